"""Wrong idioms a small model writes (set() for counting, sorted() where order matters, >= for >,
the first match for all of them, no empty case) fail EVERY drawn task of their family: the
asserts hold inputs where they differ from the right answer, not just 3-5 lucky tiny ones.

The asserts are run by the grader's own test runner (tasks/harness.py) in this process, against
the idiom as a local function (trusted code), so hundreds of tasks take well under a second; the
last test grades a few through the sandbox end to end."""

from __future__ import annotations

import dataclasses
import random

import pytest

from tasks.harness import AnswerError, prepare, run_spec, strict_eq
from tasks.pyfuncs import BY_FAMILY, EDGE_CASES, FAMILIES, grade, instances

# family -> wrong bodies (``return ...`` expressions over the template's arguments and constants)
WRONG: dict[str, list[str]] = {
    "is_multiple": ["n % {k} == 0 and n > 0", "n % {k} == 0 and n != 0", "n // {k} > 0"],
    "clamp": ["min(x, {hi})", "max({lo}, x)", "max({lo}, min({hi} - 1, x))",
              "x if {lo} < x < {hi} else ({lo} if x < {lo} else {hi} - 1)"],
    "floor_div": ["int(x / {k})", "round(x / {k})"],
    "remainder": ["x % {k} if x > {k} else x", "x - {k} if x >= {k} else x"],
    "sum_above": ["sum(x for x in xs if x >= {k})", "sum(set(x for x in xs if x > {k}))"],
    "count_above": ["len(set(x for x in xs if x > {k}))", "sum(1 for x in xs if x >= {k})"],
    "sum_below": ["sum(x for x in xs if x <= {k})", "sum(set(x for x in xs if x < {k}))"],
    "count_below": ["len(set(x for x in xs if x < {k}))", "sum(1 for x in xs if x <= {k})"],
    "filter_above": ["sorted(x for x in xs if x > {k})", "list(set(x for x in xs if x > {k}))",
                     "[x for x in xs if x >= {k}]"],
    "filter_below": ["sorted(x for x in xs if x < {k})", "list(set(x for x in xs if x < {k}))",
                     "[x for x in xs if x <= {k}]"],
    "count_equal": ["int({k} in xs)", "len(set(x for x in xs if x == {k}))"],
    "drop_value": ["sorted(x for x in xs if x != {k})", "list(set(xs) - {{{k}}})",
                   "xs[:xs.index({k})] + xs[xs.index({k}) + 1:] if {k} in xs else xs"],
    "contains": ["xs[0] == {k} if xs else False", "{k} in xs[1:]", "len(xs) > 0"],
    "all_above": ["all(x >= {k} for x in xs)", "bool(xs) and all(x > {k} for x in xs)",
                  "min(xs) > {k} if xs else False"],
    "any_above": ["any(x >= {k} for x in xs)", "max(xs) > {k} if xs else True"],
    "add_each": ["sorted(x + {k} for x in xs)", "list(set(x + {k} for x in xs))"],
    "scale_each": ["sorted(x * {k} for x in xs)", "list(set(x * {k} for x in xs))"],
    "sub_each": ["sorted(x - {k} for x in xs)", "[abs(x - {k}) for x in xs]"],
    "square_each": ["sorted(x * x for x in xs)", "list(set(x * x for x in xs))",
                    "[x * abs(x) for x in xs]"],
    "abs_each": ["sorted(abs(x) for x in xs)", "list(set(abs(x) for x in xs))"],
    "cap_each": ["[x for x in xs if x <= {k}]", "sorted(min(x, {k}) for x in xs)",
                 "[min(x, {k} - 1) if x >= {k} else x for x in xs]"],
    "double_if_above": ["[2 * x if x >= {k} else x for x in xs]",
                        "sorted(2 * x if x > {k} else x for x in xs)",
                        "[2 * x for x in xs if x > {k}]"],
    "mod_each": ["sorted(x % {k} for x in xs)", "list(set(x % {k} for x in xs))",
                 "[x % {k} for x in xs if x % {k}]"],
    "evens": ["sorted(x for x in xs if x % 2 == 0)", "list(set(x for x in xs if x % 2 == 0))",
              "[x for x in xs if x % 2 == 0 and x]"],
    "count_even": ["len(set(x for x in xs if x % 2 == 0))",
                   "sum(1 for x in xs if x % 2 == 0 and x > 0)"],
    "sum_odd": ["sum(set(x for x in xs if x % 2))", "sum(x for x in xs if x % 2 and x > 0)"],
    "sum_squares": ["sum(set(x * x for x in xs))", "sum(xs) ** 2"],
    "first_k": ["xs[:{k} + 1]", "sorted(xs)[:{k}]", "xs[:{k}] if len(xs) >= {k} else []"],
    "last_k": ["xs[::-1][:{k}]", "sorted(xs)[-{k}:]", "xs[-{k} - 1:]"],
    "sum_first": ["sum(sorted(xs)[:{k}])", "sum(xs[:{k}]) if len(xs) >= {k} else 0",
                  "sum(xs[:{k} + 1])"],
    "count_char": ["int('{c}' in s)", "len(set(ch for ch in s if ch == '{c}'))",
                   "s.count('{c}') if s else 1"],
    "replace_char": ["s.replace('{c}', '{d}', 1)", "s.replace('{d}', '{c}')"],
    "remove_char": ["s.replace('{c}', '', 1)", "s.strip('{c}')"],
    "starts_with": ["'{p}' in s", "s[:1] == '{p}'[:1]", "s != '' and s[0] == '{p}'[0]"],
    "ends_with": ["'{p}' in s", "s[-1:] == '{p}'[-1:]", "s != '' and s[-1] == '{p}'[-1]"],
    "longer_than": ["[w for w in words if len(w) >= {k}]", "sorted(w for w in words "
                    "if len(w) > {k})", "list(set(w for w in words if len(w) > {k}))"],
    "count_longer": ["sum(1 for w in words if len(w) >= {k})",
                     "len(set(w for w in words if len(w) > {k}))"],
    "starting_with": ["[w for w in words if '{c}' in w]", "sorted(w for w in words "
                      "if w.startswith('{c}'))", "list(set(w for w in words if w[0] == '{c}'))"],
    "join_sep": ["'{sep}'.join(sorted(words))", "'{sep}'.join(set(words))",
                 "'{sep}'.join(words) + ('{sep}' if not words else '')"],
    "pad_left": ["s.ljust({k}, '{c}')", "'{c}' * ({k} - len(s)) + s if s else s",
                 "('{c}' * {k} + s)[-{k}:]"],
    "max_list": ["xs[-1]", "sorted(xs)[0]", "max(0, *xs)", "max(xs, key=abs)"],
    "min_list": ["xs[0]", "sorted(xs)[-1]", "min(0, *xs)", "min(xs, key=abs)"],
    "max_plus": ["xs[-1] + {k}", "max(0, *xs) + {k}", "max(xs, key=abs) + {k}"],
    "product": ["sum(xs)", "__import__('functools').reduce(lambda a, b: a * b, xs)",
                "__import__('math').prod(set(xs))", "__import__('math').prod(x for x in xs "
                "if x)"],
    "average": ["sum(xs) // len(xs)", "__import__('statistics').mean(xs)",
                "sum(set(xs)) / len(set(xs))"],
    "reverse_str": ["''.join(sorted(s, reverse=True))", "s[::-1][1:] + s[:1] if s else s"],
    "is_palindrome": ["s[:1] == s[-1:]", "len(s) % 2 == 1", "s == s[::-1] and s != ''"],
    "count_vowels": ["len(set(ch for ch in s if ch in 'aeiou'))",
                     "sum(ch in 'aeiouy' for ch in s)"],
    "count_words": ["s.count(' ') + 1", "len(s.split(' '))"],
    "capitalize": ["s.capitalize()", "s.title()"],
    "digit_sum": ["n % 9", "sum(int(d) for d in set(str(n)))"],
    "factorial": ["__import__('math').prod(range(1, n))",
                  "n * __import__('math').factorial(n - 1) if n > 1 else n"],
    "sum_to_n": ["n * (n - 1) // 2", "sum(range(n))"],
    "count_unique": ["len(xs)", "sum(1 for x in xs if xs.count(x) == 1)",
                     "len(set(xs[1:])) + 1"],
    "max_of_three": ["max(a, b)", "a if a > b else (b if b > c else c)", "max(a, c)"],
    "abs_diff": ["a - b", "b - a", "abs(a) - abs(b)"],
    "second_largest": ["sorted(xs)[-2]", "sorted(set(xs))[1]", "sorted(xs, reverse=True)[1]"],
    "index_of": ["xs.index({k})", "len(xs) - 1 - xs[::-1].index({k}) if {k} in xs else -1",
                 "xs.index({k}) if {k} in xs else None"],
    "word_lengths": ["sorted(len(w) for w in words)", "list(set(len(w) for w in words))"],
    "upper_all": ["sorted(w.upper() for w in words)", "list(set(w.upper() for w in words))"],
    "total_length": ["sum(len(w) for w in set(words))", "len(words)"],
    "in_range": ["{lo} < x < {hi}", "{lo} <= x < {hi}", "{lo} < x <= {hi}"],
    "at_least": ["min(x, {k})", "x if x > {k} else {k} + 1"],
    "at_most": ["max(x, {k})", "x if x < {k} else {k} - 1"],
    "length_is": ["len(s) >= {k}", "len(s) <= {k}"],
    "prefix_k": ["s[:{k} + 1]", "s[1:{k} + 1]", "s[:{k}] if len(s) >= {k} else ''"],
    "power_const": ["x * {k}", "abs(x) ** {k}"],
    "add_const": ["abs(x) + {k}", "max(x, 0) + {k}", "x + {k} if x > 0 else {k}"],
    "mul_const": ["abs(x) * {k}", "max(x, 0) * {k}"],
    "sub_const": ["abs(x - {k})", "{k} - x", "max(x - {k}, 0)"],
    "repeat_str": ["s * ({k} - 1)", "' '.join([s] * {k})", "(s + ' ') * {k}"],
    "swap_pair": ["[b, a]", "(a, b)", "tuple(sorted((a, b), reverse=True))"],
    "sum_plus": ["sum(set(xs)) + {k}", "sum(xs) + {k} if xs else 0",
                 "sum(abs(x) for x in xs) + {k}", "sum(x for x in xs if x > 0) + {k}"],
    "sum_times": ["sum(set(xs)) * {k}", "sum(abs(x) for x in xs) * {k}",
                  "sum(x for x in xs if x > 0) * {k}"],
    "linear": ["(x + {b}) * {a}", "abs(x) * {a} + {b}", "x * {a} + {b} if x > 0 else {b}"],
    "shift_then_scale": ["x + {a} * {b}", "x * {b} + {a}", "abs(x + {a}) * {b}",
                         "max(x + {a}, 0) * {b}"],
    "square_plus": ["x * 2 + {k}", "x * abs(x) + {k}", "x ** 2 + {k} if x > 0 else {k}"],
    "add_suffix": ["'{w}' + s", "s + '{w}' if s else ''",
                   "s if s.endswith('{w}') else s + '{w}'"],
    "add_prefix": ["s + '{w}'", "'{w}' + s if s else ''",
                   "s if s.startswith('{w}') else '{w}' + s"],
    "wrap": ["'{c}' + s", "'{c}' + s + '{c}' if s else ''", "'{c}' + s.strip('{c}') + '{c}'",
             "s if s.startswith('{c}') else '{c}' + s + '{c}'"],
    "count_between": ["sum(1 for x in xs if {lo} < x < {hi})",
                      "sum(1 for x in xs if {lo} <= x < {hi})",
                      "sum(1 for x in xs if {lo} < x <= {hi})",
                      "len(set(x for x in xs if {lo} <= x <= {hi}))"],
    "sum_between": ["sum(x for x in xs if {lo} < x < {hi})",
                    "sum(x for x in xs if {lo} <= x < {hi})",
                    "sum(x for x in xs if {lo} < x <= {hi})",
                    "sum(set(x for x in xs if {lo} <= x <= {hi}))"],
    "filter_between": ["sorted(x for x in xs if {lo} <= x <= {hi})",
                       "list(set(x for x in xs if {lo} <= x <= {hi}))",
                       "[x for x in xs if {lo} < x < {hi}]", "[x for x in xs if {lo} <= x < {hi}]"],
    "count_outside": ["sum(1 for x in xs if x <= {lo} or x >= {hi})",
                      "len(set(x for x in xs if not {lo} <= x <= {hi}))",
                      "sum(1 for x in xs if x < {lo} and x > {hi})",
                      "len(xs) - sum(1 for x in xs if {lo} < x < {hi})"],
    "affine_each": ["sorted(x * {a} + {b} for x in xs)", "list(set(x * {a} + {b} for x in xs))",
                    "[(x + {b}) * {a} for x in xs]", "[abs(x) * {a} + {b} for x in xs]"],
    "times_minus": ["(x - {b}) * {a}", "abs(x * {a} - {b})", "abs(x) * {a} - {b}"],
    "is_greater": ["x >= {k}", "int(x > {k})", "abs(x) > {k}"],
    "max_with": ["max(xs, default={k})", "max(max(xs), {k})", "max(xs[-1], {k}) if xs else {k}"],
    "min_with": ["min(xs, default={k})", "min(min(xs), {k})", "min(xs[0], {k}) if xs else {k}"],
    "first_or": ["xs[0] if len(xs) > 1 else {k}", "xs[-1] if xs else {k}",
                 "min(xs) if xs else {k}", "xs[0] if xs and xs[0] else {k}"],
    "last_or": ["xs[-1] if len(xs) > 1 else {k}", "xs[0] if xs else {k}",
                "max(xs) if xs else {k}", "xs[-1] if xs and xs[-1] else {k}"],
    "at_least_each": ["[x for x in xs if x >= {k}]", "sorted(max(x, {k}) for x in xs)",
                      "[min(x, {k}) for x in xs]", "list(set(max(x, {k}) for x in xs))"],
    "cube_plus": ["x * 3 + {k}", "x ** 2 + {k}", "abs(x) ** 3 + {k}"],
    "square_minus": ["x * 2 - {k}", "abs(x * x - {k})", "x * abs(x) - {k}"],
    "all_below": ["all(x <= {k} for x in xs)", "bool(xs) and all(x < {k} for x in xs)",
                  "max(xs) < {k} if xs else False", "any(x < {k} for x in xs)"],
    "replace_value": ["sorted({b} if x == {a} else x for x in xs)",
                      "list(set({b} if x == {a} else x for x in xs))",
                      "xs[:xs.index({a})] + [{b}] + xs[xs.index({a}) + 1:] if {a} in xs else xs"],
    "count_not_equal": ["len(xs) - int({k} in xs)", "len(set(x for x in xs if x != {k}))",
                        "sum(1 for x in xs if x > {k})"],
    "count_multiples": ["sum(1 for x in xs if x % {k} == 0 and x != 0)",
                        "sum(1 for x in xs if x % {k} == 0 and x > 0)",
                        "len(set(x for x in xs if x % {k} == 0))"],
    "pad_right": ["(s + '{c}' * {k})[:{k}]", "s.rjust({k}, '{c}')", "s.ljust({k} - 1, '{c}')",
                  "s + '{c}' * {k}"],
    "suffix_k": ["s[-{k} - 1:]", "s[-{k}:] if len(s) >= {k} else ''", "s[len(s) - {k}:]",
                 "s[::-1][:{k}]"],
    "words_of_length": ["[w for w in words if len(w) >= {k}]",
                        "[w for w in words if len(w) <= {k}]",
                        "sorted(w for w in words if len(w) == {k})",
                        "list(set(w for w in words if len(w) == {k}))"],
    "abs_diff_from": ["x - {k}", "{k} - x", "abs(x) - {k}"],
    "mod_add": ["x + {a} % {b}", "x % {b} + {a}", "(x + {a}) // {b}"],
    "count_containing": ["sum(w.count('{c}') for w in words)",
                         "len(set(w for w in words if '{c}' in w))",
                         "sum(1 for w in words if w.startswith('{c}'))",
                         "sum(1 for w in words if w[0] == '{c}')"],
}

