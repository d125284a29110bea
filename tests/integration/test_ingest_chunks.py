"""A span ingested in many chunks gives what one pass over it gives.

The same recorded events (completions with their signals, conversations whose follow-up windows
close at the next completion, bad records) are ingested twice into fresh output roots: in one
Beam run per span, and in chunks of ~150 events per span. Over two spans (the first carries open
completions, the second adds signals for them, a late signal, and drains), the committed rows,
the carried events, the late signals, the dead letters, the finalised ids and the counts agree.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from ingest.config import FileSource, IngestConfig
from ingest.pipeline import SpanJob, _Staged
from ingest.spans import SpanStore
from ingest.synthetic import append_records, completion, feedback, followup, persistence, stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _events(t0: datetime, n: int, prefix: str) -> list[Any]:
    """``n`` completions 40 s apart with their signals, and every tenth one also the next turn
    of a conversation (its follow-up window closes there), in the order they happen."""
    events: list[Any] = []
    groups = list(stream(n, start=t0, spacing_s=40.0, seed=3, prefix=prefix))
    for e in groups:
        events.append(e)
        if e.kind == "completion" and int(e.response_id[len(prefix) :]) % 10 == 0:
            t = e.event_time + timedelta(seconds=15)
            rid = f"{prefix}-turn-{e.response_id}"
            events += [
                completion(rid, t, conversation_id=f"conv-{e.response_id}"),
                followup(rid, t + timedelta(seconds=30), dissatisfied=True),
                persistence(rid, t, 30, 0.5),
            ]
    t_open = t0 + timedelta(seconds=40 * n + 1)  # the newest: one checkpoint in, carried
    return [
        *events,
        completion(f"{prefix}-open", t_open),
        persistence(f"{prefix}-open", t_open, 30, 0.2),
    ]


def _bad(t: datetime) -> list[dict[str, Any]]:
    ms = int(t.timestamp() * 1000)
    good = completion("dup-rid", t).to_json().decode()
    return [
        {"topic": "ratchet.completions", "key": "x", "value": "{not json", "timestamp_ms": ms},
        {"topic": "ratchet.signals.feedback", "key": "z", "value": good, "timestamp_ms": ms},
        {"topic": "ratchet.completions", "key": "d", "value": good, "timestamp_ms": ms},
        {"topic": "ratchet.completions", "key": "d", "value": good, "timestamp_ms": ms},
    ]


def _write(path: Path, events: list[Any], bad: list[dict[str, Any]], at: int) -> None:
    append_records(path, events[:at])
    with open(path, "a") as f:
        for rec in bad:
            f.write(json.dumps(rec) + "\n")
    append_records(path, events[at:])


def _span(src: Path, out: Path, drain: bool, chunk_events: int) -> dict[str, Any]:
    # a drain that finalises everything, open persistence windows too (their rows neutral)
    cfg = IngestConfig(drain=drain, chunk_events=chunk_events, join={"open_at_drain": "neutral"})
    job = SpanJob.from_config(cfg, source=FileSource(path=src), output_root=out)
    job.setup()
    try:
        job.run()
        chunks = len(list(job.staging.glob("chunk-*")))
        result = job.commit()
    finally:
        job.cleanup()
    store = SpanStore(out)
    state = store.load_state()
    return {
        "chunks": chunks,
        "rows": pq.read_table(result.path),
        "counts": (
            result.rows,
            result.dead_letters,
            result.completions_in,
            result.signals_in,
            result.pending,
            result.late,
            result.duplicates,
        ),
        "pending": sorted((rid, tuple(i)) for rid, i in state.pending),
        "finalized": state.finalized,
        "max_event_time_us": state.max_event_time_us,
        "dead": [d.model_dump() for d in store.dead_letters(result.span_id, "dead_letters")],
        "late": [d.model_dump() for d in store.dead_letters(result.span_id, "late")],
    }


def _same(one: dict[str, Any], many: dict[str, Any]) -> None:
    assert one["chunks"] == 1 and many["chunks"] > 2
    assert many["rows"].num_rows == one["rows"].num_rows > 0
    assert many["rows"].equals(one["rows"])
    for key in ("counts", "pending", "finalized", "max_event_time_us", "dead", "late"):
        assert many[key] == one[key], key


def test_a_span_in_many_chunks_equals_one_pass_over_two_spans(tmp_path):
    src = tmp_path / "events.jsonl"
    t0 = datetime.now(UTC) - timedelta(hours=6)
    first = _events(t0, 120, "a")
    _write(src, first, _bad(t0 + timedelta(seconds=400)), at=60)
    one = _span(src, tmp_path / "one", drain=False, chunk_events=10**9)
    many = _span(src, tmp_path / "many", drain=False, chunk_events=150)
    _same(one, many)
    assert one["pending"] and one["dead"]  # carried completions and dead letters are compared

    t1 = t0 + timedelta(seconds=40 * 120)
    later = _events(t1, 60, "b")
    carried = "a-open"
    assert carried in {rid for rid, _ in one["pending"]}
    extra = [
        followup("a00000001", t1 + timedelta(seconds=5), dissatisfied=True),  # late: finalised
        feedback(carried, t1 + timedelta(seconds=3), accept=True),  # for a carried completion
    ]
    _write(src, [*extra, *later], [], at=len(extra))
    one2 = _span(src, tmp_path / "one", drain=True, chunk_events=10**9)
    many2 = _span(src, tmp_path / "many", drain=True, chunk_events=150)
    _same(one2, many2)
    assert one2["late"] and one2["pending"] == []
    row = next(r for r in one2["rows"].to_pylist() if r["response_id"] == carried)
    assert row["feedback_accept"] is True


def test_a_recorded_file_in_chunks_finalises_before_its_last_chunk(tmp_path):
    """A recorded file is one partition whose records carry their own topics: the chunks must
    not hold the watermark on a partition no record names (that carried every completion of the
    span to the last chunk: state growing with the span)."""
    src = tmp_path / "events.jsonl"
    append_records(src, _events(datetime.now(UTC) - timedelta(hours=6), 240, "a"))
    job = SpanJob.from_config(IngestConfig(chunk_events=150), source=FileSource(path=src),
                              output_root=tmp_path / "out")
    job.setup()
    try:
        job.run()
        chunks = sorted(job.staging.glob("chunk-*"))
        early = [sum(p["rows"] for p in _Staged(c).parts()) for c in chunks[:-1]]
        result = job.commit()
    finally:
        job.cleanup()
    assert len(chunks) > 5 and result.rows > 200
    assert sum(early) > result.rows // 2, early
