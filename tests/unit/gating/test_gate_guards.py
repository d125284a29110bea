"""Regression guards: a candidate that is surely worse than the champion on a guard suite fails
``guard.<name>`` whatever it does on the target suite; a tie passes; guards need a champion."""

from __future__ import annotations

import pytest

from gating.config import BootstrapConfig, GateConfig, GuardSuite, SuiteConfig
from gating.gates import guard_gate
from gating.records import SuiteResult, TaskOutcome


def _result(passed: list[bool]) -> SuiteResult:
    return SuiteResult(tasks=[
        TaskOutcome(task_id=f"t{i}", kind="pyfunc", prompt_key=f"p{i}", passed=p,
                    malformed=False, no_edit=False, completion_tokens=4, score=float(p))
        for i, p in enumerate(passed)])


GUARD = GuardSuite(name="solved", suite=SuiteConfig(size=40))


def test_a_candidate_surely_worse_on_the_guard_fails_it():
    champion = _result([True] * 40)
    candidate = _result([True] * 20 + [False] * 20)  # 20 of 40 prompts lost: mean -0.5
    gate = guard_gate(GUARD, candidate, champion, BootstrapConfig())
    assert gate.name == "guard.solved" and not gate.passed
    assert gate.value == pytest.approx(-0.5) and gate.ci_high < 0.0


def test_a_tie_on_the_guard_passes():
    champion = _result([True, False] * 20)
    assert guard_gate(GUARD, champion, champion, BootstrapConfig()).passed


def test_the_burden_of_proof_is_on_the_candidate():
    """One prompt lost and one won of 40: no evidence of harm, but no proof of non-inferiority
    either (one-sided 95% lower bound -0.05 below the -0.03 margin): the guard fails. The older
    rule (fail only when surely worse) let it through."""
    champion = _result([True, False] * 20)
    candidate = _result([False, True] + [True, False] * 19)
    gate = guard_gate(GUARD, candidate, champion, BootstrapConfig())
    assert not gate.passed and gate.value == 0.0
    assert gate.ci_low < -0.03 < 0.0 < gate.ci_high  # the interval straddles the margin
    assert "not shown non-inferior" in gate.reason
    old = GUARD.model_copy(update={"test": "surely_worse", "max_drop": 0.0})
    assert guard_gate(old, candidate, champion, BootstrapConfig()).passed
    # the same churn on 400 prompts is proven within the margin
    big_champ = _result([True, False] * 200)
    big_cand = _result([False, True] + [True, False] * 199)
    assert guard_gate(GUARD, big_cand, big_champ, BootstrapConfig()).passed


def test_max_drop_tolerates_a_small_sure_regression():
    champion = _result([True] * 400)
    candidate = _result([False] * 20 + [True] * 380)  # -0.05, surely
    assert not guard_gate(GUARD, candidate, champion, BootstrapConfig()).passed
    tolerant = GUARD.model_copy(update={"max_drop": 0.1})
    assert guard_gate(tolerant, candidate, champion, BootstrapConfig()).passed


def test_guard_names_are_unique_and_plain():
    with pytest.raises(ValueError, match="unique"):
        GateConfig(guards=[GUARD, GUARD])
    with pytest.raises(ValueError):
        GuardSuite(name="has space", suite=SuiteConfig())


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    import torch

    from policy.toy.checkpoint import load_checkpoint, save_checkpoint
    from policy.toy.model import MoETransformer
    from trainer.fixtures import champion_dir

    champion = load_checkpoint(champion_dir())
    torch.manual_seed(3)
    worse = MoETransformer(champion.config).eval()  # untrained: fails what the champion solves
    root = tmp_path_factory.mktemp("guards")
    return {"champion": (champion_dir(), champion),
            "worse": (save_checkpoint(worse, root / "worse"), worse)}


def _runner(tmp_path, cand, champ, *, champion_version: int | None = 1):
    from gating.gate import GateRunner

    config = GateConfig(suite=SuiteConfig(size=24, max_new_tokens=16),
                        guards=[GuardSuite(name="toy", suite=SuiteConfig(size=40, seed=7,
                                                                         max_new_tokens=16))])
    runner = GateRunner(tracking_uri="unused", model_name="m", candidate_version=2,
                        champion_version=champion_version, config=config, workdir=tmp_path)
    (runner.candidate_dir, runner.candidate) = cand
    if champion_version is not None:
        (runner.champion_dir, runner.champion) = champ
    return runner


def test_the_runner_runs_each_guard_on_both_models(checkpoints, tmp_path):
    extras: dict[str, float] = {}
    worse = _runner(tmp_path, checkpoints["worse"], checkpoints["champion"]).guard_gates(extras)
    assert [g.name for g in worse] == ["guard.toy", "guard.families"] and not worse[0].passed
    assert extras["guard.toy.tasks"] == 40.0
    assert extras["guard.toy.candidate_pass_rate"] < extras["guard.toy.champion_pass_rate"]
    same = _runner(tmp_path, checkpoints["champion"], checkpoints["champion"]).guard_gates({})
    assert same[0].passed and same[0].value == 0.0
    # a guard's results are cached apart from the target suite's (their keys differ)
    keys = {p.name for p in (tmp_path / "suite-cache").iterdir()}
    assert len(keys) == 2


def test_no_guard_without_a_champion(checkpoints, tmp_path):
    runner = _runner(tmp_path, checkpoints["champion"], None, champion_version=None)
    assert runner.guard_gates({}) == []


def test_guards_are_skipped_for_a_candidate_already_rejected_when_asked(checkpoints, tmp_path):
    def verdict_inputs(skip: bool, cand: str, work):
        from policy.loader import as_policy

        runner = _runner(work, checkpoints[cand], checkpoints["champion"])
        runner.candidate, runner.champion = as_policy(runner.candidate), as_policy(runner.champion)
        runner.config = runner.config.model_copy(update={"guards_skip_on_fail": skip})
        runner._record = lambda c, h, gates, extras: (gates, extras)
        return runner.run()

    gates, extras = verdict_inputs(True, "worse", tmp_path / "a")
    assert not all(g.passed for g in gates) and extras["guards.skipped"] == 1.0
    assert not [g for g in gates if g.name.startswith("guard.")]
    gates, extras = verdict_inputs(False, "worse", tmp_path / "b")
    assert "guards.skipped" not in extras
    assert [g.name for g in gates if g.name.startswith("guard.")] == ["guard.toy", "guard.families"]
