"""bench/loop_real.py's statistics: pass rates grouped by prompt text, the paired final-minus-first
delta resampling prompts, and a summary carrying every key the issue asks for."""

import argparse
from pathlib import Path

import pytest

from bench.loop_real import by_prompt, paired_delta, summarise

KEYS = {"cycles", "pass_first", "pass_final", "ci_low", "ci_high", "placebo_delta",
        "humaneval_first", "humaneval_final", "promotions", "placebo_promotions", "per_cycle"}


def test_by_prompt_groups_repeated_prompts():
    assert by_prompt(["a", "a", "b", "c"], [True, False, False, True]) == {
        "a": 0.5, "b": 0.0, "c": 1.0}


def test_paired_delta_is_the_mean_over_prompts_with_a_bracketing_interval():
    first = {"a": 0.5, "b": 0.0, "c": 1.0}
    final = {"a": 1.0, "b": 1.0, "c": 1.0}
    delta, low, high = paired_delta(first, final)
    assert delta == pytest.approx(0.5)  # (0.5 + 1 + 0) / 3
    assert 0.0 <= low <= delta <= high <= 1.0
    same, lo2, hi2 = paired_delta(first, first)
    assert (same, lo2, hi2) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="different prompts"):
        paired_delta(first, {"a": 1.0})


def test_summary_has_every_key_and_counts_promotions_per_arm():
    args = argparse.Namespace(cycles=2, requests=8, config=Path("c.json"), humaneval=0)
    sealed = [{"prompt": p} for p in ("a", "a", "b", "c")]
    rows = [{"arm": "rl", "promoted": True}, {"arm": "rl", "promoted": False},
            {"arm": "placebo", "promoted": True}]
    scores = {"first": {"passed": [True, False, False, True], "humaneval": None},
              "rl-final": {"passed": [True, True, True, True], "humaneval": None},
              "placebo-final": {"passed": [True, False, False, True], "humaneval": None}}
    out = summarise(args, rows, scores, sealed, 1.0)
    assert KEYS <= set(out)
    assert out["pass_first"] == 0.5 and out["pass_final"] == 1.0
    assert out["promotions"] == 1 and out["placebo_promotions"] == 1
    assert out["placebo_delta"] == 0.0
    assert out["ci_low"] <= 0.5 <= out["ci_high"]
    assert out["sealed_prompts"] == 3 and out["complete"] is False
