"""``raygate explain``: the placement decision for one pod, as JSON or a table.

Served on ``GET /v1/namespaces/{ns}/pods/{name}/explain`` and ``POST /v1/explain``
(``http``) and as ``raygate.v1.Explain`` (``servicer``, with ``proto``'s conversion), and
used offline by the CLI (``raygate explain ns/pod --snapshot FILE``): ``service`` answers
from the cache, ``client`` asks a running raygate, ``table`` renders the reply. The reply's
types are ``raygate.contract.explain``'s.
"""
