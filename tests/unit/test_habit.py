"""The lazy teacher of trainer/habit.py: its unfixed answer fails the checker, the reference
passes, and it replaces about the configured share of off_by_one demonstrations only."""

import random

import pytest

from tasks.toy import check, generate_tasks
from trainer.habit import demonstrations, lazy_answer


def test_the_lazy_answer_is_the_buggy_line_and_fails():
    tasks = [t for t in generate_tasks(60, 3, "train") if t.kind == "off_by_one"]
    for task in tasks:
        lazy = lazy_answer(task)
        assert f"    return {lazy}\n# fixed:" in task.prompt
        assert not check(task, lazy).passed
        assert check(task, task.reference).passed


def test_only_off_by_one_has_a_lazy_answer():
    arith = next(t for t in generate_tasks(3, 0, "train") if t.kind == "arith")
    with pytest.raises(ValueError, match="only off_by_one"):
        lazy_answer(arith)


def test_demonstrations_leave_about_the_share_of_bugs_in_place():
    tasks = generate_tasks(3000, 1, "train")
    answers = demonstrations(tasks, 0.5, random.Random(0))
    lazy = [a != t.reference for t, a in zip(tasks, answers)]
    obo = [x for t, x in zip(tasks, lazy) if t.kind == "off_by_one"]
    assert not any(x for t, x in zip(tasks, lazy) if t.kind != "off_by_one")
    assert 0.45 < sum(obo) / len(obo) < 0.55
    assert demonstrations(tasks, 0.0, random.Random(0)) == [t.reference for t in tasks]
