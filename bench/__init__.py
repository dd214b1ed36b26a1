"""Benchmarks of raygate: deterministic payloads (``bench.payloads``) and the end-to-end
HTTP benchmark against a real ``raygate serve`` process (``python -m bench.http_extender``).
"""
