"""The admission-status API: the state of each RayCluster's admission, over HTTP and gRPC.

``service`` derives, memoises and watches the statuses (``state``: one snapshot's
statuses; ``waiters``: who waits for a change); ``http`` parses requests and encodes
replies over it, as the gRPC servicer (``raygate.server.grpc.servicers``) does: each
front calls the service, never the other way round.
"""
