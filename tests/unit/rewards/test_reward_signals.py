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
    concave_length_cost,
    edit_persistence_reward,
    feedback_reward,
    followup_reward,
    is_trainable,
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


def test_length_penalty_free_budget_then_quadratic_then_capped():
    q = dict(shape="quadratic")
    assert length_penalty(100, 256, 256, 1.0, **q) == 0.0
    assert length_penalty(256, 256, 256, 1.0, **q) == 0.0
    assert length_penalty(384, 256, 256, 1.0, **q) == pytest.approx(0.25)  # (128/256)^2
    assert length_penalty(5000, 256, 256, 0.8, **q) == pytest.approx(0.8)


def test_concave_cost_hand_values_and_limits():
    # q = 0.5, k = 0.5, x = 6: ((1 + 3)^0.5 - 1) / (0.5 * 0.5) = (2 - 1) / 0.25 = 4
    assert concave_length_cost(6, 0.5, 0.5) == pytest.approx(4.0)
    # q = 2, k = 1, x = 1: ((2)^-1 - 1) / (1 * -1) = 0.5; bounded by 1 / (k (q - 1)) = 1
    assert concave_length_cost(1, 1.0, 2.0) == pytest.approx(0.5)
    assert concave_length_cost(1e9, 1.0, 2.0) == pytest.approx(1.0, abs=1e-6)
    # q = 0: linear, C(x) = x
    assert concave_length_cost(37, 0.1, 0.0) == pytest.approx(37.0)
    # q = 1: log(1 + k x) / k = log(3) / 0.5; and q -> 1 from both sides converges to it
    log_limit = math.log(3.0) / 0.5
    assert concave_length_cost(4, 0.5, 1.0) == pytest.approx(log_limit)
    for q in (1 - 1e-4, 1 + 1e-4, 1 - 1e-7, 1 + 1e-7):
        assert concave_length_cost(4, 0.5, q) == pytest.approx(log_limit, rel=1e-3)
    assert concave_length_cost(0, 0.5, 0.7) == 0.0
    with pytest.raises(ValueError, match="x >= 0"):
        concave_length_cost(-1, 0.5, 1.0)


@pytest.mark.parametrize("q", [0.3, 1.0, 1.5])
def test_concave_cost_is_increasing_and_concave(q):
    xs = list(range(0, 400, 7))
    c = [concave_length_cost(x, 1 / 64, q) for x in xs]
    steps = [b - a for a, b in zip(c, c[1:])]
    assert all(d > 0 for d in steps)  # monotone
    assert all(b < a for a, b in zip(steps, steps[1:]))  # each step costs less: concave
    # the default concave penalty: 0 at the free budget, 1 at free + scale, capped beyond
    pen = [length_penalty(256 + x, 256, 256, 1.0, k=1 / 64, q=q) for x in (0, 64, 128, 256, 999)]
    assert pen[0] == 0.0 and pen[3] == pytest.approx(1.0) and pen[4] == 1.0
    assert pen[1] > 64 / 256 and pen[2] > 128 / 256  # above the chord: concave


CONCAVE = {"length_free_tokens": 256, "length_scale_tokens": 256, "length_shape": "concave"}


def test_concave_penalty_when_configured():
    # 384 tokens, free 256: x = 128, k = 1/64, q = 1 -> log(1 + 2) / log(1 + 4) = 0.6826
    cfg = RewardConfig.model_validate(CONCAVE)
    _, comps, _ = compute_reward(RowSignals(completion_tokens=384, feedback_label="accept"), cfg)
    assert comps["length"] == pytest.approx(-math.log(3) / math.log(5))


def test_length_costs_from_the_first_token_in_proportion_by_default():
    # linear, no free budget, scale 32 (the toy gate's max_new_tokens): n / 32, capped at 1
    cfg = RewardConfig()
    pen = [-compute_reward(RowSignals(n, feedback_label="accept"), cfg)[1]["length"]
           for n in (0, 1, 8, 16, 32, 500)]
    assert pen == pytest.approx([0.0, 1 / 32, 0.25, 0.5, 1.0, 1.0])
    assert length_penalty(48, 0, 64, 1.0, "linear") == pytest.approx(0.75)


def test_latency_is_not_in_the_reward():
    assert "latency" not in RewardConfig().weights.model_dump()
    _, comps, _ = compute_reward(RowSignals(8, {600: 1.0}), RewardConfig())
    assert set(comps) == {"edit_persistence", "followup", "feedback", "length"}
    with pytest.raises(ValidationError, match="latency"):
        RewardConfig.model_validate({"weights": {"latency": 0.1}})


