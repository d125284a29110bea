"""Reward rows decide ``followup_dissatisfied`` from the follow-up text, not the producer's flag."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from ingest.detector import detector_version
from ingest.join import US, Windows, join_group
from ingest.kafka_io import KafkaRecord
from ingest.parse import classify
from ingest.schema import REWARD_SCHEMA, TOPICS, Followup
from ingest.synthetic import T0, completion
from rewards.config import RewardConfig

T0_US = int(T0.timestamp() * US)


def _item(event, offset):
    rec = KafkaRecord(TOPICS[event.kind], 0, offset, None, event.to_json(),
                      int(event.event_time.timestamp() * 1000))
    return classify(rec, max_event_bytes=10**6, max_future_skew_s=60, max_age_s=86400)[1]


def _row(text: str | None, flag: bool | None) -> dict:
    items = [_item(completion("r1", T0), 0)]
    if text is not None:
        fu = Followup(event_id="fu-r1", response_id="r1", event_time=T0 + timedelta(seconds=20),
                      text=text, dissatisfied=flag)
        items.append(_item(fu, 1))
    out = join_group("r1", items, watermark_us=T0_US, finalized={},
                     windows=Windows.from_seconds(600, 900, 1800), reward_config=RewardConfig(),
                     drain=True, open_at_drain="neutral")
    assert out.row is not None
    return out.row


def test_a_thankful_text_is_neutral_even_when_the_producer_flags_it():
    row = _row("Thanks, that works!", flag=True)
    assert row["followup_dissatisfied"] is False and row["followup_flag"] is True
    assert row["followup_text"] == "Thanks, that works!"
    assert row["dissatisfied_score"] < 0.5 and row["detector_version"] == detector_version()
    assert dict(row["reward_components"])["followup"] == 0.0


def test_a_pasted_traceback_is_dissatisfied_without_any_flag():
    trace = "Traceback (most recent call last):\n  File \"m.py\", line 3\nNameError: name 'b'"
    row = _row(trace, flag=None)
    assert row["followup_dissatisfied"] is True and row["followup_flag"] is None
    assert row["dissatisfied_score"] >= 0.9
    assert dict(row["reward_components"])["followup"] == -1.0
    # reward = persistence default 0 + 0.5 * (-1) + feedback default 0 + 0.5 * -(8 tokens / 32)
    assert row["completion_tokens"] == 8
    assert row["reward"] == pytest.approx(-0.625)


def test_no_followup_leaves_every_detector_column_null():
    row = _row(None, None)
    cols = ("followup_dissatisfied", "followup_text", "followup_flag", "dissatisfied_score",
            "detector_version")
    assert all(row[c] is None for c in cols)
    assert "followup" in row["defaulted_signals"]


def test_rows_fit_the_reward_schema():
    table = pa.Table.from_pylist([_row("still the same error", False), _row(None, None)],
                                 schema=REWARD_SCHEMA)
    assert table.column("followup_dissatisfied").to_pylist() == [True, None]
    assert table.column("followup_flag").to_pylist() == [False, None]
