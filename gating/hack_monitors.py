"""The gate's hook into the answer monitors (rewards/monitors.py ``hack_flags``).

``hack_figures(tasks, candidate, champion)`` flags the candidate's suite run: passing answers
shorter than every correct reference of their task, passing answers that exit the process, and
a rise of empty or refused answers against the champion on the same tasks. It returns them as
``monitor.*`` figures for the verdict's ``extras`` (``monitor.flagged`` counts the flags that
fired). Recorded, not gated: the decision rule lives in gating/gates.py.

Deliberately left out: acting on a flag. The answers are the ones the record keeps
(``TaskOutcome.answer``, the first 200 characters), so an exit call past them is not seen.
"""

from __future__ import annotations

from collections.abc import Sequence

from gating.records import SuiteResult
from rewards.monitors import Answer, flag_figures, hack_flags
from tasks.toy import Task


def _answers(result: SuiteResult) -> list[Answer]:
    return [Answer(t.task_id, t.answer, t.passed) for t in result.tasks]


def hack_figures(
    tasks: Sequence[Task], candidate: SuiteResult, champion: SuiteResult | None
) -> dict[str, float]:
    """``monitor.*`` figures of the candidate's run (see the module docstring)."""
    answers = _answers(candidate)
    previous = None if champion is None else _answers(champion)
    references = {t.task_id: [t.reference] for t in tasks if t.reference}
    return flag_figures(hack_flags(answers, references, previous), answers, previous)
