"""The admission-status API's long-poll (``waitForChange``) on a real server over
loopback: answered at once when the version differs, woken by the cache or by time, timed
out with the same status, ended at shutdown; many waiters woken a batch at a time, and a
rebuild of many clusters that lets requests through."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from raygate.client import HttpAdmissionClient
from raygate.policy.config import PolicyConfig
from raygate.server.cache.cluster import ClusterCache
from testkit.builders import T0_EPOCH, make_pod, make_raycluster
from tests import admission_scenarios as sc
from tests.conftest import FakeClock, ServerThread, wait_until
from tests.fronts.admission_api import GET, LIST, WAIT, check, get, path_of

# --- long-poll --------------------------------------------------------------------------------


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as executor:
        yield executor


def test_long_poll_returns_at_once_when_the_version_differs(
        server: ServerThread, client: httpx.Client) -> None:
    server.publish(*sc.inqueue_gang())
    version = get(client, "ray", "queued").json()["metadata"]["version"]
    started = time.monotonic()
    response = get(client, "ray", "queued", waitForChange="0" * 16, timeoutSeconds=60)
    assert time.monotonic() - started < WAIT
    assert check(GET, response)["metadata"]["version"] == version


def test_long_poll_wakes_on_a_change_through_the_cache(
        server: ServerThread, client: httpx.Client, pool: ThreadPoolExecutor) -> None:
    server.publish(*sc.inqueue_gang())
    before = get(client, "ray", "queued").json()["metadata"]["version"]
    service = server.server.services.admission
    with httpx.Client(base_url=server.url, timeout=120) as other:
        waiting: Future[httpx.Response] = pool.submit(
            get, other, "ray", "queued", waitForChange=before, timeoutSeconds=60)
        wait_until(lambda: service.waiting(("ray", "queued")))
        assert not waiting.done()
        # The cache publishes from this thread, not the server's loop.
        admitted = sc.make_podgroup("ray-queued-pg").owned_by("queued").phase("Running")
        server.publish(*sc.inqueue_gang()[:1], admitted.min_member(3).obj(),
                       *sc.inqueue_gang()[2:])
        response = waiting.result(WAIT)
    body = check(GET, response)
    assert body["metadata"]["version"] != before
    assert body["gang"]["admitted"] is True


def test_long_poll_of_the_list_wakes_on_a_new_cluster(
        server: ServerThread, client: httpx.Client, pool: ThreadPoolExecutor) -> None:
    server.publish(*sc.stuck())
    before = client.get("/v1/admission", params={"namespace": "ray"}).headers["etag"].strip('"')
    with httpx.Client(base_url=server.url, timeout=120) as other:
        waiting = pool.submit(other.get, "/v1/admission", params={
            "namespace": "ray", "waitForChange": before, "timeoutSeconds": "60"})
        wait_until(lambda: server.server.services.admission.waiting(("ray", None)))
        server.publish(*sc.stuck(), *sc.inqueue_gang())
        body = check(LIST, waiting.result(WAIT))
    assert [i["metadata"]["name"] for i in body["items"]] == ["lonely", "queued"]


def test_long_poll_times_out_with_the_same_status(
        server: ServerThread, client: httpx.Client) -> None:
    server.publish(*sc.inqueue_gang())
    first = get(client, "ray", "queued")
    version = first.json()["metadata"]["version"]
    timed_out = get(client, "ray", "queued", waitForChange=version, timeoutSeconds=0.05)
    assert check(GET, timed_out)["metadata"]["version"] == version
    not_modified = client.get(path_of("ray", "queued"), headers={
        "If-None-Match": first.headers["etag"]}, params={
        "waitForChange": version, "timeoutSeconds": "0.05"})
    assert not_modified.status_code == 304


def test_long_poll_of_an_unknown_cluster_is_a_404_at_once(
        server: ServerThread, client: httpx.Client) -> None:
    server.publish(*sc.stuck())
    started = time.monotonic()
    response = get(client, "ray", "queued", waitForChange="0" * 16, timeoutSeconds=60)
    assert check(GET, response)["error"]["reason"] == "NotFound"
    assert time.monotonic() - started < WAIT  # answered, not held for the 60 s


@pytest.mark.parametrize("seen", ["", "x", '"4fccef0cec470134"', "4FCCEF0CEC470134",
                                  "4fccef0cec47013", "4fccef0cec4701345"])
def test_a_malformed_wait_for_change_is_a_400_at_once(
        server: ServerThread, client: httpx.Client, seen: str) -> None:
    server.publish(*sc.stuck())
    for name in ("lonely", "unknown"):  # known or not: the parameter is checked first
        started = time.monotonic()
        response = get(client, "ray", name, waitForChange=seen, timeoutSeconds=60)
        assert response.status_code == 400
        assert "waitForChange" in check(GET, response)["error"]["message"]
        assert time.monotonic() - started < WAIT
    listing = client.get(LIST, params={"waitForChange": seen, "timeoutSeconds": "60"})
    assert listing.status_code == 400


def test_the_http_client_watches_a_cluster_that_appears_later(
        server: ServerThread, pool: ThreadPoolExecutor) -> None:
    """A named long-poll of an unknown cluster is a 404 at once: the client waits on the
    namespace's listing instead, with no busy loop."""
    server.publish(*sc.stuck())
    with HttpAdmissionClient(server.url, timeout=WAIT, poll_seconds=60) as api:
        events = api.watch("ray", "queued")
        assert next(events).type == "SYNCED"
        appeared = pool.submit(next, events)
        wait_until(lambda: server.server.services.admission.waiting(("ray", None)))
        server.publish(*sc.stuck(), *sc.inqueue_gang())
        event = appeared.result(WAIT)
        assert (event.type, event.status and event.status.metadata.name) == ("ADDED", "queued")
        events.close()


