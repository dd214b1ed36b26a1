"""The errors a raygate command ends on when what it was given cannot be used: a flag, a
file, a setting, a cluster to follow, a port, a Ray version. Raised by the policy (its
``policy:`` section), the server (its files, its cluster, its ports) and the client side
(``raygate-autoscaler``'s environment) alike; ``raygate.process.exits`` says each as one
line on stderr and exit status 2.

This module imports nothing, so that the policy, which must stay pure, may raise
``ConfigError`` from it, and ``raygate --version`` loads nothing more for it.
"""

from __future__ import annotations

__all__ = ["CommandError", "ConfigError"]


class CommandError(Exception):
    """What the command was given cannot be used; the message says what, and why."""


class ConfigError(CommandError, ValueError):
    """Invalid settings; ``problems`` lists each as ``"path: what is wrong"``, under
    ``heading`` (what raygate says of them all)."""

    def __init__(self, problems: list[str], heading: str = "invalid configuration") -> None:
        super().__init__(f"{heading}:\n  " + "\n  ".join(problems))
        self.problems = problems
