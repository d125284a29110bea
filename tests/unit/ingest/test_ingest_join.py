"""The event-time join for one response id: finality, carry-over, late, dedup, order."""

from __future__ import annotations

import itertools
import random
from datetime import timedelta

import pytest

from ingest.join import US, Windows, join_group, next_completion_marker, next_in_conversation
from ingest.kafka_io import KafkaRecord
from ingest.parse import EventItem, classify
from ingest.schema import TOPICS
from ingest.synthetic import T0, completion, feedback, followup, persistence
from rewards.config import RewardConfig

WIN = Windows.from_seconds(600, 900, 1800)
CFG = RewardConfig()
T0_US = int(T0.timestamp() * US)
_offsets = itertools.count()


def item(event, offset: int | None = None) -> EventItem:
    """The event as the pipeline's classifier turns it into a join item."""
    off = next(_offsets) if offset is None else offset
    ts = int(event.event_time.timestamp() * 1000)
    rec = KafkaRecord(TOPICS[event.kind], 0, off, None, event.to_json(), ts)
    _, got = classify(rec, max_event_bytes=10**6, max_future_skew_s=60, max_age_s=86400)
    return got


def _all_signals(rid="r1"):
    return [
        item(persistence(rid, T0, 30, 1.0)),
        item(persistence(rid, T0, 120, 1.0)),
        item(persistence(rid, T0, 300, 0.5)),
        item(persistence(rid, T0, 600, 0.5)),
        item(followup(rid, T0 + timedelta(seconds=20), True)),
        item(feedback(rid, T0 + timedelta(seconds=5), True)),
    ]


def join(items, watermark_us, finalized=None, drain=False, open_at_drain="pending"):
    return join_group(
        "r1",
        items,
        watermark_us=watermark_us,
        finalized=finalized or {},
        windows=WIN,
        reward_config=CFG,
        drain=drain,
        open_at_drain=open_at_drain,
    )


def test_open_windows_carry_everything():
    items = [item(completion("r1", T0)), item(persistence("r1", T0, 30, 1.0))]
    out = join(items, watermark_us=T0_US + 1700 * US)  # feedback window (1800 s) still open
    assert out.row is None and out.finalized_at_us is None
    assert sorted(i.event_id for i in out.pending) == ["c-r1", "ep30-r1"]


def test_final_when_every_window_closed_with_defaults_for_missing():
    items = [item(completion("r1", T0)), item(persistence("r1", T0, 600, 0.75))]
    out = join(items, watermark_us=T0_US + 1800 * US)
    assert out.pending == [] and out.row is not None
    assert out.row["edit_persistence_600"] == 0.75 and out.row["edit_persistence_30"] is None
    assert out.row["followup_dissatisfied"] is None and out.row["feedback_accept"] is None
    assert out.row["defaulted_signals"] == ["followup", "feedback"]
    # persistence 2*0.75-1 = 0.5 (w 1.0); defaults 0; length 8 tokens / 32 = 0.25 (w 0.5)
    assert out.row["completion_tokens"] == 8
    assert out.row["reward"] == pytest.approx(0.5 - 0.5 * 8 / 32)
    assert out.row["trainable"] is True
    assert out.finalized_at_us == T0_US


def test_final_early_when_every_signal_arrived():
    out = join([item(completion("r1", T0)), *_all_signals()], watermark_us=T0_US)
    assert out.row is not None
    assert out.row["feedback_accept"] is True and out.row["followup_dissatisfied"] is True
    assert out.row["defaulted_signals"] == []


def test_drain_keeps_an_open_persistence_window_pending():
    # the watermark has not closed the persistence window (600 s): its checkpoints can still come
    items = [item(completion("r1", T0)), item(persistence("r1", T0, 30, 1.0))]
    out = join(items, watermark_us=T0_US + 100 * US, drain=True)
    assert out.row is None and sorted(i.event_id for i in out.pending) == ["c-r1", "ep30-r1"]
    # once it has closed, a drain finalises without waiting for the follow-up/feedback windows
    out = join(items, watermark_us=T0_US + 700 * US, drain=True)
    assert out.row is not None and out.row["edit_persistence_30"] == 1.0 and out.pending == []
    # every checkpoint in: final at a drain even though the window is open
    every = [item(completion("r1", T0))] + [item(persistence("r1", T0, w, 1.0))
                                            for w in (30, 120, 300, 600)]
    assert join(every, watermark_us=T0_US, drain=True).row is not None


