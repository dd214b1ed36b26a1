"""raygate's benchmark suite: ``python -m bench --label fast|full`` (``make bench-ci``,
``make bench``).

``scenarios`` says what is measured, as data; ``payloads`` and ``workload`` build the
request bytes and the answer checks; ``contenders`` runs ``raygate serve`` and the Go peer
(``peers/go-extender``); ``measure`` drives wrk or ``pyclient``; ``report`` makes the
tables and the plot; ``micro`` holds the in-process pytest-benchmark suite; ``profile``
shows where the in-process time goes.
"""
