"""tasks.toy: generation is deterministic and split-stable; check is safe and exact."""

import hashlib
import json
import time

import pytest

from tasks.toy import (
    FRESH_EXCLUDES,
    Task,
    check,
    evaluate,
    fresh_tasks,
    generate_tasks,
    is_heldout,
)


def _task(kind, prompt, reference, cases=()):
    return Task("t", kind, prompt, reference, cases)


ADD = _task("complete", "def f(a, b):\n    # sum of a and b\n    return ", "a + b",
            ((("a", 2), ("b", 3)), (("a", -4), ("b", 10))))
LAST = _task("off_by_one", "", "xs[len(xs) - 1]", ((("xs", (1, 2, 3)),), (("xs", (7,)),)))


def test_arith_hand_computed():
    t = _task("arith", "# evaluate\n12+7 = ", "19")
    assert check(t, "19").passed
    assert check(t, " 19\n").passed
    assert not check(t, "18").passed
    r = check(t, "12+7")  # repeating the expression is not an answer
    assert not r.passed and not r.malformed


def test_complete_equivalent_answers_pass():
    assert check(ADD, "a + b").passed
    assert check(ADD, "b + a").passed
    assert check(ADD, "sum([a, b])").passed
    wrong = check(ADD, "a - b")
    assert not wrong.passed and not wrong.malformed and "got -1" in wrong.detail


def test_off_by_one_buggy_fails_at_runtime_not_malformed():
    assert check(LAST, "xs[len(xs) - 1]").passed
    assert check(LAST, "xs[-1]").passed
    r = check(LAST, "xs[len(xs)]")
    assert not r.passed and not r.malformed and "IndexError" in r.detail


@pytest.mark.parametrize("answer", ["", "   ", "\n", "should I use max?"])
def test_no_edit(answer):
    r = check(ADD, answer)
    assert r.no_edit and not r.passed and not r.malformed


@pytest.mark.parametrize("answer", [
    "a +", "__import__('os').system('true')", "9**9**9**9", "[1] * 10**9", "a.b", "'x'",
    "lambda: 1", "(x for x in a)", "open('f')", "2 ** 64 * 2 ** 64", "x" * 1000,
    "(" * 300 + "1" + ")" * 300, "f'{a}'", "a if b else __builtins__",
])
def test_hostile_or_disallowed_is_malformed_and_fast(answer):
    t0 = time.perf_counter()
    r = check(ADD, answer)
    assert time.perf_counter() - t0 < 0.05
    assert r.malformed and not r.passed and not r.no_edit


def test_unbound_name_is_wrong_not_malformed():
    r = check(ADD, "a + c")
    assert not r.passed and not r.malformed and "'c'" in r.detail


def test_whitelist_semantics():
    assert evaluate("max(a, 3) if a > 0 else -a % 4", (("a", -5),)) == 1
    assert evaluate("sum(range(1, n + 1))", (("n", 4),)) == 10
    assert evaluate("xs[1:]", (("xs", (1, 2, 3)),)) == [2, 3]
    assert evaluate("7 // 2 - 2 ** 3") == -5


def test_bool_is_not_int():
    t = _task("complete", "", "1", ((),))
    assert not check(t, "1 == 1").passed


def test_bool_is_not_int_inside_a_list_either():
    t = _task("complete", "", "[x, 0]", ((("x", 1),),))
    assert check(t, "[x, x - 1]").passed
    assert not check(t, "[x == x, x == 0]").passed


def test_generate_deterministic_and_correct():
    a = generate_tasks(60, seed=3, split="train")
    assert a == generate_tasks(60, seed=3, split="train")
    assert a != generate_tasks(60, seed=4, split="train")
    assert {t.kind for t in a} == {"arith", "complete", "off_by_one"}
    assert all(check(t, t.reference).passed for t in a)


def test_splits_are_disjoint_and_about_20_percent():
    train = {t.task_id for t in generate_tasks(600, seed=0, split="train")}
    held = generate_tasks(300, seed=0, split="heldout")
    assert all(is_heldout(t) for t in held)
    assert not train & {t.task_id for t in held}


def _ids_digest(tasks) -> str:
    return hashlib.sha256(json.dumps([t.task_id for t in tasks]).encode()).hexdigest()[:16]


def test_existing_splits_are_unchanged():
    """The fixture's prompts, the learning test's held-out set and a gate suite: pinned digests
    (computed before the fresh split was added)."""
    assert _ids_digest(generate_tasks(2000, 1, "train")) == "308dbdf51bc00de6"
    assert _ids_digest(generate_tasks(300, 7, "heldout")) == "d9260cefdebb6a9d"
    assert _ids_digest(generate_tasks(1000, 0, "heldout")) == "65b9ab1a6140c3c5"


def test_fresh_split_is_held_out_and_disjoint_from_the_tuning_draws():
    fresh = fresh_tasks(600)
    assert fresh == generate_tasks(600, 0, "fresh") == fresh_tasks(600)
    assert all(is_heldout(t) for t in fresh)
    assert [t.kind for t in fresh[:3]] == ["arith", "complete", "off_by_one"]
    ids = {t.task_id for t in fresh}
    tuned = {t.task_id for seed, n in FRESH_EXCLUDES for t in generate_tasks(n, seed, "heldout")}
    assert not ids & tuned
    assert not ids & {t.task_id for t in generate_tasks(600, 0, "train")}
    assert all(check(t, t.reference).passed for t in fresh)


def test_roundtrip_dict():
    for t in generate_tasks(9, seed=1, split="heldout"):
        assert Task.from_dict(t.to_dict()) == t


def test_bad_split_raises():
    with pytest.raises(ValueError, match="split"):
        generate_tasks(3, seed=0, split="test")  # type: ignore[arg-type]
