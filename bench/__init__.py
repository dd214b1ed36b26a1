"""raygate's benchmark suite: ``python -m bench --label fast|full`` (``make bench-ci``,
``make bench``).

``scenarios`` says what is measured, as data; ``payloads`` and ``workload`` build the
request bytes (from ``fixtures/`` and ``testkit.ray_pods``) and the answer checks;
``contenders`` runs ``raygate serve`` and the Go peer (``peers/go-extender``); ``measure``
drives wrk or ``pyclient``; ``report`` makes the tables and the plot; ``micro`` holds the
in-process pytest-benchmark suite; ``profile`` shows where the in-process time goes.

Shared by every benchmark: ``stats`` (the one percentile), ``memory`` (the one reader of
a process's resident memory), ``reporter`` (tables and result files) and
``cluster_json`` (the large cluster ``cache_sync``, ``cache_scale`` and ``soak`` serve);
the one client of a real kube-apiserver is the testbed's (``testbed.api.KubeApi``).
"""
