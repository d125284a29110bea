"""Rows built column-wise (ingest/rows.py) equal rows built one dict at a time (reward_row)."""

from __future__ import annotations

import json
import random
from datetime import timedelta

from ingest.join import reward_row
from ingest.kafka_io import KafkaRecord
from ingest.parse import EventItem, classify
from ingest.rows import reward_table
from ingest.schema import TOPICS
from ingest.synthetic import T0, completion, feedback, followup, persistence
from ingest.transforms import rows_to_table
from rewards.config import RewardConfig


def _item(event, offset: int, value: bytes | None = None) -> EventItem:
    rec = KafkaRecord(TOPICS[event.kind], 0, offset, None, value or event.to_json(), None)
    got = classify(rec, max_event_bytes=1 << 20, max_future_skew_s=1e12, max_age_s=1e12)
    assert isinstance(got, tuple), got
    return got[1]


def _finals(n: int, seed: int) -> list[tuple[str, EventItem, list[EventItem]]]:
    """Completions of varied shapes (lengths, v1 payloads without the v2 fields, pretty-printed
    JSON, unicode, sampling as ints) with varied signals."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        rid, t = f"r{i}", T0 + timedelta(seconds=i)
        c = completion(rid, t, n_tokens=rng.choice([0, 1, 5, 40]), latency_ms=rng.random() * 9e3)
        d = json.loads(c.to_json())
        d["prompt"] = rng.choice(["def f():", "é ✓ \\n \"quoted\"\n", ""])
        d["response_logprobs"] = [-rng.random() * 20 for _ in d["response_token_ids"]]
        if i % 3 == 0:
            d["prompt_token_ids"], d["prompt_routed_experts"] = [1, 2, 3], [[[1]], [[2]], [[3]]]
        if i % 4 == 0:
            for k in ("prompt_token_ids", "prompt_routed_experts", "routed_experts_source"):
                d.pop(k, None)
        if i % 5 == 0:
            d["sampling"]["temperature"] = 1
        value = json.dumps(d, indent=2 if i % 7 == 0 else None, ensure_ascii=i % 2 == 0)
        signals = [
            _item(persistence(rid, t, w, round(rng.random(), 3)), 10 * i + k)
            for k, w in enumerate((30, 120, 300, 600))
            if rng.random() < 0.7
        ]
        if rng.random() < 0.5:
            signals.append(_item(followup(rid, t, rng.random() < 0.5), 10 * i + 5))
        if rng.random() < 0.5:
            signals.append(_item(feedback(rid, t, rng.random() < 0.5), 10 * i + 6))
        out.append((rid, _item(c, 10 * i, value.encode()), signals))
    return out


def test_column_wise_rows_equal_row_by_row_rows():
    cfg = RewardConfig()
    for seed in range(3):
        finals = _finals(60, seed)
        want = rows_to_table([reward_row(r, c, s, cfg) for r, c, s in finals])
        got = reward_table(finals, cfg)
        assert got.schema == want.schema
        assert got.equals(want)


def test_a_batch_the_json_reader_refuses_is_built_row_by_row():
    cfg = RewardConfig()
    finals = _finals(5, 0)
    rid, c, s = finals[2]
    value = c.value[:-1] + b', "prompt": "repeated key"}'  # pydantic keeps the last one
    finals[2] = (rid, c._replace(value=value), s)
    want = rows_to_table([reward_row(r, c, s, cfg) for r, c, s in finals])
    assert want.column("prompt")[2].as_py() == "repeated key"
    assert reward_table(finals, cfg).equals(want)


def test_no_finals_no_rows():
    assert reward_table([], RewardConfig()).num_rows == 0
