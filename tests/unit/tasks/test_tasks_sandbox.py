"""The sandbox: hanging, crashing, memory-hungry and networked programs fail, never hang."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tasks import sandbox
from tasks.humaneval import grade, humaneval_suite, load_problems, truncate
from tasks.sandbox import run_sandboxed


def test_a_clean_program_passes_and_sees_a_bare_environment():
    r = run_sandboxed("import os\nprint(sorted(k for k in os.environ if k != 'LC_CTYPE'))")
    assert r.passed and r.returncode == 0
    assert r.stdout.strip() == "['HOME', 'PATH', 'PWD', 'TMPDIR']"


def test_an_infinite_loop_times_out_and_fails():
    start = time.perf_counter()
    r = run_sandboxed("while True:\n    pass\n", timeout_s=1.0)
    assert r.status == "timeout" and not r.passed
    assert time.perf_counter() - start < 5.0


def test_a_sleeping_child_process_is_killed_with_the_group():
    code = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
            "time.sleep(30)\n")
    r = run_sandboxed(code, timeout_s=1.0)
    assert r.status == "timeout"


def test_a_stop_signal_while_the_box_starts_still_ends_the_box(monkeypatch):
    """A benchmark stopped by SIGTERM (unwound as SystemExit) just as ``subprocess.Popen``
    starts bwrap, before the call holds the process: the caller still kills bwrap's group. Left
    to itself bwrap dies of the closed status pipe while the caller lives, but a caller that
    exits at once can leave the box's pid 1 waiting forever for a bwrap that is gone."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers live in the main thread")
    real, started = subprocess.Popen, []

    def popen(*args, **kwargs):
        proc = real(*args, **kwargs)
        started.append(proc)
        signal.raise_signal(signal.SIGTERM)  # the handler runs here, inside Popen's call
        return proc

    monkeypatch.setattr(sandbox.subprocess, "Popen", popen)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        with pytest.raises(SystemExit):
            run_sandboxed("import time\ntime.sleep(30)\n", timeout_s=30)
        assert len(started) == 1
        deadline = time.monotonic() + 5
        while started[0].poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        # stopped by the caller (SIGKILL to its group), not left to notice a closed pipe
        assert started[0].poll() == -signal.SIGKILL
    finally:
        signal.signal(signal.SIGTERM, previous)
        for proc in started:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


@pytest.mark.parametrize("code,status", [
    ("import os\nos.abort()\n", "crashed"),
    ("raise SystemExit(3)\n", "failed"),
    ("x = bytearray(1 << 31)\n", "failed"),  # MemoryError under RLIMIT_AS
])
def test_crashes_and_memory_bombs_fail(code, status):
    r = run_sandboxed(code, memory_mb=256)
    assert r.status == status and not r.passed


def test_network_is_unreachable():
    r = run_sandboxed("import socket\nsocket.create_connection(('127.0.0.1', 80), timeout=1)\n")
    assert not r.passed and "Operation not permitted" in r.stderr
    raw = run_sandboxed("import _socket\n_socket.socket().connect(('127.0.0.1', 80))\n")
    assert not raw.passed


def test_scratch_directory_is_private_and_removed(tmp_path):
    r = run_sandboxed("import os\nopen('f.txt', 'w').write('x')\nprint(os.getcwd())",
                      scratch_root=tmp_path)
    assert r.passed and r.stdout.strip().startswith(str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_humaneval_canonical_solution_passes_and_wrong_or_looping_ones_fail():
    problems = load_problems()
    assert len(problems) == 164
    p = problems["HumanEval/0"]
    assert grade(p, p["canonical_solution"], timeout_s=5).passed
    assert not grade(p, "    return False\n", timeout_s=5).passed
    loop = grade(p, "    while True:\n        pass\n", timeout_s=1)
    assert not loop.passed and loop.detail.startswith("timeout")
    bad = grade(p, "    return (\n", timeout_s=5)
    assert bad.malformed and not bad.passed
    assert grade(p, "   \n", timeout_s=5).no_edit


def test_humaneval_suite_is_reproducible_from_seed():
    a, _ = humaneval_suite(size=12, seed=5, timeout_s=5)
    b, _ = humaneval_suite(size=12, seed=5, timeout_s=5)
    c, _ = humaneval_suite(size=12, seed=6, timeout_s=5)
    assert [t.task_id for t in a] == [t.task_id for t in b] != [t.task_id for t in c]
    full, _ = humaneval_suite(size=500, seed=0, timeout_s=5)
    assert len(full) == 164


def test_truncate_stops_at_next_top_level_statement():
    assert truncate("    return 1\ndef other():\n    pass") == "    return 1"
    assert truncate("    return 1\n") == "    return 1\n"
