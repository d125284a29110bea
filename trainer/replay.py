"""Replay of the champion's own verified answers on prior-distribution prompts.

:func:`verified_answers` has the champion answer the first ``n`` tasks of a JSONL task file
greedily, grades each answer with the task's own checker (a line with ``tests``: the sandboxed
asserts of ``tasks.jsonl_suite.grade``, the gate's grader; a line with ``cases``: a toy task,
``tasks.toy.check``) and keeps the passing answers as greedy rows (temperature 0, reward 1) with
the champion's routing, so the trainer's greedy imitation term (inside the champion's trust
region) trains on them next to the traffic rows.

Left out: sampling several answers per task, and answers the champion got wrong (there is no
verified target to replay for them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from policy.base import Policy
from tasks.toy import CheckResult
from trainer.data import Sample, _fit


def load_graded_tasks(path: str | Path, n: int, *, timeout_s: float,
                      ) -> list[tuple[str, Callable[[str], CheckResult]]]:
    """(prompt, grade(reply)) of the first ``n`` tasks of ``path``."""
    from tasks import jsonl_suite, toy

    path = Path(path)
    out: list[tuple[str, Callable[[str], CheckResult]]] = []
    for i, raw in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if len(out) >= n:
            break
        if not raw.strip():
            continue
        record = json.loads(raw)
        if "tests" in record:
            task = jsonl_suite.parse_line(raw, path=path, line=i)
            out.append((task.prompt, lambda reply, t=task: jsonl_suite.grade(
                t, reply, timeout_s=timeout_s)))
        elif "cases" in record:
            task = toy.Task.from_dict(record)
            out.append((task.prompt, lambda reply, t=task: toy.check(t, reply)))
        else:
            raise ValueError(f"{path}:{i}: a replay task needs 'tests' (a suite task) or "
                             f"'cases' (a toy task) to be graded")
    if not out:
        raise ValueError(f"{path}: no tasks")
    return out


def verified_answers(champion: Policy, path: str | Path, *, n: int, max_new_tokens: int,
                     timeout_s: float, version: int) -> tuple[list[Sample], int]:
    """(the champion's passing greedy answers as greedy samples, tasks tried)."""
    tasks = load_graded_tasks(path, n, timeout_s=timeout_s)
    prompt_ids = [champion.encode_prompt(p) for p, _ in tasks]
    outs = champion.generate(prompt_ids, max_new_tokens=max_new_tokens, temperature=0.0)
    samples = []
    for (prompt, grade), ids, o in zip(tasks, prompt_ids, outs):
        if not o.token_ids or not grade(o.text).passed:
            continue
        s = Sample(list(ids), list(o.token_ids), list(o.logprobs), o.routed_experts, 1.0,
                   "replay", prompt, version, 0.0, prompt_routes=o.prompt_routed_experts)
        _fit(s, champion.max_seq_len)
        samples.append(s)
    return samples, len(tasks)
