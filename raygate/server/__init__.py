"""What runs in the raygate pod: the kube-scheduler and Volcano extenders, the
admission-status API over HTTP and gRPC, explain, the webhook, list/watch and the cluster
cache, settings and the ``raygate`` CLI. Needs the ``server`` extra; the client side
(``raygate.client``, ``raygate.ray_autoscaler``) never imports it."""
