"""Synthetic, schema-valid events for tests, benchmarks and replays.

``completion`` and the signal builders make one event each with sensible defaults;
``stream`` makes a deterministic traffic mix (every completion followed by its persistence
checkpoints, and with some probability a follow-up and explicit feedback).

Deliberately left out: anything realistic about the text (the serving fleet produces that), and
bad payloads (tests build those next to the check they exercise).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from ingest.schema import (
    EDIT_WINDOWS_S,
    Completion,
    EditPersistence,
    Feedback,
    Followup,
    SamplingParams,
    Usage,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def completion(
    response_id: str,
    t: datetime,
    *,
    n_tokens: int = 8,
    model_version: int = 1,
    latency_ms: float = 200.0,
    event_id: str | None = None,
    conversation_id: str | None = None,
    layers: int = 2,
    top_k: int = 2,
) -> Completion:
    """A valid completion with ``n_tokens`` tokens and routed experts for each."""
    return Completion(
        event_id=event_id or f"c-{response_id}",
        response_id=response_id,
        event_time=t,
        conversation_id=conversation_id or f"conv-{response_id}",
        user_hash="u-0001",
        model_name="ratchet-moe",
        model_version=model_version,
        task_kind="code_complete",
        prompt="def add(a, b):",
        response_text="    return a + b",
        response_token_ids=[(7 * i + 3) % 512 for i in range(n_tokens)],
        response_logprobs=[-0.1 * (1 + i % 5) for i in range(n_tokens)],
        sampling=SamplingParams(temperature=0.7, top_p=0.95, max_tokens=64, seed=None),
        routed_experts=[
            [[(i + layer) % 4, (i + layer + 1) % 4][:top_k] for layer in range(layers)]
            for i in range(n_tokens)
        ],
        time_to_first_token_ms=latency_ms / 4,
        latency_ms=latency_ms,
        finish_reason="stop",
        usage=Usage(input_tokens=5, output_tokens=n_tokens),
    )


def persistence(response_id: str, t0: datetime, window_s: int, score: float) -> EditPersistence:
    """The ``window_s`` checkpoint of the completion made at ``t0``."""
    return EditPersistence(
        event_id=f"ep{window_s}-{response_id}",
        response_id=response_id,
        event_time=t0 + timedelta(seconds=window_s),
        window_s=window_s,  # type: ignore[arg-type]
        score=score,
    )


def followup(response_id: str, t: datetime, dissatisfied: bool) -> Followup:
    return Followup(
        event_id=f"fu-{response_id}",
        response_id=response_id,
        event_time=t,
        text="that is wrong" if dissatisfied else "thanks, next:",
        dissatisfied=dissatisfied,
    )


def feedback(response_id: str, t: datetime, accept: bool) -> Feedback:
    return Feedback(
        event_id=f"fb-{response_id}",
        response_id=response_id,
        event_time=t,
        label="accept" if accept else "reject",
    )


def stream(
    n_completions: int,
    *,
    start: datetime = T0,
    spacing_s: float = 1.0,
    seed: int = 0,
    p_followup: float = 0.5,
    p_feedback: float = 0.5,
    n_tokens: int = 8,
    prefix: str = "r",
) -> Iterator[Completion | EditPersistence | Followup | Feedback]:
    """Completions every ``spacing_s`` seconds, each followed by all its signals (in that order)."""
    rng = random.Random(seed)
    for i in range(n_completions):
        rid = f"{prefix}{i:08d}"
        t = start + timedelta(seconds=i * spacing_s)
        yield completion(rid, t, n_tokens=n_tokens)
        score = rng.random()
        for w in EDIT_WINDOWS_S:
            yield persistence(rid, t, w, round(score, 3))
        if rng.random() < p_followup:
            yield followup(rid, t + timedelta(seconds=20), rng.random() < 0.3)
        if rng.random() < p_feedback:
            yield feedback(rid, t + timedelta(seconds=5), rng.random() < 0.7)


def append_records(path, events) -> None:
    """Append ``events`` to ``path`` as recorded Kafka records (ratchet/replay.py's JSONL format),
    each stamped with its event time."""
    import json

    from ingest.schema import TOPICS

    with open(path, "a") as f:
        for e in events:
            rec = {
                "topic": TOPICS[e.kind],
                "key": e.response_id,
                "value": e.to_json().decode(),
                "timestamp_ms": int(e.event_time.timestamp() * 1000),
            }
            f.write(json.dumps(rec) + "\n")
