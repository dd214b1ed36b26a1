"""The README's quickstart, run as far as it goes without a real cluster: its commands in
order, every file and image they name, `raygate check` on the example, the chart
installed with the quickstart's values (as `helm template`, where the testbed has built
helm), and the admission API's answer for the example RayCluster from a real raygate
server that holds it."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from raygate.policy.config import PolicyConfig
from raygate.policy.quantity import parse_milli
from raygate.server.cache.cluster import ClusterCache
from testbed.build import COMPONENTS
from tests.conftest import FakeClock, ServerThread, snapshot_of
from tests.docs import doc

ROOT = Path(__file__).resolve().parents[2]
SECTION = re.search(r"^## Quickstart on kind or minikube\n(?P<body>.*?)^## ", doc("README.md"),
                    re.S | re.M)
assert SECTION, "README.md: no `## Quickstart on kind or minikube` section"
(BLOCK,) = re.findall(r"```sh\n(.*?)```", SECTION["body"], re.S)
# One command a line (`a && b` is two), the trailing `&` of a background job dropped.
COMMANDS = [shlex.split(part.strip().removesuffix("&"))
            for line in BLOCK.splitlines() if line.strip()
            for part in line.split("&&")]


def _only(program: str, *words: str) -> list[str]:
    (command,) = [c for c in COMMANDS if c[:len(words) + 1] == [program, *words]]
    return command


def _after(first: list[str], then: list[str]) -> bool:
    return COMMANDS.index(first) < COMMANDS.index(then)


def test_it_goes_from_a_bare_cluster_to_the_admission_api_in_a_few_lines() -> None:
    assert COMMANDS[0] == ["kind", "create", "cluster"]
    assert COMMANDS[-1][:2] == ["curl", "-s"] and "/admission" in COMMANDS[-1][-1]
    assert len(BLOCK.splitlines()) <= 12
    helm = _only("helm", "install", "raygate")
    assert _after(_only("helm", "install", "kuberay-operator"), helm)
    assert _after(_only("kind", "load"), helm)
    assert _after(_only("kubectl", "create", "namespace"),
                  _only("kubectl", "apply", "-f"))
    assert _after(_only("kubectl", "-n", "raygate-system", "rollout"),
                  _only("kubectl", "-n", "raygate-system", "port-forward"))
    # The two set-up commands stay the README's own, apart from the quickstart.
    assert "make run" not in BLOCK and "make test" not in BLOCK


def test_the_image_it_loads_is_the_one_make_image_builds_and_the_chart_pulls() -> None:
    loaded = _only("kind", "load", "docker-image")[-1]
    made = subprocess.run(["make", "-s", "-n", "image"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout
    assert f"docker build -t {loaded} ." in made
    component = yaml.safe_load((ROOT / "deploy/image/kustomization.yaml").read_text())
    (image,) = component["images"]
    assert loaded == f"{image['newName']}:{image['newTag']}"


def test_the_example_goes_to_the_namespace_it_creates() -> None:
    namespace = _only("kubectl", "create", "namespace")[-1]
    example = yaml.safe_load((ROOT / _only("kubectl", "apply", "-f")[-1]).read_text())
    assert example["metadata"]["namespace"] == namespace
    path = _only("curl", "-s")[-1]
    assert f"/namespaces/{namespace}/rayclusters/{example['metadata']['name']}/" in path


def _requests(template: dict[str, Any]) -> tuple[int, int]:
    """(milli-CPU, bytes) a pod template requests."""
    asked = [c.get("resources", {}).get("requests", {}) for c in template["spec"]["containers"]]
    return (sum(parse_milli(r.get("cpu", 0)) for r in asked),
            sum(parse_milli(r.get("memory", 0)) // 1000 for r in asked))


def test_the_example_fits_a_laptops_kind_node() -> None:
    """What the RayCluster asks for at its start fits on a 4-CPU, 8 GiB kind node beside
    what the quickstart runs there (the control plane, KubeRay, raygate and ray-scheduler:
    about 2.7 CPUs and 3.3 GiB of requests); the first example asked for 20 CPUs."""
    example = yaml.safe_load((ROOT / _only("kubectl", "apply", "-f")[-1]).read_text())
    spec = example["spec"]
    pods = [(1, spec["headGroupSpec"]["template"])] + [
        (group.get("replicas", 0) * group.get("numOfHosts", 1), group["template"])
        for group in spec["workerGroupSpecs"]]
    cpu = sum(n * _requests(t)[0] for n, t in pods)
    memory = sum(n * _requests(t)[1] for n, t in pods)
    assert (cpu, memory) == (1000, 4 * 2**30)
    # The deploy guide's account of it.
    assert "1 CPU and 4 GiB in all" in doc("deploy.md")


def test_raygate_check_passes_the_example() -> None:
    check = _only("raygate", "check")
    result = subprocess.run([sys.executable, "-m", "raygate", *check[1:]], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_chart_installs_with_the_quickstarts_values() -> None:
    helm = COMPONENTS["helm"].path("helm")
    if not helm.is_file():
        pytest.skip(f"helm is not built ({helm}): `make testbed` builds it; make e2e runs "
                    "the chart's own tests")
    install = _only("helm", "install", "raygate")
    argv = [a for a in install[2:] if a != "--create-namespace"]
    rendered = subprocess.run([str(helm), "template", *argv], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, check=True).stdout
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    rollout = _only("kubectl", "-n", "raygate-system", "rollout")[-1]  # deploy/<name>
    assert any(o["kind"] == "Deployment" and o["metadata"]["name"] == rollout.split("/")[1]
               and o["metadata"]["namespace"] == "raygate-system" for o in objects)
    forwarded = _only("kubectl", "-n", "raygate-system", "port-forward")
    assert any(o["kind"] == "Service" and f"svc/{o['metadata']['name']}" == forwarded[-2]
               for o in objects)
    images = {c["image"] for o in objects if o["kind"] == "Deployment"
              for c in o["spec"]["template"]["spec"]["containers"] if c["name"] == "raygate"}
    assert images == {_only("kind", "load", "docker-image")[-1]}
    config = next(o for o in objects if o["kind"] == "ConfigMap"
                  and o["metadata"]["name"] == "raygate-config")
    # curl without a token: the quickstart's values turn authz off.
    assert yaml.safe_load(config["data"]["raygate.yaml"])["server"]["authz"]["mode"] in (
        "off", False)


@pytest.fixture
def serving_the_example() -> Iterator[ServerThread]:
    example = yaml.safe_load((ROOT / _only("kubectl", "apply", "-f")[-1]).read_text())
    cache = ClusterCache(PolicyConfig(), "test")
    cache.publish(snapshot_of(example))
    server = ServerThread(cache, FakeClock())
    server.start()
    yield server
    server.stop()


def test_the_admission_api_answers_for_the_example(serving_the_example: ServerThread) -> None:
    curl = _only("curl", "-s")
    path = curl[-1].removeprefix("localhost:8888")
    reply = httpx.get(f"{serving_the_example.url}{path}", timeout=10)
    assert reply.status_code == 200, reply.text
    status = reply.json()
    assert status["kind"] == "AdmissionStatus"
    assert status["metadata"] == {**status["metadata"], "namespace": "ray", "name": "ray-demo"}
    assert [g["name"] for g in status["groups"]] == ["headgroup", "baseline", "overflow"]


def test_port_forward_reaches_the_port_curl_calls() -> None:
    forwarded = _only("kubectl", "-n", "raygate-system", "port-forward")[-1]
    assert f"localhost:{forwarded}/" in _only("curl", "-s")[-1]


def test_upgrading_is_the_quickstarts_install_as_an_upgrade() -> None:
    """docs/operations.md's Upgrading: the same release, chart, namespace and values as the
    install (any values given replace the install's), and no version before the first."""
    section = doc("operations.md").split("## Upgrading\n", 1)[1].split("\n## ", 1)[0]
    (upgrade,) = [shlex.split(line) for line in section.splitlines()
                  if line.strip().startswith("helm upgrade")]
    install = _only("helm", "install", "raygate")
    assert upgrade == ["helm", "upgrade", *[a for a in install[2:] if a != "--create-namespace"]]
    # A second release rewrites this section (and this test).
    assert f"{version('raygate')} is raygate's first release" in section
    assert "--print-config" in section
