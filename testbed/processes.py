"""Child processes of the testbed: started with their log in a file, stopped by PID.

Each component runs in its own process group, so stopping it stops whatever it started;
its output goes to ``<logs>/<name>.log``, kept after the stop for a failed test to show.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = ["Process", "StartError", "free_port", "wait_for"]


class StartError(Exception):
    """A component did not come up; the message names it and ends with its log."""


def free_port() -> int:
    """A loopback port nothing listens on now (the kernel's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(what: str, ready: Callable[[], bool], timeout: float,
             process: Process | None = None) -> None:
    """Poll ``ready`` until it says yes; fail naming ``what`` (with the process's log
    tail when it died or never got ready)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and not process.alive:
            raise StartError(f"{what}: {process.name} exited with {process.returncode}\n"
                             f"{process.tail()}")
        with contextlib.suppress(Exception):
            if ready():
                return
        time.sleep(0.1)
    tail = f"\n{process.tail()}" if process is not None else ""
    raise StartError(f"{what}: not ready after {timeout:.0f} s{tail}")


class Process:
    """One component: argv, environment, a log file."""

    def __init__(self, name: str, argv: Sequence[str], logs: Path,
                 env: Mapping[str, str] | None = None, cwd: Path | None = None) -> None:
        self.name = name
        self.argv = [str(arg) for arg in argv]
        self.log = logs / f"{name}.log"
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"--- start {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
            out.flush()
            self._popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=self.env,
                                           cwd=self.cwd, start_new_session=True)
        return self

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    @property
    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._popen.poll() if self._popen else None

    def signal(self, signum: int) -> None:
        if self.alive and self._popen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._popen.pid, signum)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the process group, SIGKILL what is left after ``timeout``."""
        if self._popen is None:
            return
        self.signal(signal.SIGTERM)
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self._popen.wait(5)
        # Children that outlived the leader (none of ours should) go too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would: no shutdown code runs."""
        if self._popen is not None:
            self.signal(signal.SIGKILL)
            self._popen.wait(5)

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return f"(no log at {self.log})"
        return "\n".join([f"--- last {min(lines, len(text))} lines of {self.log}:",
                          *text[-lines:]])
