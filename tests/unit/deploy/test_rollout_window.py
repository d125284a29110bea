"""When a canary window counts as closed: on completed reward rows, not only on the watermark."""

from datetime import UTC, datetime, timedelta

from deploy.fleet.rollout import RewardSpans
from ingest.parse import EventItem
from ingest.spans import SpanStore, manifest_record

T0 = datetime(2026, 1, 1, tzinfo=UTC)
US = 1_000_000
HORIZON_S = 660.0


def _us(seconds: float) -> int:
    return int((T0 + timedelta(seconds=seconds)).timestamp() * US)


def test_final_until_is_the_earliest_pending_completion_below_the_watermark():
    from deploy.fleet.rollout import final_until_us

    assert final_until_us(1000, 660, []) == 1000  # nothing pending: final up to the watermark
    assert final_until_us(1000, 660, [700, 900]) == 700  # a completion waits for its signals
    assert final_until_us(1000, 660, [2000]) == 1000  # pending beyond the watermark: unread
    assert final_until_us(1000, 660, [100]) == 340  # every window closed before the horizon


def _commit_span(root, seq: int, watermark_us: int, pending_at_s: list[float],
                 drained: bool = False) -> None:
    store = SpanStore(root)
    pending = [
        (f"r{i}", EventItem("completion", f"e{i}", _us(t), "completions", 0, i, b"{}", -1))
        for i, t in enumerate(pending_at_s)
    ]
    pending.append(("r-sig", EventItem("edit_persistence", "s", _us(1.0), "signals", 0, 0, b"{}",
                                       -1, 30, 0.5)))  # a signal without its completion: ignored
    manifest = manifest_record(
        span_id=f"span-{seq:06d}", seq=seq, source={"type": "kafka"}, offsets={}, files=[],
        status="ok", counts={"rows": 0}, max_event_time_us=watermark_us,
        watermark_us=watermark_us, stats={}, validation={}, drained=drained,
    )
    store.commit_manifest(manifest, pending, {}, [], [])


def test_a_window_closes_once_its_completions_are_final_before_the_horizon_passes(tmp_path):
    # Compressed time: the watermark (bounded by ingest's clock) is only 30 s past the window's
    # end, far less than the 660 s join horizon, but no completion of the window is pending.
    spans = RewardSpans(tmp_path, model_name="m", horizon_s=HORIZON_S)
    assert spans.closed_until() is None
    window_end = T0 + timedelta(seconds=20)
    _commit_span(tmp_path, 1, _us(50), pending_at_s=[])
    assert spans.closed_until() == T0 + timedelta(seconds=50)
    assert spans.closed_until() >= window_end


def test_a_pending_completion_keeps_its_window_open(tmp_path):
    spans = RewardSpans(tmp_path, model_name="m", horizon_s=HORIZON_S)
    _commit_span(tmp_path, 1, _us(50), pending_at_s=[12.0, 40.0])
    assert spans.closed_until() == T0 + timedelta(seconds=12)
    assert spans.closed_until() < T0 + timedelta(seconds=20)
    _commit_span(tmp_path, 2, _us(55), pending_at_s=[40.0])  # the next span finalised it
    assert spans.closed_until() == T0 + timedelta(seconds=40)


def test_a_drained_span_closes_everything_but_what_it_carries(tmp_path):
    """A drain keeps the real watermark (windows still open stay pending), so the span says it
    drained: everything it does not carry is final, whatever the watermark."""
    spans = RewardSpans(tmp_path, model_name="m", horizon_s=HORIZON_S)
    _commit_span(tmp_path, 1, _us(50), pending_at_s=[], drained=True)
    assert spans.closed_until().year == 9999
    _commit_span(tmp_path, 2, _us(50), pending_at_s=[45.0], drained=True)
    assert spans.closed_until() == T0 + timedelta(seconds=45)
