"""`ratchet serve` as a user runs it: a subprocess that starts the embedded broker and MLflow,
bootstraps a champion, serves it, prints its address and ``API key: KEY``; a completion and a
feedback go through it and land in its broker; SIGTERM stops every process it started."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _read_until_key(proc: subprocess.Popen, timeout_s: float) -> tuple[str, str, str]:
    url = bootstrap = None
    deadline = time.monotonic() + timeout_s
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        lines.append(line)
        if m := re.search(r" at (http://127\.0\.0\.1:\d+)", line):
            url = m.group(1)
        if m := re.search(r"Kafka: (\S+)", line):
            bootstrap = m.group(1)
        if line.startswith("API key: "):
            return url, bootstrap, line.split(": ", 1)[1].strip()
    raise AssertionError(f"no API key line; output so far: {lines}")


def _complete(url: str) -> dict:
    """A completion in ratchet's shape, or the OpenAI shape if the replica speaks that."""
    body = {"prompt": "# evaluate\n2+3 = ", "max_tokens": 8, "temperature": 1.0, "seed": 1,
            "conversation_id": "serve-cli", "user_id": "u1", "task_kind": "arith"}
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    if r.status_code != 200:  # the OpenAI-shaped gateway (400 or 422 for the legacy body)
        r = httpx.post(f"{url}/v1/completions", timeout=60,
                       json={"prompt": body["prompt"], "max_tokens": 8})
    assert r.status_code == 200, r.text
    return r.json()


def test_serve_prints_key_serves_signals_and_stops_everything(tmp_path):
    from ingest.kafka_io import high_watermarks, read_range
    from ingest.schema import TOPICS, parse_event

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_name": f"serve-{uuid.uuid4().hex[:6]}",
                                  "champion": {"sft_steps": 2}}))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ratchet.cli", "serve", "--config", str(config),
         "--workdir", str(tmp_path / "work")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        url, bootstrap, key = _read_until_key(proc, timeout_s=300)
        assert url and bootstrap and key.startswith("rk_")
        children = _descendants(proc.pid)
        assert len(children) >= 3  # broker, MLflow server, replica (and their workers)
        response = _complete(url)
        r = httpx.post(f"{url}/v1/feedback", json={"response_id": response["id"],
                                                   "label": "accept", "rating": 5},
                       headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert r.status_code == 202, r.text
        r = httpx.post(f"{url}/v1/feedback", json={"response_id": response["id"],
                                                   "label": "accept"},
                       headers={"Authorization": "Bearer rk_00000000_nope"}, timeout=30)
        assert r.status_code == 401
        events, deadline = [], time.monotonic() + 30
        while not events and time.monotonic() < deadline:
            for part, hw in high_watermarks(bootstrap, TOPICS["feedback"]).items():
                for _, _, value, _ in read_range(bootstrap, TOPICS["feedback"], part, 0, hw):
                    events.append(parse_event(value))
            time.sleep(0.5)
        assert [(e.response_id, e.label, e.rating) for e in events] == [
            (response["id"], "accept", 5)
        ]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in children if _alive(p)] == []
