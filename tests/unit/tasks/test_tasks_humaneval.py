"""HumanEval grading of chat replies (hand-written, run in the real sandbox): a fenced block, an
unfenced reply, prose around a fence, a block that defines the entry point (the whole program)
or only a body (appended to the prompt), an unclosed fence; raw completions graded as before."""

from __future__ import annotations

import pytest

from tasks.humaneval import chat_prompt, chat_source, extract_code, grade, load_problems

SOLUTION = """def has_close_elements(numbers: List[float], threshold: float) -> bool:
    for i, a in enumerate(numbers):
        for b in numbers[i + 1:]:
            if abs(a - b) < threshold:
                return True
    return False
"""
WRONG = "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n" \
        "    return False\n"
BODY = """    return any(abs(a - b) < threshold
               for i, a in enumerate(numbers) for b in numbers[i + 1:])
"""


@pytest.fixture(scope="module")
def problem():
    return load_problems()["HumanEval/0"]


def _passes(problem, reply: str, chat: bool = True) -> bool:
    return grade(problem, reply, timeout_s=10, chat=chat).passed


def test_fenced_reply_with_prose_around_it_passes(problem):
    reply = f"Sure! Here it is:\n\n```python\n{SOLUTION}```\n\nThis loops over pairs."
    assert extract_code(reply) == SOLUTION
    assert _passes(problem, reply)


def test_the_first_python_block_is_taken_and_a_wrong_one_fails(problem):
    assert not _passes(problem, f"```python\n{WRONG}```\n```python\n{SOLUTION}```")
    assert _passes(problem, f"```text\nnot code\n```\n```python\n{SOLUTION}```")


def test_unfenced_reply_defining_the_entry_point_is_the_program(problem):
    assert extract_code(SOLUTION) == SOLUTION
    # the prompt comes first (its `from typing import List` and helpers stay), then the reply's
    # definition replaces the prompt's stub
    assert chat_source(problem, SOLUTION) == problem["prompt"] + "\n" + SOLUTION
    assert _passes(problem, SOLUTION)


def test_block_without_the_entry_point_is_appended_to_the_prompt(problem):
    src = chat_source(problem, f"```python\n{BODY}```")
    assert src.startswith(problem["prompt"]) and src.endswith(BODY)
    assert _passes(problem, f"```python\n{BODY}```")


def test_unclosed_fence_runs_to_the_end_and_main_block_is_cut(problem):
    reply = f"```py\n{SOLUTION}\nif __name__ == '__main__':\n    raise SystemExit(3)\n"
    assert _passes(problem, reply)


def test_prose_only_reply_does_not_compile(problem):
    r = grade(problem, "I cannot help with that.", timeout_s=10, chat=True)
    assert not r.passed and r.malformed


def test_raw_completion_path_is_unchanged(problem):
    assert _passes(problem, BODY + "\ndef other():\n    pass\n", chat=False)
    # a fenced reply is not code for a raw completion: it does not compile
    assert grade(problem, f"```python\n{SOLUTION}```", timeout_s=10).malformed


def test_chat_prompt_holds_the_instruction_and_the_prompt(problem):
    text = chat_prompt(problem["prompt"])
    assert text.startswith("Complete the following Python function")
    assert problem["prompt"].strip() in text


def test_a_reply_is_complete_once_its_code_block_is_closed():
    from tasks.humaneval import reply_complete

    assert not reply_complete("Sure:\n```python\ndef f():\n    return 1\n")
    assert reply_complete("Sure:\n```python\ndef f():\n    return 1\n```")
    assert not reply_complete("def f():\n    return 1\n")


def test_a_reply_may_call_the_prompts_helper_function():
    problem = load_problems()["HumanEval/10"]  # make_palindrome, with helper is_palindrome
    reply = """```python
def make_palindrome(string: str) -> str:
    if not string:
        return ''
    beginning_of_suffix = 0
    while not is_palindrome(string[beginning_of_suffix:]):
        beginning_of_suffix += 1
    return string + string[:beginning_of_suffix][::-1]
```"""
    assert _passes(problem, reply)