def test_time_alone_turns_a_pod_stuck(server: ServerThread, client: httpx.Client,
                                      pool: ThreadPoolExecutor) -> None:
    objects = [make_raycluster("t").group("w", replicas=1).obj(),
               make_pod("t-w1").ray("t", "w").created(sc.at(0)).obj()]
    server.publish(*objects)
    young = check(GET, get(client, "ray", "t"))
    assert young["pods"][0]["state"] == "Starting"
    # A poll after the deadline sees the new state (the status is derived again)...
    server.clock.now = T0_EPOCH + 121
    assert check(GET, get(client, "ray", "t"))["pods"][0]["state"] == "Stuck"
    # ...and a long-poll is woken by the deadline (the server's timer runs on real time;
    # with the fake clock the test triggers it).
    server.clock.now = T0_EPOCH
    server.publish(*objects)
    before = get(client, "ray", "t").json()["metadata"]["version"]
    with httpx.Client(base_url=server.url, timeout=120) as other:
        waiting = pool.submit(get, other, "ray", "t", waitForChange=before, timeoutSeconds=60)
        wait_until(lambda: server.server.services.admission.waiting(("ray", "t")))
        server.clock.now = T0_EPOCH + 121
        server.loop.call_soon_threadsafe(server.server.services.admission.refresh)
        assert check(GET, waiting.result(WAIT))["pods"][0]["state"] == "Stuck"


def test_shutdown_ends_long_polls_at_once(pool: ThreadPoolExecutor) -> None:
    thread = ServerThread(ClusterCache(PolicyConfig(), "test"), FakeClock())
    thread.start()
    thread.publish(*sc.inqueue_gang())
    with httpx.Client(base_url=thread.url, timeout=120) as client:
        version = get(client, "ray", "queued").json()["metadata"]["version"]
        waiting = pool.submit(get, client, "ray", "queued", waitForChange=version,
                              timeoutSeconds=300)
        wait_until(lambda: thread.server.services.admission.waiting(("ray", "queued")))
        started = time.monotonic()
        thread.stop()
        response = waiting.result(WAIT)
    # The unchanged status, now: the server does not sit out a 300 s poll to stop.
    assert check(GET, response)["metadata"]["version"] == version
    assert time.monotonic() - started < WAIT


def _request_position(count: int, wake_batch: int) -> int:
    """Where a request that arrives as the first of ``count`` waiters wakes up runs among
    them, in the order the loop ran them."""
    from raygate.server.fronts.admission.service import AdmissionService
    from tests.conftest import snapshot_of

    cache = ClusterCache(PolicyConfig(), "test")
    cache.publish(snapshot_of(*sc.inqueue_gang()))
    order: list[str] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        service = AdmissionService(cache, FakeClock(), wake_batch=wake_batch)
        service.attach(loop)
        seen = service.get("ray", "queued").version

        async def waiter() -> None:
            await service.wait_for_change(
                ("ray", "queued"), lambda g: g.entries[("ray", "queued")].version, seen, 60)
            if not order:  # the first woken: a request arrives now
                loop.call_soon(order.append, "request")
            order.append("waiter")

        tasks = [asyncio.ensure_future(waiter()) for _ in range(count)]
        signals = service._signals
        while ("ray", "queued") not in signals or len(signals[("ray", "queued")].waiters) < count:
            await asyncio.sleep(0)
        cache.publish(snapshot_of(*sc.inqueue_gang()[:-1]))
        await asyncio.gather(*tasks)
        service.close()

    asyncio.run(scenario())
    assert len(order) == count + 1
    return order.index("request")


def test_a_change_wakes_many_waiters_a_batch_at_a_time() -> None:
    """A request that arrives while a change wakes many waiters runs after a batch or two,
    not after all of them."""
    from raygate.server.fronts.admission.waiters import WAKE_BATCH

    count = 8 * WAKE_BATCH
    assert _request_position(count, WAKE_BATCH) <= 3 * WAKE_BATCH
    assert _request_position(count, count) == count  # all at once: the request last


def test_a_rebuild_of_many_clusters_lets_requests_through() -> None:
    """After a publish, statuses are derived a chunk of clusters per turn of the loop: a
    request queued meanwhile runs before the rebuild ends; one that reads the status
    finishes the rebuild itself and sees the new snapshot."""
    from raygate.server.fronts.admission import service as admission_api
    from raygate.server.fronts.admission.service import AdmissionService
    from tests.conftest import snapshot_of

    def clusters(phase: str) -> list[Any]:
        objects: list[Any] = []
        for i in range(3 * admission_api.REBUILD_CHECK_EVERY):
            objects += [make_raycluster(f"c{i}").obj(),
                        sc.make_podgroup(f"ray-c{i}-pg").phase(phase).obj()]
        return objects

    cache = ClusterCache(PolicyConfig(), "test")
    cache.publish(snapshot_of(*clusters("Inqueue")))
    events: list[str] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        service = AdmissionService(cache, FakeClock(), rebuild_slice_seconds=0.0)  # a step per turn
        service.attach(loop)
        first = service.current()
        cache.publish(snapshot_of(*clusters("Running")))
        await asyncio.sleep(0)  # the listener's hop onto the loop: the rebuild starts
        loop.call_soon(lambda: events.append(
            "request during the rebuild" if service._generation is first
            else "request after the rebuild"))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert events == ["request during the rebuild"]
        assert service.get("ray", "c0").status.gang.admitted  # finished on demand
        service.close()

    asyncio.run(scenario())
