"""The decision rule: a win must be shown (superiority at one-sided alpha per decision) and no
guardrail may be left unproven (non-inferiority, burden of proof on the candidate).

- The 2026-11-26 SmolLM2 v2, promoted then although it lost `count_even` 7 -> 2 of the guard
  pool, is blocked by a guardrail on its stored per-task verdicts.
- A planted +0.05 candidate with realistic churn (25% of clusters discordant) on the toy
  preset's draw (724 independent clusters) is promoted at the first decision with the
  probability the exact power calculation documents (0.81, docs/STATISTICS.md).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from gating.config import BootstrapConfig, GateConfig, GuardrailConfig, GuardSuite
from gating.gates import evaluate_gates, families_gate, guard_gate, power_figures
from gating.records import GateVerdict, SuiteResult, TaskOutcome
from gating.report import decision_line, format_table
from gating.stats import AlphaSpending, mcnemar_power

DATA = Path(__file__).parent / "data" / "v2_guard_pool.json"
PRESET = Path(__file__).parents[3] / "configs" / "smollm2-pyfuncs.json"


def _suite(passed, *, kinds=None, keys=None, tokens=None) -> SuiteResult:
    n = len(passed)
    return SuiteResult(tasks=[
        TaskOutcome(task_id=f"t{i}", kind=kinds[i] if kinds else "k",
                    prompt_key=keys[i] if keys else f"p{i}", passed=bool(p), malformed=False,
                    no_edit=False, completion_tokens=tokens[i] if tokens else 8,
                    score=float(p)) for i, p in enumerate(passed)] if n else [])


def _v2(cluster: str):
    rows = json.loads(DATA.read_text())["tasks"]
    kinds = [r["family"] for r in rows]
    keys = [r["task_id"] if cluster == "prompt" else r["entry_point"] for r in rows]
    return (_suite([r["v2"] for r in rows], kinds=kinds, keys=keys),
            _suite([r["v1"] for r in rows], kinds=kinds, keys=keys))


def _preset_guard() -> GuardSuite:
    gate = json.loads(PRESET.read_text())["gate"]
    return GuardSuite.model_validate(gate["guards"][0])


def test_the_2026_11_26_v2_is_blocked_by_a_guardrail():
    guard = _preset_guard()
    cand, champ = _v2("prompt")
    assert (cand.pass_rate, champ.pass_rate) == (pytest.approx(204 / 236), pytest.approx(208 / 236))
    pool = guard_gate(guard, cand, champ, BootstrapConfig(), GuardrailConfig())
    assert not pool.passed  # -0.017, one-sided 95% lower bound about -0.055 < -0.03
    assert pool.ci_low < -0.03 < pool.value
    fam = families_gate([(guard, cand, champ)], BootstrapConfig(), GuardrailConfig())
    assert not fam.passed and 0.02 < fam.value <= 0.05
    assert "guard `count_even` dropped 5 of 7" in fam.reason
    # with variants of one function as one cluster (155 functions) the pool guard still blocks
    cand_f, champ_f = _v2("function")
    assert not guard_gate(guard, cand_f, champ_f, BootstrapConfig(), GuardrailConfig()).passed
    verdict = GateVerdict(passed=False, run_id="r", gates=[pool, fam],
                          candidate=cand.summary(), champion=champ.summary(), champion_version=1)
    assert decision_line(verdict).startswith("rejected: guard `count_even` dropped 5 of 7, p = ")


def test_the_first_champion_against_itself_passes_the_guardrails():
    guard = _preset_guard()
    _, champ = _v2("prompt")
    assert guard_gate(guard, champ, champ, BootstrapConfig(), GuardrailConfig()).passed
    fam = families_gate([(guard, champ, champ)], BootstrapConfig(), GuardrailConfig())
    assert fam.passed and fam.value == 1.0


TOY_CLUSTERS = 724
"""Independent clusters of the toy preset's gate draw (2,000 tasks of the gate pool)."""
DOCUMENTED_POWER = 0.81
"""docs/STATISTICS.md: exact power of the rule at +0.05, 25% discordant, 724 clusters."""


def test_the_default_rule_tests_each_decision_at_alpha():
    ec = GateConfig().error_control
    assert (ec.rule, ec.alpha) == ("per_decision", 0.05)
    s = AlphaSpending(alpha=ec.alpha, rule=ec.rule)
    assert s.level() == 0.05
    for _ in range(8):
        s.record(False)
    assert s.level() == 0.05  # the ninth decision too
    assert mcnemar_power(TOY_CLUSTERS, 0.15, 0.10, 0.04) == pytest.approx(DOCUMENTED_POWER,
                                                                         abs=0.005)


