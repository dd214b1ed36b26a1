"""In-process micro-benchmarks (pytest-benchmark): the pieces of each verb's hot path,
run by ``python -m bench`` (or ``pytest bench/micro --benchmark-enable``)."""
