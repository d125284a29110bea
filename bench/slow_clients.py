"""Slow clients against one replica process: are trickling connections closed, and is a prompt
client still served while they hang on?

Starts ``python -m deploy.replica.serve_main`` on 127.0.0.1 (no model needed: ``/healthz`` answers
without
one), opens ``--connections`` sockets that send a request line and then one header byte every
``--every-s`` seconds, and meanwhile times ``GET /healthz`` from a normal client. Reports how many
trickling connections the replica closed, when (seconds after opening), and the health latency.
Run it twice to compare: ``--header-timeout-s 10`` (the default) and a very long one, which
stands for a server without a header deadline.

    python bench/slow_clients.py [--connections 100] [--header-timeout-s 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(port: int, header_timeout_s: float, work: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "RATCHET_TRACKING_URI": "http://127.0.0.1:9",
        "RATCHET_MODEL_NAME": "bench",
        "RATCHET_ADMIN_TOKEN": "bench-slow-clients-token",
        "RATCHET_PORT": str(port),
        "RATCHET_SPOOL_DIR": str(work / "spool"),
        "RATCHET_CACHE_DIR": str(work / "cache"),
        "RATCHET_API_KEYS_PATH": str(work / "keys.json"),
        "RATCHET_HEADER_TIMEOUT_S": str(header_timeout_s),
        "RATCHET_LOG_BEHAVIOUR": "false",
    }
    proc = subprocess.Popen([sys.executable, "-m", "deploy.replica.serve_main"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("replica did not start")


def run(args: argparse.Namespace) -> dict:
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = _start(port, args.header_timeout_s, Path(tmp))
        try:
            return _attack(port, args)
        finally:
            proc.terminate()
            proc.wait(30)


def _attack(port: int, args: argparse.Namespace) -> dict:
    socks, opened = [], []
    for _ in range(args.connections):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.setblocking(False)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(s)
        opened.append(time.monotonic())
    closed_after: dict[int, float] = {}
    health_ms: list[float] = []
    start = time.monotonic()
    next_health = start
    while time.monotonic() - start < args.duration_s and len(closed_after) < len(socks):
        for i, s in enumerate(socks):
            if i in closed_after:
                continue
            try:
                if s.recv(1024) == b"":
                    closed_after[i] = time.monotonic() - opened[i]
                    continue
            except BlockingIOError:
                pass
            except OSError:
                closed_after[i] = time.monotonic() - opened[i]
                continue
            try:
                s.send(b"X")
            except OSError:
                closed_after[i] = time.monotonic() - opened[i]
        if time.monotonic() >= next_health:
            t0 = time.perf_counter()
            r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
            if r.status_code == 200:
                health_ms.append((time.perf_counter() - t0) * 1000)
            next_health += 0.5
        time.sleep(args.every_s)
    for s in socks:
        s.close()
    times = sorted(closed_after.values())
    return {
        "connections": len(socks),
        "closed": len(times),
        "still_open_after_s": None if len(times) == len(socks) else args.duration_s,
        "closed_after_s": {
            "min": round(times[0], 2) if times else None,
            "median": round(statistics.median(times), 2) if times else None,
            "max": round(times[-1], 2) if times else None,
        },
        "healthz_ms": {
            "n": len(health_ms),
            "median": round(statistics.median(health_ms), 1) if health_ms else None,
            "max": round(max(health_ms), 1) if health_ms else None,
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--header-timeout-s", type=float, default=2.0)
    parser.add_argument("--every-s", type=float, default=0.5, help="one header byte per ...")
    parser.add_argument("--duration-s", type=float, default=15.0)
    parser.add_argument("--out", type=Path, default=Path("bench/results/slow_clients.json"))
    args = parser.parse_args(argv)
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()}-core CPU",
        "load_avg_1m_at_start": os.getloadavg()[0],
        "header_timeout_s": args.header_timeout_s,
        "trickle_every_s": args.every_s,
        **run(args),
    }
    print(json.dumps(result, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