def test_drain_neutral_finalises_now_and_leaves_unknown_persistence_out_of_training():
    out = join([item(completion("r1", T0))], watermark_us=0, drain=True, open_at_drain="neutral")
    assert out.row is not None and out.row["defaulted_signals"] == [
        "edit_persistence",
        "followup",
        "feedback",
    ]
    assert out.row["trainable"] is False


def test_open_at_drain_names_its_choices():
    with pytest.raises(ValueError, match="open_at_drain"):
        join([item(completion("r1", T0))], watermark_us=0, drain=True, open_at_drain="close")


def test_duplicate_deliveries_are_removed_and_counted():
    c = completion("r1", T0)
    sig = persistence("r1", T0, 600, 0.2)
    out = join([item(c, 5), item(c, 9), item(sig, 6), item(sig, 7)], watermark_us=T0_US + 10**12)
    assert out.duplicates == 2
    assert out.row["edit_persistence_600"] == pytest.approx(0.2)


def test_order_of_arrival_changes_nothing():
    items = [item(completion("r1", T0)), *_all_signals(), item(persistence("r1", T0, 30, 1.0))]
    rows = set()
    for seed in range(6):
        shuffled = items[:]
        random.Random(seed).shuffle(shuffled)
        out = join(shuffled, watermark_us=T0_US + 10**12)
        rows.add(repr(sorted(out.row.items())))
    assert len(rows) == 1


def test_signal_after_finalisation_is_late_not_dropped():
    sig = item(feedback("r1", T0 + timedelta(seconds=5), False))
    out = join([sig], watermark_us=T0_US, finalized={"r1": T0_US})
    assert out.row is None and out.pending == []
    assert [d.reason for d in out.late] == ["late_signal"]


def test_signal_outside_its_window_is_late():
    late_fb = item(feedback("r1", T0 + timedelta(seconds=2000), False))
    out = join([item(completion("r1", T0)), late_fb], watermark_us=T0_US + 10**12)
    assert out.row["feedback_accept"] is None
    assert [d.reason for d in out.late] == ["late_signal"]


def test_signal_without_completion_waits_then_is_dead_lettered():
    sig = item(persistence("r1", T0, 30, 1.0))
    waiting = join([sig], watermark_us=T0_US + 100 * US)
    assert waiting.pending == [sig] and waiting.dead == []
    gone = join([sig], watermark_us=T0_US + 30 * US + 1800 * US)
    assert [d.reason for d in gone.dead] == ["unknown_response_id"]


def test_second_completion_with_another_event_id_is_dead_lettered():
    a = item(completion("r1", T0, event_id="a"))
    b = item(completion("r1", T0 + timedelta(seconds=1), event_id="b"))
    out = join([b, a], watermark_us=T0_US + 10**12)
    assert out.row is not None
    assert [(d.reason, d.offset) for d in out.dead] == [("duplicate_response_id", b.offset)]


def test_redelivered_completion_after_finalisation_counts_as_duplicate():
    out = join([item(completion("r1", T0))], watermark_us=T0_US, finalized={"r1": T0_US})
    assert out.row is None and out.duplicates == 1


def test_followup_window_closes_at_the_conversations_next_completion():
    nxt = next_completion_marker("r1", T0_US + 100 * US)
    early = item(followup("r1", T0 + timedelta(seconds=50), True))
    out = join([item(completion("r1", T0)), early, nxt], watermark_us=T0_US + 10**12)
    assert out.row["followup_dissatisfied"] is True and out.late == []
    after_next = item(followup("r1", T0 + timedelta(seconds=150), True))
    out = join([item(completion("r1", T0)), after_next, nxt], watermark_us=T0_US + 10**12)
    assert out.row["followup_dissatisfied"] is None
    assert [d.reason for d in out.late] == ["late_signal"]


def test_next_completion_markers_follow_event_time_order():
    pairs = next_in_conversation([("b", 20), ("a", 10), ("c", 30)])
    assert [(rid, m.event_time_us) for rid, m in pairs] == [("a", 20), ("b", 30)]


