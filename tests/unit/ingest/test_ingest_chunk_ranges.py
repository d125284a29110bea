"""A span cut into chunks: the offset slices cover every range once, and a chunk that is not
the span's last finalises a completion only once all its windows have closed."""

from __future__ import annotations

from ingest.join import US, Windows, join_group
from ingest.kafka_io import KafkaRecord
from ingest.parse import EventItem, classify
from ingest.pipeline import chunk_ranges
from ingest.schema import TOPICS
from ingest.synthetic import T0, completion, persistence
from rewards.config import RewardConfig

WIN = Windows.from_seconds(600, 900, 1800, grace=(60, 0, 0))
T0_US = int(T0.timestamp() * US)


def test_chunks_cover_every_offset_once_and_keep_small_spans_whole():
    ranges = [("a", 0, 10, 1013), ("a", 1, 0, 7), ("b", 0, 5, 5), ("b", 3, 100, 400)]
    chunks = chunk_ranges(ranges, 300)
    assert len(chunks) == 5  # 1303 events / 300 per chunk
    for t, p, s, e in ranges:
        pieces = sorted((c[2], c[3]) for chunk in chunks for c in chunk if c[:2] == (t, p))
        covered = [o for a, b in pieces for o in range(a, b)]
        assert covered == list(range(s, e))
    assert all(sum(e - s for *_, s, e in chunk) <= 300 for chunk in chunks)
    assert chunk_ranges(ranges, 10_000) == [ranges]
    assert chunk_ranges([], 10) == [[]]


def _item(event, offset: int) -> EventItem:
    rec = KafkaRecord(TOPICS[event.kind], 0, offset, None, event.to_json(), None)
    return classify(rec, max_event_bytes=1 << 20, max_future_skew_s=1e12, max_age_s=1e12)[1]


def test_not_early_waits_for_every_window_even_when_every_signal_arrived():
    items = [_item(completion("r1", T0), 0)]
    items += [
        _item(persistence("r1", T0, w, 1.0), i + 1) for i, w in enumerate((30, 120, 300, 600))
    ]

    def join(watermark_us: int, early: bool):
        return join_group(
            "r1",
            items,
            watermark_us=watermark_us,
            finalized={},
            windows=WIN,
            reward_config=RewardConfig(),
            expected=("edit_persistence",),
            early=early,
        )

    assert join(T0_US + 700 * US, early=True).row is not None  # every checkpoint is in
    held = join(T0_US + 700 * US, early=False)  # feedback window (1800 s) still open
    assert held.row is None and len(held.pending) == 5
    assert join(T0_US + 1800 * US, early=False).row == join(T0_US + 700 * US, early=True).row


def test_a_chunk_holds_the_watermark_at_the_slowest_partition_still_to_read():
    from ingest.transforms import _WatermarkFn

    def watermark(hold, prev=None):
        fn = _WatermarkFn(None, 60 * US, 10**18, frozenset(hold), prev)
        acc = fn.create_accumulator()
        for item in (("a:0", 5000 * US), ("b:0", 1000 * US), ("a:0", 4000 * US)):
            acc = fn.add_input(acc, item)
        return fn.extract_output(fn.merge_accumulators([acc, fn.create_accumulator()]))

    assert watermark(()) == [5000 * US, 4940 * US, {"a:0": 5000 * US, "b:0": 1000 * US}]
    assert watermark({"a:0", "b:0"})[1] == 940 * US  # b:0 is read only up to 1000 s so far
    assert watermark({"a:0", "b:0"}, prev={"b:0": 3000 * US})[1] == 2940 * US
    assert watermark({"a:0", "c:1"})[1] == -(2**62)  # c:1 not read at all yet
