"""The gate judges what users get, and counts each independent unit once.

- A pool whose functions of one family flip together (a small weight change flips a family's
  near-ties at once) declares the family its independence unit: a whole family flipping is one
  better cluster, not one per function, and cannot promote a candidate by itself.
- The primary can be the pass rate at the serving temperature (``primary_metric: sampled``): a
  candidate better only greedily is not promoted on it, one better at the serving temperature
  is, and the greedy pass stays a guardrail.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gating.config import GateConfig
from gating.gates import evaluate_gates, power_figures
from gating.records import SuiteResult, TaskOutcome


def _suite(passed, *, families, sampled=None) -> SuiteResult:
    return SuiteResult(tasks=[
        TaskOutcome(task_id=f"t{i}", kind=families[i], prompt_key=f"fn{i}", passed=bool(p),
                    malformed=False, no_edit=False, completion_tokens=8, score=float(p),
                    sampled_pass=None if sampled is None else sampled[i])
        for i, p in enumerate(passed)])


def _gate(gates, name):
    return next(g for g in gates if g.name == name)


FAMILIES = [f"fam{i // 10}" for i in range(60)]  # 6 families of 10 functions


def _one_family_flips():
    """The champion passes half of every family; the candidate also passes all of fam0."""
    champ = [i % 10 < 5 for i in range(60)]
    cand = [True if i < 10 else p for i, p in enumerate(champ)]
    return _suite(cand, families=FAMILIES), _suite(champ, families=FAMILIES)


def test_a_family_that_flips_together_counts_once():
    cand, champ = _one_family_flips()
    by_function = GateConfig.model_validate({"bootstrap": {"cluster": "prompt"}})
    by_family = GateConfig.model_validate({"bootstrap": {"cluster": "family"}})
    # with functions as the unit, 5 functions of one family look like 5 independent wins
    assert _gate(evaluate_gates(cand, champ, by_function), "improvement_evidence").passed
    evidence = _gate(evaluate_gates(cand, champ, by_family), "improvement_evidence")
    assert not evidence.passed
    assert "1 better / 0 worse of 6 clusters" in evidence.detail
    power = power_figures(cand, champ, by_family, 0.05)
    assert power["power.clusters"] == 6.0 and power["power.discordant_share"] == 1 / 6


def test_the_real_preset_declares_the_family_its_unit():
    import json
    from pathlib import Path

    preset = json.loads((Path(__file__).parents[3] / "configs" / "smollm2-pyfuncs.json")
                        .read_text())
    gate = GateConfig.model_validate(preset["gate"])
    assert gate.bootstrap.cluster == "family"
    assert gate.primary_metric == "sampled" and gate.suite.samples >= 4
    assert set(gate.champion_temperatures) >= {0.3}


def _greedy_vs_sampled():
    """Every family: the candidate's greedy answers pass 8 of 10 functions (champion 5), but at
    the serving temperature both pass each function 3 times in 8."""
    champ_greedy = [i % 10 < 5 for i in range(60)]
    cand_greedy = [i % 10 < 8 for i in range(60)]
    same = [3 / 8] * 60
    return (_suite(cand_greedy, families=FAMILIES, sampled=same),
            _suite(champ_greedy, families=FAMILIES, sampled=same))


def test_a_candidate_better_only_greedily_is_not_promoted_on_the_served_metric():
    cand, champ = _greedy_vs_sampled()
    greedy = GateConfig.model_validate({"bootstrap": {"cluster": "family"},
                                        "suite": {"samples": 8}})
    served = GateConfig.model_validate({"bootstrap": {"cluster": "family"},
                                        "suite": {"samples": 8}, "primary_metric": "sampled"})
    assert _gate(evaluate_gates(cand, champ, greedy), "improvement_evidence").passed
    gates = evaluate_gates(cand, champ, served)
    assert not _gate(gates, "improvement_evidence").passed
    assert _gate(gates, "pass_rate").value == pytest.approx(3 / 8)


def test_a_candidate_better_at_the_serving_temperature_is_promoted_and_greedy_guards():
    champ_sampled = [0.25] * 60
    cand_sampled = [0.5] * 60
    greedy = [i % 2 == 0 for i in range(60)]
    cand = _suite(greedy, families=FAMILIES, sampled=cand_sampled)
    champ = _suite(greedy, families=FAMILIES, sampled=champ_sampled)
    served = GateConfig.model_validate({"bootstrap": {"cluster": "family"},
                                        "suite": {"samples": 8}, "primary_metric": "sampled"})
    gates = evaluate_gates(cand, champ, served)
    assert _gate(gates, "improvement_evidence").passed
    assert _gate(gates, "pass_rate_change").value == pytest.approx(0.25)
    assert _gate(gates, "greedy_pass_rate_no_regression").passed
    worse_greedily = _suite([False] * 60, families=FAMILIES, sampled=cand_sampled)
    gates = evaluate_gates(worse_greedily, champ, served)
    assert not _gate(gates, "greedy_pass_rate_no_regression").passed


def test_a_sampled_primary_needs_samples():
    with pytest.raises(ValidationError, match="samples >= 1"):
        GateConfig.model_validate({"primary_metric": "sampled"})
    with pytest.raises(ValidationError, match="champion_temperatures"):
        GateConfig.model_validate({"suite": {"samples": 4}, "champion_temperatures": [0.0]})


def test_the_champion_at_its_best_is_recorded_under_names_mlflow_accepts():
    import re

    from gating.gate import GateRunner

    runner = object.__new__(GateRunner)  # only the config is read without champion_temperatures
    runner.config = GateConfig.model_validate({"suite": {"samples": 4}})
    champ = _suite([True, False], families=["a", "b"], sampled=[0.5, 0.25])
    cand = _suite([True, True], families=["a", "b"], sampled=[0.75, 0.25])
    out = runner._champion_at_its_best([], None, cand, champ)
    assert out["champion.best_pass_rate"] == 0.5 and out["champion.best_temperature"] == 0.0
    assert out["candidate.served_minus_champion_best"] == 0.0
    assert all(re.fullmatch(r"[\w\-. :/]+", k) for k in out), sorted(out)
