"""The reward: one pure function per signal, and their weighted sum.

Every component lies in [-1, 1]; ``compute_reward`` returns ``sum_k w_k * c_k`` with the
components and the names of the signals that were missing (and took their configured default).
Three rules keep not trying from beating trying and failing:

- an empty or refused answer (``RowSignals.answered`` false, rewards/answers.py) scores the
  floor: every component at its worst, whatever signals came, so it never scores above an
  answer that tried (``RewardConfig.bounds()[0]``);
- a completion with no persistence checkpoint and no feedback is a rejection for a client that
  declared it reports persistence for every insertion, and otherwise unknown: ``is_trainable``
  is false and the trainer leaves the row out (never the old "half kept" 0 for free);
- length costs from the first token, in proportion (``length_shape`` linear by default): a
  per-token cost is what the policy controls. Latency is not in the reward: it measures the
  server's load as much as the policy, and stays a serving metric judged on the canary
  (deploy/fleet/judge.py).

Deliberately left out: any I/O, joining signals to completions (ingest/join.py), and monitoring
a batch of rewards (rewards/monitors.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from rewards.config import RewardConfig

SIGNALS = ("edit_persistence", "followup", "feedback")
"""Signals that may be missing; latency and length come with the completion itself."""


@dataclass(frozen=True)
class RowSignals:
    """What one finalised completion carries into the reward (``None``: never arrived)."""

    completion_tokens: int
    edit_persistence: Mapping[int, float] = field(default_factory=dict)
    followup_dissatisfied: bool | None = None
    feedback_label: Literal["accept", "reject"] | None = None
    reports_persistence_for_inserted: bool = False
    """The client declared it reports persistence for every inserted suggestion
    (``ClientSignals``): no checkpoint and no feedback then means "not inserted"."""
    persistence_window_open: bool = False
    """The row was finalised before its persistence window closed (a drain that the operator
    asked to finalise, or expected signals that leave persistence out): a missing checkpoint
    then means nothing, whatever the client declared."""
    answered: bool = True
    """False for an empty or refused answer (``rewards.answers.answer_kind``)."""


def edit_persistence_reward(
    scores_by_window: Mapping[int, float], window_weights: Mapping[int, float]
) -> float | None:
    """Weighted mean of the persistence scores present, mapped from [0, 1] to [-1, 1].

    ``None`` when no checkpoint arrived. Checkpoints without a weight are ignored.
    """
    present = {w: s for w, s in scores_by_window.items() if w in window_weights}
    total = sum(window_weights[w] for w in present)
    if not present or total <= 0.0:
        return None
    mean = sum(window_weights[w] * s for w, s in present.items()) / total
    return 2.0 * mean - 1.0


def followup_reward(dissatisfied: bool) -> float:
    """-1 for a dissatisfied follow-up, 0 for a neutral one."""
    return -1.0 if dissatisfied else 0.0


def feedback_reward(label: Literal["accept", "reject"]) -> float:
    """+1 for an accept, -1 for a reject."""
    if label == "accept":
        return 1.0
    if label == "reject":
        return -1.0
    raise ValueError(f"feedback label must be 'accept' or 'reject', got {label!r}")


def concave_length_cost(x: float, k: float, q: float) -> float:
    """C(x) = ((1 + k x)^(1 - q) - 1) / (k (1 - q)) (Composer 2), x >= 0; at q = 1 its limit
    log(1 + k x) / k (used within 1e-6 of q = 1, where the power form loses precision).
    C(0) = 0, C'(0) = 1, increasing and concave for q > 0; linear (C = x) at q = 0."""
    if x < 0 or k <= 0:
        raise ValueError(f"need x >= 0 and k > 0, got x={x}, k={k}")
    if abs(1.0 - q) < 1e-6:
        return math.log1p(k * x) / k
    return math.expm1((1.0 - q) * math.log1p(k * x)) / (k * (1.0 - q))


