"""raygate's pure policy core.

Everything here is a function of its arguments: the cluster view, the policy config and
``now`` (seconds since the epoch) are passed in. No I/O, no clock, no asyncio, no wire
types; ``raygate.server`` adapts the outside world to these types. The import-linter contracts
in ``pyproject.toml`` enforce this.
"""
