"""``testbed.api``, the one kube-apiserver client (the benchmarks' too), against the double
serving ``bench.cluster_json``'s cluster (``ClusterDouble``): lists, errors, a watch."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from bench.cache_scale_list import list_alone
from bench.cluster_json import TOKEN, ClusterDouble, build_cluster
from testbed.api import ApiError, KubeApi


@pytest.fixture(scope="module")
def served() -> Iterator[ClusterDouble]:
    served = ClusterDouble(build_cluster(20, 300))
    yield served
    served.double.stop()


@pytest.fixture
def api(served: ClusterDouble) -> Iterator[KubeApi]:
    api = KubeApi(f"http://127.0.0.1:{served.port}", token=TOKEN)
    yield api
    api.close()


def test_lists_every_object_the_double_holds(served: ClusterDouble, api: KubeApi) -> None:
    assert len(api.items("/api/v1/nodes")) == 20
    pods = api.items("/api/v1/pods")
    assert len(pods) == len(served.cluster.pods) == 300
    assert served.pod_json_bytes > 300 * 1000


def test_an_error_reply_carries_its_status(served: ClusterDouble) -> None:
    wrong = KubeApi(f"http://127.0.0.1:{served.port}", token="not-the-token")
    with pytest.raises(ApiError) as raised:
        wrong.get("/api/v1/nodes")
    wrong.close()
    assert raised.value.status == 401


def test_a_watch_sees_a_flipped_pod(served: ClusterDouble, api: KubeApi) -> None:
    version = api.get("/api/v1/pods", limit="1")["metadata"]["resourceVersion"]
    served.flip()
    events = api.watch("/api/v1/pods", version, timeout_seconds=5)
    kind, pod = next(itertools.islice(events, 1))
    events.close()
    assert kind == "MODIFIED" and pod["metadata"]["name"] == served.cluster.pods[0].name
    ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"]
    assert ready == "False"


def test_the_list_alone_reads_every_node_and_pod(served: ClusterDouble, api: KubeApi) -> None:
    """``bench.cache_scale``'s LIST taken apart lists the nodes and the pods, whatever
    the order of raygate's kinds (it once listed the first two, DRA's, empty)."""
    alone = list_alone(api, page_size=50)
    for way in (alone.pages, alone.pages_gzip, alone.stream, alone.stream_gzip):
        assert way.items == 20 + 300
    assert alone.pages.requests == alone.pages_protobuf.requests == 1 + 6
    assert alone.stream.requests == 2
    assert alone.pages.mib > 300 * 1000 / 2**20
