"""How a simulated user reacts to one completion: a pure function from what they saw to signals.

``plan_signals(outcome, policy, rng)`` decides, from whether the answer passed the task's checker,
how slow and how long it was, the delayed signals the user will emit. The user judges the model,
not the machine: how long an answer kept them waiting is its completion tokens at a stated decode
speed (``perceived_latency_ms``), which the model controls by how much it writes; the wall clock a
client measures on a shared machine (queueing, load) is reported by the caller but never judged.

- edit persistence at 30/120/300/600 s: a correct answer mostly stays (high score, decaying
  slowly), a wrong, malformed or empty one is reverted (low score, falling fast);
- a follow-up message: a wrong answer often draws a dissatisfied one, a slow or long correct one
  sometimes does, otherwise sometimes a neutral one; its text is drawn from the paraphrase bank
  of simulation/followup_texts.py (many wordings per intent, including neutral "no"), and its
  ``dissatisfied`` flag is the intent's ground truth (ingest only compares it with its detector);
- sometimes explicit feedback (accept a correct answer, reject a wrong one, with a little noise);

each with a delay in event time. No I/O and no clock: the caller owns the random generator.

Deliberately left out: sending (simulation/simulator.py) and rewards (rewards/).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ingest.schema import EDIT_WINDOWS_S
from simulation import followup_texts

WRONG_INTENTS = ("wrong", "wrong", "wrong", "misread", "error")
"""Complaint intents after a wrong answer (weighted by repetition); a malformed one draws
``error``."""


class SignalPolicy(BaseModel):
    """Parameters of the simulated user; probabilities per completion."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    persist_correct_low: float = Field(
        default=0.85, ge=0.0, le=1.0, description="Lowest 30 s persistence of a correct answer."
    )
    persist_correct_decay: float = Field(
        default=0.97,
        gt=0.0,
        le=1.0,
        description="Smallest per-window factor a correct answer's persistence keeps.",
    )
    persist_wrong_high: float = Field(
        default=0.3, ge=0.0, le=1.0, description="Highest 30 s persistence of a wrong answer."
    )
    persist_wrong_decay: float = Field(
        default=0.4, gt=0.0, le=1.0, description="Largest per-window factor of a wrong answer."
    )
    p_dissatisfied_wrong: float = Field(
        default=0.7, ge=0.0, le=1.0, description="P(dissatisfied follow-up | wrong answer)."
    )
    slow_latency_ms: float = Field(
        default=2000.0, gt=0.0,
        description="An answer whose perceived latency (``perceived_latency_ms``: its tokens at "
        "``decode_tokens_per_s``) exceeds this may annoy the user.",
    )
    decode_tokens_per_s: float = Field(
        default=20.0, gt=0.0,
        description="The decode speed the user's wait is judged at (tokens per second): an "
        "answer of n completion tokens kept them n / this seconds. A stated speed of a served "
        "code model, not a measurement of the machine the simulation runs on (a shared CPU "
        "decoding 16 requests at once takes 30 s or more for 64 tokens, whatever the model "
        "writes). At 20 tokens/s the default 2 s threshold is 40 tokens.",
    )
    p_annoyed_slow: float = Field(
        default=0.3, ge=0.0, le=1.0, description="P(dissatisfied | correct but slow)."
    )
    long_tokens: int = Field(
        default=24, ge=1, description="An answer with more tokens than this may annoy the user."
    )
    p_annoyed_long: float = Field(
        default=0.3, ge=0.0, le=1.0, description="P(dissatisfied | correct but long)."
    )
    p_neutral_followup: float = Field(
        default=0.3, ge=0.0, le=1.0, description="P(neutral follow-up | no complaint)."
    )
    p_feedback: float = Field(
        default=0.2, ge=0.0, le=1.0, description="P(explicit accept/reject feedback)."
    )
    p_feedback_noise: float = Field(
        default=0.05, ge=0.0, le=0.5, description="P(feedback label is flipped)."
    )
    followup_delay_s: tuple[float, float] = Field(
        default=(5.0, 90.0), description="Uniform range of the follow-up delay (event seconds)."
    )
    feedback_delay_s: tuple[float, float] = Field(
        default=(1.0, 30.0), description="Uniform range of the feedback delay (event seconds)."
    )


