"""A minimal keep-alive HTTP/1.1 load client on a raw socket, run as its own process.

The runner uses it where wrk cannot do the job:

* the scheduling-cycle scenarios, whose unit is *two* requests (filter, then prioritize)
  timed together: wrk's Lua API has no clock to time a pair;
* every scenario when wrk is missing (a fallback the runner announces).

One connection, units sent back to back in turn (closed loop, like wrk's). The client costs
~15-30 µs per request on this machine (one ``sendall``, a few ``recv_into``), the same
for every contender. Replies must carry ``Content-Length`` (both servers send it) and
status 200; anything else exits 1 with the reason.

    python -m bench.pyclient --port 8888 --duration 5 --warmup 1 --out samples.json \
        --per-unit 2 filter-0.http prioritize-0.http filter-1.http prioritize-1.http
"""

from __future__ import annotations

import argparse
import itertools
import json
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ClientError", "measure"]

HOST = "127.0.0.1"
MAX_UNITS = 2_000_000


class ClientError(RuntimeError):
    pass


class _Connection:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def exchange(self, request: bytes) -> int:
        """Send one request, read its whole reply; the reply's status."""
        sock, buf = self.sock, self.buf
        sock.sendall(request)
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            chunk = sock.recv(65536)
            if not chunk:
                raise ClientError("server closed the connection")
            buf += chunk
        head = bytes(buf[:end]).lower()
        start = head.find(b"\r\ncontent-length:")
        if start < 0:
            raise ClientError(f"reply without Content-Length: {bytes(buf[:200])!r}")
        stop = head.find(b"\r\n", start + 2)
        length = int(head[start + 17:stop if stop >= 0 else None])
        need = end + 4 + length
        while len(buf) < need:
            chunk = sock.recv(max(65536, need - len(buf)))
            if not chunk:
                raise ClientError("server closed the connection mid-reply")
            buf += chunk
        status = int(buf[9:12])
        del buf[:need]
        return status

    def close(self) -> None:
        self.sock.close()


def measure(port: int, units: Sequence[Sequence[bytes]], duration_s: float,
            warmup_s: float) -> tuple[list[int], float]:
    """``units`` in turn (each unit's requests in order), back to back on one connection
    for ``duration_s`` after ``warmup_s``; each unit's wall time in ns, and the seconds
    measured."""
    conn = _Connection(port)
    clock = time.perf_counter_ns
    samples: list[int] = []
    turn = itertools.cycle(units)
    try:
        deadline = clock() + int(warmup_s * 1e9)
        while clock() < deadline:
            for request in next(turn):
                if (status := conn.exchange(request)) != 200:
                    raise ClientError(f"HTTP {status} during warm-up")
        started = clock()
        deadline = started + int(duration_s * 1e9)
        while len(samples) < MAX_UNITS:
            t0 = clock()
            for request in next(turn):
                if (status := conn.exchange(request)) != 200:
                    raise ClientError(f"HTTP {status}")
            t1 = clock()
            samples.append(t1 - t0)
            if t1 >= deadline:
                break
        return samples, (clock() - started) / 1e9
    finally:
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pyclient")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--warmup", type=float, default=0.0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--per-unit", type=int, default=1,
                        help="requests per unit, timed together (default 1)")
    parser.add_argument("requests", nargs="+", type=Path,
                        help="files holding one raw HTTP request each, in sending order")
    args = parser.parse_args(argv)
    requests = [p.read_bytes() for p in args.requests]
    if args.per_unit < 1 or len(requests) % args.per_unit:
        parser.error(f"{len(requests)} requests do not make units of {args.per_unit}")
    units = [requests[i:i + args.per_unit] for i in range(0, len(requests), args.per_unit)]
    try:
        samples, elapsed = measure(args.port, units, args.duration, args.warmup)
    except (ClientError, OSError) as exc:
        print(f"pyclient: {exc}", file=sys.stderr)
        return 1
    args.out.write_text(json.dumps({"elapsed_s": elapsed, "samples_ns": samples}),
                        encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
