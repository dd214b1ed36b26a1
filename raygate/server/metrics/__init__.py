"""Prometheus metrics, every name prefixed ``raygate_``, served on ``GET /metrics``."""