def test_compute_reward_with_every_signal():
    cfg = RewardConfig()
    row = RowSignals(
        completion_tokens=8,  # penalty 8 / 32 = 0.25
        edit_persistence={30: 1.0, 600: 0.5},  # 0.2
        followup_dissatisfied=True,  # -1
        feedback_label="accept",  # +1
    )
    reward, comps, defaulted = compute_reward(row, cfg)
    # 1.0*0.2 + 0.5*(-1) + 1.0*1 + 0.5*(-0.25) = 0.575
    assert reward == pytest.approx(0.575)
    assert comps == pytest.approx(
        {"edit_persistence": 0.2, "followup": -1.0, "feedback": 1.0, "length": -0.25}
    )
    assert defaulted == []
    assert is_trainable(row, cfg)


def test_missing_signals_take_their_configured_default_and_are_listed():
    cfg = RewardConfig.model_validate(
        {"defaults": {"edit_persistence": 0.1, "followup": 0.2, "feedback": -0.3}}
    )
    row = RowSignals(completion_tokens=0)
    reward, comps, defaulted = compute_reward(row, cfg)
    assert defaulted == ["edit_persistence", "followup", "feedback"]
    assert comps["edit_persistence"] == 0.1 and comps["followup"] == 0.2
    # 1.0*0.1 + 0.5*0.2 + 1.0*(-0.3) + 0 = -0.1
    assert reward == pytest.approx(-0.1)
    assert not is_trainable(row, cfg)  # nothing known of its persistence: left out


def test_rejected_ranks_below_accepted_then_rewritten_without_feedback_weight():
    # feedback weight 0: only persistence tells them apart (same latency, length, no follow-up)
    cfg = RewardConfig.model_validate({"weights": {"feedback": 0.0}})
    kept = RowSignals(20, {30: 1.0, 120: 1.0, 300: 1.0, 600: 1.0}, None, "accept")
    # rewritten: (0.1*0.6 + 0.2*0.3 + 0.3*0.2 + 0.4*0.1) = 0.22 kept -> 2*0.22 - 1 = -0.56
    rewritten = RowSignals(20, {30: 0.6, 120: 0.3, 300: 0.2, 600: 0.1}, None, "accept")
    # rejected: never inserted, no checkpoint -> edit_persistence_rejected = -1 (0% kept),
    # where the old single default 0 ("half kept") put it above the rewritten one
    rejected = RowSignals(20, {}, None, "reject")
    r_kept, c_kept, _ = compute_reward(kept, cfg)
    r_rewritten, c_rewritten, _ = compute_reward(rewritten, cfg)
    r_rejected, c_rejected, defaulted = compute_reward(rejected, cfg)
    assert (c_kept["edit_persistence"], c_rewritten["edit_persistence"],
            c_rejected["edit_persistence"]) == pytest.approx((1.0, -0.56, -1.0))
    assert r_kept > r_rewritten > r_rejected
    assert "edit_persistence" in defaulted


def test_missing_persistence_default_depends_on_what_is_known():
    cfg = RewardConfig.model_validate({"defaults": {"edit_persistence": 0.1,
                                                    "edit_persistence_accepted": 0.3,
                                                    "edit_persistence_rejected": -0.9}})
    comps = {label: compute_reward(RowSignals(0, {}, None, label), cfg)[1]["edit_persistence"]
             for label in (None, "accept", "reject")}
    assert comps == {None: 0.1, "accept": 0.3, "reject": -0.9}


def test_config_rejects_bad_values_naming_the_fields():
    with pytest.raises(ValidationError, match="length_free_tokens"):
        RewardConfig(length_free_tokens=-1)


@given(
    tokens=st.integers(0, 10_000),
    scores=st.dictionaries(st.sampled_from([30, 120, 300, 600]), st.floats(0, 1)),
    dissatisfied=st.none() | st.booleans(),
    label=st.none() | st.sampled_from(["accept", "reject"]),
)
def test_reward_is_finite_and_within_the_config_bounds(
    tokens, scores, dissatisfied, label
):
    cfg = RewardConfig()
    reward, _, _ = compute_reward(RowSignals(tokens, scores, dissatisfied, label), cfg)
    lo, hi = cfg.bounds()
    assert math.isfinite(reward)
    assert lo - 1e-9 <= reward <= hi + 1e-9
