"""raygate: a scheduler-side plugin for Ray clusters on Kubernetes.

- ``raygate.contract``: the floor client and server share (errors and how they travel,
  the admission-status types, the protobuf code, logs, version);
- ``raygate.policy``: the pure policy (classification, placement, victims, admission);
- ``raygate.server``: what runs in the raygate pod (the extenders, the admission-status
  API, the webhook, list/watch and the cache, settings, the CLI): the ``server`` extra;
- ``raygate.client``: the client of the admission-status API, for KubeRay and the Ray
  autoscaler;
- ``raygate.ray_autoscaler``: the Ray autoscaler v2 following raygate's advice
  (``raygate-autoscaler``).

The client side loads nothing of the server nor its dependencies, so ``raygate[ray]``
brings Ray's Python little besides msgspec, grpcio and protobuf. One top-level package,
so that raygate installs beside Ray (the autoscaler image) or any other distribution
without claiming generic names.
"""
