"""How long the local MLflow server takes to answer, and ``ratchet ui`` and ``ratchet serve`` to
print their addresses.

    python bench/services_start.py [--runs 3] [--out bench/results/services_start.json]

1. ``mlflow_healthy_s``: ``MlflowServer.start`` on a fresh workdir until ``/health`` answers
   (the call returns then), per run; with the number of processes in the server's session at
   that moment (``mlflow server`` had run two: the launcher and its uvicorn child).
2. ``ui_url_s``: ``ratchet ui --workdir <fresh>`` from its start until it prints the
   ``MLflow UI:`` line, per run; it is then stopped by its PID (SIGINT, as Ctrl-C would).
3. ``serve_url_s``: ``ratchet serve --workdir <fresh>`` (broker, MLflow, a champion bootstrapped,
   one replica ready) from its start until it prints the replica's address, per run; then
   stopped by its PID (SIGINT).

``bytecode`` says whether the interpreter's installed packages carry compiled bytecode (mlflow's
``__pycache__``): where ``PYTHONDONTWRITEBYTECODE`` is set, a package installed without it is
compiled again by every process that imports it.

Each figure carries the 1-minute load average read just before it: the machine is shared and
the times move with it. Measures; chooses nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _session_members(sid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:  # fields after the name: state ppid pgrp session ...
                members.append(int(entry.name))
    return members


def _mlflow_run(tmp: Path) -> dict:
    from runtime.services import MlflowServer

    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    server = MlflowServer.start(tmp)
    seconds = time.perf_counter() - t0
    try:
        processes = len(_session_members(server.pid))
    finally:
        server.stop()
    return {"seconds": round(seconds, 2), "load_1m": load, "processes": processes}


def _until_line(command: str, tmp: Path, done) -> dict:
    """Seconds from starting ``ratchet COMMAND --workdir tmp`` until it prints a line ``done``
    accepts; then it is stopped by its PID (SIGINT, as Ctrl-C would)."""
    load = os.getloadavg()[0]
    argv = [sys.executable, "-m", "ratchet.cli", command, "--workdir", str(tmp)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if done(line):
                return {"seconds": round(time.perf_counter() - t0, 2), "load_1m": load}
        raise RuntimeError(f"ratchet {command} exited with {proc.wait()} before its address")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def _ui_run(tmp: Path) -> dict:
    return _until_line("ui", tmp, lambda line: line.startswith("MLflow UI:"))


def _serve_run(tmp: Path) -> dict:
    return _until_line("serve", tmp, lambda line: line.startswith("ratchet serve: ")
                       and " at http://" in line)


def _bytecode() -> bool:
    import importlib.util

    origin = Path(importlib.util.find_spec("mlflow").origin)
    return any((origin.parent / "__pycache__").glob("__init__.*.pyc"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "services_start.json")
    args = p.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                            capture_output=True).stdout.strip()
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
                    "cpus": os.cpu_count(), "bytecode": _bytecode(),
                    "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
                    "mlflow_healthy_s": [], "ui_url_s": [], "serve_url_s": []}
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-mlflow-") as tmp:
            result["mlflow_healthy_s"].append(_mlflow_run(Path(tmp)))
        with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
            result["ui_url_s"].append(_ui_run(Path(tmp)))
        with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
            result["serve_url_s"].append(_serve_run(Path(tmp)))
        print(f"run {i + 1} of {args.runs}: mlflow {result['mlflow_healthy_s'][-1]['seconds']} s,"
              f" ui {result['ui_url_s'][-1]['seconds']} s, serve "
              f"{result['serve_url_s'][-1]['seconds']} s", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