def length_penalty(
    completion_tokens: int, free_tokens: int, scale_tokens: int, max_penalty: float,
    shape: Literal["linear", "concave", "quadratic"] = "concave", k: float = 1.0 / 64,
    q: float = 1.0,
) -> float:
    """0 up to ``free_tokens``; then for x = n - free: ``x / scale`` (linear), ``C(x) /
    C(scale)`` (concave) or ``(x / scale)^2`` (quadratic); capped at ``max_penalty``."""
    over = max(0, completion_tokens - free_tokens)
    if shape == "linear":
        return min(max_penalty, over / scale_tokens)
    if shape == "quadratic":
        return min(max_penalty, (over / scale_tokens) ** 2)
    cost = concave_length_cost(over, k, q) / concave_length_cost(scale_tokens, k, q)
    return min(max_penalty, cost)


def is_trainable(row: RowSignals, config: RewardConfig) -> bool:
    """False when nothing is known of the row's persistence: no weighted checkpoint, no
    feedback, and either its window was still open or its client declared nothing (a declaring
    client's silence is a rejection). The trainer leaves such a row out instead of scoring a
    guess. An empty or refused answer is always trained on (at the floor)."""
    if not row.answered:
        return True
    if edit_persistence_reward(row.edit_persistence, config.persistence_window_weights) is not None:
        return True
    if row.feedback_label is not None:
        return True
    return row.reports_persistence_for_inserted and not row.persistence_window_open


def _missing_persistence(label: str | None, config: RewardConfig) -> float:
    """No checkpoint arrived: a rejected suggestion was never inserted (nothing kept), an
    accepted one lost its telemetry, and without feedback nothing is known (the row is left out
    of training; the value is only recorded)."""
    d = config.defaults
    if label == "reject":
        return d.edit_persistence_rejected
    if label == "accept":
        return d.edit_persistence_accepted
    return d.edit_persistence


def _floor(row: RowSignals, config: RewardConfig) -> tuple[float, dict[str, float], list[str]]:
    """An empty or refused answer: every component at its worst (nothing to keep, nothing to
    accept, a request left unanswered, the whole length budget spent on nothing)."""
    components = {"edit_persistence": -1.0, "followup": -1.0, "feedback": -1.0,
                  "length": -config.length_max_penalty}
    defaulted = [name for name, missing in (
        ("edit_persistence", not row.edit_persistence),
        ("followup", row.followup_dissatisfied is None),
        ("feedback", row.feedback_label is None)) if missing]
    weights = config.weights.model_dump()
    return sum(weights[k] * v for k, v in components.items()), components, defaulted


def compute_reward(
    row_signals: RowSignals, config: RewardConfig
) -> tuple[float, dict[str, float], list[str]]:
    """``(reward, components, defaulted)``: the weighted sum, each component, missing signals.

    ``components`` holds the unweighted component values (``length`` is the negated penalty),
    so ``reward == sum(weights[k] * components[k])``. An unanswered row scores the floor
    (``RewardConfig.bounds()[0]``); whether a row is trained on at all is ``is_trainable``.
    """
    if not row_signals.answered:
        return _floor(row_signals, config)
    defaulted: list[str] = []
    label = row_signals.feedback_label
    if (label is None and not row_signals.edit_persistence
            and row_signals.reports_persistence_for_inserted
            and not row_signals.persistence_window_open):
        label = "reject"  # never inserted: what a rejection means, scored as one
    persistence = edit_persistence_reward(
        row_signals.edit_persistence, config.persistence_window_weights
    )
    if persistence is None:
        persistence = _missing_persistence(label, config)
        defaulted.append("edit_persistence")
    if row_signals.followup_dissatisfied is None:
        followup = config.defaults.followup
        defaulted.append("followup")
    else:
        followup = followup_reward(row_signals.followup_dissatisfied)
    if row_signals.feedback_label is None:
        feedback = config.defaults.feedback if label is None else feedback_reward(label)
        defaulted.append("feedback")
    else:
        feedback = feedback_reward(row_signals.feedback_label)
    components = {
        "edit_persistence": persistence,
        "followup": followup,
        "feedback": feedback,
        "length": -length_penalty(
            row_signals.completion_tokens,
            config.length_free_tokens,
            config.length_scale_tokens,
            config.length_max_penalty,
            config.length_shape,
            config.length_k,
            config.length_q,
        ),
    }
    weights = config.weights.model_dump()
    reward = sum(weights[k] * v for k, v in components.items())
    return reward, components, defaulted
