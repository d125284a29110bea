"""Events through the real broker and Beam (DirectRunner) into a Parquet span."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from ingest.config import IngestConfig, JoinConfig
from ingest.kafka_io import (
    EventProducer,
    committed_offsets,
    ensure_topics,
    high_watermarks,
    read_range,
    read_topic,
    start_group_at_end,
)
from ingest.pipeline import run_span
from ingest.schema import DEAD_LETTER_TOPIC, LATE_TOPIC, REWARD_SCHEMA, TOPICS
from ingest.spans import read_spans
from ingest.synthetic import completion, feedback, persistence, stream
from rewards.config import RewardConfig

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _letters(bootstrap: str, topic: str, since: dict[int, int]) -> list[dict]:
    return [json.loads(v) for _, _, _, v in read_topic(bootstrap, topic, since)]


def test_high_watermarks_count_every_record(broker):
    topic = "test.hwm"
    ensure_topics(broker.bootstrap, partitions=2, topics=[topic])
    with EventProducer(broker.bootstrap) as p:
        for i in range(1001):
            p.send_raw(topic, None, b"v%d" % i, partition=i % 2)
    marks = high_watermarks(broker.bootstrap, topic)
    assert marks == {0: 501, 1: 500}
    got = list(read_range(broker.bootstrap, topic, 1, 0, marks[1]))
    assert [o for o, *_ in got] == list(range(500))


def test_events_become_reward_rows_and_bad_ones_dead_letters(broker, tmp_path):
    ensure_topics(broker.bootstrap)
    # the session's broker is shared: start from what is there now
    before = start_group_at_end(broker.bootstrap, "g1", TOPICS.values())
    dlq_before = high_watermarks(broker.bootstrap, DEAD_LETTER_TOPIC)
    late_before = high_watermarks(broker.bootstrap, LATE_TOPIC)
    t0 = datetime.now(UTC) - timedelta(hours=3)
    n = 60
    with EventProducer(broker.bootstrap) as p:
        for e in stream(n, start=t0, spacing_s=60, prefix="a"):
            p.send(e)
        p.send_raw(TOPICS["completion"], b"bad", b"{not json")
        bad = json.loads(completion("a-neg", t0).to_json())
        bad["latency_ms"] = -5
        p.send_raw(TOPICS["completion"], b"a-neg", json.dumps(bad).encode())
    # a known completion and its signals, to check values
    with EventProducer(broker.bootstrap) as p:
        p.send(completion("known", t0, latency_ms=2750))
        p.send(persistence("known", t0, 600, 1.0))
        p.send(feedback("known", t0 + timedelta(seconds=5), accept=False))

    out = tmp_path / "spans"
    # every signal kind expected: completions wait for their windows (and are carried)
    wait_all = IngestConfig(join=JoinConfig(expected_signals=("edit_persistence", "followup",
                                                              "feedback")))
    r = run_span(
        bootstrap=broker.bootstrap, group_id="g1", output_root=out, reward_config=RewardConfig(),
        config=wait_all,
    )
    assert r.completions_in == n + 1 and r.dead_letters == 2
    assert r.validated and not r.quarantined
    table = pq.read_table(r.path)
    assert table.schema.equals(REWARD_SCHEMA, check_metadata=False)
    assert table.num_rows == r.rows
    ids = set(table.column("response_id").to_pylist())
    assert len(ids) == r.rows
    # everything whose windows closed (watermark = last event - 60 s) is in; the rest pending
    assert "known" in ids and r.rows >= n - 32 and r.pending > 0
    known = table.filter(ds.field("response_id") == "known").to_pylist()[0]
    # persistence 1.0 -> 1 (w 1); reject -1 (w 1); followup default 0; 8 tokens / 32 (w 0.5)
    assert known["reward"] == pytest.approx(1.0 - 1.0 - 0.5 * 8 / 32)
    assert known["defaulted_signals"] == ["followup"]

    reasons = sorted(d["reason"] for d in _letters(broker.bootstrap, DEAD_LETTER_TOPIC, dlq_before))
    assert reasons == ["negative_latency", "unparseable_json"]
    committed = committed_offsets(broker.bootstrap, "g1", [TOPICS["completion"]])
    completion_topic = TOPICS["completion"]
    read = sum(committed[completion_topic].values()) - sum(before[completion_topic].values())
    assert read == n + 3

    # the next span, drained, finalises the carried completions: every completion exactly once
    r2 = run_span(
        bootstrap=broker.bootstrap,
        group_id="g1",
        output_root=out,
        reward_config=RewardConfig(),
        drain=True,
    )
    assert r2.completions_in == 0 and r2.pending == 0
    all_rows = read_spans(out)
    assert all_rows.num_rows == n + 1
    assert len(set(all_rows.column("response_id").to_pylist())) == n + 1
    hive = ds.dataset(out / "spans", partitioning="hive")
    assert hive.count_rows() == n + 1 and "hour" in hive.schema.names

    # a signal for a finalised completion is late: counted and routed, never joined
    with EventProducer(broker.bootstrap) as p:
        p.send(feedback("known", t0 + timedelta(seconds=9), accept=True))
    r3 = run_span(
        bootstrap=broker.bootstrap, group_id="g1", output_root=out, reward_config=RewardConfig()
    )
    assert (r3.signals_in, r3.late, r3.rows, r3.dead_letters) == (1, 1, 0, 0)
    late = _letters(broker.bootstrap, LATE_TOPIC, late_before)
    assert [(d["reason"], d["topic"]) for d in late] == [("late_signal", TOPICS["feedback"])]
    assert read_spans(out).num_rows == n + 1


def test_kafka_read_splits_at_any_claimed_offset_without_loss_or_overlap(broker):
    from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker

    from ingest.transforms import ReadKafkaRanges

    topic = "test.sdf"
    ensure_topics(broker.bootstrap, partitions=1, topics=[topic])
    with EventProducer(broker.bootstrap) as p:
        for i in range(1000):
            p.send_raw(topic, None, b"%d" % i, partition=0)
    end = high_watermarks(broker.bootstrap, topic)[0]
    fn = ReadKafkaRanges(broker.bootstrap, batch=100)
    fn.setup()
    try:
        primary = OffsetRestrictionTracker(OffsetRange(0, end))
        got, residual = [], None
        for i, batch in enumerate(fn.process((topic, 0, 0, end), tracker=primary)):
            got += [r[2] for r in batch]
            if i == 2:  # a runner splits the rest off while the read is running
                _, residual = primary.try_split(0.5)
        assert residual is not None and 300 <= residual.start < end
        rest = OffsetRestrictionTracker(residual)
        more = [r[2] for b in fn.process((topic, 0, residual.start, end), tracker=rest) for r in b]
    finally:
        fn.teardown()
    assert got == list(range(residual.start)) and more == list(range(residual.start, end))
