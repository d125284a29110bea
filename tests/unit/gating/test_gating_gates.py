"""Gate logic on hand-built suite results: a worse candidate fails, a better one passes."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from gating.config import BootstrapConfig, ChangeThreshold, GateConfig, TokenBudget
from gating.gates import (
    HealthFigures,
    change_gate,
    evaluate_gates,
    paired_bootstrap,
    token_budget_gate,
)
from gating.records import GateVerdict, SuiteResult, TaskOutcome
from gating.report import format_table, render_html
from gating.stats import normalised_load_entropy
from gating.suite import task_score

BALANCED = [[10, 10, 10, 10], [10, 10, 10, 10]]


def suite(passed: list[bool], tokens: list[int] | int = 4, *, no_edit: int = 0,
          malformed: int = 0, load=BALANCED) -> SuiteResult:
    n = len(passed)
    toks = tokens if isinstance(tokens, list) else [tokens] * n
    return SuiteResult(tasks=[
        TaskOutcome(task_id=f"t{i}", kind="arith", passed=p, malformed=i < malformed,
                    no_edit=i < no_edit, completion_tokens=t, score=task_score(p, t, 32, 0.5))
        for i, (p, t) in enumerate(zip(passed, toks))
    ], expert_load=load)


def by_name(gates):
    return {g.name: g for g in gates}


def test_worse_candidate_fails_and_better_passes():
    champion = suite([True] * 20 + [False] * 20)  # 0.5
    worse = suite([True] * 6 + [False] * 34)  # 0.15
    better = suite([True] * 30 + [False] * 10)  # 0.75: 10 prompts gained, McNemar p ~ 0.001
    cfg = GateConfig(min_pass_rate=0.1)
    bad = by_name(evaluate_gates(worse, champion, cfg))
    good = by_name(evaluate_gates(better, champion, cfg))
    assert not bad["pass_rate_change"].passed
    assert not bad["pass_rate_no_regression"].passed  # 14 of 40 tasks lost: significant
    assert bad["pass_rate_change"].value == pytest.approx(-0.35)
    assert all(g.passed for g in good.values()), [g for g in good.values() if not g.passed]
    assert good["pass_rate_change"].value == pytest.approx(0.25)
    assert good["pass_rate_change"].ci_low <= 0.25 <= good["pass_rate_change"].ci_high


def test_without_champion_only_absolute_gates_decide():
    gates = by_name(evaluate_gates(suite([True] * 3 + [False] * 7), None,
                                   GateConfig(min_pass_rate=0.2)))
    assert set(gates) == {"pass_rate", "expert_load_entropy"}
    assert gates["pass_rate"].passed and gates["pass_rate"].value == pytest.approx(0.3)
    low = evaluate_gates(suite([True] + [False] * 9), None, GateConfig(min_pass_rate=0.2))
    assert not by_name(low)["pass_rate"].passed


def test_token_bloat_fails_budget_and_no_regression_gate():
    champion = suite([True] * 30, 5)
    bloated = suite([True] * 30, 12)
    gates = by_name(evaluate_gates(bloated, champion, GateConfig()))
    assert gates["pass_rate_change"].passed
    assert not gates["token_budget"].passed
    assert gates["token_budget"].value == pytest.approx(7.0)
    assert gates["token_budget"].threshold == pytest.approx(1.0)  # max(1, 0.1 * 5)
    assert not gates["tokens_non_inferior"].passed  # +7 tokens, margin max(0, 0.1 * 5)
    assert bloated.score < champion.score  # same correctness, longer answers score lower


def test_token_budget_relative_allowance():
    g = token_budget_gate(54.0, 50.0, TokenBudget(max_abs_increase=1.0, max_rel_increase=0.1),
                          None)
    assert g.passed and g.threshold == pytest.approx(5.0)


def test_change_gate_relative_and_direction():
    rule = ChangeThreshold(direction="increase", min_abs=0.0, min_rel=0.1)
    assert not change_gate("x", 0.52, 0.5, rule, None).passed  # +4% < +10%
    assert change_gate("x", 0.56, 0.5, rule, None).passed
    down = ChangeThreshold(direction="decrease", min_abs=0.0)
    assert change_gate("y", 4.0, 5.0, down, None).passed
    assert not change_gate("y", 6.0, 5.0, down, None).passed


def test_hack_monitors_fail_on_jump():
    champion = suite([True] * 10 + [False] * 10)
    hacky = suite([True] * 10 + [False] * 10, no_edit=5, malformed=3)
    gates = by_name(evaluate_gates(hacky, champion, GateConfig(min_pass_rate=0.1)))
    assert not gates["no_edit_rate"].passed and gates["no_edit_rate"].value == pytest.approx(0.25)
    assert not gates["malformed_rate"].passed
    assert gates["pass_rate_change"].passed


def test_health_gates():
    collapsed = suite([True] * 10, load=[[40, 0, 0, 0], [10, 10, 10, 10]])
    gates = by_name(evaluate_gates(collapsed, None, GateConfig(min_pass_rate=0.1),
                                   health=HealthFigures(nonfinite_params=3)))
    assert not gates["finite_weights"].passed and gates["finite_weights"].value == 3
    assert not gates["expert_load_entropy"].passed
    ok = by_name(evaluate_gates(suite([True] * 10), suite([True] * 10), GateConfig(),
                                health=HealthFigures(0, kl_to_champion=0.01)))
    assert ok["finite_weights"].passed and ok["kl_to_champion"].passed
    nan = by_name(evaluate_gates(suite([True] * 10), suite([True] * 10), GateConfig(),
                                 health=HealthFigures(0, kl_to_champion=float("nan"))))
    assert not nan["kl_to_champion"].passed


def test_load_entropy_values():
    assert normalised_load_entropy([[5, 5, 5, 5]]) == pytest.approx(1.0)
    assert normalised_load_entropy([[8, 0, 0, 0]]) == pytest.approx(0.0)
    # two of four experts equally used: log 2 / log 4
    assert normalised_load_entropy([[5, 5, 0, 0], [1, 1, 1, 1]]) == pytest.approx(0.5)


def test_paired_bootstrap_constant_difference_has_zero_width():
    a = np.array([3.0, 5.0, 7.0, 9.0])
    ci = paired_bootstrap(a + 2.0, a, n_resamples=200, confidence=0.9, seed=0)
    assert ci.mean == ci.low == ci.high == pytest.approx(2.0)


def test_paired_bootstrap_is_reproducible_and_covers_mean():
    rng = np.random.default_rng(1)
    a, b = rng.random(50), rng.random(50)
    ci1 = paired_bootstrap(a, b, n_resamples=500, confidence=0.95, seed=7)
    ci2 = paired_bootstrap(a, b, n_resamples=500, confidence=0.95, seed=7)
    assert ci1 == ci2 and ci1.low < ci1.mean < ci1.high
    with pytest.raises(ValueError):
        paired_bootstrap(a, b[:10], n_resamples=100, confidence=0.9, seed=0)


def test_mismatched_suites_are_refused():
    a = suite([True, False])
    b = SuiteResult(tasks=[t.model_copy(update={"task_id": "other"}) for t in a.tasks])
    with pytest.raises(ValueError, match="same tasks"):
        evaluate_gates(a, b, GateConfig())


def test_task_score_prefers_tight_answers():
    assert task_score(True, 3, 32, 0.5) > task_score(True, 20, 32, 0.5) > task_score(False, 3,
                                                                                      32, 0.5)
    assert task_score(False, 3, 32, 0.5) == 0.0


def test_config_bounds_and_unknown_keys_fail_loudly():
    with pytest.raises(ValidationError):
        GateConfig(min_pass_rate=1.5)
    with pytest.raises(ValidationError):
        GateConfig.model_validate({"min_pass_rat": 0.3})
    with pytest.raises(ValidationError):
        BootstrapConfig(confidence=1.0)
    cfg = GateConfig.model_validate_json(GateConfig().model_dump_json())
    assert cfg == GateConfig()


def test_report_table_and_html_show_every_gate():
    champion, cand = suite([True] * 5 + [False] * 5), suite([True] * 2 + [False] * 8)
    gates = evaluate_gates(cand, champion, GateConfig(min_pass_rate=0.1))
    v = GateVerdict(passed=all(g.passed for g in gates), run_id="r1", model_name="m",
                    candidate_version=2, champion_version=1, gates=gates,
                    candidate=cand.summary(), champion=champion.summary())
    text = format_table(v)
    assert text.startswith("Gate FAIL: m v2 vs champion v1")
    for g in gates:
        assert g.name in text
    assert "pass_rate_change" in v.failed_gates
    page = render_html(v, GateConfig().model_dump_json(), cand, champion)
    assert page.count("<tr class=\"fail\">") == len(v.failed_gates)
    assert "Tasks that changed verdict" in page and page.count("<td>t2</td>") == 1
    assert "min_pass_rate" in page


# -- noise must not become champion: evidence of improvement ----------------------------------
def test_tie_is_rejected_by_improvement_evidence():
    champion = suite([True] * 20 + [False] * 20)
    tie = suite([True] * 20 + [False] * 20)  # d = 0 on every task: CI [0, 0] by hand
    gates = by_name(evaluate_gates(tie, champion, GateConfig(min_pass_rate=0.1)))
    ev = gates["improvement_evidence"]
    assert (ev.ci_low, ev.ci_high) == (0.0, 0.0)
    assert not ev.passed and ev.comparator == "ci_low >"
    assert gates["pass_rate_change"].passed  # the old rule alone would have promoted the tie


def test_clear_win_passes_with_hand_computed_ci():
    # 40 tasks: the candidate wins 20 (d = 1) and ties 20 (d = 0). The gate's interval is the
    # exact test's, at the primary level 0.04: 20 of 20 discordant clusters better, so the
    # Clopper-Pearson lower bound of the better share is 0.04 ** (1 / 20) = 0.8513 and the net
    # share better is 20 / 40 * (2 * 0.8513 - 1) = 0.351, its upper bound 20 / 40 = 0.5.
    champion = suite([False] * 40)
    better = suite([True] * 20 + [False] * 20)
    ev = by_name(evaluate_gates(better, champion, GateConfig(min_pass_rate=0.1)))[
        "improvement_evidence"]
    assert ev.passed
    assert ev.value == pytest.approx(0.5)
    assert ev.ci_low == pytest.approx(0.5 * (2 * 0.04 ** (1 / 20) - 1), abs=1e-6)
    assert ev.ci_high == pytest.approx(0.5)
    margin = GateConfig(min_pass_rate=0.1, improvement={"min_pass_rate_ci_low": 0.4})
    assert not by_name(evaluate_gates(better, champion, margin))["improvement_evidence"].passed


def test_shorter_with_no_regression_passes_and_shorter_but_worse_fails():
    champion = suite([True] * 20 + [False] * 20, 5)
    shorter = suite([True] * 20 + [False] * 20, 3)  # pass CI [0, 0], tokens CI [-2, -2]
    ev = by_name(evaluate_gates(shorter, champion, GateConfig(min_pass_rate=0.1)))[
        "improvement_evidence"]
    assert ev.passed and "shorter" in ev.detail
    worse = suite([True] * 10 + [False] * 30, 3)  # loses 10 tasks: d mean -0.25
    ev = by_name(evaluate_gates(worse, champion, GateConfig(min_pass_rate=0.1)))[
        "improvement_evidence"]
    assert not ev.passed
    saving = GateConfig(min_pass_rate=0.1, improvement={"min_token_saving": 2.0})
    assert not by_name(evaluate_gates(shorter, champion, saving))["improvement_evidence"].passed
    off = by_name(evaluate_gates(shorter, champion, GateConfig(improvement=None)))
    assert "improvement_evidence" not in off
