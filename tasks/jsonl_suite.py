"""Your own gate suite: tasks from a JSONL file, graded by their asserts in the sandbox.

One task per line (UTF-8; lines are split on ``"\\n"`` only)::

    {"task_id": "pyfunc/clamp/0007",
     "prompt": "Write a Python function clamp(x, lo, hi) that ...",
     "messages": [{"role": "user", "content": "..."}],
     "entry_point": "clamp",
     "tests": ["assert clamp(5, 0, 3) == 3"],
     "family": "clamp", "function": "clamp/hi=12,lo=3"}

``task_id``, ``prompt`` and ``tests`` are required; ``messages`` (the chat turns, default one user
turn holding ``prompt``), ``entry_point`` (the function the tests call) and ``family`` (a template
id, for transfer splits) and ``function`` (the independent function asked for: family and
constants; :func:`cluster_key`) are optional. Statistics over a suite cluster by ``function``
when a task has one, by prompt text otherwise. Write files with
``json.dumps(task, ensure_ascii=True)`` per line (:func:`dump_tasks`).

Grading (:func:`grade`): the code is the first fenced block of the reply (the whole reply when it
has none); :func:`tasks.grader.grade_asserts` runs it in the sandbox and evaluates the asserts
outside the answer's reach, type-strictly; the task passes iff the harness's verdict says every
assert passed (never on an exit code). An empty reply is a no-edit, code that does not compile (or
lacks the entry point) is malformed.

Deliberately left out: choosing chat or completion prompting (the gate asks the policy's
tokenizer: gating/suite.py) and sampling several answers per task (the gate is greedy, pass@1).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from tasks.grader import grade_asserts
from tasks.humaneval import extract_code
from tasks.syntax import check_syntax
from tasks.toy import CheckResult, Task

REQUIRED = ("task_id", "prompt", "tests")
OPTIONAL = ("messages", "entry_point", "family", "function")


@dataclass(frozen=True)
class JsonlTask(Task):
    """A :class:`tasks.toy.Task` with the chat turns and hidden asserts of a JSONL line."""

    messages: tuple[tuple[str, str], ...] = ()
    """(role, content) turns; one user turn holding the prompt when the line has none."""
    tests: tuple[str, ...] = ()
    entry_point: str | None = None
    family: str | None = None
    function: str | None = None
    """The independent function the task asks for (family + constants, e.g. ``count_above/k=3``):
    tasks asking for the same function are one cluster for the statistics."""

    def chat(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


def _field_error(path: Path, line: int, msg: str) -> ValueError:
    return ValueError(f"{path}:{line}: {msg}")


def parse_line(raw: str, *, path: Path = Path("<jsonl>"), line: int = 1) -> JsonlTask:
    """One JSONL line as a task; raises ValueError naming the line and the field."""
    try:
        d = json.loads(raw)
    except json.JSONDecodeError as e:
        raise _field_error(path, line, f"not JSON: {e}") from e
    if not isinstance(d, dict):
        raise _field_error(path, line, f"a task is a JSON object, got {type(d).__name__}")
    unknown = set(d) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        raise _field_error(path, line, f"unknown field(s) {sorted(unknown)}")
    for key in REQUIRED:
        if key not in d:
            raise _field_error(path, line, f"missing field {key!r}")
    if not isinstance(d["task_id"], str) or not d["task_id"]:
        raise _field_error(path, line, f"task_id must be a non-empty string, got {d['task_id']!r}")
    if not isinstance(d["prompt"], str) or not d["prompt"].strip():
        raise _field_error(path, line, "prompt must be a non-empty string")
    tests = d["tests"]
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise _field_error(path, line, "tests must be a non-empty list of strings")
    messages = d.get("messages") or [{"role": "user", "content": d["prompt"]}]
    if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str) for m in messages):
        raise _field_error(path, line, "messages must be a list of {role, content} strings")
    entry = d.get("entry_point")
    if entry is not None and (not isinstance(entry, str) or not entry.isidentifier()):
        raise _field_error(path, line, f"entry_point must be an identifier, got {entry!r}")
    family = d.get("family")
    function = d.get("function")
    if function is not None and (not isinstance(function, str) or not function):
        raise _field_error(path, line, f"function must be a non-empty string, got {function!r}")
    return JsonlTask(
        task_id=d["task_id"], kind=str(family) if family else "jsonl", prompt=d["prompt"],
        reference="", cases=(), messages=tuple((m["role"], m["content"]) for m in messages),
        tests=tuple(tests), entry_point=entry, family=None if family is None else str(family),
        function=function,
    )


def cluster_key(task: Task | dict) -> str:
    """The independent unit a task belongs to for the statistics: its ``function`` when it has
    one, else its prompt text (a task record or a task)."""
    if isinstance(task, dict):
        return task.get("function") or task["prompt"]
    return getattr(task, "function", None) or task.prompt


def load_tasks(path: str | Path) -> list[JsonlTask]:
    """Every task of a JSONL suite file, in file order; task ids must be unique."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    tasks: list[JsonlTask] = []
    seen: set[str] = set()
    for i, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        task = parse_line(raw, path=path, line=i)
        if task.task_id in seen:
            raise _field_error(path, i, f"duplicate task_id {task.task_id!r}")
        seen.add(task.task_id)
        tasks.append(task)
    if not tasks:
        raise ValueError(f"{path}: no tasks")
    return tasks


def dump_tasks(tasks: list[dict], path: str | Path) -> None:
    """Write task dicts in the suite format (ASCII-escaped JSON, one per line)."""
    lines = [json.dumps(t, ensure_ascii=True) for t in tasks]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def program(task: JsonlTask, code: str) -> str:
    """The answer's code (without an ``if __name__`` block, which would run its demo), then the
    hidden asserts: what must compile for the answer not to be malformed."""
    return code.split("\nif __name__")[0].rstrip() + "\n\n" + "\n".join(task.tests) + "\n"


def grade(task: JsonlTask, reply: str, *, timeout_s: float) -> CheckResult:
    """Pass iff the grader's verdict says every assert of the task passed on the reply's code."""
    code = extract_code(reply)
    if not code.strip():
        return CheckResult(False, False, True, "empty answer")
    source = program(task, code)
    syntax = check_syntax(source, filename="<jsonl-task>")
    if not syntax.ok:
        return CheckResult(False, True, False, syntax.reason)
    if task.entry_point and not re.search(
            rf"^\s*(async\s+)?def\s+{re.escape(task.entry_point)}\s*\(|^{re.escape(task.entry_point)}\s*=",
            code, re.MULTILINE):
        return CheckResult(False, True, False, f"no definition of {task.entry_point}")
    verdict = grade_asserts(code.split("\nif __name__")[0], task.tests, timeout_s=timeout_s)
    return CheckResult(verdict.passed, False, False, verdict.detail)


def jsonl_suite(*, path: str | Path, size: int, seed: int, timeout_s: float):
    """``(tasks, checker)``: ``size`` tasks of the file drawn with ``seed`` (file order kept; all
    of them when ``size`` >= the file's tasks)."""
    tasks = load_tasks(path)
    if size < len(tasks):
        keep = set(random.Random(seed).sample(range(len(tasks)), size))
        tasks = [t for i, t in enumerate(tasks) if i in keep]

    def checker(task: Task, answer: str, *, chat: bool = False) -> CheckResult:
        if not isinstance(task, JsonlTask):
            raise TypeError(f"the JSONL checker grades JsonlTask, got {type(task).__name__}")
        return grade(task, answer, timeout_s=timeout_s)

    return tasks, checker
