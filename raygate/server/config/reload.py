"""The policy section re-read when the config file changes, no restart."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from raygate.policy.config import (
    PolicyConfig,
    policy_config_to_mapping,
)
from raygate.server.config.file import ConfigFile, read_config_file, stamp_of
from raygate.server.config.settings import RELOAD_INTERVAL_SECONDS, show, shown

log = logging.getLogger("raygate.settings")


def _policy_changes(old: PolicyConfig, new: PolicyConfig) -> list[str]:
    before, after = policy_config_to_mapping(old), policy_config_to_mapping(new)
    return [f"{key} {show(before[key])} -> {show(after[key])}"
            for key in after if before[key] != after[key]]


class PolicyReloader:
    """Watches the config file and serves a changed ``policy:`` without a restart.

    A daemon thread compares the file's stamp (device, inode, size, mtime) every
    ``interval`` seconds. On a change the file is read again: a valid ``policy:`` that
    differs goes to ``apply`` (``ClusterCache.set_policy``); an invalid one is refused and
    each problem logged at warning, the running policy kept. ``server:`` keys are read at
    start only: a change there is logged as needing a restart. ``on_reload`` is called
    with ``"ok"`` or ``"failed"`` after each re-read (from this thread), and ``counts``
    keeps the same tally.
    """

    def __init__(
        self,
        baseline: ConfigFile,
        apply: Callable[[PolicyConfig], None],
        *,
        interval: float = RELOAD_INTERVAL_SECONDS,
        on_reload: Callable[[str], None] | None = None,
    ) -> None:
        if baseline.policy is None:
            raise ValueError("the baseline config file must be valid")
        self.path = baseline.path
        self.interval = interval
        self.counts = {"ok": 0, "failed": 0}
        self._apply = apply
        self._on_reload = on_reload
        self._stamp = baseline.stamp
        self._policy = baseline.policy
        self._running_server = dict(baseline.server_raw)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raygate-config-reload",
                                        daemon=True)

    def start(self) -> PolicyReloader:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception:  # the watch must outlive one bad reading; the log says why
                log.exception("config reload of %s failed", self.path)

    def poll(self) -> bool:
        """Re-read the file if its stamp changed; returns whether it did."""
        stamp = stamp_of(self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        reading = read_config_file(self.path)
        self._report_server(reading)
        if reading.policy is None:
            for problem in reading.problems:
                log.warning("config reload: %s (the running policy is kept)", problem)
            self._count("failed")
            return True
        for problem in reading.problems:  # server: only; the policy is fine
            log.warning("config reload: %s (raygate would refuse to start with this file)",
                        problem)
        changes = _policy_changes(self._policy, reading.policy)
        if changes:
            self._apply(reading.policy)
            self._policy = reading.policy
            log.info("config reload: policy from %s applied: %s", self.path, "; ".join(changes))
        self._count("ok")
        return True

    def _report_server(self, reading: ConfigFile) -> None:
        if not reading.parsed:
            return  # unreadable: reported as a problem of the reading
        new = reading.server_raw
        for key in sorted(set(new) | set(self._running_server)):
            if new.get(key) != self._running_server.get(key):
                log.warning("config reload: %s changed in %s (%s -> %s): needs a restart, "
                            "not applied", key, self.path, shown(self._running_server, key),
                            shown(new, key))

    def _count(self, result: str) -> None:
        self.counts[result] += 1
        if self._on_reload is not None:
            self._on_reload(result)
