"""Typed configuration of the reward: component weights, defaults for missing signals, shapes.

Importing this module imports only pydantic. Deliberately left out: the reward functions
themselves (rewards/signals.py) and the monitors (rewards/monitors.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class RewardWeights(BaseModel):
    """Weight of each component in the weighted sum ``reward = sum_k w_k * c_k``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    edit_persistence: float = Field(1.0, ge=0.0, le=10.0, description="Weight of persistence.")
    followup: float = Field(0.5, ge=0.0, le=10.0, description="Weight of the follow-up signal.")
    feedback: float = Field(1.0, ge=0.0, le=10.0, description="Weight of explicit feedback.")
    length: float = Field(
        0.5, ge=0.0, le=10.0, description="Weight of the length penalty (the gate's "
        "``token_penalty`` is 0.5 too: a passed task scores 1 - 0.5 * tokens / max_new_tokens)."
    )


class SignalDefaults(BaseModel):
    """Component value used when a signal never arrived, per signal and per what its absence
    means (missing is not zero, but needs a value). Persistence is on [-1, 1] = 2 * kept - 1:
    0 means "half of it kept", -1 "nothing of it kept"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    edit_persistence: float = Field(
        0.0, ge=-1.0, le=1.0, description="Persistence component recorded on a row left out of "
        "training (no checkpoint and no feedback from a client that declares nothing, or a "
        "persistence window still open): it is never trained on, so this value only shows in "
        "the row's components and reward."
    )
    edit_persistence_rejected: float = Field(
        -1.0, ge=-1.0, le=1.0, description="Persistence component when no checkpoint arrived "
        "and the suggestion was rejected: it was never inserted, so nothing of it persisted "
        "(-1: 0% kept). Ranks a rejected suggestion below one inserted and then rewritten."
    )
    edit_persistence_accepted: float = Field(
        0.0, ge=-1.0, le=1.0, description="Persistence component when the suggestion was "
        "accepted (inserted) but no checkpoint arrived (its telemetry was lost)."
    )
    followup: float = Field(
        0.0, ge=-1.0, le=1.0, description="Follow-up component when the user wrote no follow-up "
        "(silence is neutral: the same value as a neutral follow-up)."
    )
    feedback: float = Field(
        0.0, ge=-1.0, le=1.0, description="Feedback component when no accept/reject arrived "
        "(between reject, -1, and accept, +1)."
    )


class ClientSignals(BaseModel):
    """What one client declares it reports, which decides what a *missing* signal means for its
    completions. For a client that declares nothing, a completion with no checkpoint and no
    feedback is left out of training (nothing is known about it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reports_persistence_for_inserted: bool = Field(
        False, description="The client sends edit-persistence checkpoints for every suggestion "
        "the user inserted (as Copilot-style telemetry does, with or without accept/reject "
        "events). Then a completion with no checkpoint and no feedback once the windows closed "
        "was never inserted: it is scored as a rejection (persistence "
        "``defaults.edit_persistence_rejected`` and feedback -1). False: such a completion is "
        "left out of training (its row is written with ``trainable`` false)."
    )


class RewardConfig(BaseModel):
    """Everything ``compute_reward`` needs; every component lies in [-1, 1]."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weights: RewardWeights = Field(default_factory=RewardWeights, description="Component weights.")
    defaults: SignalDefaults = Field(
        default_factory=SignalDefaults, description="Component values for missing signals."
    )
    clients: dict[str, ClientSignals] = Field(
        default_factory=dict,
        description="Per-client declarations, keyed by the ``client_id`` a completion event "
        "carries (for clients of the signals API: their API key id, deploy/replica/api_keys.py). A "
        "client id missing here (or a completion without one) declares nothing.",
    )
    persistence_window_weights: dict[int, float] = Field(
        default_factory=lambda: {30: 0.1, 120: 0.2, 300: 0.3, 600: 0.4},
        description="Weight of each edit-persistence checkpoint (seconds) in its weighted mean.",
    )
    length_free_tokens: int = Field(
        0, ge=0, le=100_000, description="Completion tokens that cost nothing (0: every token "
        "costs, from the first, as in the gate's length-aware score)."
    )
    length_scale_tokens: int = Field(
        32, ge=1, le=100_000, description="Tokens over budget at which the penalty reaches 1: "
        "set it to the gate suite's ``max_new_tokens`` (and the traffic's ``max_tokens``) so the "
        "reward charges length in the gate's proportion (a shipped-config test checks it)."
    )
    length_max_penalty: float = Field(
        1.0, gt=0.0, le=1.0, description="Upper bound of the length penalty."
    )
    length_shape: Literal["linear", "concave", "quadratic"] = Field(
        "linear", description="linear: x / scale, a per-token cost (what the policy controls; "
        "it stands in for latency, which the policy's reward leaves to the canary). concave "
        "(Composer 2): C(x) / C(scale) with C(x) = ((1 + k x)^(1-q) - 1) / (k (1-q)), x = "
        "tokens over the free budget — each extra token costs less than the one before, so "
        "easy tasks stay short without starving hard ones. quadratic: "
        "(x / scale)^2. All are 0 at x = 0 and 1 at x = length_scale_tokens."
    )
    length_k: float = Field(
        1.0 / 64, gt=0.0, le=10.0, description="k of the concave penalty (per token): where it "
        "bends; for x << 1/k it is about linear."
    )
    length_q: float = Field(
        1.0, ge=0.0, le=10.0, description="q of the concave penalty: 0 linear, 1 logarithmic "
        "(the q -> 1 limit log(1 + k x) / k), > 1 bounded by 1 / (k (q - 1))."
    )

    @model_validator(mode="after")
    def _check(self) -> RewardConfig:
        bad = {w: v for w, v in self.persistence_window_weights.items() if v < 0}
        if bad or not self.persistence_window_weights:
            raise ValueError(f"persistence_window_weights must be non-empty and >= 0, got {bad}")
        return self

    def client(self, client_id: str | None) -> ClientSignals:
        """The declaration of ``client_id`` (the empty declaration when unknown or None)."""
        return self.clients.get(client_id or "", _NO_DECLARATION)

    def bounds(self) -> tuple[float, float]:
        """The smallest and largest reward this config can produce (the smallest is what an
        empty or refused answer scores)."""
        w = self.weights
        lo = -(w.edit_persistence + w.followup + w.feedback + w.length * self.length_max_penalty)
        hi = w.edit_persistence + w.followup + w.feedback
        return lo, hi


_NO_DECLARATION = ClientSignals()
