"""Delegated authorization for real: raygate asks the real kube-apiserver (TokenReview,
SubjectAccessReview) about ServiceAccount tokens the real TokenRequest API issued, under
the RBAC of deploy/ that raygate itself runs with."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from raygate.client import connect
from raygate.contract.errors import Forbidden, Unauthorized
from testbed.cluster import Testbed

pytestmark = pytest.mark.e2e


def get(testbed: Testbed, path: str, token: str | None) -> int:
    request = urllib.request.Request(testbed.raygate_url + path)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture(scope="module")
def team_token(testbed: Testbed) -> str:
    """A team's ServiceAccount in namespace ``team-a``, bound to raygate-status-reader
    by a RoleBinding there: it may read that namespace's RayClusters, nothing else."""
    testbed.kubectl("create", "namespace", "team-a")
    testbed.kubectl("create", "serviceaccount", "app", "-n", "team-a")
    testbed.kubectl("create", "rolebinding", "status", "-n", "team-a",
                    "--clusterrole=raygate-status-reader", "--serviceaccount=team-a:app")
    return testbed.kubectl("create", "token", "app", "-n", "team-a").stdout.strip()


@pytest.fixture(scope="module")
def nobody_token(testbed: Testbed) -> str:
    testbed.kubectl("create", "serviceaccount", "nobody", "-n", "default")
    return testbed.kubectl("create", "token", "nobody", "-n", "default").stdout.strip()


@pytest.fixture(scope="module")
def tokens(reader_token: str, team_token: str, nobody_token: str) -> dict[str | None, str | None]:
    return {"reader": reader_token, "team": team_token, "nobody": nobody_token,
            "garbage": "not-a-token", None: None}


@pytest.mark.parametrize(("path", "who", "status"), [
    ("/v1/admission", None, 401),
    ("/v1/admission", "garbage", 401),
    ("/v1/admission", "nobody", 403),
    ("/v1/admission", "reader", 200),
    ("/v1/admission", "team", 403),  # cluster-wide list: not granted by a RoleBinding
    ("/v1/admission?namespace=team-a", "team", 200),
    ("/v1/admission?namespace=ray", "team", 403),
    ("/v1/namespaces/team-a/rayclusters/none/admission", "team", 404),  # allowed, unknown
    ("/v1/namespaces/ray/rayclusters/none/admission", "team", 403),
    # The scheduler's verbs and probes are not behind authz (kube-scheduler sends no token).
    ("/readyz", None, 200),
])
def test_http_answers_by_the_callers_rbac(testbed: Testbed, tokens: dict[str | None, str | None],
                                          path: str, who: str | None, status: int) -> None:
    assert get(testbed, path, tokens[who]) == status


def test_grpc_answers_by_the_callers_rbac(testbed: Testbed, reader_token: str,
                                          nobody_token: str) -> None:
    target = f"grpc://{testbed.raygate_grpc}"
    with connect(target, token=lambda: reader_token) as client:
        assert client.list().kind == "AdmissionStatusList"
    with connect(target, token=lambda: nobody_token) as client, pytest.raises(Forbidden):
        client.list()
    with connect(target) as client, pytest.raises(Unauthorized):
        client.list()
