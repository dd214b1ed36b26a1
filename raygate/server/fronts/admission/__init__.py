"""The admission-status API: the state of each RayCluster's admission, over HTTP and gRPC.

``service`` derives, memoises and watches the statuses (``state``: one snapshot's
statuses; ``waiters``: who waits for a change); ``http`` parses requests and encodes
replies over it, as ``servicer`` does over gRPC: both call the service, never the other
way round.
"""
