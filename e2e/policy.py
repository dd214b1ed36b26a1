"""raygate's policy changed for one scenario, through its config file as an operator
changes it, and seen in force before the scenario goes on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import yaml

from e2e.lagging import metric
from e2e.scenario import wait_until
from testbed.cluster import Testbed

__all__ = ["policy_changed"]


@contextmanager
def policy_changed(testbed: Testbed, change: Callable[[dict[str, Any]], None]
                   ) -> Iterator[None]:
    """raygate's ``policy:`` as ``change`` edits it, in force (the reloader polls the
    file's stamp each second: ``raygate_config_reloads_total`` counts it); the file as it
    was afterwards, in force again."""
    path = testbed.workdir / "raygate.yaml"
    original = path.read_text()
    config = yaml.safe_load(original)
    change(config.setdefault("policy", {}))

    def reloaded(text: str) -> None:
        before = metric(testbed.raygate_url, "raygate_config_reloads_total", result="ok")
        path.write_text(text)
        wait_until("raygate's policy reloaded", lambda: metric(
            testbed.raygate_url, "raygate_config_reloads_total", result="ok") > before)

    reloaded(yaml.safe_dump(config))
    try:
        yield
    finally:
        reloaded(original)