SEEDS = (0, 1000)  # a pool draw and the calibration draw
PER_SEED = 6


def _function(template, k: dict, body: str):
    ns: dict = {}
    exec(f"def f({template.args}):\n    return {body.format(**k)}\n", ns)  # trusted test code
    return ns["f"]


def _passes(task, fn) -> bool:
    def call(name, args, kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise AnswerError(f"{name} raised {type(e).__name__}: {e}") from None

    return run_spec(prepare({"kind": "asserts", "tests": list(task.tests)}), call)["passed"]


def _draw(family: str, per_seed: int = PER_SEED, seeds=SEEDS) -> list[tuple]:
    """``(task, constants)`` pairs: the family's reference is asked for once per drawn task, in
    order, so a recording reference hands back each task's constants."""
    template = BY_FAMILY[family]
    seen: list[dict] = []
    recording = dataclasses.replace(template, ref=lambda k: (seen.append(k), template.ref(k))[1])
    tasks = [t for seed in seeds for t in instances(recording, per_seed, seed=seed)]
    assert len(seen) == len(tasks) and tasks == [
        t for seed in seeds for t in instances(template, per_seed, seed=seed)]
    return list(zip(tasks, seen))


def _wrong_here(template, k: dict, fn) -> bool:
    """Whether the idiom is wrong at all for these constants (``>=`` for ``>`` is right when the
    constant is 0 in a sum): it differs from the reference on some of 100 drawn inputs or an
    edge case."""
    ref = template.ref(k)
    rng = random.Random(0)
    probes = [template.inputs(rng, k) for _ in range(100)] + EDGE_CASES.get(
        template.family, lambda k: [])(k)
    for args in probes:
        try:
            if not strict_eq(fn(*args), ref(*args)):
                return True
        except Exception:
            return True
    return False


def test_every_family_has_edge_cases_and_wrong_idioms():
    assert [f for f in FAMILIES if f not in EDGE_CASES] == []
    assert [f for f in FAMILIES if len(WRONG.get(f, ())) < 2] == []


@pytest.mark.parametrize("family", sorted(WRONG))
def test_every_wrong_idiom_fails_every_task_where_it_is_wrong(family):
    template = BY_FAMILY[family]
    wrong_somewhere = dict.fromkeys(WRONG[family], False)
    for task, k in _draw(family):
        assert _passes(task, template.ref(k)), task.task_id  # the reference itself passes
        for body in WRONG[family]:
            fn = _function(template, k, body)
            if _wrong_here(template, k, fn):
                wrong_somewhere[body] = True
                assert not _passes(task, fn), (task.task_id, body)
    assert all(wrong_somewhere.values()), wrong_somewhere  # every listed idiom is truly wrong


def test_wrong_idioms_fail_in_the_sandbox_too():
    for family, body in (("count_unique", "len(xs)"), ("filter_above", "sorted(x for x in xs "
                         "if x > {k})"), ("second_largest", "sorted(xs)[-2]")):
        template = BY_FAMILY[family]
        task, k = _draw(family, 1, (0,))[0]
        wrong = f"def {task.entry_point}({template.args}):\n    return {body.format(**k)}\n"
        assert not grade(task, wrong).passed, family
