"""A span file merged from sorted parts (``write_merged_atomic``) equals one sort of all rows,
and ``narrow`` keeps what the span-level checks and the monitors need."""

from __future__ import annotations

import random
from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ingest.kafka_io import KafkaRecord
from ingest.parse import EventItem, classify
from ingest.rows import reward_table
from ingest.schema import REWARD_SCHEMA, TOPICS
from ingest.spans import SORT_KEYS, write_merged_atomic
from ingest.synthetic import T0, completion, feedback
from ingest.validate import narrow
from rewards.config import RewardConfig
from rewards.monitors import batch_monitors


def _item(event, offset: int) -> EventItem:
    rec = KafkaRecord(TOPICS[event.kind], 0, offset, None, event.to_json(), None)
    got = classify(rec, max_event_bytes=1 << 20, max_future_skew_s=1e12, max_age_s=1e12)
    assert isinstance(got, tuple), got
    return got[1]


def _rows(n: int, seed: int) -> pa.Table:
    """``n`` reward rows with many equal event times (ties broken by response id)."""
    rng = random.Random(seed)
    finals = []
    for i in range(n):
        rid, t = f"r{rng.randrange(10**6):06d}-{i}", T0 + timedelta(seconds=rng.randrange(n // 4))
        c = completion(rid, t, n_tokens=rng.choice([0, 3, 9]))
        signals = [_item(feedback(rid, t, rng.random() < 0.5), 2 * i + 1)] if i % 2 else []
        finals.append((rid, _item(c, 2 * i), signals))
    return reward_table(finals, RewardConfig())


@pytest.mark.parametrize("batch_rows", [1, 7, 64, 10_000])
def test_merge_of_sorted_parts_equals_one_sort(tmp_path, batch_rows):
    rows = _rows(300, seed=batch_rows)
    cuts = [0, 10, 11, 140, 140, 300]  # an empty part and a one-row part among them
    parts = []
    for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
        path = tmp_path / f"part-{i}.parquet"
        pq.write_table(rows.slice(a, b - a).sort_by(SORT_KEYS), path, row_group_size=13)
        parts.append(path)
    out = tmp_path / "spans" / "span.parquet"
    assert write_merged_atomic(parts, out, batch_rows=batch_rows) == 300
    got = pq.read_table(out)
    assert got.schema == REWARD_SCHEMA
    assert got.equals(rows.sort_by(SORT_KEYS))
    assert [p.name for p in out.parent.iterdir()] == ["span.parquet"]  # no temp file left


def test_merge_of_no_rows_is_an_empty_span_file(tmp_path):
    empty = tmp_path / "empty.parquet"
    pq.write_table(REWARD_SCHEMA.empty_table(), empty)
    out = tmp_path / "span.parquet"
    assert write_merged_atomic([empty], out) == 0 and write_merged_atomic([], out) == 0
    assert pq.read_table(out).equals(REWARD_SCHEMA.empty_table())


def test_narrow_rows_give_the_monitors_of_the_full_rows():
    rows = _rows(200, seed=3)
    parts = [narrow(rows.slice(0, 50)), narrow(rows.slice(50))]
    got = batch_monitors(pa.concat_tables(parts), dead_letters=4)
    assert got == pytest.approx(batch_monitors(rows, dead_letters=4))
    ids = pa.concat_tables(parts).column("response_id")
    assert ids.type == pa.int64() and pc.count_distinct(ids).as_py() == 200
