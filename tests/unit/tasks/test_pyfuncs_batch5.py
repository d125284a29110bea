"""The fifth batch: new families with wide domains, tests that discriminate, answerable prompts.

Each family's solution below is written from its description alone and run against the asserts
the family generates; the references are never imported into a solution.
"""

from __future__ import annotations

import random

import pytest

from tasks import pyfuncs_v2 as v2
from tasks.pyfuncs import (
    BY_FAMILY,
    EDGE_CASES,
    _in_name,
    constants,
    function_id,
    function_tasks,
)
from tasks.pyfuncs_batch5 import BY_BATCH5, TEMPLATES_5
from tasks.pyfuncs_fresh import BY_FRESH, FRESH_TRANSFER

SOLUTIONS = {  # the body of each family's function, from its description; {a}, {b}, {c}, {k}
    "square_of_diff": "return (x - {k}) * (x - {k})",
    "round_down_to": "return x - x % {k}",
    "remainder_is": "return x % {b} == {a}",
    "within_of": "return {a} - {b} <= x <= {a} + {b}",
    "div_plus": "return x // {a} + {b}",
    "double_below": "return x * 2 if x < {k} else x",
    "last_digit_plus": "return int(str(n)[-1]) + {k}",
    "larger_minus": "return (x if x > {a} else {a}) - {b}",
    "abs_plus": "return (x if x >= 0 else -x) + {k}",
    "pair_sum_times": "return a * {k} + b * {k}",
    "pair_product_plus": "return a * b + {k}",
    "pair_larger_plus": "return (a if a > b else b) + {k}",
    "pair_sum_above": "return a + b > {k}",
    "same_remainder": "return (a - b) % {k} == 0",
    "pair_smaller_times": "return min(a, b) * {k}",
    "insert_after_first": "return s[:1] + '{c}' + s[1:]",
    "has_either": "return any(ch in '{a}{b}' for ch in s)",
    "excess_length": "return len(s) - {k} if len(s) > {k} else 0",
    "first_char_times": "return s[:1] * {k}",
    "shout_if_longer": "return s if len(s) <= {k} else s.upper()",
    "mask_vowels": "return s.translate(str.maketrans('aeiou', '{c}' * 5))",
    "spread_with": "return '{c}'.join(list(s))",
    "first_plus": "return xs[0] + {k}",
    "last_times": "return xs[len(xs) - 1] * {k}",
    "sum_mod": "return sum(xs) % {k}",
    "span_plus": "return max(xs) - min(xs) + {k}",
    "sum_add_each": "return sum(xs) + {k} * len(xs)",
    "append_value": "return xs + [{k}]",
    "replace_first": "return [{k}] + xs[1:]",
    "sum_last": "return sum(xs[max(0, len(xs) - {k}):])",
}


def test_the_batch_is_thirty_new_families_that_pools_v2_calibrate():
    assert len(TEMPLATES_5) == 30 and set(SOLUTIONS) == set(BY_BATCH5)
    earlier = set(BY_FAMILY) | set(EDGE_CASES) | set(BY_FRESH) | set(FRESH_TRANSFER)
    assert not set(BY_BATCH5) & earlier
    assert set(BY_BATCH5) <= set(v2.BY_V2)


def test_no_new_family_asks_what_another_asks_in_the_same_words_or_names():
    def texts(t):
        return {t.describe(k) for k in constants(t, draws=400)}

    def names(t):
        return {n.format(**{a: _in_name(v) for a, v in k.items()})
                for k in constants(t, draws=400) for n in t.names}

    for t in TEMPLATES_5:
        others = [o for o in v2.TEMPLATES_V2 if o.family != t.family]
        assert not texts(t) & set().union(*(texts(o) for o in others)), t.family
        assert not names(t) & set().union(*(names(o) for o in others)), t.family


@pytest.mark.parametrize("template", TEMPLATES_5, ids=lambda t: t.family)
def test_a_new_family_draws_thirty_constants_and_discriminating_tests(template):
    ks = constants(template)
    assert len(ks) >= 30, len(ks)
    rng = random.Random(f"test/{template.family}")
    for k in rng.sample(ks, 8):
        drawn = [template.inputs(rng, k) for _ in range(40)]
        assert len({repr(template.ref(k)(*x)) for x in drawn}) >= 2, k
        other = rng.choice([o for o in ks if o != k])
        edges = template.edge(k)
        assert any(template.ref(k)(*x) != template.ref(other)(*x) for x in drawn + edges), (
            k, other)


@pytest.mark.parametrize("template", TEMPLATES_5, ids=lambda t: t.family)
def test_a_solution_written_from_the_description_passes_the_generated_tests(template):
    ks = constants(template)
    picks = random.Random(f"solve/{template.family}").sample(ks, 6)
    for pool in ("gate", "sealed", "train"):
        for task in function_tasks(template, picks, pool, seed=v2.SEED):
            k = next(k for k in picks if function_id(template.family, k) == task.function)
            answers = {line.split(" == ", 1)[1] for line in task.tests}
            assert task.entry_point.isidentifier() and len(task.tests) >= 3, task.tests
            assert len(answers) >= 2, task.tests
            scope: dict = {}
            exec(f"def {task.entry_point}({template.args}):\n"  # noqa: S102
                 f"    {SOLUTIONS[template.family].format(**k)}", scope)
            for line in task.tests:  # the task's own asserts, generated above
                exec(line, scope)  # noqa: S102
            wrong: dict = {task.entry_point: lambda *a: None}
            with pytest.raises(AssertionError):
                for line in task.tests:
                    exec(line, wrong)  # noqa: S102
