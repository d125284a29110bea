"""One bad event never blocks or poisons a span, and replayed telemetry classifies as recorded.

Real broker (Tansu) and Beam for every test: a 5 MB event and a crash mid-publish, a producer
timestamp in 2100, out-of-range numbers, a quarantined span released by the CLI, a 10-day
recording replayed twice, and no outbound network call on the Kafka-source path.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ingest.config import FileSource, IngestConfig, ValidationConfig
from ingest.kafka_io import (
    EventProducer,
    ensure_topics,
    high_watermarks,
    read_topic,
    start_group_at_end,
)
from ingest.pipeline import FAILPOINT_ENV, run_config, run_span
from ingest.schema import DEAD_LETTER_TOPIC, TOPICS
from ingest.spans import SpanStore, read_spans
from ingest.synthetic import append_records, completion, feedback, persistence, stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _letters(bootstrap: str, since: dict[int, int]) -> list[tuple[bytes, dict]]:
    return [(k, json.loads(v)) for _, _, k, v in read_topic(bootstrap, DEAD_LETTER_TOPIC, since)]


def _raw_producer(bootstrap: str):
    from kafka import KafkaProducer

    return KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_request_size=16 * 2**20)


def _ingest(bootstrap: str, group: str, out: Path, failpoint: str | None = None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(FAILPOINT_ENV, None)
    if failpoint:
        env[FAILPOINT_ENV] = failpoint
    argv = [sys.executable, "-m", "ingest.pipeline", "--bootstrap", bootstrap]
    argv += ["--group-id", group, "--output-root", str(out)]
    return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_a_5mb_event_is_dead_lettered_once_even_across_a_crash_mid_publish(broker, tmp_path):
    ensure_topics(broker.bootstrap)
    start_group_at_end(broker.bootstrap, "huge", TOPICS.values())
    dlq_before = high_watermarks(broker.bootstrap, DEAD_LETTER_TOPIC)
    huge = b'{"kind": "completion", "prompt": "' + b"x" * (5 * 1024 * 1024) + b'"}'
    t0 = datetime.now(UTC) - timedelta(hours=2)
    with EventProducer(broker.bootstrap) as p:
        for e in stream(10, start=t0, spacing_s=60, prefix="h"):
            p.send(e)
    raw = _raw_producer(broker.bootstrap)
    raw.send(TOPICS["completion"], key=b"huge", value=huge)
    raw.send(TOPICS["completion"], key=b"bad", value=b"{not json")
    raw.send(TOPICS["feedback"], key=b"bad2", value=b'{"kind": "gossip"}')
    raw.flush()
    raw.close()
    out = tmp_path / "spans"
    crashed = _ingest(broker.bootstrap, "huge", out, failpoint="mid_publish")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    for _ in range(2):  # recovery finishes the publish; a second run has nothing left to send
        again = _ingest(broker.bootstrap, "huge", out)
        assert again.returncode == 0, again.stderr[-3000:]
    letters = _letters(broker.bootstrap, dlq_before)
    keys = Counter(k for k, _ in letters)
    assert len(letters) == 3 and max(keys.values()) == 1, keys  # each exactly once
    too_large = [d for _, d in letters if d["reason"] == "too_large"]
    assert len(too_large) == 1
    assert too_large[0]["payload_bytes"] == len(huge)
    assert too_large[0]["payload_sha256"] == hashlib.sha256(huge).hexdigest()
    assert too_large[0]["payload_truncated"] and huge.decode().startswith(too_large[0]["payload"])
    assert read_spans(out).num_rows == 10


def test_a_producer_timestamp_in_2100_cannot_move_the_watermark(broker, tmp_path):
    ensure_topics(broker.bootstrap)
    start_group_at_end(broker.bootstrap, "future", TOPICS.values())
    dlq_before = high_watermarks(broker.bootstrap, DEAD_LETTER_TOPIC)
    far = datetime(2100, 1, 1, tzinfo=UTC)
    t = datetime.now(UTC) - timedelta(minutes=20)
    ids = [f"f{i}" for i in range(5)]
    raw = _raw_producer(broker.bootstrap)  # the producer stamps the record in 2100 too
    raw.send(TOPICS["completion"], key=b"poison", value=completion("poison", far).to_json(),
             timestamp_ms=int(far.timestamp() * 1000))
    raw.flush()
    raw.close()
    with EventProducer(broker.bootstrap) as p:
        for rid in ids:
            p.send(completion(rid, t))
    out = tmp_path / "spans"
    first = run_span(bootstrap=broker.bootstrap, group_id="future", output_root=out)
    assert first.rows == 0 and first.pending == 5  # windows still open: carried, not defaulted
    assert first.dead_letters == 1
    with EventProducer(broker.bootstrap) as p:  # the signals come in the next span
        for rid in ids:
            for w in (30, 120, 300, 600):
                p.send(persistence(rid, t, w, 0.8))
            p.send(feedback(rid, t + timedelta(seconds=5), accept=True))
    second = run_span(bootstrap=broker.bootstrap, group_id="future", output_root=out)
    assert second.late == 0 and second.rows == 5
    assert second.defaulted_share == 0.0  # every expected signal joined
    rows = read_spans(out).to_pylist()
    assert all(r["edit_persistence_600"] == pytest.approx(0.8) for r in rows)
    assert all(r["feedback_accept"] is True for r in rows)
    reasons = [d["reason"] for _, d in _letters(broker.bootstrap, dlq_before)]
    assert reasons == ["future_timestamp"]


def test_one_out_of_range_event_is_dead_lettered_and_the_span_keeps_its_good_rows(tmp_path):
    src = tmp_path / "events.jsonl"
    t0 = datetime.now(UTC) - timedelta(hours=2)
    append_records(src, stream(40, start=t0, spacing_s=30))
    bad = json.loads(completion("bad", t0).to_json())
    text = json.dumps(bad).replace('"latency_ms": 200.0', '"latency_ms": 1e308')
    inf = json.dumps(bad).replace('"latency_ms": 200.0', '"latency_ms": Infinity')
    with open(src, "a") as f:
        for value in (text, inf.replace('"bad"', '"bad2"')):
            rec = {"topic": TOPICS["completion"], "key": "bad", "value": value,
                   "timestamp_ms": int(t0.timestamp() * 1000)}
            f.write(json.dumps(rec) + "\n")
    cfg = IngestConfig(source=FileSource(path=src), output_root=tmp_path / "out", drain=True)
    r = run_config(cfg)
    assert r.validated and not r.quarantined
    assert r.rows == 40 and r.dead_letters == 2
    letters = SpanStore(tmp_path / "out").dead_letters(r.span_id, "dead_letters")
    assert sorted((d.reason, "latency_ms" in d.detail) for d in letters) == [
        ("non_finite", True),
        ("out_of_range", True),
    ]


def test_a_quarantined_span_is_released_by_the_cli_with_all_its_rows(tmp_path):
    from ratchet.cli import main

    src = tmp_path / "events.jsonl"
    append_records(src, stream(30, start=datetime.now(UTC) - timedelta(hours=2), p_feedback=0.3))
    workdir = tmp_path / "work"
    strict = ValidationConfig(min_join_share={"feedback": 0.95})
    cfg = IngestConfig(source=FileSource(path=src), output_root=workdir / "spans",
                       validation=strict, drain=True)
    r = run_config(cfg)
    assert r.quarantined and read_spans(workdir / "spans").num_rows == 0
    assert main(["spans", "release", "span-000099", "--workdir", str(workdir)]) == 2
    assert main(["spans", "release", r.span_id, "--workdir", str(workdir), "--note", "ok"]) == 0
    assert read_spans(workdir / "spans").num_rows == 30
    assert read_spans(workdir / "spans", status="quarantined").num_rows == 0
    m = SpanStore(workdir / "spans").manifests_list()[0]
    assert m["status"] == "ok" and m["released"]["note"] == "ok"
    assert not r.path.exists()  # the quarantined copy is gone once the manifest moved
    assert main(["spans", "release", r.span_id, "--workdir", str(workdir)]) == 2  # not twice


def _ten_day_recording(path: Path) -> int:
    """Completions with all their signals spread over 10 days, plus 2 malformed records."""
    start = datetime(2026, 3, 1, tzinfo=UTC)
    events = list(stream(40, start=start, spacing_s=10 * 86400 / 40, p_followup=0.0, prefix="z"))
    append_records(path, events)
    with open(path, "a") as f:
        for value in ("{oops", '{"kind": "gossip"}'):
            ts = int((start + timedelta(days=5)).timestamp() * 1000)
            rec = {"topic": TOPICS["completion"], "key": None, "value": value, "timestamp_ms": ts}
            f.write(json.dumps(rec) + "\n")
    lines = path.read_text().splitlines()  # in timestamp order, as ``ratchet.replay.record``
    lines.sort(key=lambda ln: json.loads(ln)["timestamp_ms"])
    path.write_text("".join(ln + "\n" for ln in lines))
    return len(events) + 2


def _replay_and_ingest(broker, recording: Path, group: str, out: Path):
    from ratchet.replay import replay

    start_group_at_end(broker.bootstrap, group, TOPICS.values())
    dlq_before = high_watermarks(broker.bootstrap, DEAD_LETTER_TOPIC)
    replay(recording, bootstrap=broker.bootstrap)
    r = run_span(bootstrap=broker.bootstrap, group_id=group, output_root=out, drain=True)
    reasons = Counter(d["reason"] for _, d in _letters(broker.bootstrap, dlq_before))
    rows = read_spans(out)
    joined = sorted(zip(rows.column("response_id").to_pylist(),
                        rows.column("edit_persistence_600").to_pylist(), strict=True))
    return r, reasons, joined


def test_a_ten_day_recording_replays_without_stale_letters_and_reruns_identically(
    broker, tmp_path
):
    ensure_topics(broker.bootstrap)
    recording = tmp_path / "recorded.jsonl"
    n = _ten_day_recording(recording)
    r1, reasons1, joined1 = _replay_and_ingest(broker, recording, "replay-1", tmp_path / "a")
    assert r1.completions_in + r1.signals_in + r1.dead_letters == n
    assert reasons1 == Counter({"unparseable_json": 1, "unknown_kind": 1})  # 0 stale_timestamp
    assert len(joined1) == 40 and all(p is not None for _, p in joined1)
    r2, reasons2, joined2 = _replay_and_ingest(broker, recording, "replay-2", tmp_path / "b")
    assert (reasons2, joined2, r2.rows, r2.late) == (reasons1, joined1, r1.rows, r1.late)


NET_PROBE = '''
import json, sys
attempts = []
LOOPBACK = ("127.0.0.1", "localhost", "::1")
def hook(event, args):
    if event == "socket.connect" and isinstance(args[1], tuple):
        if str(args[1][0]) not in LOOPBACK:
            attempts.append([event, str(args[1][0])])
    elif event == "socket.getaddrinfo" and args[0] is not None:
        if str(args[0]) not in LOOPBACK:
            attempts.append([event, str(args[0])])
    elif event == "urllib.Request":
        attempts.append([event, str(args[0])])
sys.addaudithook(hook)
from ingest.pipeline import run
result = run(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    json.dump({"attempts": attempts, "rows": result.rows}, f)
'''


def test_a_kafka_source_run_makes_no_outbound_network_call(broker, tmp_path):
    ensure_topics(broker.bootstrap)
    start_group_at_end(broker.bootstrap, "offline", TOPICS.values())
    with EventProducer(broker.bootstrap) as p:
        for e in stream(5, start=datetime.now(UTC) - timedelta(hours=1), prefix="o"):
            p.send(e)
    probe, report = tmp_path / "probe.py", tmp_path / "report.json"
    probe.write_text(NET_PROBE)
    argv = [sys.executable, str(probe), str(report), "--bootstrap", broker.bootstrap]
    argv += ["--group-id", "offline", "--output-root", str(tmp_path / "out")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(report.read_text())
    assert got["attempts"] == []  # no Prism download, no DNS lookup, nothing beyond loopback
    assert got["rows"] == 5
