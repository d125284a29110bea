"""experiments/local_update.py trains in a child process (the memory of a LoRA update goes back
when it ends); terminated by its PID, the experiment stops that child too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.test_serve_cli import _alive
from tests.integration.test_services import _children

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _is_trainer(pid: int) -> bool:
    """The spawn context's training child (its resource tracker is a child too)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    return b"spawn_main" in cmd and b"resource_tracker" not in cmd


def test_sigterm_stops_the_training_child(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.local_update", "--tiny", "--requests", "4", "--steps",
         "100000", "--seeds", "1", "--objectives", "token_clip", "--retain", "off", "--lora",
         "off", "--pools", "sealed", "--limit", "2", "--max-new-tokens", "8", "--threads", "1",
         "--workdir", str(tmp_path / "w"), "--out", str(tmp_path / "out.json")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    trainers: list[int] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            trainers = [c for c in _children(proc.pid) if _is_trainer(c)]
            if trainers:
                break
            time.sleep(0.5)
        assert trainers, "the benchmark never started its training child"
        time.sleep(2.0)  # the child is importing torch and training
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(c) for c in trainers):
            time.sleep(0.5)
        assert not any(_alive(c) for c in trainers), "the training child outlived the benchmark"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for c in trainers:
            if _alive(c):
                os.kill(c, signal.SIGKILL)
