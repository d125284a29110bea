"""The join inside the Beam pipeline (recorded-file source, no broker): conversations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ingest.config import FileSource, IngestConfig
from ingest.pipeline import run_config
from ingest.spans import read_spans
from ingest.synthetic import append_records, completion, followup, persistence

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_followup_window_ends_at_the_next_completion_across_spans(tmp_path):
    src = tmp_path / "events.jsonl"
    t0 = datetime.now(UTC) - timedelta(hours=2)
    cfg = IngestConfig(source=FileSource(path=src), output_root=tmp_path / "out")
    # span 1: the first completion of a conversation, still open -> carried
    append_records(
        src, [completion("q1", t0, conversation_id="conv"), persistence("q1", t0, 30, 0.9)]
    )
    first = run_config(cfg)
    assert first.rows == 0 and first.pending == 2
    # span 2: the conversation's next completion at +60 s, and a follow-up for q1 at +90 s
    t1 = t0 + timedelta(seconds=60)
    append_records(
        src,
        [
            completion("q2", t1, conversation_id="conv"),
            followup("q1", t0 + timedelta(seconds=90), dissatisfied=True),
            followup("q2", t1 + timedelta(seconds=10), dissatisfied=False),
        ],
    )
    # q1's persistence window is still open: a drain finalises it only when asked to (neutral)
    neutral = cfg.join.model_copy(update={"open_at_drain": "neutral"})
    second = run_config(cfg.model_copy(update={"drain": True, "join": neutral}))
    rows = {r["response_id"]: r for r in read_spans(tmp_path / "out").to_pylist()}
    assert set(rows) == {"q1", "q2"} and second.late == 1
    assert rows["q1"]["followup_dissatisfied"] is None  # after q2: belongs to q2's turn
    assert rows["q1"]["edit_persistence_30"] == pytest.approx(0.9)  # carried signal joined
    assert rows["q2"]["followup_dissatisfied"] is False
