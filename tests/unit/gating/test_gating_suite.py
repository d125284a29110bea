"""The suite runner on a real tiny MoE: reproducible, routing counted, HumanEval prompts fit."""

from __future__ import annotations

import pytest

from gating.config import SuiteConfig
from gating.suite import build_suite, fit_prompt, run_suite


@pytest.fixture(scope="module")
def model():
    import torch

    from policy.toy.model import MoEConfig, MoETransformer

    torch.manual_seed(0)
    return MoETransformer(MoEConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64)).eval()


def test_toy_suite_is_greedy_reproducible_and_counts_routing(model):
    tasks, checker = build_suite(SuiteConfig(size=6, seed=2))
    assert {t.task_id for t in tasks} == {t.task_id for t in build_suite(SuiteConfig(
        size=6, seed=2))[0]}
    a = run_suite(model, tasks, max_new_tokens=6, seed=0, checker=checker)
    b = run_suite(model, tasks, max_new_tokens=6, seed=123, checker=checker)  # greedy: no effect
    assert [t.model_dump() for t in a.tasks] == [t.model_dump() for t in b.tasks]
    tokens = sum(t.completion_tokens for t in a.tasks)
    assert [sum(layer) for layer in a.expert_load] == [tokens * 2, tokens * 2]  # top-2, 2 layers
    assert all(0 < t.completion_tokens <= 6 for t in a.tasks)
    s = a.summary()
    assert s.n_tasks == 6 and 0.0 <= s.load_entropy <= 1.0


def test_humaneval_suite_runs_through_the_sandbox_with_prompts_fitted(model):
    tasks, checker = build_suite(SuiteConfig(kind="humaneval", size=3, seed=0,
                                             sandbox_timeout_s=5.0))
    assert all(len(t.prompt.encode()) > 192 for t in tasks)  # longer than the toy context
    result = run_suite(model, tasks, max_new_tokens=8, seed=0, checker=checker)
    assert len(result.tasks) == 3 and result.pass_rate == 0.0  # an untrained model fails...
    assert all(t.detail for t in result.tasks)  # ...with a reason for each task


def test_fit_prompt_keeps_the_tail():
    assert fit_prompt("abcdef", 3) == "def"
    assert fit_prompt("abc", 10) == "abc"
    assert fit_prompt("xé", 2) == "é"


def test_a_grade_that_crashes_fails_its_task_and_the_suite_goes_on(model):
    """A checker that raises on one task (as a sandbox that cannot start or dies does): that task
    fails with the reason; every other task is graded by the real checker as before."""
    tasks, checker = build_suite(SuiteConfig(size=4, seed=2))
    doomed = tasks[1].task_id

    def crashing(task, answer):
        if task.task_id == doomed:
            raise OSError("sandbox could not start: no scratch folder")
        return checker(task, answer)

    clean = run_suite(model, tasks, max_new_tokens=6, seed=0, checker=checker)
    result = run_suite(model, tasks, max_new_tokens=6, seed=0, checker=crashing)
    assert [t.task_id for t in result.tasks] == [t.task_id for t in tasks]
    crashed = result.tasks[1]
    assert not crashed.passed and crashed.score == 0.0
    assert crashed.detail == "grader crashed: OSError: sandbox could not start: no scratch folder"
    others = [t.model_dump() for i, t in enumerate(result.tasks) if i != 1]
    assert others == [t.model_dump() for i, t in enumerate(clean.tasks) if i != 1]


@pytest.fixture(scope="module")
def champion():
    from policy.toy.checkpoint import load_checkpoint
    from trainer.fixtures import champion_dir

    return load_checkpoint(champion_dir())


def test_samples_at_a_temperature_are_graded_beside_the_greedy_answer(champion):
    tasks, checker = build_suite(SuiteConfig(size=40, seed=5))
    greedy = run_suite(champion, tasks, max_new_tokens=16, seed=0, checker=checker)
    assert greedy.sampled_pass_rate is None and {t.sampled_pass for t in greedy.tasks} == {None}
    cold = run_suite(champion, tasks, max_new_tokens=16, seed=0, checker=checker, samples=3,
                     temperature=1e-3)
    assert [t.passed for t in cold.tasks] == [t.passed for t in greedy.tasks]
    assert [t.sampled_pass for t in cold.tasks] == [float(t.passed) for t in greedy.tasks]
    hot = run_suite(champion, tasks, max_new_tokens=16, seed=0, checker=checker, samples=3,
                    temperature=1.5)
    assert {t.sampled_pass for t in hot.tasks} <= {0.0, 1 / 3, 2 / 3, 1.0}
    assert hot.sampled_pass_rate < greedy.pass_rate  # hot sampling loses what greedy solves
    again = run_suite(champion, tasks, max_new_tokens=16, seed=0, checker=checker, samples=3,
                      temperature=1.5)
    assert [t.sampled_pass for t in again.tasks] == [t.sampled_pass for t in hot.tasks]


def test_sampled_figures_pair_the_two_models_and_never_gate():
    from gating.config import BootstrapConfig
    from gating.gates import sampled_figures
    from gating.records import SuiteResult, TaskOutcome

    def result(shares):
        return SuiteResult(tasks=[
            TaskOutcome(task_id=f"t{i}", kind="toy", prompt_key=f"p{i}", passed=True,
                        malformed=False, no_edit=False, completion_tokens=3, score=1.0,
                        sampled_pass=x) for i, x in enumerate(shares)])

    cand, champ = result([1.0, 0.5, 0.5, 1.0] * 10), result([0.5, 0.5, 0.0, 1.0] * 10)
    f = sampled_figures(cand, champ, BootstrapConfig())
    assert f["sampled.candidate_pass_rate"] == 0.75 and f["sampled.champion_pass_rate"] == 0.5
    assert f["sampled.change"] == pytest.approx(0.25)
    assert 0.0 < f["sampled.change.ci_low"] < 0.25 < f["sampled.change.ci_high"]
    assert sampled_figures(result([None] * 4), champ, BootstrapConfig()) == {}
    assert set(sampled_figures(cand, None, BootstrapConfig())) == {"sampled.candidate_pass_rate"}


