"""Nothing secret leaves a grade: the box cannot read the caller's environment, and what the
program prints is scrubbed of the caller's environment values and of key material before it
reaches a grade's detail (the text the gate stores in ``gate/candidate_suite.json``)."""

from __future__ import annotations

import uuid

import pytest

from gating.records import SuiteResult, TaskOutcome
from tasks.jsonl_suite import grade as jsonl_grade
from tasks.jsonl_suite import parse_line
from tasks.sandbox import REDACTED, run_sandboxed, scrub

PEM = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
       "-----END OPENSSH PRIVATE KEY-----")


def test_scrub_removes_environment_values_and_key_material():
    env = {"DB_URL": "postgres://u:hunter22@db/x", "SHORT": "abc", "LANG": "en_US.UTF-8"}
    text = ("url postgres://u:hunter22@db/x short abc lang en_US.UTF-8\n"
            f"{PEM}\nopenai sk-proj-AbCdEfGhIjKlMnOpQrSt aws AKIAIOSFODNN7EXAMPLE\n"
            "API_KEY=0123456789abcdef export GITHUB_TOKEN='ghp_abcdefghijklmnopqrstuvwx'\n"
            "{\"secret\": \"c2VjcmV0LXZhbHVlLWhlcmU=\"} keyboard=qwerty12345 ok")
    out = scrub(text, env)
    assert out == (f"url {REDACTED} short abc lang en_US.UTF-8\n"
                   f"{REDACTED}\nopenai {REDACTED} aws {REDACTED}\n"
                   f"API_KEY={REDACTED} export GITHUB_TOKEN='{REDACTED}'\n"
                   f"{{\"secret\": \"{REDACTED}\"}} keyboard=qwerty12345 ok")


def _attack(secret_literal: str, end: str = "raise SystemExit(1)\n") -> str:
    """A program that hunts for secrets and prints what it finds (and a secret it was told)."""
    return (
        "import os, sys\n"
        "for p in ['/proc/%d/environ' % os.getppid(), '/proc/1/environ', '/proc/self/environ']:\n"
        "    try:\n"
        "        sys.stderr.write(open(p).read().replace('\\0', '\\n'))\n"
        "    except OSError as e:\n"
        "        print(e, file=sys.stderr)\n"
        f"print({secret_literal!r}, file=sys.stderr)\n"
        f"print({secret_literal!r})\n"
        f"print({PEM!r}, file=sys.stderr)\n"
        f"print({secret_literal!r}, file=sys.stderr, flush=True)\n"
        + end
    )


def test_a_planted_secret_never_leaves_the_box(monkeypatch):
    secret = "tok-" + uuid.uuid4().hex
    monkeypatch.setenv("RATCHET_PLANTED", secret)
    r = run_sandboxed(_attack(secret), timeout_s=10)
    assert r.status == "failed"
    for text in (r.stdout, r.stderr):
        assert secret not in text and "BEGIN OPENSSH" not in text
    assert REDACTED in r.stderr


@pytest.mark.parametrize("end", ["raise SystemExit(1)\n", "os.kill(os.getppid(), 9)\n"])
def test_a_planted_secret_never_reaches_the_stored_suite_result(monkeypatch, end):
    """A user's suite task whose hidden asserts and a model's answer both hunt for secrets: the
    grade's detail, stored per task in the gate's ``candidate_suite.json``, holds none. Killing
    the harness leaves no verdict, and the detail then quotes the box's stderr, scrubbed."""
    secret = "tok-" + uuid.uuid4().hex
    monkeypatch.setenv("RATCHET_PLANTED", secret)
    task = parse_line('{"task_id": "leak", "prompt": "Write f().", "entry_point": "f", '
                      '"tests": ["assert f() == 1"]}')
    reply = "```python\ndef f():\n    return 0\n\n" + _attack(secret, end) + "```"
    result = jsonl_grade(task, reply, timeout_s=10)
    assert not result.passed
    stored = SuiteResult(tasks=[TaskOutcome(
        task_id=task.task_id, kind=task.kind, passed=result.passed, malformed=result.malformed,
        no_edit=result.no_edit, completion_tokens=1, score=0.0, detail=result.detail[:200],
    )]).model_dump_json()
    assert secret not in stored and "OPENSSH" not in stored
    if "kill" in end:
        assert REDACTED in stored
