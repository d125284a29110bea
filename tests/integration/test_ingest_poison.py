"""Poison records cannot stop ingest: 10,000+ random-byte and mutated-valid records (fixed seed),
line separators inside text fields among them, through the real broker and Beam, then a second
span. Both spans commit their offsets, every good completion is a row, and a span whose carried
files were torn on disk is quarantined with its reason while ingest goes on."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest

from ingest.config import IngestConfig, JoinConfig, ParseConfig
from ingest.kafka_io import (
    EventProducer,
    committed_offsets,
    ensure_topics,
    high_watermarks,
    start_group_at_end,
)
from ingest.pipeline import run_span
from ingest.schema import TOPICS
from ingest.spans import SpanStore, read_spans
from ingest.synthetic import completion, followup

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEED = 20261125
N_POISON = 10_000
SEPARATORS = ["\u2028", "\u2029", "\x85", "\x1c", "\x0b", "\r"]
GROUP = "poison"


def _good(rid: str, t: datetime) -> list[tuple[str, bytes]]:
    text = f"still the same error{random.Random(rid).choice(SEPARATORS)}TypeError"
    fu = followup(rid, t + timedelta(seconds=5), True).model_copy(update={"text": text})
    done = completion(rid, t).to_json()
    return [(TOPICS["completion"], done), (TOPICS["followup"], fu.to_json())]


def _poison(rng: random.Random, i: int, t: datetime) -> tuple[str, bytes]:
    topic = rng.choice(sorted(TOPICS.values()))
    roll = rng.random()
    if roll < 0.4:  # random bytes, line-breaking sequences among them
        raw = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
        return topic, raw + rng.choice([b"", b"\xc2\x85", b"\xe2\x80\xa8", b"\n", b"\r\n"])
    valid = completion(f"mut{i}", t).to_json()
    if roll < 0.7:  # mutated bytes of a valid event
        raw = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(len(raw))] = rng.getrandbits(8)
        return TOPICS["completion"], bytes(raw)
    if roll < 0.85:  # a valid event whose strings hold separators and C1 controls
        d = json.loads(valid)
        d["response_text"] = "".join(rng.choice(SEPARATORS + ["a", "é", "\x9f"]) for _ in range(20))
        return TOPICS["completion"], json.dumps(d, ensure_ascii=False).encode()
    d = json.loads(valid)  # a valid event cut short or with a field of the wrong type
    d[rng.choice(sorted(d))] = rng.choice([None, [], {}, "\u2028", 1e400 if roll < 0.9 else -1])
    return TOPICS["completion"], json.dumps(d, ensure_ascii=False).encode()[: rng.randint(1, 400)]


def _send(broker, records):
    with EventProducer(broker.bootstrap) as p:
        futures = [p.send_raw(topic, None, value) for topic, value in records]
        p.flush()
        for f in futures:
            f.get(timeout=30)


def _all_committed(broker) -> bool:
    committed = committed_offsets(broker.bootstrap, GROUP, TOPICS.values())
    return all(committed[t] == high_watermarks(broker.bootstrap, t) for t in TOPICS.values())


def test_poison_never_stops_ingest_and_every_good_row_is_kept(broker, tmp_path):
    rng = random.Random(SEED)
    ensure_topics(broker.bootstrap)
    start_group_at_end(broker.bootstrap, GROUP, TOPICS.values())  # the broker is shared
    t0 = datetime.now(UTC) - timedelta(hours=1)
    good, records = [], []
    for i in range(N_POISON):
        if i % 50 == 0:
            rid = f"good{i}"
            good.append(rid)
            records += _good(rid, t0 + timedelta(milliseconds=i))
        records.append(_poison(rng, i, t0 + timedelta(milliseconds=i)))
    _send(broker, records)
    # the drain finalises open persistence windows too (its pending rule has its own test:
    # test_ingest_drain_open_windows.py); this test is about poison
    cfg = IngestConfig(parse=ParseConfig(max_event_bytes=4096), drain=True,
                       join=JoinConfig(open_at_drain="neutral"))
    out = tmp_path / "out"

    first = run_span(bootstrap=broker.bootstrap, group_id=GROUP, output_root=out, config=cfg)
    assert first.dead_letters >= N_POISON // 2
    assert _all_committed(broker)

    # the first span's carried files torn on disk: the next run quarantines it and goes on
    store = SpanStore(out)
    (store.manifests / first.span_id / "dead_letters.jsonl").open("a").write('{"reason": "x\n')
    later = [f"later{i}" for i in range(20)]
    _send(broker, [r for rid in later for r in _good(rid, t0 + timedelta(minutes=30))])
    second = run_span(bootstrap=broker.bootstrap, group_id=GROUP, output_root=out, config=cfg)
    assert _all_committed(broker)

    statuses = {m["span_id"]: m["status"] for m in store.manifests_list()}
    assert statuses == {first.span_id: "quarantined", second.span_id: "ok"}
    store.release(first.span_id, note="reviewed: torn dead-letter file")
    rows = read_spans(out).to_pylist()
    ids = [r["response_id"] for r in rows]
    assert set(good + later) <= set(ids) and len(ids) == len(set(ids))
    dissatisfied = {r["response_id"]: r["followup_dissatisfied"] for r in rows}
    assert all(dissatisfied[rid] is not None for rid in good + later)
