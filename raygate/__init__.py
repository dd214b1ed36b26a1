"""raygate: a scheduler-side plugin for Ray clusters on Kubernetes.

- ``raygate.plugin``: the pure policy (classification, placement, victims, admission);
- ``raygate.server``: everything that touches the outside (servers, wire codecs,
  list/watch, cache, settings, CLI, the Ray autoscaler hooks);
- ``raygate.client``: the client of the admission-status API, for KubeRay and the Ray
  autoscaler.

One top-level package, so that raygate installs beside Ray (the autoscaler image) or
any other distribution without claiming generic names.
"""
