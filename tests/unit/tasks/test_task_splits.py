"""Train, gate pool, sealed (fresh) set and the tuning draws are disjoint by prompt TEXT.

The fresh set used to share 351 of its 2,000 tasks (98 prompts) with the seed-0 gate suite, so
the loop's fresh-set gain was partly scored on the tasks that selected its promotions.
"""

from __future__ import annotations

from gating.config import SuiteConfig
from gating.suite import build_suite
from tasks.toy import FRESH_EXCLUDES, fresh_tasks, generate_tasks, is_sealed


def _prompts(tasks) -> set[str]:
    return {t.prompt for t in tasks}


def test_train_gate_pool_sealed_and_tuning_are_disjoint_by_prompt_text():
    train = _prompts(generate_tasks(20_000, 0, "train")) | _prompts(
        generate_tasks(20_000, 1, "train"))
    gate = set().union(*(_prompts(build_suite(SuiteConfig(), decision=k)[0]) for k in range(20)))
    sealed = _prompts(fresh_tasks())
    tuning = set().union(*(_prompts(generate_tasks(n, seed, "heldout"))
                           for seed, n in FRESH_EXCLUDES))
    assert len(gate) > 500 and len(sealed) > 500
    assert not train & gate
    assert not train & sealed
    assert not gate & sealed
    assert not tuning & sealed


def test_sealed_is_an_alias_of_fresh_and_a_function_of_the_prompt():
    assert [t.task_id for t in generate_tasks(50, 3, "sealed")] == [
        t.task_id for t in generate_tasks(50, 3, "fresh")]
    assert all(is_sealed(t) for t in fresh_tasks(300))
    assert not any(is_sealed(t) for t in generate_tasks(300, 0, "gate"))


def test_consecutive_gate_decisions_draw_different_suites():
    config = SuiteConfig(size=60)
    ids = [[t.task_id for t in build_suite(config, decision=k)[0]] for k in range(4)]
    assert all(a != b for a, b in zip(ids, ids[1:]))
    fixed = config.model_copy(update={"draw": "fixed"})
    assert build_suite(fixed, decision=1)[0] == build_suite(fixed, decision=2)[0]