def test_a_planted_gain_is_promoted_at_the_first_decision_with_the_documented_probability():
    """Each simulated first decision: 724 clusters, the champion passes half; 15% of clusters
    flip to pass and 10% to fail (true gain +0.05, churn 25%). The whole gate (every champion
    gate, the default config) promotes at the rate the exact calculation gives."""
    rng = np.random.default_rng(11)
    config = GateConfig(bootstrap=BootstrapConfig(n_resamples=200))
    n, runs, promoted = TOY_CLUSTERS, 60, 0
    for _ in range(runs):
        champ = rng.random(n) < 0.5
        u = rng.random(n)
        better = u < 0.15  # the champion fails, the candidate passes
        worse = (u >= 0.15) & (u < 0.25)
        champ = np.where(better, False, np.where(worse, True, champ))
        cand = np.where(better, True, np.where(worse, False, champ))
        gates = evaluate_gates(_suite(cand), _suite(champ), config)
        promoted += all(g.passed for g in gates)
    # 60 draws of Bernoulli(0.81): 99.9% of runs fall within 4 sd of the mean
    sd = math.sqrt(DOCUMENTED_POWER * (1 - DOCUMENTED_POWER) / runs)
    assert abs(promoted / runs - DOCUMENTED_POWER) < 4 * sd, promoted


def test_the_verdict_records_what_the_draw_could_detect():
    champ = _suite([True, False] * 200)
    cand = _suite([False, True] * 25 + [True, False] * 175)  # 50 of 400 clusters discordant
    f = power_figures(cand, champ, GateConfig(), 0.05)
    assert f["power.clusters"] == 400 and f["power.discordant_share"] == pytest.approx(0.125)
    # (z_0.96 + z_0.8) sqrt(0.125 / 400) = (1.751 + 0.842) * 0.01768
    assert f["power.mde"] == pytest.approx(0.0458, abs=0.001)


def test_tokens_are_non_inferior_at_ten_percent_not_at_zero():
    champ = _suite([True, False] * 100, tokens=[20] * 200)
    longer = _suite([True, False] * 100, tokens=[21] * 200)  # +5%, surely longer
    gates = {g.name: g for g in evaluate_gates(longer, champ, GateConfig())}
    assert gates["tokens_non_inferior"].passed
    bloated = _suite([True, False] * 100, tokens=[23] * 200)  # +15%
    gates = {g.name: g for g in evaluate_gates(bloated, champ, GateConfig())}
    assert not gates["tokens_non_inferior"].passed


def test_the_decision_line_names_the_rule_that_decided():
    champ = _suite([True, False] * 200)
    win = _suite([True] * 400)  # 200 clusters better, none worse
    gates = evaluate_gates(win, champ, GateConfig())
    v = GateVerdict(passed=all(g.passed for g in gates), run_id="r", gates=gates,
                    candidate=win.summary(), champion=champ.summary(), champion_version=1)
    line = decision_line(v)
    assert line.startswith("promoted: +0.500 [") and "superiority p = " in line
    assert line.endswith("<= 0.04 (200 better / 0 worse); pass-rate change over tasks +0.500; "
                         "guardrails held")
    v = v.model_copy(update={"extras": power_figures(win, champ, GateConfig(), 0.05)})
    table = format_table(v)
    # one level, printed as the decision line prints it, with what it is
    assert "level: one-sided 0.04, the superiority test's" in table
    assert "alpha_k" not in table.split("\n\n")[0]
    tie = _suite([False, True] * 10 + [True, False] * 190)  # 10 better, 10 worse
    gates = evaluate_gates(tie, champ, GateConfig())
    v = GateVerdict(passed=False, run_id="r", gates=gates, candidate=tie.summary(),
                    champion=champ.summary(), champion_version=1,
                    extras=power_figures(tie, champ, GateConfig(), 0.05))
    line = decision_line(v)
    assert line.startswith("rejected: no evidence of a win: +0.000 [")
    assert "superiority p = 0.59 > 0.04 (10 better / 10 worse)" in line
    assert "400 independent clusters, 5% discordant; detects +" in line
    boot = GateVerdict(passed=True, run_id="r", gates=[], candidate=champ.summary())
    assert decision_line(boot) == "promoted: first champion, absolute gates held (pass rate 0.500)"


def test_variants_of_one_function_are_one_cluster():
    from types import SimpleNamespace

    from gating.suite import prompt_key

    a = SimpleNamespace(prompt="Write plus_38(x).", function="add_const/plus_38", messages=())
    b = SimpleNamespace(prompt="Please write plus_38(x).", function="add_const/plus_38",
                        messages=())
    c = SimpleNamespace(prompt="Write plus_38(x).", function=None, messages=())
    d = SimpleNamespace(prompt="Please write plus_38(x).", messages=())
    assert prompt_key(a) == prompt_key(b)
    assert prompt_key(c) != prompt_key(d) and prompt_key(c) != prompt_key(a)


def _bracket(text: str) -> tuple[float, float]:
    inside = text.split("[", 1)[1].split("]", 1)[0]
    low, high = (float(x) for x in inside.split(","))
    return low, high


