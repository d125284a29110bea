"""The follow-up detector inside the Beam pipeline (recorded-file source, no broker): the span's
rows carry the detector's decision, not the producer's flag, and the span's monitors compare them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ingest.config import FileSource, IngestConfig
from ingest.detector import detector_version
from ingest.pipeline import run_config
from ingest.schema import Followup
from ingest.spans import read_spans
from ingest.synthetic import append_records, completion

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _followup(rid: str, t: datetime, text: str, flag: bool | None) -> Followup:
    return Followup(event_id=f"fu-{rid}", response_id=rid, event_time=t, text=text,
                    dissatisfied=flag)


def test_span_rows_take_the_detectors_decision_and_monitors_compare(tmp_path):
    src = tmp_path / "events.jsonl"
    t0 = datetime.now(UTC) - timedelta(hours=2)
    later = t0 + timedelta(seconds=20)
    append_records(src, [
        completion("a", t0), _followup("a", later, "Still the same error on case 3.", False),
        completion("b", t0), _followup("b", later, "cheers, works now", True),
        completion("c", t0), _followup("c", later, "IndexError: list index out of range", None),
        completion("d", t0),
    ])
    # no checkpoints came: finalise now all the same (open_at_drain neutral), for the detector
    cfg = IngestConfig(source=FileSource(path=src), output_root=tmp_path / "out", drain=True,
                       join={"open_at_drain": "neutral"})
    result = run_config(cfg)
    rows = {r["response_id"]: r for r in read_spans(tmp_path / "out").to_pylist()}
    assert result.rows == 4
    decided = {k: (r["followup_dissatisfied"], r["followup_flag"]) for k, r in rows.items()}
    assert decided == {"a": (True, False), "b": (False, True), "c": (True, None), "d": (None, None)}
    assert rows["c"]["followup_text"] == "IndexError: list index out of range"
    assert {rows[k]["detector_version"] for k in "abc"} == {detector_version()}
    assert rows["d"]["detector_version"] is None and rows["d"]["dissatisfied_score"] is None
    assert result.monitors["followup_pairs"] == 2.0
    assert result.monitors["detector_agreement"] == 0.0


def test_validation_rejects_a_follow_up_without_detector_or_with_a_bad_score():
    import pyarrow as pa

    from ingest.join import US, Windows, join_group
    from ingest.kafka_io import KafkaRecord
    from ingest.parse import classify
    from ingest.schema import REWARD_SCHEMA, TOPICS
    from ingest.validate import validate_span
    from rewards.config import RewardConfig

    t0 = datetime.now(UTC) - timedelta(hours=1)

    def row(rid: str, text: str) -> dict:
        items = []
        for off, e in enumerate([completion(rid, t0), _followup(rid, t0, text, None)]):
            rec = KafkaRecord(TOPICS[e.kind], 0, off, None, e.to_json(),
                              int(e.event_time.timestamp() * 1000))
            items.append(classify(rec, max_event_bytes=10**6, max_future_skew_s=60,
                                  max_age_s=86400)[1])
        return join_group(rid, items, watermark_us=int(t0.timestamp() * US), finalized={},
                          windows=Windows.from_seconds(600, 900, 1800),
                          reward_config=RewardConfig(), drain=True,
                          open_at_drain="neutral").row

    def check(rows):
        return validate_span(pa.Table.from_pylist(rows, schema=REWARD_SCHEMA),
                             reward_bounds=(-3.0, 3.0), max_completion_tokens=4096,
                             max_latency_ms=60_000, min_join_share={},
                             min_current_version_share=0.0, drift={})

    good = [row("a", "thanks"), row("b", "that's wrong")]
    assert check(good)[0]
    ok, report = check([good[0], {**good[1], "detector_version": None}])
    assert not ok and [f["expectation"] for f in report["failed"]] == [
        "expect_column_values_to_be_in_set"]
    ok, report = check([good[0], {**good[1], "dissatisfied_score": 1.5}])
    assert not ok and [f["expectation"] for f in report["failed"]] == [
        "expect_column_values_to_be_between"]