def test_markers_are_never_carried_or_counted():
    nxt = next_completion_marker("r1", T0_US + 10 * US)
    out = join([item(completion("r1", T0)), nxt, nxt], watermark_us=T0_US)
    assert out.row is None and out.duplicates == 0
    assert [i.kind for i in out.pending] == ["completion"]


def _join_cfg(items, watermark_us, expected=("edit_persistence", "followup", "feedback"), win=WIN):
    return join_group(
        "r1", items, watermark_us=watermark_us, finalized={}, windows=win,
        reward_config=CFG, expected=expected,
    )


@pytest.mark.parametrize("late_by_s", [0.0, 0.5, 30.0])
def test_last_checkpoint_at_or_just_after_its_nominal_time_joins(late_by_s):
    from ingest.config import JoinConfig

    j = JoinConfig()
    win = Windows.from_seconds(
        j.edit_persistence_window_s, j.followup_window_s, j.feedback_window_s,
        grace=(j.edit_persistence_grace_s, j.followup_grace_s, j.feedback_grace_s),
    )
    ep = persistence("r1", T0 + timedelta(seconds=late_by_s), 600, 0.9)
    items = [item(completion("r1", T0)), item(ep)]
    out = _join_cfg(items, watermark_us=T0_US + 4000 * US, win=win)
    assert out.row is not None and out.late == []
    assert out.row["edit_persistence_600"] == pytest.approx(0.9)


def test_final_once_the_expected_signals_arrived_without_waiting_for_a_followup():
    ckpts = [item(persistence("r1", T0, w, 0.5)) for w in (30, 120, 300, 600)]
    items = [item(completion("r1", T0)), *ckpts, item(feedback("r1", T0, True))]
    watermark = T0_US + 610 * US  # follow-up (900 s) and feedback (1800 s) windows still open
    out = _join_cfg(items, watermark, expected=("edit_persistence",))
    assert out.row is not None and out.pending == []
    assert out.row["feedback_accept"] is True and out.row["followup_dissatisfied"] is None
    # with every kind expected it still waits for the follow-up
    waiting = _join_cfg(items, watermark)
    assert waiting.row is None and len(waiting.pending) == len(items)
    # a missing checkpoint keeps it open while the persistence window is open
    no_600 = items[:-2] + items[-1:]
    partial = _join_cfg(no_600, watermark - 100 * US, expected=("edit_persistence",))
    assert partial.row is None


def test_feedback_after_the_first_is_a_dead_letter_with_its_reason():
    first = feedback("r1", T0 + timedelta(seconds=5), True)
    flip = first.model_copy(update={"event_id": "fb-r1-2", "label": "reject",
                                    "event_time": T0 + timedelta(seconds=9)})
    again = first.model_copy(update={"event_id": "fb-r1-3",
                                     "event_time": T0 + timedelta(seconds=12)})
    items = [item(completion("r1", T0)), item(flip), item(first), item(again)]

    out = join(items, watermark_us=T0_US, drain=True, open_at_drain="neutral")

    assert out.row["feedback_accept"] is True  # the first verdict stands (was: the latest)
    assert sorted(d.reason for d in out.dead) == ["contradictory_feedback", "repeated_feedback"]
    assert {d.offset for d in out.dead} == {items[1].offset, items[3].offset}


def _default_windows() -> Windows:
    from ingest.config import JoinConfig

    j = JoinConfig()
    return Windows.from_seconds(
        j.edit_persistence_window_s, j.followup_window_s, j.feedback_window_s,
        grace=(j.edit_persistence_grace_s, j.followup_grace_s, j.feedback_grace_s),
    )


