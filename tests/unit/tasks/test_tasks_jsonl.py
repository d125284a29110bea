"""A JSONL suite file: parsed strictly, each task graded by its asserts in the real sandbox."""

from __future__ import annotations

import json

import pytest

from gating.config import SuiteConfig
from gating.suite import build_suite, prompt_key
from tasks.jsonl_suite import dump_tasks, load_tasks

CLAMP = {
    "task_id": "pyfunc/clamp/0001",
    "prompt": "Write a Python function clamp(x, lo, hi) that limits x to [lo, hi].",
    "entry_point": "clamp",
    "tests": ["assert clamp(5, 0, 3) == 3", "assert clamp(-1, 0, 3) == 0",
              "assert clamp(2, 0, 3) == 2"],
    "family": "clamp",
}
SQUARE = {
    "task_id": "pyfunc/square/0001",
    "prompt": "Write a Python function square(x) that returns x squared.",
    "messages": [{"role": "system", "content": "Answer with code."},
                 {"role": "user", "content": "Write square(x): x squared. é"}],
    "tests": ["assert square(3) == 9", "assert square(-2) == 4"],
}
GOOD_CLAMP = "Here you go:\n```python\ndef clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n```\n"
BAD_SQUARE = "def square(x):\n    return x * 2\n"


@pytest.fixture
def suite_file(tmp_path):
    path = tmp_path / "suite.jsonl"
    dump_tasks([CLAMP, SQUARE], path)
    return path


def test_a_passing_and_a_failing_task_graded_in_the_sandbox(suite_file):
    tasks, checker = build_suite(SuiteConfig(kind="jsonl", path=str(suite_file), size=10))
    by_id = {t.task_id: t for t in tasks}
    assert list(by_id) == ["pyfunc/clamp/0001", "pyfunc/square/0001"]
    ok = checker(by_id["pyfunc/clamp/0001"], GOOD_CLAMP, chat=True)
    bad = checker(by_id["pyfunc/square/0001"], BAD_SQUARE)
    assert ok.passed and not ok.malformed
    assert not bad.passed and not bad.malformed and "AssertionError" in bad.detail
    fixed = checker(by_id["pyfunc/square/0001"], "def square(x):\n    return x * x\n")
    assert fixed.passed


def test_empty_uncompilable_and_missing_entry_point_answers(suite_file):
    tasks, checker = build_suite(SuiteConfig(kind="jsonl", path=str(suite_file), size=10))
    clamp = tasks[0]
    assert checker(clamp, "   ").no_edit
    assert checker(clamp, "def clamp(x, lo, hi) return x").malformed
    wrong_name = checker(clamp, "def limit(x, lo, hi):\n    return x\n")
    assert wrong_name.malformed and "clamp" in wrong_name.detail


def test_messages_default_to_one_user_turn_and_are_kept(suite_file):
    clamp, square = load_tasks(suite_file)
    assert clamp.chat() == [{"role": "user", "content": CLAMP["prompt"]}]
    assert square.chat()[1]["content"].endswith("é")  # \\u escapes read back
    assert clamp.kind == "clamp" and square.kind == "jsonl"
    assert prompt_key(clamp) != prompt_key(square)
    assert all(ord(c) < 128 for c in suite_file.read_text(encoding="utf-8"))


@pytest.mark.parametrize(("line", "match"), [
    ('{"task_id": "a", "prompt": "p"}', "missing field 'tests'"),
    ('{"task_id": "a", "prompt": "p", "tests": []}', "tests must be"),
    ('{"task_id": "a", "prompt": "p", "tests": ["assert 1"], "checker": "x"}', "unknown field"),
    ('{"task_id": "a", "prompt": "p", "tests": ["assert 1"], "entry_point": "a b"}',
     "entry_point"),
    ("[1, 2]", "JSON object"),
])
def test_bad_lines_name_the_line_and_field(tmp_path, line, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(CLAMP) + "\n" + line + "\n")
    with pytest.raises(ValueError, match=match) as e:
        load_tasks(path)
    assert ":2:" in str(e.value)


def test_duplicate_ids_and_missing_path_are_refused(tmp_path):
    path = tmp_path / "dup.jsonl"
    dump_tasks([CLAMP, CLAMP], path)
    with pytest.raises(ValueError, match="duplicate task_id"):
        load_tasks(path)
    with pytest.raises(ValueError, match="path is required"):
        SuiteConfig(kind="jsonl")


def test_a_smaller_suite_is_drawn_afresh_per_decision(tmp_path):
    path = tmp_path / "many.jsonl"
    dump_tasks([{**CLAMP, "task_id": f"c{i}", "prompt": f"clamp variant {i}"}
                for i in range(40)], path)
    config = SuiteConfig(kind="jsonl", path=str(path), size=10)
    draws = [[t.task_id for t in build_suite(config, decision=k)[0]] for k in range(3)]
    assert draws[0] != draws[1] != draws[2]
    assert draws[0] == [t.task_id for t in build_suite(config, decision=0)[0]]


def test_the_function_field_is_parsed_and_is_the_cluster_key(tmp_path):
    from tasks.jsonl_suite import cluster_key

    path = tmp_path / "suite.jsonl"
    twin = {**CLAMP, "task_id": "pyfunc/clamp/0002", "prompt": "Implement clamp(x, lo, hi).",
            "function": "clamp/hi=3,lo=0"}
    dump_tasks([{**CLAMP, "function": "clamp/hi=3,lo=0"}, twin, SQUARE], path)
    a, b, square = load_tasks(path)
    assert a.function == b.function == "clamp/hi=3,lo=0" and square.function is None
    assert cluster_key(a) == cluster_key(b) == "clamp/hi=3,lo=0"
    assert cluster_key(square) == SQUARE["prompt"]  # a file without the field still loads
    assert cluster_key(twin) == "clamp/hi=3,lo=0" and cluster_key(SQUARE) == SQUARE["prompt"]
    dump_tasks([{**CLAMP, "function": 3}], path)
    with pytest.raises(ValueError, match="function must be a non-empty string"):
        load_tasks(path)
