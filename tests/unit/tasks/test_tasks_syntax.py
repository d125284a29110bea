"""Degenerate answers (greedy runs of one token) are malformed answers in every checker, never an
exception of this process: CPython's compiler raises MemoryError or RecursionError on them."""

from __future__ import annotations

import pytest

from tasks import syntax
from tasks.syntax import check_syntax

DASHES = "-" * 6000  # MemoryError in compile(): 95 SmolLM2 tokens
RETURN_DASHES = "def f(x):\n    return " + "-" * 3000 + "x\n"  # RecursionError: 51 tokens
PARENS = "x = " + "(" * 5000
ATTRS = "y = x" + ".a" * 4000
DEGENERATE = [DASHES, RETURN_DASHES, PARENS, ATTRS]


@pytest.mark.parametrize("source", DEGENERATE)
def test_degenerate_sources_are_malformed_with_a_reason(source):
    result = check_syntax(source)
    assert not result.ok and result.tree is None
    assert result.reason.startswith("does not compile: ")


@pytest.mark.parametrize(("source", "error"), [(DASHES, "MemoryError"),
                                               (RETURN_DASHES, "RecursionError")])
def test_what_the_compiler_raises_past_the_bounds_is_malformed_too(monkeypatch, source, error):
    monkeypatch.setattr(syntax, "MAX_OPERATORS_PER_LINE", 10**9)
    result = check_syntax(source)
    assert not result.ok and result.reason.startswith(f"does not compile: {error}")


@pytest.mark.parametrize(("source", "ok"), [
    ("def f(x):\n    return -x + (x ** 2) - ~x\n", True),
    ("x = [" + ", ".join(f"-{i}" for i in range(300)) + "]\n", True),
    ("return 1\n", False),  # a compile-time error, not only a parse error
    ("a = 1\x00", False),  # ValueError in older interpreters
    ("x" * (syntax.MAX_SOURCE_CHARS + 1), False),
])
def test_ordinary_code_compiles_and_errors_are_malformed(source, ok):
    assert check_syntax(source).ok is ok


def test_eval_mode_gives_the_expression():
    result = check_syntax("max(a, 2) + 1", mode="eval")
    assert result.ok and type(result.tree).__name__ == "Expression"


@pytest.mark.parametrize("answer", DEGENERATE)
def test_pyfuncs_and_jsonl_checkers_call_a_degenerate_answer_malformed(answer):
    from tasks.pyfuncs import BY_FAMILY, grade, instances

    task = instances(BY_FAMILY["add_const"], 1, seed=0)[0]
    result = grade(task, answer)
    assert result.malformed and not result.passed and "does not compile" in result.detail


@pytest.mark.parametrize("completion", [DASHES, "    return " + "-" * 3000 + "x\n",
                                        "    return " + "(" * 5000])
def test_humaneval_checker_calls_a_degenerate_completion_malformed(completion):
    from tasks.humaneval import grade, load_problems

    problem = load_problems()["HumanEval/0"]
    for chat in (False, True):
        result = grade(problem, completion, timeout_s=5.0, chat=chat)
        assert result.malformed and not result.passed and "does not compile" in result.detail


@pytest.mark.parametrize("answer", ["-" * 300 + "1", "(" * 199 + "1", DASHES])
def test_toy_checker_calls_a_degenerate_answer_malformed(answer):
    from tasks.toy import check, generate_tasks

    task = generate_tasks(1, seed=0, split="heldout")[0]
    result = check(task, answer)
    assert result.malformed and not result.passed
