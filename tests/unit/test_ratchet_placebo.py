"""The placebo control: ``trainer.shuffle_rewards`` permutes the reward column of the rows a
cycle trains on (seeded by the cycle) and keeps every other column; off, the rows are untouched."""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq

from ingest.join import reward_row
from ingest.kafka_io import KafkaRecord
from ingest.parse import classify
from ingest.schema import REWARD_SCHEMA, TOPICS
from ingest.synthetic import T0, completion
from ratchet.config import RatchetConfig
from ratchet.cycle import Cycle
from rewards.config import RewardConfig


def _rows(n: int) -> pa.Table:
    t0_ms = int(T0.timestamp() * 1000)
    rows = []
    for i in range(n):
        raw = completion(f"r{i}", T0 + timedelta(seconds=i)).to_json()
        c = classify(KafkaRecord(TOPICS["completion"], 0, i, None, raw, t0_ms + 1000 * i),
                     max_event_bytes=10**6, max_future_skew_s=60.0, max_age_s=86400.0,
                     now_ms=t0_ms + 1000 * i)[1]
        rows.append({**reward_row(f"r{i}", c, [], RewardConfig()), "reward": float(i)})
    return pa.Table.from_pylist(rows, schema=REWARD_SCHEMA)


def _read(tmp_path, shuffle: bool) -> pa.Table:
    from ratchet.cycle_state import CycleState

    path = tmp_path / "rows.parquet"
    pq.write_table(_rows(12), path)
    config = RatchetConfig.model_validate({"trainer": {"shuffle_rewards": shuffle}})
    cycle = Cycle(config, tracking_uri="unused", bootstrap="unused", workdir=tmp_path)
    cycle.store.span_files = lambda ids: [path]
    state = CycleState(cycle_id="c-1", seq=1, span_ids=["s"], span_rows={"s": 12})
    return cycle._read_rows(state)


def test_the_placebo_permutes_rewards_and_keeps_the_rest(tmp_path):
    plain, placebo = _read(tmp_path, False), _read(tmp_path, True)
    by_id = dict(zip(plain.column("response_id").to_pylist(), plain.column("reward").to_pylist()))
    assert sorted(placebo.column("reward").to_pylist()) == sorted(by_id.values())
    moved = [r for r, x in zip(placebo.column("response_id").to_pylist(),
                               placebo.column("reward").to_pylist()) if by_id[r] != x]
    assert len(moved) >= 6  # a permutation, not the identity
    assert placebo.drop_columns(["reward"]).equals(plain.drop_columns(["reward"]))
    assert _read(tmp_path, True).equals(placebo)  # seeded by the cycle
