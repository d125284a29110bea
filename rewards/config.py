"""Typed configuration of the reward: component weights, defaults for missing signals, shapes.

Importing this module imports only pydantic. Deliberately left out: the reward functions
themselves (rewards/signals.py) and the monitors (rewards/monitors.py).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class RewardWeights(BaseModel):
    """Weight of each component in the weighted sum ``reward = sum_k w_k * c_k``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    edit_persistence: float = Field(1.0, ge=0.0, le=10.0, description="Weight of persistence.")
    followup: float = Field(0.5, ge=0.0, le=10.0, description="Weight of the follow-up signal.")
    feedback: float = Field(1.0, ge=0.0, le=10.0, description="Weight of explicit feedback.")
    latency: float = Field(0.1, ge=0.0, le=10.0, description="Weight of the latency reward.")
    length: float = Field(0.5, ge=0.0, le=10.0, description="Weight of the length penalty.")


class SignalDefaults(BaseModel):
    """Component value used when a signal never arrived (missing is not zero, but needs a value)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    edit_persistence: float = Field(
        0.0, ge=-1.0, le=1.0, description="Persistence component when no checkpoint arrived."
    )
    followup: float = Field(
        0.0, ge=-1.0, le=1.0, description="Follow-up component when the user wrote no follow-up."
    )
    feedback: float = Field(
        0.0, ge=-1.0, le=1.0, description="Feedback component when no accept/reject arrived."
    )


class RewardConfig(BaseModel):
    """Everything ``compute_reward`` needs; every component lies in [-1, 1]."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weights: RewardWeights = Field(default_factory=RewardWeights, description="Component weights.")
    defaults: SignalDefaults = Field(
        default_factory=SignalDefaults, description="Component values for missing signals."
    )
    persistence_window_weights: dict[int, float] = Field(
        default_factory=lambda: {30: 0.1, 120: 0.2, 300: 0.3, 600: 0.4},
        description="Weight of each edit-persistence checkpoint (seconds) in its weighted mean.",
    )
    latency_target_ms: float = Field(
        500.0, gt=0.0, description="Latency at or below which the latency component is 1."
    )
    latency_max_ms: float = Field(
        5000.0, gt=0.0, description="Latency at or above which the latency component is 0."
    )
    length_free_tokens: int = Field(
        256, ge=0, le=100_000, description="Completion tokens that cost nothing."
    )
    length_scale_tokens: int = Field(
        256, ge=1, le=100_000, description="Tokens over budget at which the penalty reaches 1."
    )
    length_max_penalty: float = Field(
        1.0, gt=0.0, le=1.0, description="Upper bound of the (quadratic) length penalty."
    )

    @model_validator(mode="after")
    def _check(self) -> RewardConfig:
        if self.latency_max_ms <= self.latency_target_ms:
            raise ValueError(
                f"latency_max_ms ({self.latency_max_ms}) must exceed "
                f"latency_target_ms ({self.latency_target_ms})"
            )
        bad = {w: v for w, v in self.persistence_window_weights.items() if v < 0}
        if bad or not self.persistence_window_weights:
            raise ValueError(f"persistence_window_weights must be non-empty and >= 0, got {bad}")
        return self

    def bounds(self) -> tuple[float, float]:
        """The smallest and largest reward this config can produce."""
        w = self.weights
        lo = -(w.edit_persistence + w.followup + w.feedback + w.length * self.length_max_penalty)
        hi = w.edit_persistence + w.followup + w.feedback + w.latency
        return lo, hi
