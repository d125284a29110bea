"""Rewards for clients that send no accept/reject events: what a missing signal means follows
what the completion's client declared it reports (``RewardConfig.clients``)."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest

from ingest.join import US, Windows, join_group
from ingest.kafka_io import KafkaRecord
from ingest.parse import EventItem, classify
from ingest.rows import reward_table
from ingest.schema import REWARD_SCHEMA, TOPICS, upgrade_reward_table
from ingest.synthetic import T0, completion, persistence
from rewards.config import RewardConfig

WIN = Windows.from_seconds(600, 900, 1800, grace=(60.0, 0.0, 0.0))
T0_US = int(T0.timestamp() * US)
DECLARING = RewardConfig.model_validate(
    {"clients": {"editor-telemetry": {"reports_persistence_for_inserted": True}}})


def _item(event, offset: int) -> EventItem:
    ts = int(event.event_time.timestamp() * 1000)
    rec = KafkaRecord(TOPICS[event.kind], 0, offset, None, event.to_json(), ts)
    return classify(rec, max_event_bytes=10**6, max_future_skew_s=60, max_age_s=86400)[1]


def _recording(client_id: str | None) -> dict[str, list[EventItem]]:
    """Three suggestions, no feedback and no follow-up events at all: one inserted and kept,
    one inserted and rewritten, one never inserted (so no persistence checkpoint)."""
    kept = {30: 1.0, 120: 1.0, 300: 0.95, 600: 0.9}
    rewritten = {30: 0.6, 120: 0.3, 300: 0.2, 600: 0.1}
    out: dict[str, list[EventItem]] = {}
    offset = 0
    for rid, scores in (("kept", kept), ("rewritten", rewritten), ("never", {})):
        c = completion(rid, T0).model_copy(update={"client_id": client_id})
        items = [_item(c, offset)]
        for w, s in scores.items():
            offset += 1
            items.append(_item(persistence(rid, T0, w, s), offset))
        offset += 1
        out[rid] = items
    return out


def _rows(config: RewardConfig, client_id: str | None) -> dict[str, dict]:
    rows = {}
    for rid, items in _recording(client_id).items():
        out = join_group(rid, items, watermark_us=T0_US + 4000 * US, finalized={}, windows=WIN,
                         reward_config=config, expected=("edit_persistence",))
        assert out.row is not None and out.late == []
        rows[rid] = out.row
    return rows


def test_declaring_client_without_feedback_events_ranks_kept_rewritten_never_inserted():
    rows = _rows(DECLARING, "editor-telemetry")
    r = {k: v["reward"] for k, v in rows.items()}
    assert r["kept"] > r["rewritten"] > r["never"]
    never = dict(rows["never"]["reward_components"])
    assert never["edit_persistence"] == -1.0 and never["feedback"] == -1.0
    assert rows["never"]["feedback_accept"] is None  # nothing observed, nothing invented
    assert {v["client_id"] for v in rows.values()} == {"editor-telemetry"}
    assert all(v["client_reports_persistence"] is True for v in rows.values())


@pytest.mark.parametrize("client_id", [None, "someone-else"])
def test_a_client_that_declares_nothing_has_its_silent_rows_left_out_of_training(client_id):
    rows = _rows(DECLARING, client_id)
    never = dict(rows["never"]["reward_components"])
    assert never["edit_persistence"] == 0.0 and never["feedback"] == 0.0  # recorded only
    # its reward would rank never-inserted above rewritten (the old bug): it is not trained on
    assert rows["never"]["trainable"] is False
    assert rows["kept"]["trainable"] is True and rows["rewritten"]["trainable"] is True
    assert rows["never"]["client_reports_persistence"] is (None if client_id is None else False)


def test_column_wise_rows_record_the_declaration_like_row_by_row():
    finals = []
    for rid, items in _recording("editor-telemetry").items():
        finals.append((rid, items[0], items[1:]))
    table = reward_table(finals, DECLARING)
    by_row = _rows(DECLARING, "editor-telemetry")
    got = {r["response_id"]: r for r in table.to_pylist()}
    for rid, row in by_row.items():
        assert got[rid]["reward"] == pytest.approx(row["reward"])
        assert got[rid]["client_id"] == "editor-telemetry"
        assert got[rid]["client_reports_persistence"] is True


def test_old_spans_without_the_client_columns_still_read():
    table = reward_table([(rid, items[0], items[1:])
                          for rid, items in _recording(None).items()], RewardConfig())
    old = table.drop_columns(["client_id", "client_reports_persistence"])
    up = upgrade_reward_table(old)
    assert up.schema == REWARD_SCHEMA
    assert up.column("client_id").null_count == up.num_rows
    assert pa.compute.all(pa.compute.is_null(up.column("client_reports_persistence"))).as_py()


def test_completion_without_client_id_parses_as_before():
    raw = completion("x", T0 + timedelta(seconds=1)).to_json()
    assert b"client_id" in raw  # serialised as null
    from ingest.schema import parse_event

    assert parse_event(raw).client_id is None


@pytest.mark.parametrize("client_id", ["editor-telemetry", None])
def test_a_drain_before_the_persistence_window_closed_keeps_the_row_pending(client_id):
    items = _recording(client_id)["never"]
    drained = join_group("never", items, watermark_us=T0_US + 100 * US, finalized={},
                         windows=WIN, reward_config=DECLARING, drain=True)
    assert drained.row is None and {i.kind for i in drained.pending} == {"completion"}
    # the operator may ask for the neutral default instead: finalised, never a rejection,
    # left out of training (nothing is known of its persistence)
    neutral = join_group("never", items, watermark_us=T0_US + 100 * US, finalized={},
                         windows=WIN, reward_config=DECLARING, drain=True,
                         open_at_drain="neutral")
    comps = dict(neutral.row["reward_components"])
    assert comps["edit_persistence"] == 0.0 and comps["feedback"] == 0.0
    assert neutral.row["trainable"] is False
    # the same completion once its windows have closed: a rejection for the declaring client
    if client_id is None:
        return
    closed = join_group("never", items, watermark_us=T0_US + 4000 * US, finalized={},
                        windows=WIN, reward_config=DECLARING)
    assert dict(closed.row["reward_components"])["edit_persistence"] == -1.0
