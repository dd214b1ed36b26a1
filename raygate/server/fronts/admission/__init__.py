"""The admission-status API: the state of each RayCluster's admission, over HTTP and gRPC."""
