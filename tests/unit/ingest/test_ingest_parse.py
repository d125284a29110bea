"""Dead-letter classification: every reason, with the field and value named where there is one."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.kafka_io import KafkaRecord
from ingest.parse import EventItem, classify
from ingest.schema import TOPICS, DeadLetter
from ingest.synthetic import T0, completion, feedback

LIMITS = {"max_event_bytes": 4096, "max_future_skew_s": 300.0, "max_age_s": 86400.0}
TS = int(T0.timestamp() * 1000)


def _rec(value: bytes, topic: str = TOPICS["completion"], ts: int = TS) -> KafkaRecord:
    return KafkaRecord(topic, 2, 17, b"k", value, ts)


def _completion_dict(**changes) -> dict:
    d = json.loads(completion("r1", T0).to_json())
    d.update(changes)
    return d


def _reason(value: bytes, **kw) -> DeadLetter:
    got = classify(_rec(value, **kw), **LIMITS)
    assert isinstance(got, DeadLetter), got
    return got


def test_good_completion_is_keyed_by_response_id():
    raw = completion("r1", T0).to_json()
    got = classify(_rec(raw), **LIMITS)
    assert not isinstance(got, DeadLetter)
    response_id, item = got
    assert response_id == "r1"
    t_us = int(T0.timestamp() * 1e6)
    assert item == EventItem(
        "completion", "c-r1", t_us, TOPICS["completion"], 2, 17, raw, TS, conversation_id="conv-r1"
    )


@pytest.mark.parametrize(
    ("value", "reason", "detail"),
    [
        (b"x" * 5000, "too_large", "5000 bytes"),
        (b'{"kind": "\xff"}', "invalid_utf8", "byte"),
        (b"{not json", "unparseable_json", ""),
        (b"[1, 2]", "schema_violation", "<root>"),
        (b'{"no_kind": 1}', "schema_violation", "field kind"),
        (b'{"kind": "telemetry"}', "unknown_kind", "telemetry"),
    ],
)
def test_structural_reasons(value, reason, detail):
    dl = _reason(value)
    assert dl.reason == reason
    assert detail in dl.detail
    assert (dl.topic, dl.partition, dl.offset) == (TOPICS["completion"], 2, 17)


def test_schema_violation_names_the_field_and_value():
    dl = _reason(json.dumps(_completion_dict(model_version=0)).encode())
    assert dl.reason == "schema_violation"
    assert "model_version" in dl.detail and "0" in dl.detail


def test_the_router_arm_is_kept_and_an_unknown_arm_is_named():
    got = classify(_rec(json.dumps(_completion_dict(arm="holdback")).encode()), **LIMITS)
    assert not isinstance(got, DeadLetter), got
    assert json.loads(got[1].value)["arm"] == "holdback"
    dl = _reason(json.dumps(_completion_dict(arm="control")).encode())
    assert dl.reason == "schema_violation" and "arm" in dl.detail and "control" in dl.detail


def test_missing_field_is_named():
    d = _completion_dict()
    del d["prompt"]
    dl = _reason(json.dumps(d).encode())
    assert dl.reason == "schema_violation" and "prompt" in dl.detail


@pytest.mark.parametrize(
    ("changes", "reason", "field"),
    [
        ({"latency_ms": -3.0}, "negative_latency", "latency_ms"),
        ({"time_to_first_token_ms": -1}, "negative_latency", "time_to_first_token_ms"),
        ({"response_logprobs": [-0.1] * 7 + [0.5]}, "logprob_above_zero", "response_logprobs[7]"),
        ({"response_logprobs": [-0.1] * 5}, "length_mismatch", "response_logprobs 5"),
    ],
)
def test_completion_semantic_reasons(changes, reason, field):
    dl = _reason(json.dumps(_completion_dict(**changes)).encode())
    assert dl.reason == reason
    assert field in dl.detail


def test_wrong_topic():
    dl = _reason(feedback("r1", T0, True).to_json())  # a feedback on the completions topic
    assert dl.reason == "wrong_topic"


def test_timestamps_judged_against_the_record_timestamp():
    future = completion("r1", T0 + timedelta(hours=1)).to_json()
    assert _reason(future).reason == "future_timestamp"
    stale = completion("r1", T0 - timedelta(days=2)).to_json()
    assert _reason(stale).reason == "stale_timestamp"
    slightly_ahead = completion("r1", T0 + timedelta(seconds=60)).to_json()
    assert not isinstance(classify(_rec(slightly_ahead), **LIMITS), DeadLetter)


def test_naive_event_time_is_utc():
    d = _completion_dict(event_time=T0.replace(tzinfo=None).isoformat())
    got = classify(_rec(json.dumps(d).encode()), **LIMITS)
    assert not isinstance(got, DeadLetter)
    assert got[1].event_time_us == int(T0.timestamp() * 1e6)


def test_payload_is_kept_with_replacement_characters():
    dl = _reason(b"\xff\xfe{")
    assert dl.reason == "invalid_utf8"
    assert dl.payload == "\ufffd\ufffd{"


JSON = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_crash(raw):
    got = classify(_rec(raw), **LIMITS)
    assert isinstance(got, DeadLetter) or got[0]


@settings(max_examples=500)
@given(JSON, st.sampled_from(sorted(TOPICS)))
def test_arbitrary_json_is_classified_not_raised(obj, kind):
    if isinstance(obj, dict) and obj:
        obj["kind"] = kind
    got = classify(_rec(json.dumps(obj).encode()), **LIMITS)
    assert isinstance(got, DeadLetter)
    assert got.reason in {
        "schema_violation",
        "wrong_topic",
        "negative_latency",
        "logprob_above_zero",
        "length_mismatch",
        "non_finite",
        "out_of_range",
    }


def test_v1_reward_rows_upgrade_with_null_v2_columns() -> None:
    import pyarrow as pa

    from ingest.schema import REWARD_SCHEMA, upgrade_reward_table

    v1_names = [n for n in REWARD_SCHEMA.names if n not in {
        "prompt_token_ids", "prompt_routed_experts", "routed_experts_source", "top_p",
        "followup_text", "followup_flag", "dissatisfied_score", "detector_version"}]
    v1 = pa.Table.from_pylist([], schema=pa.schema([REWARD_SCHEMA.field(n) for n in v1_names]))
    up = upgrade_reward_table(v1)
    assert up.schema.equals(REWARD_SCHEMA)
    bad = v1.append_column("surprise", pa.array([], pa.int8()))
    with pytest.raises(ValueError, match="surprise"):
        upgrade_reward_table(bad)


def test_v1_completion_event_still_parses() -> None:
    from ingest.schema import Completion, parse_event

    v1 = _completion_dict(schema_version=1)
    for key in ("prompt_token_ids", "prompt_routed_experts", "routed_experts_source"):
        v1.pop(key, None)
    event = parse_event(json.dumps(v1).encode())
    assert isinstance(event, Completion) and event.prompt_token_ids == []
    assert event.routed_experts_source == "engine"


@pytest.mark.parametrize(
    ("raw_change", "reason", "field"),
    [
        (("latency_ms", "1e308"), "out_of_range", "latency_ms"),
        (("latency_ms", "Infinity"), "non_finite", "latency_ms"),
        (("latency_ms", "NaN"), "non_finite", "latency_ms"),
        (("time_to_first_token_ms", "1e9"), "out_of_range", "time_to_first_token_ms"),
    ],
)
def test_non_finite_and_out_of_range_numbers_are_dead_lettered(raw_change, reason, field):
    name, token = raw_change
    d = _completion_dict()
    text = json.dumps(d).replace(f'"{name}": {json.dumps(d[name])}', f'"{name}": {token}')
    assert token in text
    dl = _reason(text.encode())
    assert dl.reason == reason and field in dl.detail


@pytest.mark.parametrize("token", ["-Infinity", "NaN", "-1e300"])
def test_non_finite_or_huge_logprobs_are_dead_lettered(token):
    d = _completion_dict()
    text = json.dumps(d).replace('"response_logprobs": [-0.1', f'"response_logprobs": [{token}', 1)
    assert token in text
    dl = _reason(text.encode())
    assert dl.reason in {"non_finite", "out_of_range"}
    assert "response_logprobs[0]" in dl.detail


def test_event_time_is_bounded_by_ingest_clock_not_the_producer_timestamp():
    from datetime import UTC, datetime

    far = datetime(2100, 1, 1, tzinfo=UTC)
    ts_far = int(far.timestamp() * 1000)  # the producer stamped the record too
    got = classify(_rec(completion("r1", far).to_json(), ts=ts_far), **LIMITS, now_ms=TS)
    assert isinstance(got, DeadLetter) and got.reason == "future_timestamp"
    assert "clock" in got.detail
    # a valid event in a record whose producer timestamp is in the future is not 'stale'
    ok = classify(_rec(completion("r1", T0).to_json(), ts=ts_far), **LIMITS, now_ms=TS)
    assert not isinstance(ok, DeadLetter)


def test_dead_letter_of_a_huge_payload_is_a_prefix_with_size_and_hash():
    import hashlib

    from ingest.parse import PAYLOAD_PREFIX_CHARS

    raw = b"x" * (5 * 1024 * 1024)
    dl = _reason(raw)
    assert dl.reason == "too_large"
    assert len(dl.payload) == PAYLOAD_PREFIX_CHARS and dl.payload_truncated
    assert dl.payload_bytes == len(raw)
    assert dl.payload_sha256 == hashlib.sha256(raw).hexdigest()
    assert len(dl.to_json()) < 100_000


def test_a_stored_oversized_dead_letter_is_cut_before_it_is_published():
    from ingest.parse import PAYLOAD_PREFIX_CHARS, fit

    old = DeadLetter(reason="too_large", detail="d", topic="t", partition=0, offset=1,
                     payload="y" * 3_000_000)  # as stored by an earlier version
    cut = fit(old)
    assert len(cut.payload) == PAYLOAD_PREFIX_CHARS and cut.payload_truncated
    assert cut.payload_bytes == 3_000_000 and len(cut.payload_sha256) == 64
    assert fit(cut) == cut
