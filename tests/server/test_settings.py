"""The settings of ``raygate serve``: precedence, validation with paths, --print-config,
the shipped ConfigMap. The policy reload: test_policy_reload.py."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from raygate.contract.command import ConfigError
from raygate.policy.config import GpuNodesForSurplus, PolicyConfig
from raygate.server.config.load import authz_enabled, load_settings
from raygate.server.config.render import render_config
from raygate.server.config.settings import SETTINGS, ServeSettings
from tests.server.config_files import write_whole

Flags = dict[str, Any]
Env = dict[str, str]



def _load(config: Path, text: str | None, flags: Flags | None = None,
          env: Env | None = None) -> Any:
    flags = dict(flags or {})
    if text is not None:
        write_whole(config, text)
        flags.setdefault("config_file", str(config))
    return load_settings(flags, env or {})


# --- precedence ------------------------------------------------------------------------

# field, then the value each source gives: flag (text), env (text), file (YAML), and what
# each becomes in ServeSettings.
PRECEDENCE: list[tuple[str, str, str, str, tuple[Any, Any, Any]]] = [
    ("http_addr", "127.0.0.1:1", "127.0.0.1:2", "httpAddr: 127.0.0.1:3",
     ("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3")),
    ("max_body_bytes", "100", "200", "limits: {maxBodyBytes: 300}", (100, 200, 300)),
    ("header_timeout_seconds", "1.5", "2", "limits: {headerTimeoutSeconds: 3}",
     (1.5, 2.0, 3.0)),
    ("shutdown_delay_seconds", "0", "7", "shutdown: {delaySeconds: 9.5}", (0.0, 7.0, 9.5)),
    ("log_level", "debug", "warning", "log: {level: error}", ("debug", "warning", "error")),
    ("authz", "off", "auto", "authz: {mode: 'on'}", ("off", "auto", "on")),
    ("authz", "on", "off", "authz: {mode: off}", ("on", "off", "off")),  # YAML 1.1: false
    ("webhook_addr", "", ":9443", "webhook: {addr: ''}", ("", ":9443", "")),
    ("authz_audiences", "raygate, other", "raygate", "authz: {audiences: [a, b]}",
     (("raygate", "other"), ("raygate",), ("a", "b"))),
]
LAYERS = ["flag", "env", "file", "default"]


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("case", PRECEDENCE, ids=[f"{p[0]}-{p[3]}" for p in PRECEDENCE])
def test_precedence_flag_env_file_default(
    config: Path, layer: str, case: tuple[str, str, str, str, tuple[Any, Any, Any]],
) -> None:
    name, flag, env, file, expected = case
    setting = next(s for s in SETTINGS if s.name == name)
    # Every source at or below `layer` gives a value: the highest of them wins.
    present = LAYERS[LAYERS.index(layer):]
    flags = {name: flag} if "flag" in present else {}
    environ = {setting.env: env} if "env" in present else {}
    text = f"server:\n  {file}\n" if "file" in present else "server:\n"
    if name == "webhook_addr":  # it needs TLS; its own value is what is tested
        text = text.replace("webhook: {", "webhook: {cert: /dev/null, key: /dev/null, ")
        environ |= {"RAYGATE_WEBHOOK_CERT": "/dev/null", "RAYGATE_WEBHOOK_KEY": "/dev/null"}
    loaded = _load(config, text, flags, environ)
    value = getattr(loaded.settings, name)
    want = {"flag": expected[0], "env": expected[1], "file": expected[2],
            "default": getattr(ServeSettings(), name)}[layer]
    assert value == want and type(value) is type(want)
    assert loaded.origins[name].kind == layer
    assert loaded.origins[name].where == {"flag": setting.flag, "env": setting.env}.get(layer, "")


def test_sources_of_cluster_state_come_from_flags_then_the_environment(config: Path) -> None:
    env = {"RAYGATE_SNAPSHOT": f"a.yaml{os.pathsep}b.yaml", "RAYGATE_CONTEXT": "ctx"}
    loaded = load_settings({}, env)
    assert loaded.settings.snapshots == ("a.yaml", "b.yaml")
    assert loaded.settings.context == "ctx"
    assert loaded.origins["snapshots"].where == "RAYGATE_SNAPSHOT"
    # A flag source replaces the environment's, whichever kind it is.
    loaded = load_settings({"demo": True, "context": "mine"}, env)
    assert loaded.settings.demo and loaded.settings.snapshots == ()
    assert loaded.settings.context == "mine"
    assert load_settings({}, {"RAYGATE_DEMO": "true"}).settings.demo
    assert not load_settings({}, {"RAYGATE_DEMO": "false"}).settings.demo
    # The config file itself: --config, else RAYGATE_CONFIG.
    write_whole(config, "policy: {thrashGuardSeconds: 5}\n")
    loaded = load_settings({}, {"RAYGATE_CONFIG": str(config)})
    assert loaded.settings.policy.thrash_guard_seconds == 5
    assert loaded.settings.config_file == str(config)
    assert loaded.origins["policy.thrashGuardSeconds"].kind == "file"
    assert loaded.origins["policy.gpuResources"].kind == "default"


def test_an_empty_or_absent_file_section_is_every_default(config: Path) -> None:
    for text in ("", "server:\npolicy:\n", "server: {tls: , log: }\n"):
        loaded = _load(config, text)
        assert replace(loaded.settings, config_file="") == ServeSettings(), text


def test_every_setting_has_a_flag_a_variable_and_a_key() -> None:
    names = [s.name for s in SETTINGS]
    assert len(set(names)) == len(names)
    server_fields = set(ServeSettings.__dataclass_fields__) - {
        "snapshots", "demo", "kubeconfig", "context", "config_file", "policy"}
    assert set(names) == server_fields
    for s in SETTINGS:
        assert s.flag == "--" + s.name.replace("_", "-")
        assert s.env == "RAYGATE_" + s.name.upper()
        assert re.fullmatch(r"[a-z][A-Za-z]*(\.[a-z][A-Za-z]*)?", s.key), s.key


# --- validation ------------------------------------------------------------------------

BAD: list[tuple[str, Flags, Env, str | None, list[str]]] = [
    ("number in the file", {}, {}, "server: {limits: {maxBodyBytes: x}}",
     ['raygate.yaml: server.limits.maxBodyBytes: expected a positive integer, got "x"']),
    ("number in the environment", {}, {"RAYGATE_MAX_BODY_BYTES": "0"}, None,
     ['RAYGATE_MAX_BODY_BYTES: expected a positive integer, got "0"']),
    ("number as a flag", {"max_body_bytes": "-5"}, {}, None,
     ['--max-body-bytes: expected a positive integer, got "-5"']),
    ("audiences are names", {}, {}, "server: {authz: {audiences: [1]}}",
     ["server.authz.audiences: expected a list of audience names"]),
    ("a quoted number in YAML is a string", {}, {}, "server: {limits: {maxBodyBytes: '5'}}",
     ['server.limits.maxBodyBytes: expected a positive integer, got "5"']),
    ("a boolean is no number", {}, {}, "server: {limits: {predicateConcurrency: true}}",
     ["server.limits.predicateConcurrency: expected a positive integer, got true"]),
    ("seconds", {"header_timeout_seconds": "soon"}, {"RAYGATE_SHUTDOWN_GRACE_SECONDS": "0"},
     "server: {authz: {cacheSeconds: .nan}, shutdown: {delaySeconds: -1}}",
     ['--header-timeout-seconds: expected a number of seconds > 0, got "soon"',
      'RAYGATE_SHUTDOWN_GRACE_SECONDS: expected a number of seconds > 0, got "0"',
      "server.authz.cacheSeconds: expected a number of seconds > 0, got NaN",
      "server.shutdown.delaySeconds: expected a number of seconds >= 0, got -1"]),
    ("addresses", {"http_addr": "nowhere"}, {"RAYGATE_GRPC_ADDR": "host:99999"},
     "server: {webhook: {addr: 9443, cert: /dev/null, key: /dev/null}}",
     ['--http-addr: expected HOST:PORT, got "nowhere"',
      'RAYGATE_GRPC_ADDR: expected HOST:PORT, got "host:99999"',
      "server.webhook.addr: expected HOST:PORT (or empty: not served), got 9443"]),
    ("choices", {}, {"RAYGATE_AUTHZ": "yes", "RAYGATE_LOG_FORMAT": "xml"},
     "server: {log: {level: INFO}}",
     ['RAYGATE_AUTHZ: expected one of on, off, auto, got "yes"',
      'RAYGATE_LOG_FORMAT: expected one of auto, json, text, got "xml"',
      'server.log.level: expected one of debug, info, warning, error, got "INFO"']),
    ("a path is a string", {}, {}, "server: {tls: {cert: [a]}}",
     ['server.tls.cert: expected a file path (or empty: none), got ["a"]']),
    ("unreadable files", {"tls_cert": "/nonexistent/tls.crt"}, {}, "server: {tls: {key: .}}",
     ["--tls-cert: cannot read '/nonexistent/tls.crt': No such file or directory",
      "raygate.yaml: server.tls.key: cannot read '.'"]),
    ("a certificate needs its key", {"tls_cert": "/dev/null"}, {}, None,
     ["--tls-cert: set, but not its pair (--tls-key, RAYGATE_TLS_KEY or server.tls.key)"]),
    ("a key needs its certificate", {}, {"RAYGATE_TLS_KEY": "/dev/null"}, None,
     ["RAYGATE_TLS_KEY: set, but not its pair (--tls-cert, RAYGATE_TLS_CERT or "
      "server.tls.cert)"]),
    ("client CA needs TLS", {}, {}, "server: {tls: {clientCA: /dev/null}}",
     ["raygate.yaml: server.tls.clientCA: needs TLS"]),
    ("webhook needs its certificate", {"webhook_addr": ":9443", "tls_cert": "/dev/null",
                                        "tls_key": "/dev/null"}, {}, None,
     ["--webhook-addr: needs a certificate and key (--webhook-cert, RAYGATE_WEBHOOK_CERT or "
      "server.webhook.cert, --webhook-key, RAYGATE_WEBHOOK_KEY or server.webhook.key): the "
      "API server calls webhooks over HTTPS only"]),
    ("authz on needs an API server", {"demo": True, "authz": "on"}, {}, None,
     ["--authz: on needs an API server to ask"]),
    ("authz on in the file, snapshots from the environment", {},
     {"RAYGATE_SNAPSHOT": "s.yaml"}, "server: {authz: {mode: 'on'}}",
     ["raygate.yaml: server.authz.mode: on needs an API server to ask"]),
    ("lease names", {"leader_election_lease_name": "Raygate"}, {}, "server: "
     "{leaderElection: {leaseNamespace: a.b}}",
     ['--leader-election-lease-name: expected an object name (lowercase letters, digits, - '
      'and .), got "Raygate"',
      'server.leaderElection.leaseNamespace: expected a namespace name (or empty: the '
      'pod\'s own), got "a.b"']),
    ("a leader stops acting before another can take the lease", {},
     {"RAYGATE_LEADER_ELECTION_RENEW_DEADLINE_SECONDS": "15"},
     "server: {leaderElection: {retrySeconds: 0.5}}",
     ["raygate.yaml: server.leaderElection.retrySeconds: expected at least 1, got 0.5",
      "--leader-election-lease-seconds: must be more than the renew deadline (15), got 15"]),
    ("more than one attempt before the renew deadline", {"leader_election_retry_seconds": "9"},
     {}, None, ["--leader-election-renew-deadline-seconds: must be more than 1.2 × the retry "
                "period (9), got 10"]),
    ("two sources in the environment", {}, {"RAYGATE_DEMO": "1", "RAYGATE_SNAPSHOT": "s"},
     None, ["RAYGATE_SNAPSHOT and RAYGATE_DEMO: give one source of cluster state"]),
    ("a boolean variable", {}, {"RAYGATE_DEMO": "maybe"}, None,
     ['RAYGATE_DEMO: expected true or false, got "maybe"']),
    ("unknown keys, with a guess", {}, {},
     "servr: {}\nserver:\n  limits: {maxBodyByte: 1}\n  tsl: {}\n  zzz: 1\n",
     ["raygate.yaml: servr: unknown section (did you mean server?)",
      "raygate.yaml: server.limits.maxBodyByte: unknown setting (did you mean maxBodyBytes?)",
      "raygate.yaml: server.tsl: unknown setting (did you mean tls?)",
      "raygate.yaml: server.zzz: unknown setting"]),
    ("a section that is no mapping", {}, {}, "server: {tls: /dev/null}",
     ['raygate.yaml: server.tls: expected a mapping, got "/dev/null"']),
    ("the server section", {}, {}, "server: [httpAddr]",
     ['raygate.yaml: server: expected a mapping, got ["httpAddr"]']),
    ("policy problems beside server problems", {}, {},
     "server: {limits: {maxBodyBytes: 0}}\npolicy: {gpuNodesForSurplus: maybe}",
     ["raygate.yaml: server.limits.maxBodyBytes: expected a positive integer, got 0",
      "raygate.yaml: policy.gpuNodesForSurplus: expected one of never, surplus, always"]),
    ("not a mapping", {}, {}, "- server\n", ["raygate.yaml: expected a mapping at the top"]),
    ("not YAML", {}, {}, "server: [\n", ["raygate.yaml: not valid YAML"]),
    ("a missing file", {"config_file": "/nonexistent/raygate.yaml"}, {}, None,
     ["/nonexistent/raygate.yaml: cannot read: No such file or directory"]),
]


@pytest.mark.parametrize(("flags", "env", "text", "messages"), [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])
def test_every_problem_is_reported_with_its_path(
    config: Path, flags: Flags, env: Env, text: str | None, messages: list[str],
) -> None:
    with pytest.raises(ConfigError) as err:
        _load(config, text, flags, env)
    problems = err.value.problems
    # Every problem is reported, each once, and nothing else.
    assert len(problems) == len(messages), problems
    for message in messages:
        assert sum(message in problem for problem in problems) == 1, (message, problems)


def test_values_that_hold_are_accepted(config: Path, tmp_path: Path) -> None:
    cert, key, ca = (tmp_path / n for n in ("tls.crt", "tls.key", "ca.pem"))
    for f in (cert, key, ca):
        f.write_text("-----BEGIN-----\n")
    loaded = _load(config, f"""