def test_persistence_counts_from_the_acceptance_90_s_after_the_completion():
    """Real telemetry: the user accepts 90 s after the suggestion appears and the checkpoints
    come 30 / 120 / 300 / 600 s after that; the 600-s one (completion + 690 s) is not late."""
    accepted = T0 + timedelta(seconds=90)
    scores = {30: 1.0, 120: 0.9, 300: 0.8, 600: 0.7}
    ckpts = [item(persistence("r1", accepted, w, s)) for w, s in scores.items()]
    items = [item(completion("r1", T0)), item(feedback("r1", accepted, True)), *ckpts]
    out = join_group("r1", items, watermark_us=T0_US + 4000 * US, finalized={},
                     windows=_default_windows(), reward_config=CFG)
    assert out.row is not None and out.late == []
    got = [out.row[f"edit_persistence_{w}"] for w in scores]
    assert got == pytest.approx(list(scores.values()))
    # early finality waits for the 600-s checkpoint while the shifted window is still open ...
    early = join_group("r1", items[:-1], watermark_us=T0_US + 680 * US, finalized={},
                       windows=_default_windows(), reward_config=CFG,
                       expected=("edit_persistence",))
    assert early.row is None and early.late == []
    # ... and the last checkpoint completes the row at once, with nothing late
    done = join_group("r1", items, watermark_us=T0_US + 691 * US, finalized={},
                      windows=_default_windows(), reward_config=CFG,
                      expected=("edit_persistence",))
    assert done.row is not None and done.late == []


def test_without_an_acceptance_the_window_still_counts_from_the_completion():
    late_ckpt = item(persistence("r1", T0 + timedelta(seconds=90), 600, 0.7))
    items = [item(completion("r1", T0)), late_ckpt]
    out = join_group("r1", items, watermark_us=T0_US + 4000 * US, finalized={},
                     windows=_default_windows(), reward_config=CFG)
    assert out.row is not None and [d.reason for d in out.late] == ["late_signal"]
    # a rejection is no acceptance: the window does not move either
    rejected = [*items, item(feedback("r1", T0 + timedelta(seconds=90), False))]
    out = join_group("r1", rejected, watermark_us=T0_US + 4000 * US, finalized={},
                     windows=_default_windows(), reward_config=CFG)
    assert [d.reason for d in out.late] == ["late_signal"]


def test_the_drain_watermark_is_real_and_keeps_a_cut_recordings_last_suggestions_pending():
    # a declaring client, the recording cut 5 s after its last two suggestions: the watermark
    # the pipeline computes for a drain (``_WatermarkFn``) is the largest event time less the
    # lateness, so their persistence windows are still open: pending, not rejections
    from ingest.transforms import _WatermarkFn

    declaring = RewardConfig.model_validate(
        {"clients": {"ide": {"reports_persistence_for_inserted": True}}})
    fn = _WatermarkFn(None, 60 * US, 10**18)
    acc = fn.add_input(fn.create_accumulator(), ("file:0", T0_US + 5 * US))
    _, watermark, _ = fn.extract_output(acc)
    assert watermark == T0_US + 5 * US - 60 * US
    for rid in ("a", "b"):
        c = completion(rid, T0).model_copy(update={"client_id": "ide"})
        out = join_group(rid, [item(c)], watermark_us=watermark, finalized={}, windows=WIN,
                         reward_config=declaring, drain=True)
        assert out.row is None and [i.event_id for i in out.pending] == [f"c-{rid}"]
        # the next span brings the kept checkpoints: scored as kept, once
        kept = [item(c)] + [item(persistence(rid, T0, w, 1.0)) for w in (30, 120, 300, 600)]
        later = join_group(rid, kept, watermark_us=T0_US + 700 * US, finalized={}, windows=WIN,
                           reward_config=declaring, drain=True)
        assert later.row["reward"] == pytest.approx(1.0 - 0.5 * 8 / 32)


def test_an_empty_answer_waits_for_no_persistence():
    """Nothing of an empty answer was inserted, so no client sends persistence for it: it is
    final once its other expected signals arrived (it used to wait out the whole persistence
    window, holding back every canary window behind it)."""
    empty = completion("r1", T0).model_copy(update={"response_text": ""})
    items = [item(empty), item(followup("r1", T0 + timedelta(seconds=20), True)),
             item(feedback("r1", T0 + timedelta(seconds=5), False))]
    watermark = T0_US + 30 * US  # every window still open
    out = _join_cfg(items, watermark)
    assert out.row is not None and out.pending == []
    assert out.row["edit_persistence_600"] is None and out.row["trainable"] is True
    # an answer with code still waits for its checkpoints
    coded = [item(completion("r1", T0)), *items[1:]]
    assert _join_cfg(coded, watermark).row is None
