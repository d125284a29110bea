"""Exactly-once in effect: SIGKILL the ingest process at each step, rerun, count every reward.

For each failpoint (mid-read, mid-write, after write and before commit, after commit) a fresh
batch of traffic is produced, ``python -m ingest.pipeline`` is started with the failpoint set and
must die by SIGKILL, then runs again without it. A final drained run finalises what is carried.
The spans must then hold every good completion's reward exactly once, and every bad event must
be in the dead-letter topic.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ingest.kafka_io import (
    EventProducer,
    committed_offsets,
    ensure_topics,
    high_watermarks,
    read_topic,
    start_group_at_end,
)
from ingest.pipeline import FAILPOINT_ENV
from ingest.schema import DEAD_LETTER_TOPIC, TOPICS
from ingest.spans import SpanStore, read_spans
from ingest.synthetic import stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
STEPS = ("mid_read", "mid_write", "after_write", "after_commit")


def _ingest(bootstrap: str, out: Path, failpoint: str | None, *extra: str):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(FAILPOINT_ENV, None)
    if failpoint:
        env[FAILPOINT_ENV] = failpoint
    argv = [
        sys.executable,
        "-m",
        "ingest.pipeline",
        "--bootstrap",
        bootstrap,
        "--group-id",
        "crash",
        "--output-root",
        str(out),
        *extra,
    ]
    return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _produce_batch(bootstrap: str, k: int, t0: datetime) -> tuple[int, int]:
    """One batch of 40 completions with signals (and redeliveries) plus 3 bad events."""
    n = 40
    with EventProducer(bootstrap) as p:
        events = list(
            stream(n, start=t0 + timedelta(minutes=40 * k), spacing_s=60, prefix=f"b{k}-")
        )
        for e in events:
            p.send(e)
        for e in events[:10]:  # redelivered copies: same event ids
            p.send(e)
        p.send_raw(TOPICS["completion"], b"x", b"{truncated")
        p.send_raw(TOPICS["feedback"], b"x", b'{"kind": "gossip"}')
        p.send_raw(TOPICS["followup"], b"x", b"\xc3\x28")
    return n, 3


def test_sigkill_at_every_step_keeps_every_reward_exactly_once(broker, tmp_path):
    ensure_topics(broker.bootstrap)
    start_group_at_end(broker.bootstrap, "crash", TOPICS.values())  # the broker is shared
    dlq_before = high_watermarks(broker.bootstrap, DEAD_LETTER_TOPIC)
    out = tmp_path / "spans"
    t0 = datetime.now(UTC) - timedelta(hours=5)
    good = bad = 0
    for k, step in enumerate(STEPS):
        n, b = _produce_batch(broker.bootstrap, k, t0)
        good, bad = good + n, bad + b
        crashed = _ingest(broker.bootstrap, out, step)
        assert crashed.returncode == -signal.SIGKILL, (step, crashed.stderr[-2000:])
        again = _ingest(broker.bootstrap, out, None)
        assert again.returncode == 0, again.stderr[-3000:]
    final = _ingest(broker.bootstrap, out, None, "--drain")
    assert final.returncode == 0, final.stderr[-3000:]

    rows = read_spans(out)
    counts = Counter(rows.column("response_id").to_pylist())
    expected = {f"b{k}-{i:08d}" for k in range(len(STEPS)) for i in range(40)}
    duplicates = sum(c - 1 for c in counts.values())
    losses = len(expected - set(counts))
    dead = Counter()
    for _, _, key, value in read_topic(broker.bootstrap, DEAD_LETTER_TOPIC, dlq_before):
        dead[key] += 1
        assert json.loads(value)["reason"] in {"unparseable_json", "unknown_kind", "invalid_utf8"}
    figures = {
        "completions_in": good,
        "rows_out": rows.num_rows,
        "duplicates": duplicates,
        "losses": losses,
        "bad_in": bad,
        "dead_letter_keys": len(dead),
        "spans": len(SpanStore(out).manifest_dirs()),
    }
    print("kill-test figures:", json.dumps(figures))
    assert duplicates == 0 and losses == 0 and set(counts) == expected
    assert len(dead) == bad
    ends = committed_offsets(broker.bootstrap, "crash", TOPICS.values())
    for topic in TOPICS.values():
        assert ends[topic] == high_watermarks(broker.bootstrap, topic)