@pytest.mark.parametrize("better, worse, boot, promoted", [
    (15, 4, (0.035, -0.027, 0.096), True),  # the exact test rejects; a bootstrap bound below 0
    (20, 10, (0.026, 0.002, 0.064), False),  # p = 0.049 > 0.037; a bootstrap bound above 0
])
def test_the_bracket_of_a_decision_is_the_interval_of_the_test_that_decided(
        better, worse, boot, promoted):
    """Two decisions of the 2026-11-28 toy demo: its line showed a 95% bootstrap interval beside
    an exact McNemar decision at 0.037, so a promotion read "+0.035 [-0.027, +0.096]" and a
    rejection "[+0.002, +0.064]". The bracket must agree with the verdict."""
    from gating.config import ImprovementEvidence
    from gating.gates import Evidence, improvement_gate
    from gating.stats import PairedCI

    mean, low, high = boot
    e = Evidence(alpha=0.0375, primary=0.037, shorter=-1.0, passed_ci=PairedCI(mean, low, high),
                 tokens_ci=PairedCI(0.0, -1.0, 1.0), better=better, worse=worse,
                 champion_tokens=20.0, clusters=237)
    g = improvement_gate(e, ImprovementEvidence())
    assert g.passed is promoted
    ci_low, ci_high = _bracket(g.reason)
    assert (ci_low > 0) is promoted and ci_low <= (better - worse) / 237 <= ci_high
    assert (g.ci_low, g.ci_high) == pytest.approx((ci_low, ci_high), abs=5e-4)
    assert f"({better} better / {worse} worse)" in g.reason


def test_the_exact_interval_is_above_zero_exactly_when_the_test_rejects():
    from gating.stats import mcnemar_exact, sign_test_interval

    rng = np.random.default_rng(7)
    for _ in range(400):
        n = int(rng.integers(1, 300))
        discordant = int(rng.integers(0, min(n, 80) + 1))
        better = int(rng.integers(0, discordant + 1))
        level = float(rng.choice([0.005, 0.0125, 0.037, 0.04, 0.05]))
        low, high = sign_test_interval(better, discordant - better, n, level)
        assert (low > 0 or (low == 0 and discordant > 0)) is (
            mcnemar_exact(better, discordant - better) <= level)
        assert low <= (2 * better - discordant) / n <= high
        assert -discordant / n <= low and high <= discordant / n


def _guard_pool_pair(lose_family: str):
    """The preset's guard pool, clustered as the gate clusters it (by function): the champion
    passes every task; the candidate fails every prompt of ``lose_family`` and churns elsewhere,
    one function gained and one lost in each of four large families."""
    from gating.suite import prompt_key
    from tasks.jsonl_suite import load_tasks

    tasks = load_tasks(Path(__file__).parents[3] / "tasks" / "data" / "pyfuncs_guard.jsonl")
    keys = [prompt_key(t) for t in tasks]
    kinds = [t.kind for t in tasks]
    champ = [True] * len(tasks)
    cand = [t.kind != lose_family for t in tasks]
    for fam in ("add_const", "linear", "mul_const", "remainder"):
        first = [i for i, k in enumerate(kinds) if k == fam][:2]
        cand[first[0]] = False  # the champion's pass turned to a fail: a lost function
        champ[first[1]], cand[first[1]] = False, True  # a failed function gained
    return (_suite(cand, kinds=kinds, keys=keys), _suite(champ, kinds=kinds, keys=keys))


def test_a_guard_family_of_one_function_losing_every_prompt_blocks_the_candidate():
    """`is_palindrome` is one function asked eight ways in the guard pool: by function it is one
    cluster, and a studentised drop of one cluster is at most 1, so the family test could never
    call it, though the 2026-11-26 v4 lost it 6 -> 0. Tested over its prompts it is called."""
    cand, champ = _guard_pool_pair("is_palindrome")
    assert len({k for k, t in zip(cand.clusters, cand.tasks) if t.kind == "is_palindrome"}) == 1
    fam = families_gate([(_preset_guard(), cand, champ)], BootstrapConfig(), GuardrailConfig())
    assert not fam.passed and fam.value < 0.01
    assert "guard `is_palindrome` dropped 8 of 8" in fam.reason
    assert "8 -> candidate 0 of 8 prompts" in fam.detail


def test_a_family_of_several_functions_is_still_tested_over_its_functions():
    """`repeat_str` has four functions, two prompts each: losing all eight prompts is a drop of
    four units (studentised 2.0), not eight, so the same loss weighs less than in a family of
    one function asked eight ways."""
    cand, champ = _guard_pool_pair("repeat_str")
    fam = families_gate([(_preset_guard(), cand, champ)], BootstrapConfig(), GuardrailConfig())
    assert "max-drop family repeat_str" in fam.detail and "of 4 functions" in fam.detail
    assert "studentised drop 2.00" in fam.detail
