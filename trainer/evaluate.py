"""Held-out scoring of a model on the toy task family: greedy (or sampled) pass rate.

The pass/fail verdict is ``tasks.toy.check`` — the same function the simulator's rewards
use. Left out: the champion-vs-candidate decision (gating/ owns it).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from policy.toy.generate import generate
from policy.toy.model import MoETransformer
from tasks.toy import Task, check


@dataclass
class EvalResult:
    """pass_rate in [0, 1]; mean_tokens counts generated tokens (EOS included); ``passed`` and
    ``tokens`` per task, in the order of the tasks (for paired comparisons)."""

    pass_rate: float
    mean_tokens: float
    malformed_rate: float
    n: int
    by_kind: dict[str, float] = field(default_factory=dict)
    passed: list[bool] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)


def evaluate(
    model: MoETransformer,
    tasks: list[Task],
    *,
    temperature: float = 0.0,
    max_new_tokens: int = 32,
    batch_size: int = 128,
    seed: int = 0,
) -> EvalResult:
    """Generate an answer per task (greedy by default) and check it."""
    passed: dict[str, list[bool]] = defaultdict(list)
    per_task: list[bool] = []
    per_tokens: list[int] = []
    malformed = 0
    for start in range(0, len(tasks), batch_size):
        chunk = tasks[start:start + batch_size]
        gens = generate(model, [t.prompt for t in chunk], max_new_tokens=max_new_tokens,
                        temperature=temperature, seed=seed + start)
        for task, g in zip(chunk, gens):
            r = check(task, g.text)
            passed[task.kind].append(r.passed)
            per_task.append(r.passed)
            per_tokens.append(len(g.token_ids))
            malformed += r.malformed
    n = max(len(tasks), 1)
    return EvalResult(sum(per_task) / n, sum(per_tokens) / n, malformed / n, len(tasks),
                      {k: sum(v) / len(v) for k, v in sorted(passed.items())}, per_task,
                      per_tokens)
