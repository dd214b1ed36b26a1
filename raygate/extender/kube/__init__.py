"""Live cluster state from the Kubernetes API: list, then watch, into the cache.

    resources.py  the kinds raygate follows: API paths, versions, wire types, views
    client.py     connection and auth (the ``kubernetes`` client), raw HTTP, decoding
    watch.py      the list/watch driver of one kind, with an injected retry policy
    source.py     one writer applying every kind's changes to the cache
    reviews.py    TokenReviews and SubjectAccessReviews (``raygate.extender.authz`` asks them)

Only ``client.py`` and ``reviews.py`` talk to the API server; the driver and the writer
are plain code over the ``Transport`` protocol, tested without sockets.
"""
