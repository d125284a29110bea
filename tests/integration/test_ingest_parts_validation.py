"""Great Expectations over a span in parts (``SpanValidator``): the span-level expectations see
the whole span (a duplicate across parts, a share met by the span but not by one part), the
row-level ones see every part."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ingest.kafka_io import KafkaRecord
from ingest.parse import classify
from ingest.rows import reward_table
from ingest.schema import TOPICS
from ingest.synthetic import T0, completion, feedback
from ingest.validate import SpanValidator, validate_span
from rewards.config import RewardConfig

pytestmark = pytest.mark.integration

LIMITS = {"reward_bounds": (-3.0, 3.0), "max_completion_tokens": 4096, "max_latency_ms": 60_000}


def _rows(n: int) -> pa.Table:
    """``n`` reward rows; every second one has feedback."""
    def item(event, offset):
        rec = KafkaRecord(TOPICS[event.kind], 0, offset, None, event.to_json(), None)
        return classify(rec, max_event_bytes=1 << 20, max_future_skew_s=1e12, max_age_s=1e12)[1]

    finals = []
    for i in range(n):
        rid, t = f"r{i:03d}", T0 + timedelta(seconds=i)
        signals = [item(feedback(rid, t, i % 4 == 1), 2 * i + 1)] if i % 2 else []
        finals.append((rid, item(completion(rid, t), 2 * i), signals))
    return reward_table(finals, RewardConfig())


def _check(parts: list[pa.Table], **span: object) -> tuple[bool, dict]:
    v = SpanValidator(**LIMITS)
    for p in parts:
        v.add_part(p)
    settings = {"min_join_share": {}, "min_current_version_share": 0.0, "drift": {}, **span}
    return v.finish(**settings)


def _failed(report: dict) -> list[str]:
    return [f["expectation"] for f in report["failed"]]


def test_span_checks_see_the_whole_span_and_row_checks_every_part():
    rows = _rows(60)  # every second row has feedback: a share of 0.5
    a, b = rows.slice(0, 30), rows.slice(30)
    ok, report = _check([a, b], min_join_share={"feedback": 0.5})
    assert ok and report["parts"] == 2
    assert (ok, report["evaluated"]) == (
        validate_span(rows, **LIMITS, min_join_share={"feedback": 0.5},
                      min_current_version_share=0.0, drift={})[0],
        report["evaluated"],
    )
    # a part with no feedback at all: the span's share is still 0.5 when the other has all
    fb = pc.is_valid(rows.column("feedback_accept"))
    with_fb, without = rows.filter(fb), rows.filter(pc.invert(fb))
    assert _check([with_fb, without], min_join_share={"feedback": 0.5})[0]
    assert not _check([with_fb, without], min_join_share={"feedback": 0.6})[0]
    # the same response id in two parts: each part is unique, the span is not
    ok, report = _check([a, rows.slice(29, 31)])
    assert not ok and _failed(report) == ["expect_column_values_to_be_unique"]
    # bad rows in two parts: one expectation fails, its counts add up over parts
    def bad(t: pa.Table) -> pa.Table:
        return t.set_column(t.schema.get_field_index("reward"), "reward",
                            pa.array([9.0] * t.num_rows))

    ok, report = _check([bad(a.slice(0, 5)), a.slice(5), bad(b)])
    assert not ok and _failed(report) == ["expect_column_values_to_be_between"]
    assert report["failed"][0]["unexpected_count"] == 5 + b.num_rows
