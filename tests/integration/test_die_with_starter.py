"""What a process starts dies with it, even when it is SIGKILLed: the MLflow server and a replica.

Each test runs a small starter program in a subprocess (``_STARTERS``) that starts the thing from
its main thread and then waits; the test SIGKILLs the starter and looks in /proc for any process
left in the started one's session (services and replicas run in a session of their own, whose
id is their PID). A grandchild there would survive: the kernel's death signal reaches the child
only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from runtime.services import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

_STARTERS = {
    "mlflow": """
import sys, time
from pathlib import Path
from runtime.services import MlflowServer

server = MlflowServer.start(Path(sys.argv[1]))
(Path(sys.argv[1]) / "started").write_text(str(server.pid))
time.sleep(600)
""",
    # no MLflow behind the tracking URI: the replica serves /healthz and retries its first load
    # forever, so it is still running (never ready) when its starter dies
    "replica": """
import sys
from pathlib import Path
from deploy.fleet.fleet import Fleet
from runtime.services import free_port

Fleet.start(
    n_replicas=1, tracking_uri=f"http://127.0.0.1:{free_port()}", model_name="nothing",
    bootstrap=None, workdir=Path(sys.argv[1]), admin_token="die-with-starter-7f3a9c2e",
    local_mode=True, port=int(sys.argv[2]), ready_timeout_s=600,
)
""",
}


def _session(sid: int) -> list[int]:
    """PIDs of the live (not zombie) processes in session ``sid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, session = fields[0], int(fields[3])  # after the name: state ppid pgrp session
        if session == sid and state != "Z":
            members.append(int(entry.name))
    return members


def _gone(sid: int, timeout_s: float = 10.0) -> list[int]:
    """Wait until session ``sid`` is empty; what is left of it."""
    deadline = time.monotonic() + timeout_s
    while (left := _session(sid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _start(name: str, tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / "starter.log"
    argv = [sys.executable, "-c", _STARTERS[name], str(tmp_path / "work"), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    return proc, log


def _wait_for(proc: subprocess.Popen, log: Path, ready, what: str, timeout_s: float = 180.0):
    deadline = time.monotonic() + timeout_s
    while not (value := ready()):
        assert proc.poll() is None, f"starter exited:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{what} not up in {timeout_s}s"
        time.sleep(0.2)
    return value


def _kill_and_check(proc: subprocess.Popen, sid: int) -> None:
    assert _session(sid), f"nothing runs in session {sid} before the starter is killed"
    try:
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        left = _gone(sid)
    finally:
        for pid in _session(sid):  # clean up by PID whatever the outcome
            os.kill(pid, signal.SIGKILL)
    assert not left, f"outlived their SIGKILLed starter: {left}"


def test_mlflow_server_dies_with_its_starter_grandchildren_included(tmp_path):
    proc, log = _start("mlflow", tmp_path)
    try:
        started = tmp_path / "work" / "started"
        pid = int(_wait_for(proc, log, lambda: started.exists() and started.read_text(),
                            "the mlflow server"))
        _kill_and_check(proc, pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_replica_dies_with_its_starter(tmp_path):
    port = free_port()
    proc, log = _start("replica", tmp_path, str(port))
    try:
        pidfile = tmp_path / "work" / "replica-0.pid"
        pid = int(_wait_for(proc, log, lambda: pidfile.exists() and pidfile.read_text(),
                            "the replica's pidfile"))
        _wait_for(proc, log, lambda: _answers(f"http://127.0.0.1:{port}/healthz"), "the replica")
        _kill_and_check(proc, pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
