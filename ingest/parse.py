"""Classify one Kafka record: a good event (keyed by response id) or a dead letter with a reason.

The checks run cheapest first, and each failure names its reason and, where there is one, the
field and value:

``too_large``, ``invalid_utf8``, ``unparseable_json``, ``schema_violation`` (field named),
``unknown_kind``, ``wrong_topic``, ``negative_latency``, ``logprob_above_zero``,
``length_mismatch``, ``non_finite`` (NaN or infinity, field named), ``out_of_range`` (field
named), ``future_timestamp``, ``stale_timestamp``. The join adds ``unknown_response_id``,
``duplicate_response_id``, ``contradictory_feedback`` and ``repeated_feedback`` (ingest/join.py).

A well-formed event is decoded and validated by msgspec (``ingest.schema.fast_event``: the
contract as msgspec Structs); a record msgspec refuses goes through the pydantic models, whose
error names the field and value, and then through the checks above. Both paths give the same
outcome for every record (tests/unit/ingest/test_ingest_event_structs.py).

Staleness is judged against the record's own Kafka timestamp, so a rerun (or a replay that keeps
each record's relative timestamp) classifies a record exactly as the first run did. The future
bound is also judged against ingest's own clock (``now_ms``, fixed per span): the producer sets
the record timestamp, so it alone cannot vouch for an event time (one record stamped 2100 would
otherwise move the watermark for good).

A dead letter never carries more than ``PAYLOAD_PREFIX_CHARS`` of the payload: a prefix, with
the payload's size and sha256, so every dead letter fits in a Kafka record.

Deliberately left out: producing dead letters to Kafka (ingest/spans.py) and the join.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from datetime import UTC
from typing import Any, NamedTuple

from pydantic import ValidationError

from ingest.kafka_io import KafkaRecord
from ingest.schema import EVENT_ADAPTER, TOPICS, DeadLetter, fast_event

KINDS = frozenset(TOPICS)
DEAD_LETTER_REASONS = (
    "too_large",
    "invalid_utf8",
    "unparseable_json",
    "schema_violation",
    "unknown_kind",
    "wrong_topic",
    "negative_latency",
    "logprob_above_zero",
    "length_mismatch",
    "non_finite",
    "out_of_range",
    "future_timestamp",
    "stale_timestamp",
    "unknown_response_id",
    "duplicate_response_id",
    "contradictory_feedback",
    "repeated_feedback",
)


class EventItem(NamedTuple):
    """A validated event as it travels through the join: small, primitive, re-parseable.

    ``value`` is the original (valid UTF-8 JSON) payload, re-read by the join only for
    completions. A signal's content travels as two primitives: ``window_s`` (persistence
    checkpoint, else 0) and ``signal`` (persistence score; 1.0/0.0 for a dissatisfied follow-up
    or an accepting feedback). Beam carries it as a plain tuple (``tuple(item)``).
    """

    kind: str
    event_id: str
    event_time_us: int
    topic: str
    partition: int
    offset: int
    value: bytes
    timestamp_ms: int
    window_s: int = 0
    signal: float = 0.0
    conversation_id: str = ""
    """Completions only: the conversation, to close the follow-up window at its next completion."""


PAYLOAD_PREFIX_CHARS = 16_384
"""Most characters of the payload a dead letter keeps (the rest is named by size and hash)."""


def dead_letter(rec: KafkaRecord | EventItem, reason: str, detail: str) -> DeadLetter:
    """A ``DeadLetter`` for ``rec``: the payload's prefix (decoded with replacement characters),
    its size in bytes and its sha256, so a dead letter always fits in a Kafka record."""
    raw = bytes(rec.value or b"")
    text = raw[: 4 * PAYLOAD_PREFIX_CHARS].decode("utf-8", errors="replace")
    return DeadLetter(
        reason=reason,
        detail=detail[:500],
        topic=rec.topic,
        partition=rec.partition,
        offset=rec.offset,
        payload=text[:PAYLOAD_PREFIX_CHARS],
        payload_bytes=len(raw),
        payload_sha256=hashlib.sha256(raw).hexdigest(),
        payload_truncated=len(text) > PAYLOAD_PREFIX_CHARS or len(raw) > 4 * PAYLOAD_PREFIX_CHARS,
    )


def fit(letter: DeadLetter) -> DeadLetter:
    """``letter`` with its payload cut to the prefix (for letters stored before the cut)."""
    if len(letter.payload) <= PAYLOAD_PREFIX_CHARS:
        return letter
    raw = letter.payload.encode("utf-8", errors="replace")
    return letter.model_copy(
        update={
            "payload": letter.payload[:PAYLOAD_PREFIX_CHARS],
            "payload_bytes": letter.payload_bytes or len(raw),
            "payload_sha256": letter.payload_sha256 or hashlib.sha256(raw).hexdigest(),
            "payload_truncated": True,
        }
    )


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _non_finite(d: Any, path: str = "") -> str | None:
    """Path of the first NaN or infinite number in a parsed JSON value (None if none)."""
    if isinstance(d, float) and not math.isfinite(d):
        return path or "<root>"
    items = d.items() if isinstance(d, dict) else enumerate(d) if isinstance(d, list) else ()
    for k, v in items:
        if isinstance(v, (dict, list, float)):
            sub = f"{path}[{k}]" if isinstance(k, int) else (f"{path}.{k}" if path else str(k))
            found = _non_finite(v, sub)
            if found:
                return found
    return None


def _completion_checks(
    d: dict[str, Any], max_latency_ms: float, min_logprob: float
) -> tuple[str, str] | None:
    """Semantic checks named in the issues, run before pydantic so their reason is specific."""
    for name in ("latency_ms", "time_to_first_token_ms"):
        v = d.get(name)
        if _number(v) and v < 0:
            return "negative_latency", f"{name}={v} is negative"
        if _number(v) and v > max_latency_ms:
            return "out_of_range", f"{name}={v} is above {max_latency_ms}"
    lps, ids = d.get("response_logprobs"), d.get("response_token_ids")
    if isinstance(lps, list):
        for i, lp in enumerate(lps):
            if _number(lp) and lp > 0:
                return "logprob_above_zero", f"response_logprobs[{i}]={lp} is above 0"
            if _number(lp) and lp < min_logprob:
                return "out_of_range", f"response_logprobs[{i}]={lp} is below {min_logprob}"
        if isinstance(ids, list) and len(ids) != len(lps):
            return (
                "length_mismatch",
                f"response_token_ids has {len(ids)} entries, response_logprobs {len(lps)}",
            )
    return None


def _completion_bounds(
    event: Any, max_latency_ms: float, min_logprob: float
) -> tuple[str, str] | None:
    """Range checks of a completion pydantic accepted (finite, latencies >= 0, logprobs <= 0)."""
    for name in ("latency_ms", "time_to_first_token_ms"):
        v = getattr(event, name)
        if v > max_latency_ms:
            return "out_of_range", f"{name}={v} is above {max_latency_ms}"
    lps = event.response_logprobs
    if lps and min(lps) < min_logprob:
        i = next(i for i, lp in enumerate(lps) if lp < min_logprob)
        return "out_of_range", f"response_logprobs[{i}]={lps[i]} is below {min_logprob}"
    return None


def _schema_detail(err: ValidationError) -> str:
    first = err.errors(include_url=False)[0]
    loc = ".".join(str(p) for p in first["loc"][1:] or first["loc"]) or "<root>"
    value = repr(first.get("input"))[:120]
    return f"field {loc}: {first['msg']} (value {value})"


def classify(
    rec: KafkaRecord,
    *,
    max_event_bytes: int,
    max_future_skew_s: float,
    max_age_s: float,
    max_latency_ms: float = 600_000.0,
    min_logprob: float = -1e4,
    now_ms: int | None = None,
) -> tuple[str, EventItem] | DeadLetter:
    """``(response_id, EventItem)`` for a good record, else a ``DeadLetter`` with its reason.

    ``now_ms`` is ingest's own clock (default: the wall clock now); give one value per span.
    """
    value = rec.value
    if value is None:
        return dead_letter(rec, "unparseable_json", "record has no value (tombstone)")
    if len(value) > max_event_bytes:
        return dead_letter(rec, "too_large", f"{len(value)} bytes > limit {max_event_bytes}")
    event: Any = fast_event(value)  # most events are good: msgspec decodes and validates them
    if event is None:  # pydantic decides, and names the field and value of what fails
        try:
            event = EVENT_ADAPTER.validate_json(value)
        except ValidationError:
            return _classify_bad(rec, value, max_latency_ms, min_logprob)
    if TOPICS[event.kind] != rec.topic:
        return dead_letter(rec, "wrong_topic", f"kind {event.kind!r} on topic {rec.topic!r}")
    if event.kind == "completion":
        problem = _completion_bounds(event, max_latency_ms, min_logprob)
        if problem:
            return dead_letter(rec, *problem)
    now = time.time() * 1000 if now_ms is None else now_ms
    return _with_time_checks(rec, event, max_future_skew_s, max_age_s, now)


def _classify_bad(
    rec: KafkaRecord, value: bytes, max_latency_ms: float, min_logprob: float
) -> DeadLetter:
    """Find the most specific reason why ``value`` is not a valid event."""
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as e:
        return dead_letter(rec, "invalid_utf8", f"byte {e.start}: {e.reason}")
    try:
        d = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        return dead_letter(rec, "unparseable_json", str(e)[:200])
    if not isinstance(d, dict):
        return dead_letter(
            rec, "schema_violation", f"field <root>: not an object ({type(d).__name__})"
        )
    kind = d.get("kind")
    if not isinstance(kind, str):
        return dead_letter(
            rec, "schema_violation", f"field kind: missing or not a string ({kind!r})"
        )
    if kind not in KINDS:
        return dead_letter(rec, "unknown_kind", f"kind={kind[:80]!r}")
    if TOPICS[kind] != rec.topic:
        return dead_letter(rec, "wrong_topic", f"kind {kind!r} on topic {rec.topic!r}")
    bad_number = _non_finite(d)
    if bad_number:
        return dead_letter(rec, "non_finite", f"field {bad_number} is NaN or infinite")
    if kind == "completion":
        problem = _completion_checks(d, max_latency_ms, min_logprob)
        if problem:
            return dead_letter(rec, *problem)
    try:
        EVENT_ADAPTER.validate_python(d)
    except ValidationError as e:
        return dead_letter(rec, "schema_violation", _schema_detail(e))
    return dead_letter(rec, "unparseable_json", "rejected by the JSON parser, accepted as Python")


def _with_time_checks(
    rec: KafkaRecord, event: Any, max_future_skew_s: float, max_age_s: float, now_ms: float
) -> tuple[str, EventItem] | DeadLetter:
    t = event.event_time
    if t.tzinfo is None:  # naive event times are UTC
        t = t.replace(tzinfo=UTC)
    seconds = t.timestamp()
    t_us = int(round(seconds * 1e6))
    ahead_of_clock = seconds - now_ms / 1000.0
    if ahead_of_clock > max_future_skew_s:
        return dead_letter(
            rec,
            "future_timestamp",
            f"event_time {t.isoformat()} is {ahead_of_clock:.0f}s ahead of ingest's clock",
        )
    if rec.timestamp_ms is not None and rec.timestamp_ms >= 0:
        # a record stamped in the future by its producer must not make a valid event look stale
        reference_s = min(rec.timestamp_ms, now_ms) / 1000.0
        skew = seconds - reference_s
        if skew > max_future_skew_s:
            return dead_letter(
                rec, "future_timestamp", f"event_time {t.isoformat()} is {skew:.0f}s ahead"
            )
        if -skew > max_age_s:
            return dead_letter(
                rec, "stale_timestamp", f"event_time {t.isoformat()} is {-skew:.0f}s old"
            )
    window_s, signal = _signal_fields(event)
    item = EventItem(
        event.kind,
        event.event_id,
        t_us,
        rec.topic,
        rec.partition,
        rec.offset,
        bytes(rec.value),
        int(rec.timestamp_ms if rec.timestamp_ms is not None else -1),
        window_s,
        signal,
        event.conversation_id if event.kind == "completion" else "",
    )
    return event.response_id, item


def _signal_fields(event: Any) -> tuple[int, float]:
    if event.kind == "edit_persistence":
        return int(event.window_s), float(event.score)
    if event.kind == "followup":
        return 0, 1.0 if event.dissatisfied else 0.0
    if event.kind == "feedback":
        return 0, 1.0 if event.label == "accept" else 0.0
    return 0, 0.0
