"""The gRPC servicers of raygate's own API (``raygate.v1``)."""
