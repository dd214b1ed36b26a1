"""``testbed.api.KubeApi``, the one client of the testbed's kube-apiserver, as the scenarios
make it (from a kubeconfig, every status seen) and as the benchmarks do (a busy server's
answer retried), against the API-server double (no cluster needed to check either)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed.api import RETRY_STATUSES, ApiError, KubeApi
from testkit.apiserver import CORE, ApiServerDouble
from testkit.builders import make_pod

PODS = CORE[1]


@pytest.fixture
def double() -> Iterator[ApiServerDouble]:
    served = ApiServerDouble().start()
    served.create(make_pod("a").obj())
    yield served
    served.stop()


def test_a_client_from_a_kubeconfig_reads_its_server_and_token(
        double: ApiServerDouble, tmp_path: Path) -> None:
    api = KubeApi.from_kubeconfig(double.kubeconfig(tmp_path / "kubeconfig"))
    try:
        assert [p["metadata"]["name"] for p in api.items(PODS.path)] == ["a"]
        assert api.exists("/api/v1/nodes/none") is False
    finally:
        api.close()


def test_a_wrong_token_is_refused_at_once(double: ApiServerDouble) -> None:
    api = KubeApi(double.url, token="not-the-token")
    with pytest.raises(ApiError) as raised:
        api.get(PODS.path)
    assert raised.value.status == 401
    assert double.list_requests(PODS) == 1


@dataclass(frozen=True)
class Retry:
    name: str
    retry_statuses: frozenset[int]
    answer: int | None  # the status the caller sees; None: the pods
    requests: int


@pytest.mark.parametrize("case", [
    Retry("a scenario sees every status", frozenset(), 500, 1),
    Retry("a benchmark retries a busy server", RETRY_STATUSES, None, 2),
], ids=lambda case: case.name)
def test_a_busy_servers_answer_is_retried_only_when_asked(
        double: ApiServerDouble, case: Retry) -> None:
    double.fail_next(PODS, 500)
    api = KubeApi(double.url, token=double.token, retry_statuses=case.retry_statuses)
    try:
        if case.answer is None:
            assert len(api.items(PODS.path)) == 1
        else:
            with pytest.raises(ApiError) as raised:
                api.items(PODS.path)
            assert raised.value.status == case.answer
        assert double.list_requests(PODS) == case.requests
    finally:
        api.close()
