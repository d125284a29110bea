"""A SIGTERM to an entry point unwinds it: its ``finally`` blocks (where services are stopped by
PID) run before it exits with 128 + SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CHILD = """
import sys, time
from pathlib import Path
if sys.argv[2] == "unwind":
    from runtime.services import unwind_on_sigterm
    unwind_on_sigterm()
Path(sys.argv[1] + ".started").write_text("")
try:
    time.sleep(60)
finally:
    Path(sys.argv[1]).write_text("stopped what it started")
"""


@pytest.mark.parametrize(("mode", "unwinds"), [("unwind", True), ("default", False)])
def test_sigterm_runs_the_finally_blocks_only_with_the_handler(tmp_path, mode, unwinds):
    marker = tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(marker), mode], cwd=ROOT,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    try:
        deadline = time.monotonic() + 30
        while not Path(f"{marker}.started").exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert marker.exists() is unwinds
    assert code == (128 + signal.SIGTERM if unwinds else -signal.SIGTERM)
