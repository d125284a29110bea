"""The msgspec Structs and the pydantic models agree on the event contract.

Every record of a corpus of good and bad events goes through ``classify`` twice: as it runs
(msgspec first, pydantic for what msgspec refuses) and with pydantic alone; the outcome (the
response id and ``EventItem`` of a good record, the dead letter of a bad one: reason, detail,
payload) must be identical, and the corpus reaches every dead-letter reason ingest emits (the
join's through ``join_group`` over what each path classified). Where msgspec accepts an event,
pydantic accepts it too, with the same value in every field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from ingest import parse
from ingest.config import JoinConfig
from ingest.join import US, Windows, join_group
from ingest.kafka_io import KafkaRecord
from ingest.parse import DEAD_LETTER_REASONS, classify
from ingest.schema import EVENT_ADAPTER, TOPICS, DeadLetter, fast_event
from ingest.synthetic import T0, completion, feedback, followup, persistence
from rewards.config import RewardConfig

LIMITS = {"max_event_bytes": 8192, "max_future_skew_s": 300.0, "max_age_s": 86400.0,
          "max_latency_ms": 600_000.0, "min_logprob": -1e4}
TS = int(T0.timestamp() * 1000)
NOW = TS + 60_000


def _d(event: Any) -> dict[str, Any]:
    return json.loads(event.to_json())


def _j(d: Any) -> bytes:
    return json.dumps(d).encode()


def _c(**changes: Any) -> bytes:
    d = _d(completion("r-c", T0))
    d.update(changes)
    return _j(d)


def _without(d: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in keys}


def _time(text: Any) -> bytes:
    d = _d(persistence("r-t", T0, 30, 0.5))
    d["event_time"] = text
    return _j(d)


LONG = "é" * 128
C = TOPICS["completion"]
P, F, B = TOPICS["edit_persistence"], TOPICS["followup"], TOPICS["feedback"]

CORPUS: list[tuple[str, bytes | None, int]] = [  # (topic, value, record timestamp ms)
    # good events of every kind, v1 and v2, optional fields set and unset
    (C, completion("g1", T0).to_json(), TS),
    (C, completion("g2", T0, n_tokens=0, layers=1, top_k=1).to_json(), TS),
    (C, _c(client_id="editor", prompt_token_ids=[1, 2], prompt_routed_experts=[[[0]], [[1]]],
           routed_experts_source="teacher_forced", response_id="g3"), TS),
    (C, _j(_without(_d(completion("g4", T0)), "prompt_token_ids", "prompt_routed_experts",
                    "routed_experts_source", "client_id") | {"schema_version": 1}), TS),
    (C, _c(response_id="g5", routed_experts=[], response_logprobs=[-0.0] * 8), TS),
    (C, _c(response_id="g6", latency_ms=200, time_to_first_token_ms=0), TS),
    (C, _c(response_id="g7", sampling={"temperature": 0, "top_p": 1, "max_tokens": 4096,
                                       "seed": 2**40}), TS),
    (C, _c(response_id="g8", event_id=LONG, user_hash="😀" * 128), TS),
    (C, _c(response_id="g9", client_id=None, prompt_token_ids=[2**40]), TS),
    (P, persistence("g1", T0, 600, 1.0).to_json(), TS),
    (P, persistence("g1", T0, 30, 0).to_json(), TS),
    (F, followup("g1", T0 + timedelta(seconds=5), dissatisfied=True).to_json(), TS),
    (F, _j(_d(followup("g2", T0, dissatisfied=False)) | {"dissatisfied": None}), TS),
    (F, _j(_without(_d(followup("g3", T0, dissatisfied=False)), "dissatisfied")), TS),
    (B, feedback("g1", T0, accept=True).to_json(), TS),
    (B, _j(_d(feedback("g2", T0, accept=False)) | {"rating": 5, "comment": "x" * 2000}), TS),
    (B, _j(_d(feedback("g3", T0, accept=False)) | {"rating": None, "comment": None}), TS),
    # event times in the forms JSON producers write
    (P, _time("2026-01-01T00:00:00Z"), TS),
    (P, _time("2026-01-01T00:00:00+00:00"), TS),
    (P, _time("2026-01-01T05:30:00+05:30"), TS),
    (P, _time("2026-01-01T00:00:00"), TS),
    (P, _time("2026-01-01T00:00:00.123456Z"), TS),
    (P, _time("2026-01-01T00:00:00.1234567Z"), TS),
    (P, _time("2026-01-01T00:00:00.9999999Z"), TS),
    (P, _time("2026-01-01T00:00:00.1Z"), TS),
    (P, _time("2026-01-01 00:00:00Z"), TS),
    (P, _time("2026-01-01t00:00:00z"), TS),
    (P, _time("2026-01-01"), TS),
    (P, _time("2026-01-01T00:00Z"), TS),
    (P, _time("2025-12-31T23:59:60Z"), TS),
    (P, _time("2025-12-31T24:00:00Z"), TS),
    (P, _time("2026-01-01T00:00:00-00:00"), TS),
    (P, _time("2026-01-01T00:00:00+0000"), TS),
    (P, _time(TS // 1000), TS),
    (P, _time(TS / 1000), TS),
    (P, _time(str(TS // 1000)), TS),
    (P, _time("not a time"), TS),
    (P, _time(None), TS),
    # numbers and types at the edges of what a lax or a strict parser takes
    (C, _c(model_version=2.0), TS),
    (C, _c(model_version="2"), TS),
    (C, _c(model_version=True), TS),
    (C, _c(model_version=0), TS),
    (C, _c(latency_ms="200"), TS),
    (C, _c(latency_ms=True), TS),
    (C, _c(response_token_ids=[1.0] * 8), TS),
    (C, _c(response_token_ids=[2**70] * 8), TS),
    (C, _c(sampling={"temperature": 0.7, "top_p": 0, "max_tokens": 64}), TS),
    (C, _c(sampling={"temperature": 0.7, "top_p": 0.9, "max_tokens": 64, "x": 1}), TS),
    (C, _c(usage={"input_tokens": -1, "output_tokens": 0}), TS),
    (C, _c(finish_reason="STOP"), TS),
    (C, _c(routed_experts_source="other"), TS),
    (C, _c(schema_version=3), TS),
    (C, _c(schema_version=1.0), TS),
    (C, _c(event_id=LONG + "é"), TS),
    (C, _c(event_id=""), TS),
    (C, _c(model_name=""), TS),
    (C, _c(client_id="x" * 129), TS),
    (C, _c(prompt=None), TS),
    (C, _c(extra_field=1), TS),
    (C, _j(_without(_d(completion("m", T0)), "usage")), TS),
    (C, _c(routed_experts=[[[0, 1]]] * 7), TS),
    (C, _c(prompt_token_ids=[1, 2], prompt_routed_experts=[[[0]]]), TS),
    (B, _j(_d(feedback("g4", T0, accept=True)) | {"rating": 0}), TS),
    (B, _j(_d(feedback("g4", T0, accept=True)) | {"comment": "x" * 2001}), TS),
    (B, _j(_d(feedback("g4", T0, accept=True)) | {"label": "maybe"}), TS),
    (F, _j(_d(followup("g4", T0, dissatisfied=True)) | {"text": "x" * 4097}), TS),
    (F, _j(_d(followup("g4", T0, dissatisfied=True)) | {"dissatisfied": "yes"}), TS),
    (F, _j(_d(followup("g4", T0, dissatisfied=True)) | {"dissatisfied": 1}), TS),
    (P, _j(_d(persistence("g4", T0, 30, 0.5)) | {"window_s": 31}), TS),
    (P, _j(_d(persistence("g4", T0, 30, 0.5)) | {"score": 1.5}), TS),
    (P, _j(_d(persistence("g4", T0, 30, 0.5)) | {"window_s": "30"}), TS),
    # JSON text at the edges: duplicate keys, escapes, whitespace, trailing data, a BOM
    (P, b'{"kind":"edit_persistence","event_id":"e1","response_id":"d1","event_id":"e2",'
        b'"event_time":"2026-01-01T00:00:00Z","window_s":30,"score":0.5}', TS),
    (P, b'{"kind":"edit_persistence","event_id":"e1","response_id":"d1","score":2,'
        b'"event_time":"2026-01-01T00:00:00Z","window_s":30,"score":0.5}', TS),
    (P, b'{"kind":"edit_persistence","event_id":"e1","response_id":"d1","score":0.5,'
        b'"event_time":"2026-01-01T00:00:00Z","window_s":30,"score":2}', TS),
    (P, b'{"kind":"followup","kind":"edit_persistence","event_id":"e1","response_id":"d1",'
        b'"event_time":"2026-01-01T00:00:00Z","window_s":30,"score":0.5}', TS),
    (P, b'{"kind":"edit_persistence","event_id":"\\u00e9\\ud83d\\ude00","response_id":"d1",'
        b'"event_time":"2026-01-01T00:00:00Z","window_s":30,"score":0.5}', TS),
    (P, b'{"kind":"edit_persistence","event_id":"\\ud800","response_id":"d1",'
        b'"event_time":"2026-01-01T00:00:00Z","window_s":30,"score":0.5}', TS),
    (P, b' \n{"kind":"edit_persistence","event_id":"e1","response_id":"d1",'
        b'"event_time":"2026-01-01T00:00:00Z","window_s":30,"score":0.5}\n ', TS),
    (P, b'{"kind":"edit_persistence","event_id":"e1","response_id":"d1",'
        b'"event_time":"2026-01-01T00:00:00Z","window_s":30,"score":0.5} x', TS),
    (P, b'\xef\xbb\xbf{"kind":"edit_persistence","event_id":"e1","response_id":"d1",'
        b'"event_time":"2026-01-01T00:00:00Z","window_s":30,"score":0.5}', TS),
    (P, b'{"kind":"edit_persistence","event_id":"e1","response_id":"d1",'
        b'"event_time":"2026-01-01T00:00:00Z","window_s":30,"score":0.5,}', TS),
    (P, b'{"kind":"edit_persistence","event_id":"e1","response_id":"d1",'
        b'"event_time":"2026-01-01T00:00:00Z","window_s":30,"score":5e-1}', TS),
    # one record for each reason classification gives
    (C, b"x" * 9000, TS),  # too_large
    (C, b'{"kind": "completion", "prompt": "\xff"}', TS),  # invalid_utf8
    (C, b"{not json", TS),  # unparseable_json
    (C, None, TS),  # unparseable_json: a tombstone
    (C, b"[1, 2]", TS),  # schema_violation: not an object
    (C, b'{"kind": 3}', TS),  # schema_violation: kind not a string
    (C, _c(usage=None), TS),  # schema_violation: a field named
    (C, b'{"kind": "telemetry"}', TS),  # unknown_kind
    (B, completion("w1", T0).to_json(), TS),  # wrong_topic (pydantic accepts the event)
    (B, b'{"kind": "completion", "x": 1}', TS),  # wrong_topic (pydantic refuses it)
    (C, _c(latency_ms=-1.0), TS),  # negative_latency
    (C, _c(response_logprobs=[0.5] * 8), TS),  # logprob_above_zero
    (C, _c(response_logprobs=[-0.1] * 7), TS),  # length_mismatch
    (C, _c(response_logprobs=[-0.1] * 7 + [float("nan")]), TS),  # non_finite (NaN)
    (C, _c(latency_ms=1e400), TS),  # non_finite (infinite)
    (C, _c(latency_ms=700_000.0), TS),  # out_of_range
    (C, _c(response_logprobs=[-2e4] * 8), TS),  # out_of_range
    (P, persistence("f1", T0 + timedelta(hours=2), 30, 0.5).to_json(), TS),  # future_timestamp
    (P, persistence("s1", T0 - timedelta(days=3), 30, 0.5).to_json(), TS),  # stale_timestamp
    # for the join's reasons
    (P, persistence("orphan", T0, 30, 0.5).to_json(), TS),  # unknown_response_id
    (C, completion("dup", T0).to_json(), TS),
    (C, completion("dup", T0, event_id="c-dup-2").to_json(), TS),  # duplicate_response_id
    (B, feedback("fb", T0, accept=True).to_json(), TS),
    (B, _j(_d(feedback("fb", T0 + timedelta(seconds=1), accept=True)) | {"event_id": "f2"}),
     TS),  # repeated_feedback
    (B, _j(_d(feedback("fb", T0 + timedelta(seconds=2), accept=False)) | {"event_id": "f3"}),
     TS),  # contradictory_feedback
    (C, completion("fb", T0).to_json(), TS),
]


def _records() -> list[KafkaRecord]:
    return [KafkaRecord(t, 0, i, b"k", v, ts) for i, (t, v, ts) in enumerate(CORPUS)]


def _classified(pydantic_only: bool) -> list[Any]:
    original: Callable[[bytes], Any] = parse.fast_event
    if pydantic_only:
        parse.fast_event = lambda raw: None
    try:
        return [classify(r, now_ms=NOW, **LIMITS) for r in _records()]
    finally:
        parse.fast_event = original


def _joined(classified: list[Any]) -> list[Any]:
    by_id: dict[str, list[Any]] = {}
    for got in classified:
        if not isinstance(got, DeadLetter):
            by_id.setdefault(got[0], []).append(got[1])
    j = JoinConfig()
    windows = Windows.from_seconds(j.edit_persistence_window_s, j.followup_window_s,
                                   j.feedback_window_s)
    out = []
    for rid in sorted(by_id):
        o = join_group(rid, by_id[rid], watermark_us=int(T0.timestamp() * US), finalized={},
                       windows=windows, reward_config=RewardConfig(), drain=True,
                       open_at_drain="neutral")
        out.append((rid, o.row, o.pending, o.late, o.dead, o.duplicates))
    return out


def test_both_paths_classify_and_join_the_corpus_identically():
    fast, slow = _classified(False), _classified(True)
    for rec, a, b in zip(_records(), fast, slow, strict=True):
        assert a == b, rec
    assert _joined(fast) == _joined(slow)
    reasons = {d.reason for d in fast if isinstance(d, DeadLetter)}
    reasons |= {d.reason for *_, dead, _ in _joined(fast) for d in dead}
    assert reasons == set(DEAD_LETTER_REASONS)


def test_what_msgspec_accepts_pydantic_accepts_with_the_same_values():
    accepted = 0
    for _, value, _ in CORPUS:
        event = fast_event(value) if value is not None else None
        if event is None:
            continue
        accepted += 1
        model = EVENT_ADAPTER.validate_json(value)
        assert event.kind == model.kind
        for name in type(model).model_fields:
            got, want = getattr(event, name), getattr(model, name)
            if isinstance(want, BaseModel):  # nested model: compare field by field
                want = want.model_dump()
                got = {k: getattr(got, k) for k in want}
            assert got == want, (name, value)
            if name == "event_time":
                assert got.utcoffset() == want.utcoffset()
                assert got.isoformat() == want.isoformat()
    assert accepted >= 30


def test_well_formed_synthetic_events_take_the_msgspec_path():
    for _topic, value, _ in CORPUS[:17]:
        assert fast_event(value) is not None, value


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["kind", "event_id", "response_id", "event_time", "window_s", "score",
                         "text", "label", "rating", "schema_version", "dissatisfied"]),
        st.one_of(st.none(), st.booleans(), st.integers(-5, 700), st.floats(allow_nan=False),
                  st.sampled_from(["edit_persistence", "followup", "feedback", "accept",
                                   "2026-01-01T00:00:00Z", "2026-01-01", "", "x"])),
    )
)
def test_arbitrary_signal_objects_get_the_same_outcome(obj):
    rec = KafkaRecord(P, 0, 1, b"k", json.dumps(obj).encode(), TS)
    fast = classify(rec, now_ms=NOW, **LIMITS)
    original = parse.fast_event
    parse.fast_event = lambda raw: None
    try:
        slow = classify(rec, now_ms=NOW, **LIMITS)
    finally:
        parse.fast_event = original
    assert fast == slow


@pytest.mark.parametrize("kind", ["completion", "edit_persistence", "followup", "feedback"])
def test_each_kind_is_read_with_its_attributes(kind):
    events = {"completion": completion("a", T0), "edit_persistence": persistence("a", T0, 30, .5),
              "followup": followup("a", T0, True), "feedback": feedback("a", T0, False)}
    assert fast_event(events[kind].to_json()).kind == kind
