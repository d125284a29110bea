"""The one grader behind every code checker (JSONL suites, pyfuncs, HumanEval): a verdict read
from evidence, never from an exit code.

:func:`grade_asserts` and :func:`grade_check` run the harness (tasks/harness.py) in the sandbox
with the answer's code; the tests and a fresh nonce (``secrets.token_hex``) go in on the
sandbox's private channel (never stdin: the box's pid 1 holds stdio, which any process of the
box may open when the caller is not root), which the harness reads only after it has forked off
the process that runs the answer. The harness compares each call of the answer with the expected
value itself (type-strict ``==``) and writes one line ``<nonce> <json record>`` on the channel.
:func:`read_verdict` passes the task iff exactly one line carries the nonce and its record says
every test passed; a missing, duplicated or garbled verdict fails with the reason. An exit status
means nothing here: an answer that exits 0, kills the harness or prints a verdict of its own has
no record to show.

What this guarantees and what it does not: docs/GATE.md, "What the grader guarantees".
"""

from __future__ import annotations

import ast
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from tasks.harness import prepare
from tasks.sandbox import run_sandboxed

HARNESS_SOURCE = (Path(__file__).resolve().parent / "harness.py").read_text(encoding="utf-8")
DEADLINE_FRACTION = 0.8
"""The harness stops waiting for the answer at this fraction of the sandbox's wall-clock limit,
so a slow answer still gets a verdict (a timeout) rather than a killed harness."""


@dataclass(frozen=True)
class Verdict:
    """What the harness found. ``status``: passed, failed, timeout or no-verdict."""

    passed: bool
    status: str
    detail: str
    record: dict | None = None


def imported_modules(*sources: str) -> list[str]:
    """The top-level modules the trusted test code imports (the harness imports them before it
    forks; only their names reach the answer's process)."""
    names: set[str] = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module)
    return sorted(names)


def program(answer: str, timeout_s: float, preload: list[str] | tuple[str, ...] = ()) -> str:
    """The source the sandbox runs: the harness, then its call with the answer's code."""
    deadline = max(0.1, timeout_s * DEADLINE_FRACTION)
    return f"{HARNESS_SOURCE}\n\n_main({answer!r}, {deadline!r}, {list(preload)!r})\n"


def read_verdict(stdout: str, nonce: str, *, sandbox_status: str = "passed",
                 stderr: str = "") -> Verdict:
    """The verdict in the harness's output: exactly one line carrying ``nonce``, a record whose
    ``passed`` is True and whose tests all ran."""
    lines = [line for line in stdout.splitlines() if nonce in line]
    if len(lines) != 1:
        why = "no verdict" if not lines else f"{len(lines)} verdict lines"
        if sandbox_status == "timeout":
            return Verdict(False, "timeout", f"timeout ({why}): {stderr[-150:]}")
        return Verdict(False, "no-verdict", f"{why} (sandbox {sandbox_status}): {stderr[-150:]}")
    head, _, body = lines[0].partition(" ")
    try:
        record = json.loads(body) if head == nonce else None
    except ValueError:
        record = None
    if not (isinstance(record, dict) and type(record.get("passed")) is bool
            and type(record.get("ok")) is int and type(record.get("total")) is int):
        return Verdict(False, "no-verdict", f"garbled verdict line: {lines[0][:120]!r}")
    passed = record["passed"] and record["ok"] == record["total"] > 0
    if passed:
        return Verdict(True, "passed", f"passed: {record['ok']}/{record['total']} tests", record)
    status = "timeout" if record.get("timeout") is True else "failed"
    return Verdict(False, status, f"{status}: {record['ok']}/{record['total']} tests; "
                   f"{record.get('detail', '')}", record)


def run(answer: str, spec: dict, *, timeout_s: float) -> Verdict:
    """Run the harness on ``answer`` with the test ``spec`` (see tasks/harness.py)."""
    nonce = secrets.token_hex(16)
    payload = (nonce + "\n" + json.dumps(prepare(spec))).encode()
    preload = imported_modules(spec.get("prelude", ""), spec.get("test", ""),
                               "\n".join(spec.get("tests", ())))
    result = run_sandboxed(program(answer, timeout_s, preload), timeout_s=timeout_s,
                           channel=payload)
    return read_verdict(result.channel, nonce,
                        sandbox_status=result.status, stderr=result.stderr)


def grade_asserts(answer: str, tests: list[str] | tuple[str, ...], *, timeout_s: float
                  ) -> Verdict:
    """Assert statements over the answer's functions (a JSONL suite's ``tests``)."""
    return run(answer, {"kind": "asserts", "tests": list(tests)}, timeout_s=timeout_s)


def grade_check(answer: str, *, prelude: str, test: str, entry_point: str, timeout_s: float
                ) -> Verdict:
    """HumanEval style: ``check(candidate)`` from ``test`` after the trusted ``prelude`` (the
    problem's prompt), ``candidate`` being the answer's ``entry_point``."""
    spec = {"kind": "check", "prelude": prelude, "test": test, "entry_point": entry_point}
    return run(answer, spec, timeout_s=timeout_s)
