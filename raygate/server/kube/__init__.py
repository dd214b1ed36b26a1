"""Live cluster state from the Kubernetes API: list, then watch, into the cache.

    resources.py  the kinds raygate follows: API paths, versions, wire types, views
    client.py     connection and auth (the ``kubernetes`` client), raw HTTP, decoding
    watch.py      the list/watch driver of one kind, with an injected retry policy
    source.py     one writer applying every kind's changes to the cache
    reviews.py    TokenReviews and SubjectAccessReviews (``raygate.server.authz`` asks them)
    leader.py     which replica acts: leadership of a Lease (``Leadership.leading()``)
    lease.py      the Lease's attempts and release, over the client's leader election

Only ``client.py``, ``reviews.py`` and ``lease.py`` talk to the API server; the driver,
the writer and ``leader.py`` are plain code over protocols, tested without sockets.
"""