@dataclass(frozen=True)
class Outcome:
    """What the user saw: the checker's verdict, latency and length of the answer."""

    passed: bool
    malformed: bool
    no_edit: bool
    latency_ms: float
    """The client's wall clock, queueing included: reported, never judged (it measures the
    machine's load, not the model; see ``perceived_latency_ms``)."""
    completion_tokens: int
    """Tokens of the reply as the user saw it (the served reply, without a final EOS)."""


def perceived_latency_ms(outcome: Outcome, policy: SignalPolicy) -> float:
    """How long the answer kept the user waiting, as judged: its completion tokens at
    ``policy.decode_tokens_per_s``."""
    return 1000.0 * outcome.completion_tokens / policy.decode_tokens_per_s


@dataclass(frozen=True)
class PlannedSignal:
    """One signal to emit ``delay_s`` event-seconds after the completion."""

    kind: Literal["edit_persistence", "followup", "feedback"]
    delay_s: float
    window_s: int | None = None
    score: float | None = None
    text: str | None = None
    dissatisfied: bool | None = None
    label: Literal["accept", "reject"] | None = None


def edit_persistence_scores(
    passed: bool, policy: SignalPolicy, rng: random.Random
) -> dict[int, float]:
    """Score per window, non-increasing in time: high and slow for correct, low and fast else."""
    if passed:
        score = rng.uniform(policy.persist_correct_low, 1.0)
        factors = [rng.uniform(policy.persist_correct_decay, 1.0) for _ in EDIT_WINDOWS_S[1:]]
    else:
        score = rng.uniform(0.0, policy.persist_wrong_high)
        factors = [rng.uniform(0.0, policy.persist_wrong_decay) for _ in EDIT_WINDOWS_S[1:]]
    scores = {EDIT_WINDOWS_S[0]: score}
    for window, factor in zip(EDIT_WINDOWS_S[1:], factors):
        score *= factor
        scores[window] = score
    return scores


def followup_intent(outcome: Outcome, policy: SignalPolicy, rng: random.Random) -> str | None:
    """Intent of the user's next message (simulation/followup_texts.py), or None if they say
    nothing."""
    if not outcome.passed:
        if rng.random() < policy.p_dissatisfied_wrong:
            return "error" if outcome.malformed else rng.choice(WRONG_INTENTS)
    else:
        slow = perceived_latency_ms(outcome, policy) > policy.slow_latency_ms
        if slow and rng.random() < policy.p_annoyed_slow:
            return "slow"
        if outcome.completion_tokens > policy.long_tokens and rng.random() < policy.p_annoyed_long:
            return "long"
    if rng.random() < policy.p_neutral_followup:
        return rng.choice(followup_texts.NEUTRAL)
    return None


def followup(outcome: Outcome, policy: SignalPolicy, rng: random.Random) -> tuple[str, bool] | None:
    """(text, dissatisfied) of the user's next message, or None if they say nothing: the text is
    drawn from the paraphrase bank, ``dissatisfied`` is the intent's ground truth."""
    intent = followup_intent(outcome, policy, rng)
    if intent is None:
        return None
    return followup_texts.draw(intent, rng), followup_texts.dissatisfied(intent)


def feedback(outcome: Outcome, policy: SignalPolicy, rng: random.Random) -> str | None:
    """'accept' / 'reject' (matching correctness, flipped with small noise), or None."""
    if rng.random() >= policy.p_feedback:
        return None
    accept = outcome.passed != (rng.random() < policy.p_feedback_noise)
    return "accept" if accept else "reject"


def plan_signals(outcome: Outcome, policy: SignalPolicy, rng: random.Random) -> list[PlannedSignal]:
    """Every signal the user will emit for one completion, ordered by delay."""
    plan = [
        PlannedSignal("edit_persistence", float(window), window_s=window, score=score)
        for window, score in edit_persistence_scores(outcome.passed, policy, rng).items()
    ]
    reply = followup(outcome, policy, rng)
    if reply is not None:
        plan.append(
            PlannedSignal(
                "followup",
                rng.uniform(*policy.followup_delay_s),
                text=reply[0],
                dissatisfied=reply[1],
            )
        )
    label = feedback(outcome, policy, rng)
    if label is not None:
        plan.append(PlannedSignal("feedback", rng.uniform(*policy.feedback_delay_s), label=label))
    return sorted(plan, key=lambda s: s.delay_s)