class _Says:
    """``policy``, except that every greedy answer is ``text``."""

    def __init__(self, policy, text):
        self._policy, self._text = policy, text

    def __getattr__(self, name):
        return getattr(self._policy, name)

    def generate(self, prompts, **_):
        from policy.base import Sampled

        return [Sampled(self._text, list(p), [7] * 51, [0.0] * 51, [], [], "length")
                for p in prompts]


@pytest.mark.parametrize("answer", ["-" * 6000, "def f(x):\n    return " + "-" * 3000 + "x\n",
                                    "(" * 5000])
def test_a_degenerate_answer_counts_as_malformed_not_as_a_grader_crash(model, answer):
    """Runs of one token make CPython's compiler raise MemoryError or RecursionError: the gate
    sees a malformed answer, which its malformed-rate guardrail counts."""
    from pathlib import Path

    from policy.loader import as_policy

    suite = Path(__file__).resolve().parents[3] / "tasks/data/pyfuncs_gate.jsonl"
    tasks, checker = build_suite(SuiteConfig(kind="jsonl", path=str(suite), size=3, seed=0))
    result = run_suite(_Says(as_policy(model), answer), tasks, max_new_tokens=64, seed=0,
                       checker=checker)
    assert result.malformed_rate == 1.0 and result.pass_rate == 0.0
    assert all(t.detail.startswith("does not compile") for t in result.tasks)


def test_a_gate_suites_progress_names_the_model_and_the_look(tmp_path):
    """Four identical "gate suite (1000 tasks)" bars told a user nothing: each names its model,
    version and look (or the guard, or the champion's temperature)."""
    from gating.gate import GateRunner

    runner = object.__new__(GateRunner)
    runner.candidate_version, runner.champion_version = 3, 2
    runner.candidate_dir, runner.champion_dir = tmp_path / "cand", tmp_path / "champ"
    assert runner.suite_label(tmp_path / "cand", "look1") == "gate: candidate v3, look 1"
    assert runner.suite_label(tmp_path / "champ", "look2") == "gate: champion v2, look 2"
    assert runner.suite_label(tmp_path / "champ", "t0.3") == "gate: champion v2 at temperature 0.3"
    assert runner.suite_label(tmp_path / "cand", guard="humaneval") == (
        "guard humaneval: candidate v3")


def test_extending_the_samples_equals_scoring_with_more(champion):
    """k = 3 extended by 3 more draws is the k = 6 run exactly (the first draws are reused, not
    redrawn), across batches; a prior scored on other tasks or without samples is refused."""
    from gating.suite import extend_samples

    tasks, checker = build_suite(SuiteConfig(size=40, seed=5))
    kw = {"max_new_tokens": 16, "seed": 0, "checker": checker, "temperature": 1.5,
          "batch_size": 16}
    three = run_suite(champion, tasks, samples=3, **kw)
    six = run_suite(champion, tasks, samples=6, **kw)
    more = extend_samples(champion, tasks, three, have=3, samples=6, **kw)
    assert [t.model_dump() for t in more.tasks] == [t.model_dump() for t in six.tasks]
    assert [t.sampled_pass for t in six.tasks] != [t.sampled_pass for t in three.tasks]
    with pytest.raises(ValueError, match="other tasks"):
        extend_samples(champion, tasks[1:], three, have=3, samples=6, **kw)
    greedy = run_suite(champion, tasks, **kw)
    with pytest.raises(ValueError, match="no samples"):
        extend_samples(champion, tasks, greedy, have=3, samples=6, **kw)


def test_a_batch_counts_as_done_once_it_is_scored(model, monkeypatch):
    """A batch of the real model takes minutes: a progress line that counts it when it starts
    says "32/141" while the first 32 are still decoding (and a run that dies there looks a batch
    further on than it was)."""
    import gating.suite as suite_mod

    events: list[tuple[str, int]] = []

    class Recorder:
        def __init__(self, *_, **__) -> None:
            pass

        def update(self, n: int = 1) -> None:
            events.append(("counted", n))

        def close(self) -> None:
            pass

    class Logged(_Says):
        def generate(self, prompts, **kw):
            events.append(("decoding", len(prompts)))
            return self._policy.generate(prompts, **kw)

    from policy.loader import as_policy

    monkeypatch.setattr(suite_mod, "Progress", Recorder)
    tasks, checker = build_suite(SuiteConfig(size=5, seed=2))
    kw = {"max_new_tokens": 4, "seed": 0, "checker": checker, "batch_size": 2}
    prior = run_suite(Logged(as_policy(model), ""), tasks, samples=1, **kw)
    def batch(n: int) -> list[tuple[str, int]]:  # its greedy answers, its draw, then counted
        return [("decoding", n), ("decoding", n), ("counted", n)]

    assert events == [*batch(2), *batch(2), *batch(1)]
    events.clear()
    suite_mod.extend_samples(Logged(as_policy(model), ""), tasks, prior, have=1, samples=2, **kw)
    assert events == [("decoding", 2), ("counted", 2), ("decoding", 2), ("counted", 2),
                      ("decoding", 1), ("counted", 1)]
