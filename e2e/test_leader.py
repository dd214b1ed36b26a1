"""Leader election against the real kube-apiserver: two raygates' ``Leadership`` of one
Lease, through deploy/base's ServiceAccount and its least-privilege Role (so the grants are
checked too). One leads; a stopped leader hands over at once; one that vanishes without a
word is replaced once the lease runs out; one cut off from the API server stops leading
within the renew deadline, before anyone else could take over."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from raygate.server.kube.client import KubeTransport, load_connection
from raygate.server.kube.leader import Leadership, LeaseTiming
from raygate.server.kube.lease import identity, lease_elector
from testbed.cluster import DEPLOY, RAYGATE_NAMESPACE, Testbed

pytestmark = pytest.mark.e2e

# Short, for the test's sake; the bounds are the production ones (retry * 1.2 < renew <
# lease); each API call is bounded at min(retry, (lease - renew) / 2) = 1 s.
TIMING = LeaseTiming(lease_seconds=6, renew_deadline_seconds=4.0, retry_seconds=1.0)
LEASE = "raygate"  # the one name deploy/base's Role lets raygate get and update


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """etcd and kube-apiserver only, deploy/base's namespace and RBAC applied."""
    bed = Testbed(tmp_path_factory.mktemp("leader"), control_plane_only=True)
    # Leases need no CRD: skip installing them (and needing the builds that bring them).
    bed._install_crds = lambda: None  # type: ignore[method-assign]
    bed.start()
    try:
        for manifest in ("namespace.yaml", "rbac.yaml"):
            bed.kubectl("apply", "-f", str(DEPLOY / "base" / manifest))
        yield bed
    finally:
        bed.stop()


@pytest.fixture
def candidates(control_plane: Testbed) -> Iterator[Callable[[], Leadership]]:
    """Makes started ``Leadership``s as raygate's ServiceAccount; stops them after."""
    kubeconfig: Path = control_plane.service_account_kubeconfig("raygate")
    made: list[tuple[Leadership, KubeTransport]] = []

    def candidate() -> Leadership:
        transport = KubeTransport(load_connection(str(kubeconfig)))
        elector = lease_elector(transport.api, LEASE, RAYGATE_NAMESPACE, identity(), TIMING)
        leadership = Leadership(elector, TIMING).start()
        made.append((leadership, transport))
        return leadership

    yield candidate
    for leadership, transport in made:
        leadership.stop()
        transport.close()
    control_plane.kubectl("delete", "lease", LEASE, "-n", RAYGATE_NAMESPACE,
                          "--ignore-not-found")


def until(condition: Callable[[], bool], within: float) -> float:
    """Seconds until ``condition`` holds, polled every 20 ms; fails after ``within``."""
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < within, f"not within {within} s"
        time.sleep(0.02)
    return time.monotonic() - began


def leaders(*candidates: Leadership) -> list[Leadership]:
    return [c for c in candidates if c.leading()]


def leader_and_follower(candidates: Callable[[], Leadership]
                        ) -> tuple[Leadership, Leadership]:
    """Two candidates of one Lease, once one of them leads."""
    a, b = candidates(), candidates()
    until(lambda: len(leaders(a, b)) == 1, 10)
    (leader,) = leaders(a, b)
    return leader, b if leader is a else a


def test_exactly_one_of_two_leads(candidates: Callable[[], Leadership]) -> None:
    a, b = leader_and_follower(candidates)
    for _ in range(int(3 * TIMING.lease_seconds / 0.05)):  # three leases' time, renewed
        assert len(leaders(a, b)) == 1
        time.sleep(0.05)


def test_a_stopped_leader_hands_over_within_a_retry(
        candidates: Callable[[], Leadership]) -> None:
    leader, follower = leader_and_follower(candidates)
    leader.stop()  # releases the Lease
    assert not leader.leading()
    took = until(follower.leading, TIMING.lease_seconds)
    assert took < TIMING.retry_seconds + 1.0, took  # not a lease's wait


def test_a_vanished_leader_is_replaced_when_the_lease_runs_out(
        candidates: Callable[[], Leadership]) -> None:
    leader, follower = leader_and_follower(candidates)
    # As a killed replica: its renewals end, nothing is released.
    leader._stopping.set()
    assert leader._thread is not None
    leader._thread.join()
    vanished = time.monotonic()
    until(lambda: not leader.leading(), TIMING.renew_deadline_seconds + 0.1)
    until(follower.leading, TIMING.lease_seconds + TIMING.retry_seconds + 2.0)
    # Never before the lease could have run out, counted from the follower's last view.
    assert time.monotonic() - vanished > TIMING.lease_seconds - TIMING.retry_seconds - 0.5


def test_a_leader_cut_off_from_the_api_server_stops_within_the_renew_deadline(
        control_plane: Testbed, candidates: Callable[[], Leadership]) -> None:
    leader, follower = leader_and_follower(candidates)
    told: list[tuple[bool, float]] = []
    leader.on_change(lambda leading: told.append((leading, time.monotonic())))
    control_plane.processes.pop("kube-apiserver").stop(timeout=3)
    down = time.monotonic()
    try:
        # Its last renewal began before the API server went: within the deadline of that.
        took = until(lambda: not leader.leading(), TIMING.renew_deadline_seconds + 0.1)
        assert not leaders(leader, follower), took
        # Told in time too: before the lease could pass to anyone.
        until(lambda: bool(told), TIMING.lease_seconds)
        assert told[0][0] is False and told[0][1] - down < TIMING.lease_seconds
    finally:
        control_plane._start_apiserver()
    until(lambda: len(leaders(leader, follower)) == 1, 3 * TIMING.lease_seconds)
