"""Prompt-clustered paired statistics, exact tests and alpha spending, on hand-computed tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gating.config import BootstrapConfig, GateConfig, ImprovementEvidence
from gating.gates import evaluate_gates
from gating.records import SuiteResult, TaskOutcome
from gating.report import changed_tasks
from gating.stats import (
    AlphaSpending,
    clopper_pearson_upper,
    cluster_bootstrap,
    cluster_ids,
    cluster_signs,
    max_drop_test,
    mcnemar_exact,
)

# 20 prompts, each asked 5 times (greedy: the same answer every time): 8 prompts the candidate
# gained (+1), 4 it lost (-1), 8 ties (0). Mean difference 0.2.
# Per-prompt variance of d: E[d^2] - mean^2 = 12/20 - 0.04 = 0.56.
#   clustered SE = sqrt(0.56 / 20)  = 0.1673 -> 95% half-width ~ 1.96 * 0.1673 = 0.328
#   row SE       = sqrt(0.56 / 100) = 0.0748 -> 95% half-width ~ 1.96 * 0.0748 = 0.147
PER_PROMPT = [1.0] * 8 + [-1.0] * 4 + [0.0] * 8
DIFF = np.repeat(PER_PROMPT, 5)
KEYS = [f"prompt-{i}" for i in range(20) for _ in range(5)]


def test_clustered_interval_is_wider_when_prompts_repeat():
    clustered = cluster_bootstrap(DIFF, cluster_ids(KEYS), n_resamples=20_000, seed=1)
    rows = cluster_bootstrap(DIFF, None, n_resamples=20_000, seed=1)
    assert clustered.mean == pytest.approx(0.2) and rows.mean == pytest.approx(0.2)
    assert clustered.n_clusters == 20 and rows.n_clusters == 100
    half_c = (clustered.high - clustered.low) / 2
    half_r = (rows.high - rows.low) / 2
    assert 0.28 <= half_c <= 0.37, half_c  # hand-computed 0.328
    assert 0.125 <= half_r <= 0.17, half_r  # hand-computed 0.147
    assert half_c > 2.0 * half_r  # design effect 5: sqrt(5) = 2.24 times wider


def test_clustered_interval_equals_row_bootstrap_without_repeats():
    distinct = np.asarray(PER_PROMPT)
    keys = [f"prompt-{i}" for i in range(20)]
    a = cluster_bootstrap(distinct, cluster_ids(keys), n_resamples=5000, seed=3)
    b = cluster_bootstrap(distinct, None, n_resamples=5000, seed=3)
    assert (a.mean, a.low, a.high) == (b.mean, b.low, b.high)


def test_cluster_signs_count_each_prompt_once():
    assert cluster_signs(DIFF, cluster_ids(KEYS)) == (8, 4)
    assert cluster_signs(DIFF, None) == (40, 20)


def test_mcnemar_exact_hand_computed():
    assert mcnemar_exact(6, 0) == pytest.approx(1 / 64)
    # P(X >= 8 | n = 10, 1/2) = (C(10,8) + C(10,9) + C(10,10)) / 1024 = 56 / 1024
    assert mcnemar_exact(8, 2) == pytest.approx(56 / 1024)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 3) == 1.0


def test_clopper_pearson_upper_hand_computed():
    # 0 of n: the upper bound solves (1 - p)^n = 0.05
    assert clopper_pearson_upper(0, 50) == pytest.approx(1 - 0.05 ** (1 / 50), abs=1e-9)
    # 1 of 60: (1-p)^60 + 60 p (1-p)^59 = 0.05 at p ~ 0.0771
    p = clopper_pearson_upper(1, 60)
    assert (1 - p) ** 60 + 60 * p * (1 - p) ** 59 == pytest.approx(0.05, abs=1e-9)


def _suite(passed: list[bool], keys: list[str], tokens: int = 4) -> SuiteResult:
    return SuiteResult(tasks=[
        TaskOutcome(task_id=f"t{i}", kind="arith", prompt_key=k, passed=p, malformed=False,
                    no_edit=False, completion_tokens=tokens, score=0.0)
        for i, (p, k) in enumerate(zip(passed, keys))
    ])


def test_gate_counts_a_repeated_prompt_once():
    """Five gained prompts asked six times each: 30 gained rows look decisive to a row bootstrap,
    but five discordant prompts give McNemar p = 1/32, not significant at alpha_k / 2 = 0.0125."""
    keys = [f"g{i}" for i in range(5) for _ in range(6)] + [f"tie{i}" for i in range(60)]
    champion = _suite([False] * 30 + [True] * 30 + [False] * 30, keys)
    candidate = _suite([True] * 30 + [True] * 30 + [False] * 30, keys)
    rows = GateConfig(min_pass_rate=0.0, bootstrap=BootstrapConfig(cluster="row"))
    prompts = GateConfig(min_pass_rate=0.0)
    by_row = {g.name: g for g in evaluate_gates(candidate, champion, rows, alpha=0.025)}
    by_prompt = {g.name: g for g in evaluate_gates(candidate, champion, prompts, alpha=0.025)}
    assert by_row["improvement_evidence"].passed
    assert not by_prompt["improvement_evidence"].passed
    assert "5 better / 0 worse" in by_prompt["improvement_evidence"].detail
    assert by_prompt["pass_rate_change"].ci_low < by_row["pass_rate_change"].ci_low


def test_changed_tasks_lists_each_prompt_once():
    keys = ["a", "a", "a", "b", "c"]
    cand = _suite([True, True, True, False, True], keys)
    champ = _suite([False, False, False, True, True], keys)
    rows = changed_tasks(cand, champ)
    assert len(rows) == 2
    assert rows[0][-1] == "3"  # prompt a, asked three times


# -- non-inferiority (the secondary win) --------------------------------------------------------

def _tokens_suite(passed: list[bool], tokens: list[int]) -> SuiteResult:
    return SuiteResult(tasks=[
        TaskOutcome(task_id=f"t{i}", kind="arith", prompt_key=f"p{i}", passed=p,
                    malformed=False, no_edit=False, completion_tokens=t, score=0.0)
        for i, (p, t) in enumerate(zip(passed, tokens))
    ])


def test_shorter_but_worse_candidate_is_not_a_secondary_win():
    """Much shorter, but 3 of 200 prompts lost: the pass-rate lower bound is below -0.01, so the
    candidate is not shown non-inferior (the old rule, CI high >= 0, promoted it)."""
    n = 200
    champion = _tokens_suite([True] * 100 + [False] * 100, [10] * n)
    candidate = _tokens_suite([False] * 3 + [True] * 97 + [False] * 100, [6] * n)
    g = {x.name: x for x in evaluate_gates(candidate, champion, GateConfig(min_pass_rate=0.0),
                                           alpha=0.05)}["improvement_evidence"]
    assert not g.passed and g.ci_low < -0.01


def test_shorter_and_equal_candidate_is_a_secondary_win():
    n = 200
    champion = _tokens_suite([True] * 100 + [False] * 100, [10] * n)
    candidate = _tokens_suite([True] * 100 + [False] * 100, [6] * n)
    g = {x.name: x for x in evaluate_gates(candidate, champion, GateConfig(min_pass_rate=0.0),
                                           alpha=0.05)}["improvement_evidence"]
    assert g.passed and "shorter and non-inferior" in g.detail


def test_token_saving_must_clear_five_percent():
    """Champion answers 40 tokens: 5% is 2 tokens, so saving 1 token (> 0.5) is not enough."""
    n = 100
    champion = _tokens_suite([True] * 50 + [False] * 50, [40] * n)
    candidate = _tokens_suite([True] * 50 + [False] * 50, [39] * n)
    cfg = GateConfig(min_pass_rate=0.0, improvement=ImprovementEvidence())
    g = {x.name: x for x in evaluate_gates(candidate, champion, cfg,
                                           alpha=0.05)}["improvement_evidence"]
    assert not g.passed and "shorter if < -2.00" in g.detail


# -- alpha spending -----------------------------------------------------------------------------

def test_pi2_levels_hand_computed():
    s = AlphaSpending(alpha=0.05, rule="pi2")
    assert s.record(False) == pytest.approx(6 * 0.05 / math.pi**2)
    assert s.record(True) == pytest.approx(6 * 0.05 / (4 * math.pi**2))
    assert s.k == 2


def test_lord_levels_hand_computed():
    s = AlphaSpending(alpha=0.05, rule="lord")  # W0 = 0.025, gamma_j = 1 / (j (j + 1))
    assert s.record(False) == pytest.approx(0.025 / 2)  # gamma_1 W0
    assert s.record(True) == pytest.approx(0.025 / 6)  # gamma_2 W0; promotes at k = 2
    # k = 3: gamma_3 W0 + (alpha - W0) gamma_1 = 0.025/12 + 0.025/2
    assert s.level() == pytest.approx(0.025 / 12 + 0.025 / 2)
    assert s.record(False) == pytest.approx(0.025 / 12 + 0.025 / 2)
    # the spent levels never exceed what the rule earned: wealth stays >= 0
    assert s.wealth >= 0


def test_lord_spends_at_most_alpha_under_the_null():
    s = AlphaSpending(alpha=0.05, rule="lord")
    total = sum(s.record(False) for _ in range(10_000))
    assert total <= 0.025 + 1e-12  # W0: without promotions LORD++ spends only its start wealth


def test_alpha_state_round_trips_through_tags():
    s = AlphaSpending(alpha=0.05, rule="lord")
    for promoted in (False, True, False):
        s.record(promoted)
    back = AlphaSpending.from_tags(s.to_tags(), alpha=0.05, rule="lord")
    assert (back.k, back.promotions, back.level()) == (3, [2], pytest.approx(s.level()))
    with pytest.raises(ValueError, match="cannot change midway"):
        AlphaSpending.from_tags(s.to_tags(), alpha=0.05, rule="pi2")
    assert AlphaSpending.from_tags({}, alpha=0.1, rule="pi2").k == 0


def test_obrien_fleming_bounds_hand_checked():
    from gating.stats import mcnemar_z, obrien_fleming_bounds

    # Lan-DeMets O'Brien-Fleming, one-sided 0.025, two equally informative looks: 2.963, 1.969
    c1, c2 = obrien_fleming_bounds(0.025, 0.5)
    assert c1 == pytest.approx(2.9626, abs=1e-3) and c2 == pytest.approx(1.9686, abs=1e-3)
    early, _ = obrien_fleming_bounds(0.025, 0.2)
    assert early > c1  # an earlier look spends less
    assert mcnemar_z(9, 0) == pytest.approx(3.0) and mcnemar_z(0, 0) == 0.0


def test_a_family_of_one_function_is_tested_over_its_prompts_once_each():
    """A family of one function asked 6 ways, each prompt lost in two seeds, beside a family of 6
    functions with one prompt each, all lost too: both have 6 units, so both have the
    studentised drop sqrt(6); the rows of a prompt in two seeds are one unit, not two."""
    fams = ["lone"] * 12 + ["wide"] * 6
    clusters = ["lone/f"] * 12 + [f"wide/f{i}" for i in range(6)]
    prompts = [f"lone/p{i}" for i in range(6)] * 2 + [f"wide/p{i}" for i in range(6)]
    diff = np.full(18, -1.0)
    r = max_drop_test(diff, np.asarray(clusters), fams, prompts=prompts, n_permutations=2000)
    assert r.z == pytest.approx(math.sqrt(6))
    assert (r.family, r.n_clusters, r.unit) == ("lone", 6, "prompts")
    assert (r.champion_passed, r.candidate_passed) == (6, 0)  # no candidate outcomes: 0
    wide = max_drop_test(diff[12:], np.asarray(clusters[12:]), fams[12:])
    assert (wide.n_clusters, wide.unit) == (6, "functions")
    # each family reaches sqrt(6) only with all six flips down: p about 2 / 64
    assert r.p_value < 0.05
