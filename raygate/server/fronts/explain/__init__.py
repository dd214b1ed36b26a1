"""``raygate explain``'s server side: the placement decision for one pod.

Served on ``GET /v1/namespaces/{ns}/pods/{name}/explain`` and ``POST /v1/explain``
(``http``) and as ``raygate.v1.Explain`` (``servicer``), and used offline by the CLI
(``raygate explain ns/pod --snapshot FILE``): ``service`` answers from the cache. The
reply's type is ``raygate.contract.explain``'s, mapped to protobuf by
``raygate.contract.messages``; ``raygate.client``'s ``explain`` asks a running raygate and
``raygate.client.explain_table`` renders the reply.
"""
