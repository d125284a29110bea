"""Reward components and their weighted sum, against hand-computed values."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from rewards.config import RewardConfig
from rewards.signals import (
    RowSignals,
    compute_reward,
    edit_persistence_reward,
    feedback_reward,
    followup_reward,
    latency_reward,
    length_penalty,
)

W = {30: 0.1, 120: 0.2, 300: 0.3, 600: 0.4}


def test_edit_persistence_is_a_weighted_mean_mapped_to_minus_one_one():
    # (0.1*1 + 0.4*0.5) / 0.5 = 0.6 -> 2*0.6 - 1 = 0.2
    assert edit_persistence_reward({30: 1.0, 600: 0.5}, W) == pytest.approx(0.2)
    assert edit_persistence_reward({30: 1.0, 120: 1.0, 300: 1.0, 600: 1.0}, W) == pytest.approx(1.0)
    assert edit_persistence_reward({600: 0.0}, W) == pytest.approx(-1.0)


def test_edit_persistence_missing_is_none_not_zero():
    assert edit_persistence_reward({}, W) is None
    assert edit_persistence_reward({45: 1.0}, W) is None  # no weight for that checkpoint


def test_followup_and_feedback():
    assert followup_reward(True) == -1.0
    assert followup_reward(False) == 0.0
    assert feedback_reward("accept") == 1.0
    assert feedback_reward("reject") == -1.0
    with pytest.raises(ValueError, match="maybe"):
        feedback_reward("maybe")  # type: ignore[arg-type]


def test_latency_reward_is_one_then_linear_to_zero():
    assert latency_reward(100, 500, 5000) == 1.0
    assert latency_reward(500, 500, 5000) == 1.0
    assert latency_reward(2750, 500, 5000) == pytest.approx(0.5)
    assert latency_reward(9000, 500, 5000) == 0.0


def test_length_penalty_free_budget_then_quadratic_then_capped():
    assert length_penalty(100, 256, 256, 1.0) == 0.0
    assert length_penalty(256, 256, 256, 1.0) == 0.0
    assert length_penalty(384, 256, 256, 1.0) == pytest.approx(0.25)  # (128/256)^2
    assert length_penalty(5000, 256, 256, 0.8) == pytest.approx(0.8)


def test_compute_reward_with_every_signal():
    cfg = RewardConfig()
    row = RowSignals(
        latency_ms=2750,  # latency 0.5
        completion_tokens=384,  # penalty 0.25
        edit_persistence={30: 1.0, 600: 0.5},  # 0.2
        followup_dissatisfied=True,  # -1
        feedback_label="accept",  # +1
    )
    reward, comps, defaulted = compute_reward(row, cfg)
    # 1.0*0.2 + 0.5*(-1) + 1.0*1 + 0.1*0.5 + 0.5*(-0.25) = 0.625
    assert reward == pytest.approx(0.625)
    assert comps == pytest.approx(
        {
            "edit_persistence": 0.2,
            "followup": -1.0,
            "feedback": 1.0,
            "latency": 0.5,
            "length": -0.25,
        }
    )
    assert defaulted == []


def test_missing_signals_take_their_configured_default_and_are_listed():
    cfg = RewardConfig.model_validate(
        {"defaults": {"edit_persistence": 0.1, "followup": 0.2, "feedback": -0.3}}
    )
    reward, comps, defaulted = compute_reward(RowSignals(latency_ms=0, completion_tokens=0), cfg)
    assert defaulted == ["edit_persistence", "followup", "feedback"]
    assert comps["edit_persistence"] == 0.1 and comps["followup"] == 0.2
    # 1.0*0.1 + 0.5*0.2 + 1.0*(-0.3) + 0.1*1.0 + 0 = 0.0
    assert reward == pytest.approx(0.0)


def test_config_rejects_inverted_latency_bounds_naming_the_fields():
    with pytest.raises(ValidationError, match="latency_max_ms"):
        RewardConfig(latency_target_ms=1000, latency_max_ms=900)
    with pytest.raises(ValidationError, match="length_free_tokens"):
        RewardConfig(length_free_tokens=-1)


@given(
    latency=st.floats(0, 1e6),
    tokens=st.integers(0, 10_000),
    scores=st.dictionaries(st.sampled_from([30, 120, 300, 600]), st.floats(0, 1)),
    dissatisfied=st.none() | st.booleans(),
    label=st.none() | st.sampled_from(["accept", "reject"]),
)
def test_reward_is_finite_and_within_the_config_bounds(
    latency, tokens, scores, dissatisfied, label
):
    cfg = RewardConfig()
    reward, _, _ = compute_reward(RowSignals(latency, tokens, scores, dissatisfied, label), cfg)
    lo, hi = cfg.bounds()
    assert math.isfinite(reward)
    assert lo - 1e-9 <= reward <= hi + 1e-9
