"""The policy reload of ``raygate serve`` against a real cache: a changed file's policy
applied, a bad one keeping the running policy, server keys needing a restart."""

from __future__ import annotations

import logging
import queue
from collections.abc import Iterator
from pathlib import Path

import pytest

from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from raygate.server.cache.editor import build_snapshot
from raygate.server.cache.snapshot import Snapshot
from raygate.server.cache.snapshot_files import demo_text, load_text
from raygate.server.config.file import ConfigFile, read_config_file
from raygate.server.config.reload import PolicyReloader
from tests.server.config_files import write_whole

SERVER = "server:\n  httpAddr: 0.0.0.0:8888\n"
BASE = SERVER + "policy:\n  thrashGuardSeconds: 300\n"

# Each step replaces the file; then: the reload's result, the GPU nodes served, and what
# the log says. The steps run in order on one reloader.
STEPS: list[tuple[str, str, str, set[str], list[str]]] = [
    ("a label no longer marks GPU nodes",
     BASE + "  gpuNodeLabels: {}\n", "ok", {"gpu-node-1"},
     ["policy from", "applied: gpuNodeLabels"]),
    ("GPU resources changed as well",
     BASE + "  gpuNodeLabels: {}\n  gpuResources: [example.com/accel]\n", "ok", set(),
     ['gpuResources ["nvidia.com/gpu"']),
    ("a bad policy keeps the running one",
     SERVER + "policy:\n  gpuNodeLabels: {}\n  thrashGuardSeconds: soon\n", "failed", set(),
     ["policy.thrashGuardSeconds: expected a number of seconds", "running policy is kept"]),
    ("a file that is no YAML keeps it too", "policy: [\n", "failed", set(),
     ["not valid YAML", "running policy is kept"]),
    ("server keys need a restart",
     "server:\n  httpAddr: 0.0.0.0:9999\npolicy:\n  gpuNodeLabels: {}\n"
     "  gpuResources: [example.com/accel]\n", "ok", set(),
     ['server.httpAddr changed', '"0.0.0.0:8888" -> "0.0.0.0:9999"',
      "needs a restart, not applied"]),
    ("back to the start", BASE, "ok", {"gpu-node-1", "gpu-node-2"},
     ["applied: gpuResources", "gpuNodeLabels"]),
]


@pytest.fixture
def demo_cache() -> ClusterCache:
    cache = ClusterCache(PolicyConfig(), "demo")
    cache.publish(build_snapshot(load_text(demo_text(), "demo"), PolicyConfig()))
    return cache


@pytest.fixture
def reloader(config: Path, demo_cache: ClusterCache) -> Iterator[tuple[PolicyReloader,
                                                                       queue.Queue[str]]]:
    write_whole(config, BASE)
    results: queue.Queue[str] = queue.Queue()
    baseline: ConfigFile = read_config_file(str(config))
    watcher = PolicyReloader(baseline, demo_cache.set_policy, interval=0.05,
                             on_reload=results.put).start()
    yield watcher, results
    watcher.stop()


def test_the_policy_is_reloaded_and_a_bad_file_keeps_the_old_one(
    config: Path, demo_cache: ClusterCache, reloader: tuple[PolicyReloader, queue.Queue[str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="raygate.settings")
    watcher, results = reloader
    assert demo_cache.snapshot.gpu_node_names == {"gpu-node-1", "gpu-node-2"}
    for name, text, result, gpu_nodes, logged in STEPS:
        caplog.clear()
        write_whole(config, text)
        # Bounded: the watcher polls every 50 ms; a loaded machine gets ten seconds.
        assert results.get(timeout=10) == result, name
        assert demo_cache.snapshot.gpu_node_names == gpu_nodes, name
        messages = "\n".join(r.getMessage() for r in caplog.records)
        for message in logged:
            assert message in messages, (name, message, messages)
        if result == "failed":
            assert all(r.levelno == logging.WARNING for r in caplog.records), name
    assert results.empty()
    assert watcher.counts == {"ok": 4, "failed": 2}


def test_an_unchanged_policy_is_not_applied_again(
    config: Path, demo_cache: ClusterCache, reloader: tuple[PolicyReloader, queue.Queue[str]],
) -> None:
    watcher, results = reloader
    published: list[Snapshot] = []
    demo_cache.add_listener(published.append)
    write_whole(config, "# a comment changes nothing\n" + BASE)
    assert results.get(timeout=10) == "ok"
    assert published == []
    assert not watcher.poll()  # the same stamp: not read again


def test_the_reload_thread_stops(config: Path, demo_cache: ClusterCache) -> None:
    write_whole(config, BASE)
    watcher = PolicyReloader(read_config_file(str(config)), demo_cache.set_policy,
                             interval=0.05).start()
    watcher.stop()
    assert not watcher._thread.is_alive()
