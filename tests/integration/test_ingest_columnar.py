"""The batched (bucketed) Beam pipeline gives exactly what the per-event rules give.

The reference below applies the rules one event at a time without Beam: ``classify`` every
record, group by response id (carried events and next-completion markers included), watermark
from the largest event time, ``join_group`` per response id. That is what the per-event pipeline
did step by step (one Beam element per response id); the bucketed pipeline must produce the
same rows, pending events, late signals, dead letters, finalised ids and watermark, over two
spans (the second drains what the first carried), in process and on two worker processes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ingest.config import FileSource, IngestConfig
from ingest.join import US, join_group, next_in_conversation
from ingest.kafka_io import KafkaRecord
from ingest.parse import EventItem, classify
from ingest.pipeline import SpanJob, _Staged
from ingest.schema import DeadLetter
from ingest.synthetic import append_records, completion, feedback, followup, persistence, stream
from ingest.transforms import rows_to_table

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _write_bad(path: Path, t: datetime) -> None:
    """Records the rules reject or treat specially, appended to the recorded file."""
    ms = int(t.timestamp() * 1000)
    good = completion("dup-rid", t, conversation_id="conv-shared").to_json().decode()
    other = completion("dup-rid", t, event_id="c-other", conversation_id="conv-x")
    lines = [
        {"topic": "ratchet.completions", "key": "x", "value": "{not json", "timestamp_ms": ms},
        {"topic": "ratchet.completions", "key": "y", "value": "[1, 2]", "timestamp_ms": ms},
        {  # wrong topic
            "topic": "ratchet.signals.feedback",
            "key": "z",
            "value": good,
            "timestamp_ms": ms,
        },
        {"topic": "ratchet.completions", "key": "d", "value": good, "timestamp_ms": ms},
        {"topic": "ratchet.completions", "key": "d", "value": good, "timestamp_ms": ms},
        {
            "topic": "ratchet.completions",
            "key": "d",
            "value": other.to_json().decode(),
            "timestamp_ms": ms,
        },
        {  # negative latency
            "topic": "ratchet.completions",
            "key": "n",
            "value": good.replace('"latency_ms":200.0', '"latency_ms":-1.0'),
            "timestamp_ms": ms,
        },
    ]
    with open(path, "a") as f:
        for rec in lines:
            f.write(json.dumps(rec) + "\n")


def _events(t0: datetime, n: int, prefix: str) -> list[Any]:
    events = list(stream(n, start=t0, spacing_s=40.0, seed=7, prefix=prefix))
    # a conversation of three completions: the follow-up windows close at the next completion
    for i in range(3):
        t = t0 + timedelta(seconds=100 * i + 5)
        rid = f"{prefix}-conv{i}"
        events += [
            completion(rid, t, conversation_id=f"conv-{prefix}"),
            followup(rid, t + timedelta(seconds=150), dissatisfied=i == 1),
            feedback(rid, t + timedelta(seconds=3), accept=i != 2),
            persistence(rid, t, 30, 0.5),
        ]
    events.append(followup(f"{prefix}-nobody", t0 + timedelta(seconds=7), dissatisfied=True))
    # the newest completion, one checkpoint in: its window is still open (carried)
    t_last = t0 + timedelta(seconds=40 * n + 1)
    events += [completion(f"{prefix}-open", t_last), persistence(f"{prefix}-open", t_last, 30, 0.2)]
    return events


def _records(path: Path, start: int) -> list[KafkaRecord]:
    out = []
    for i, line in enumerate(path.read_text().splitlines()):
        if i < start:
            continue
        d = json.loads(line)
        key = d["key"].encode() if d.get("key") is not None else None
        out.append(KafkaRecord(d["topic"], 0, i, key, d["value"].encode(), d["timestamp_ms"]))
    return out


def _reference(job: SpanJob, records: list[KafkaRecord]) -> dict[str, Any]:
    """The span's outputs, one event at a time, without Beam (see the module docstring);
    ``job`` has run (its spec names the windows)."""
    limits = {**job.parse.model_dump(), "now_ms": job.now_ms}
    groups: dict[str, list[EventItem]] = {}
    dead: list[DeadLetter] = []
    max_t = job.state.max_event_time_us
    for rec in records:
        got = classify(rec, **limits)
        if isinstance(got, DeadLetter):
            dead.append(got)
            continue
        groups.setdefault(got[0], []).append(got[1])
        max_t = got[1].event_time_us if max_t is None else max(max_t, got[1].event_time_us)
    for rid, item in job.state.pending:
        groups.setdefault(rid, []).append(item)
    convs: dict[str, list[tuple[str, int]]] = {}
    for rid, items in groups.items():
        for i in items:
            if i.conversation_id:
                convs.setdefault(i.conversation_id, []).append((rid, i.event_time_us))
    for entries in convs.values():
        for rid, marker in next_in_conversation(entries):
            groups.setdefault(rid, []).append(marker)
    max_t = None if max_t is None else min(max_t, job.now_ms * 1000)
    lateness = int(job.join.allowed_lateness_s * US)
    watermark = -(2**62) if max_t is None else max_t - lateness  # drained or not
    spec = job._spec()
    rows, pending, late, finalized = [], [], [], {}
    for rid in sorted(groups):
        out = join_group(
            rid,
            groups[rid],
            watermark_us=watermark,
            finalized=job.state.finalized,
            windows=spec.windows,
            reward_config=job.reward_config,
            drain=job.drain,
            expected=spec.expected_signals,
            open_at_drain=spec.open_at_drain,
        )
        if out.row is not None:
            rows.append(out.row)
            finalized[rid] = out.finalized_at_us
        pending += [(rid, i) for i in out.pending]
        late += out.late
        dead += out.dead
    table = rows_to_table(rows).sort_by([("event_time", "ascending"), ("response_id", "ascending")])
    return {
        "rows": table,
        "pending": sorted(pending, key=lambda x: (x[1].topic, x[1].partition, x[1].offset)),
        "late": sorted(d.to_json() for d in late),
        "dead": sorted(d.to_json() for d in dead),
        "finalized": finalized,
        "watermark": [max_t, watermark],
    }


def _run(job: SpanJob) -> dict[str, Any]:
    job.run()
    staged = _Staged(job.staging)
    return {
        "rows": staged.rows(),
        "pending": staged.pending(),
        "late": sorted(d.to_json() for d in staged.late()),
        "dead": sorted(d.to_json() for d in staged.dead_letters()),
        "finalized": staged.finalized(),
        "watermark": list(staged.watermark(job.state.max_event_time_us)),
    }


def _job(src: Path, out: Path, drain: bool, beam_args: list[str] | None = None) -> SpanJob:
    # a drain that finalises everything, open persistence windows too (their rows neutral)
    cfg = IngestConfig(drain=drain, join={"open_at_drain": "neutral"})
    return SpanJob.from_config(cfg, source=FileSource(path=src), output_root=out,
                               beam_args=beam_args)


def _same(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got["rows"].num_rows == want["rows"].num_rows > 0
    assert got["rows"].equals(want["rows"])
    for key in ("pending", "late", "dead", "finalized", "watermark"):
        assert got[key] == want[key], key


def _two_spans(tmp_path: Path, beam_args: list[str]) -> None:
    """Span 1 (carries open completions), then span 2 (new events, signals for carried
    completions, a late signal; drained): each equals the reference."""
    src, out = tmp_path / "events.jsonl", tmp_path / "out"
    t0 = datetime.now(UTC) - timedelta(hours=6)
    append_records(src, _events(t0, 300, "a"))
    _write_bad(src, t0 + timedelta(seconds=11))
    job = _job(src, out, drain=False, beam_args=beam_args)
    job.setup()
    got = _run(job)
    want = _reference(job, _records(src, 0))
    _same(got, want)
    assert want["pending"] and want["dead"] and want["late"]  # every path is exercised
    job.commit()
    job.cleanup()

    n_before = len(src.read_text().splitlines())
    t_open = t0 + timedelta(seconds=40 * 300 + 1)  # a-open's time (see _events)
    later = _events(t0 + timedelta(hours=1), 200, "b")
    late_signal = followup("a00000001", t0 + timedelta(hours=1), dissatisfied=True)
    carried_signal = persistence("a-open", t_open, 120, 0.4)
    append_records(src, [*later, late_signal, carried_signal])
    job2 = _job(src, out, drain=True, beam_args=beam_args)
    job2.setup()
    assert job2.state.pending and job2.state.finalized  # the second span starts from carried state
    got2 = _run(job2)
    want2 = _reference(job2, _records(src, n_before))
    _same(got2, want2)
    assert want2["late"] and want2["pending"] == []
    row = next(r for r in want2["rows"].to_pylist() if r["response_id"] == "a-open")
    assert row["edit_persistence_120"] == pytest.approx(0.4)  # carried completion, new signal
    job2.cleanup()


def test_bucketed_pipeline_matches_the_per_event_rules_over_two_spans(tmp_path):
    _two_spans(tmp_path, [])


def test_two_worker_processes_match_the_per_event_rules_over_two_spans(tmp_path):
    """Buckets are computed in the driver (carried events) and in each worker (new events):
    they must agree across processes."""
    _two_spans(tmp_path, ["--direct_num_workers=2", "--direct_running_mode=multi_processing"])
