"""Services the suite starts die with pytest: on SIGTERM (a CI timeout) and even on SIGKILL.

The outer tests run a tiny pytest session in a subprocess: its only test (``_INNER``, skipped
unless the environment names a pidfile) starts a broker through the ``broker`` fixture, writes
the broker's PID and then sleeps until it is signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.services import _pid_alive

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PIDFILE_ENV = "RATCHET_TEST_BROKER_PIDFILE"


@pytest.mark.skipif(PIDFILE_ENV not in os.environ, reason="run by the tests below only")
def test_inner_starts_a_broker_and_waits(broker):
    Path(os.environ[PIDFILE_ENV]).write_text(str(broker.pid))
    time.sleep(120)


def _run_inner_and_signal(tmp_path: Path, sig: int) -> tuple[int, int]:
    pidfile = tmp_path / "broker.pid"
    env = {**os.environ, "PYTHONPATH": str(ROOT), PIDFILE_ENV: str(pidfile)}
    node = f"{Path(__file__).relative_to(ROOT)}::test_inner_starts_a_broker_and_waits"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node]
    argv += ["--basetemp", str(tmp_path / "inner")]
    out = open(tmp_path / "inner.log", "wb")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not pidfile.exists() or not pidfile.read_text():
            assert proc.poll() is None, (tmp_path / "inner.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "inner session never started its broker"
            time.sleep(0.1)
        broker_pid = int(pidfile.read_text())
        assert _pid_alive(broker_pid)
        proc.send_signal(sig)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()
    return code, broker_pid


def _gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_sigterm_to_pytest_stops_the_broker(tmp_path):
    code, broker_pid = _run_inner_and_signal(tmp_path, signal.SIGTERM)
    assert code == -signal.SIGTERM
    assert _gone(broker_pid), f"broker {broker_pid} outlived pytest"


def test_sigkill_to_pytest_kills_the_broker_too(tmp_path):
    code, broker_pid = _run_inner_and_signal(tmp_path, signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert _gone(broker_pid), f"broker {broker_pid} outlived pytest"