server:
  httpAddr: "[::1]:8080"
  grpcAddr: :9091
  webhook: {{addr: 0.0.0.0:9443, cert: {cert}, key: {key}}}
  tls: {{cert: {cert}, key: {key}, clientCA: {ca}}}
  authz: {{mode: "off", cacheSeconds: 0.5}}
  limits: {{maxBodyBytes: 1024, headerTimeoutSeconds: 1, predicateConcurrency: 2}}
  shutdown: {{delaySeconds: 0, graceSeconds: 3}}
  log: {{level: debug, format: json}}
policy: {{gpuNodesForSurplus: never}}
""")
    assert loaded.settings == ServeSettings(
        config_file=str(config), http_addr="[::1]:8080", grpc_addr=":9091",
        webhook_addr="0.0.0.0:9443", webhook_cert=str(cert), webhook_key=str(key),
        tls_cert=str(cert), tls_key=str(key), client_ca=str(ca),
        authz="off", authz_cache_seconds=0.5, max_body_bytes=1024, header_timeout_seconds=1.0,
        predicate_concurrency=2, shutdown_delay_seconds=0.0, shutdown_grace_seconds=3.0,
        log_level="debug", log_format="json",
        policy=PolicyConfig(gpu_nodes_for_surplus=GpuNodesForSurplus.NEVER))


def test_a_flag_over_a_bad_file_value_still_refuses(config: Path) -> None:
    # The file is checked whole, even where a flag wins: it is what the next replica or
    # the next restart without that flag would read.
    with pytest.raises(ConfigError, match=r"server\.limits\.maxBodyBytes"):
        _load(config, "server: {limits: {maxBodyBytes: x}}", {"max_body_bytes": "5"})


def test_a_missing_file_a_flag_overrides_is_not_read(config: Path) -> None:
    loaded = _load(config, "server: {tls: {cert: /nonexistent, key: /nonexistent}}",
                   {"tls_cert": "", "tls_key": ""})
    assert loaded.settings.tls_cert == loaded.settings.tls_key == ""


AUTHZ: list[tuple[str, ServeSettings, Env, bool]] = [
    ("auto in a pod", ServeSettings(), {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, True),
    ("auto outside a pod", ServeSettings(), {}, False),
    ("auto with a kubeconfig in a pod", ServeSettings(kubeconfig="k"),
     {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, False),
    ("auto with a context in a pod", ServeSettings(context="c"),
     {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, False),
    ("auto on the demo in a pod", ServeSettings(demo=True),
     {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, False),
    ("auto on snapshots in a pod", ServeSettings(snapshots=("s",)),
     {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, False),
    ("on with a kubeconfig", ServeSettings(authz="on", kubeconfig="k"), {}, True),
    ("off in a pod", ServeSettings(authz="off"), {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, False),
]


@pytest.mark.parametrize(("settings", "env", "enabled"), [a[1:] for a in AUTHZ],
                         ids=[a[0] for a in AUTHZ])
def test_authz_auto_is_on_in_cluster_only(settings: ServeSettings, env: Env,
                                          enabled: bool) -> None:
    assert authz_enabled(settings, env) is enabled


# --- --print-config --------------------------------------------------------------------


def test_print_config_round_trips_and_names_origins(config: Path, tmp_path: Path) -> None:
    flags = {"demo": True, "http_addr": "127.0.0.1:1234", "authz": "off"}
    env = {"RAYGATE_MAX_BODY_BYTES": "1000", "RAYGATE_LOG_FORMAT": "json"}
    loaded = _load(config, "server:\n  log: {level: debug}\n  shutdown: {delaySeconds: 5}\n"
                   "policy:\n  gpuNodeLabels: {accel: 'yes'}\n  thrashGuardSeconds: 60\n",
                   flags, env)
    text = render_config(loaded, {})
    document = yaml.safe_load(text)
    assert set(document) == {"server", "policy"}
    assert set(document["server"]) == {"httpAddr", "grpcAddr", "webhook", "tls", "authz",
                                       "limits", "shutdown", "requeue", "disruptionBudgets",
                                       "placement", "leaderElection", "log"}
    lines = {line.split(":")[0].strip(): line for line in text.splitlines()
             if not line.startswith("#")}
    for key, origin in [("httpAddr", "# flag --http-addr"), ("mode", "# flag --authz"),
                        ("maxBodyBytes", "# env RAYGATE_MAX_BODY_BYTES"),
                        ("format", "# env RAYGATE_LOG_FORMAT"), ("level", "# file"),
                        ("delaySeconds", "# file"), ("gpuNodeLabels", "# file"),
                        ("thrashGuardSeconds", "# file"), ("grpcAddr", "# default"),
                        ("gpuResources", "# default"), ("graceSeconds", "# default")]:
        assert lines[key].endswith(origin), lines[key]
    assert "# cluster state: the demo cluster (flag --demo)" in text
    # The printed file, read back with no flags and no environment, is the same settings.
    printed = tmp_path / "printed.yaml"
    printed.write_text(text)
    again = load_settings({"demo": True, "config_file": str(printed)}, {})
    assert again.settings == replace(loaded.settings, config_file=str(printed))
    assert all(again.origins[s.name].kind == "file" for s in SETTINGS)


def test_print_config_of_the_defaults_is_a_valid_file(tmp_path: Path) -> None:
    loaded = load_settings({}, {})
    text = render_config(loaded, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert "# authz: on (auto: in-cluster)" in text
    assert all(line.endswith("# default") for line in text.splitlines()
               if ": " in line and not line.startswith("#"))
    printed = tmp_path / "printed.yaml"
    printed.write_text(text)
    assert load_settings({"config_file": str(printed)}, {}).settings == ServeSettings(
        config_file=str(printed))



def test_the_shipped_config_map_and_deployment_agree(tmp_path: Path) -> None:
    deploy = Path(__file__).resolve().parents[2] / "deploy" / "base"
    configmap = yaml.safe_load((deploy / "configmap.yaml").read_text())
    deployment = yaml.safe_load((deploy / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (flag,) = [a for a in container["args"] if a.startswith("--config=")]
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "config")
    key = Path(flag.removeprefix("--config=")).relative_to(mount)
    path = tmp_path / "raygate.yaml"
    path.write_text(configmap["data"][str(key)])
    # In the pod: the Deployment's args as flags, and the kubelet's service variables.
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    loaded = load_settings({"config_file": str(path)}, env)
    settings = loaded.settings
    assert settings.policy == PolicyConfig()
    assert authz_enabled(settings, env)
    # SIGKILL comes terminationGracePeriodSeconds after SIGTERM: the delay while /readyz
    # fails and the grace for in-flight requests must both fit before it.
    assert settings.shutdown_delay_seconds > 0
    assert (settings.shutdown_delay_seconds + settings.shutdown_grace_seconds
            < pod["terminationGracePeriodSeconds"])
    # Apart from those, the file spells out the defaults.
    assert replace(settings, config_file="", shutdown_delay_seconds=0.0) == ServeSettings()


def test_in_cluster_is_decided_by_the_variable_the_kubernetes_client_reads() -> None:
    from kubernetes.config.incluster_config import SERVICE_HOST_ENV_NAME

    from raygate.server.config.settings import IN_CLUSTER_ENV
    assert IN_CLUSTER_ENV == SERVICE_HOST_ENV_NAME
