"""The fifth batch of pyfuncs families: 30 families with wide constant domains, for pools v2.

Pools v2 (tasks/pyfuncs_v2.py) keep a trained family only where its own constant domain still
holds a gate function and a sealed function nothing has seen. The first batches drew from small
domains (a threshold in -5..15, a prefix of 1..6 characters) that the first generation's pools,
their tuning draw and the retain set used up, so most of their usable families enter no pool v2.
Every family here is new: no pool, training run, tuning draw or calibration has asked any of its
functions, and each draws from at least 30 constants, so one that calibrates in the band enters
the gate, sealed and train pools whole. The batch was declared before any model answered it.

The families are compositions in the manner of the in-band ones of the earlier calibrations: an
integer, a pair of integers, a short string or a list of integers, with one or two drawn
constants; none asks what an earlier family asks in other words. Each has edge cases where a
wrong idiom and the right answer differ (boundaries of the constant, empty inputs, negatives).

Left out: the calibration and the split themselves (tasks.pyfuncs_v2); families without
constants (one function each, which the calibration would take whole).
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import replace

from tasks.pyfuncs import (
    BY_FAMILY,
    EDGE_CASES,
    Template,
    _a_b,
    _int_list,
    _ints,
    _k,
    _near_k,
    _one_int,
    _one_word,
)
from tasks.pyfuncs_fresh import BY_FRESH

T = Template
LETTERS = "abcdeiklmnoprstuy"
"""Letters the drawn words use often enough that a test of them is not always False."""


def _two_ints(rng: random.Random, k: dict) -> tuple:
    return tuple(_ints(rng, 2))


def _nonempty(rng: random.Random, k: dict) -> tuple:
    return (_ints(rng, rng.randint(1, 6)),)


def _letters(rng: random.Random, lo: int, hi: int) -> str:
    """Lower-case letters, ``lo`` to ``hi`` of them (none below 0)."""
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(max(0, lo), hi)))


def _letter_pair(rng: random.Random) -> dict:
    a, b = sorted(rng.sample(LETTERS, 2))
    return {"a": a, "b": b}


def _with_either(rng: random.Random, k: dict) -> tuple:
    """A string of 0-6 letters from ``a``, ``b`` and four others: both answers turn up."""
    pool = [k["a"], k["b"], *rng.sample([c for c in LETTERS if c not in (k["a"], k["b"])], 4)]
    return ("".join(rng.choice(pool) for _ in range(rng.randint(0, 6))),)


def _remainder(rng: random.Random) -> dict:
    b = rng.randint(2, 9)
    return {"a": rng.randint(0, b - 1), "b": b}


def _lists_near(rng: random.Random, k: dict) -> tuple:
    """A list of 3 fewer to 4 more numbers than ``k`` (none below 0)."""
    return (_ints(rng, rng.randint(max(0, k["k"] - 3), k["k"] + 4)),)


TEMPLATES_5: tuple[Template, ...] = (
    # one integer
    T("square_of_diff", ("square_diff_{k}", "sq_dist_{k}", "squared_gap_{k}"), "x",
      lambda k: f"returns the square of the difference between x and {k['k']}", _k(-10, 30),
      lambda k: lambda x: (x - k["k"]) ** 2, _near_k),
    T("round_down_to", ("round_down_{k}", "floor_to_{k}", "down_to_multiple_{k}"), "x",
      lambda k: f"returns x rounded down to a multiple of {k['k']}", _k(2, 40),
      lambda k: lambda x: x // k["k"] * k["k"],
      lambda rng, k: (rng.choice([k["k"] * rng.randint(-2, 5), rng.randint(-30, 120)]),)),
    T("remainder_is", ("rem_{a}_mod_{b}", "leaves_{a}_mod_{b}", "is_{a}_mod_{b}"), "x",
      lambda k: f"returns True if x divided by {k['b']} leaves the remainder {k['a']} and False "
      "otherwise", _remainder, lambda k: lambda x: x % k["b"] == k["a"],
      lambda rng, k: (rng.choice([k["b"] * rng.randint(0, 10) + k["a"], rng.randint(0, 90)]),)),
    T("within_of", ("near_{a}_by_{b}", "within_{b}_of_{a}", "close_to_{a}_{b}"), "x",
      lambda k: f"returns True if x differs from {k['a']} by at most {k['b']} and False "
      "otherwise", _a_b((-10, 30), (1, 6)), lambda k: lambda x: abs(x - k["a"]) <= k["b"],
      lambda rng, k: (rng.randint(k["a"] - k["b"] - 4, k["a"] + k["b"] + 4),)),
    T("div_plus", ("div_{a}_plus_{b}", "floor_div_{a}_add_{b}", "quotient_{a}_plus_{b}"), "x",
      lambda k: f"returns x divided by {k['a']} rounded down (integer division), plus {k['b']}",
      _a_b((2, 9), (1, 20)), lambda k: lambda x: x // k["a"] + k["b"], _one_int),
    T("double_below", ("double_below_{k}", "twice_if_under_{k}", "double_when_less_{k}"), "x",
      lambda k: f"returns x doubled if x is less than {k['k']}, and x unchanged otherwise",
      _k(-10, 30), lambda k: lambda x: 2 * x if x < k["k"] else x, _near_k),
    T("last_digit_plus", ("last_digit_plus_{k}", "ones_plus_{k}", "units_digit_plus_{k}"), "n",
      lambda k: f"returns {k['k']} plus the last decimal digit of the non-negative integer n",
      _k(1, 40), lambda k: lambda n: n % 10 + k["k"], lambda rng, k: (rng.randint(0, 9999),)),
    T("larger_minus", ("larger_{a}_minus_{b}", "max_{a}_sub_{b}", "bigger_of_{a}_less_{b}"), "x",
      lambda k: f"returns the larger of x and {k['a']}, minus {k['b']}", _a_b((-10, 30), (1, 20)),
      lambda k: lambda x: max(x, k["a"]) - k["b"],
      lambda rng, k: (rng.randint(k["a"] - 10, k["a"] + 10),)),
    T("abs_plus", ("abs_plus_{k}", "magnitude_plus_{k}", "abs_add_{k}"), "x",
      lambda k: f"returns {k['k']} plus the absolute value of x", _k(1, 40),
      lambda k: lambda x: abs(x) + k["k"], _one_int),
    # two integers
    T("pair_sum_times", ("add_then_times_{k}", "pair_sum_times_{k}", "sum_of_two_times_{k}"),
      "a, b", lambda k: f"returns the sum of a and b, multiplied by {k['k']}", _k(2, 40),
      lambda k: lambda a, b: (a + b) * k["k"], _two_ints),
    T("pair_product_plus", ("mul_then_add_{k}", "pair_product_plus_{k}",
                            "product_of_two_plus_{k}"), "a, b",
      lambda k: f"returns a multiplied by b, plus {k['k']}", _k(1, 40),
      lambda k: lambda a, b: a * b + k["k"], _two_ints),
    T("pair_larger_plus", ("bigger_plus_{k}", "pair_max_plus_{k}", "max_of_two_plus_{k}"),
      "a, b", lambda k: f"returns the larger of a and b, plus {k['k']}", _k(1, 40),
      lambda k: lambda a, b: max(a, b) + k["k"], _two_ints),
    T("pair_sum_above", ("pair_exceeds_{k}", "two_sum_over_{k}", "total_above_{k}"), "a, b",
      lambda k: f"returns True if a plus b is greater than {k['k']} and False otherwise",
      _k(-10, 30), lambda k: lambda a, b: a + b > k["k"],
      lambda rng, k: (lambda a: (a, k["k"] - a + rng.randint(-3, 3)))(rng.randint(-9, 20))),
    T("same_remainder", ("same_mod_{k}", "congruent_mod_{k}", "equal_remainders_{k}"), "a, b",
      lambda k: f"returns True if a and b leave the same remainder when divided by {k['k']} and "
      "False otherwise", _k(2, 40), lambda k: lambda a, b: a % k["k"] == b % k["k"],
      lambda rng, k: (lambda a: (a, rng.choice([a + k["k"] * rng.randint(0, 3),
                                                rng.randint(0, 90)])))(rng.randint(0, 90))),
    T("pair_smaller_times", ("smaller_times_{k}", "pair_min_times_{k}", "min_of_two_times_{k}"),
      "a, b", lambda k: f"returns the smaller of a and b, multiplied by {k['k']}", _k(2, 40),
      lambda k: lambda a, b: min(a, b) * k["k"], _two_ints),
    # one string
    T("insert_after_first", ("after_first_{c}", "insert_second_{c}", "slip_in_{c}"), "s",
      lambda k: f"returns the non-empty string s with '{k['c']}' inserted right after its first "
      "character", lambda rng: {"c": rng.choice(string.ascii_lowercase + string.digits)},
      lambda k: lambda s: s[0] + k["c"] + s[1:], _one_word),
    T("has_either", ("has_{a}_or_{b}", "contains_{a}_or_{b}", "either_{a}_{b}"), "s",
      lambda k: f"returns True if the string s contains the letter '{k['a']}' or the letter "
      f"'{k['b']}' and False otherwise", _letter_pair,
      lambda k: lambda s: k["a"] in s or k["b"] in s, _with_either),
    T("excess_length", ("excess_over_{k}", "chars_beyond_{k}", "overflow_{k}"), "s",
      lambda k: f"returns how many characters longer than {k['k']} the string s is (0 if s has "
      f"at most {k['k']} characters)", _k(1, 35), lambda k: lambda s: max(0, len(s) - k["k"]),
      lambda rng, k: (_letters(rng, k["k"] - 4, k["k"] + 6),)),
    T("first_char_times", ("first_char_times_{k}", "head_char_{k}_times",
                           "initial_repeated_{k}"), "s",
      lambda k: f"returns the first character of the non-empty string s repeated {k['k']} times",
      _k(2, 33), lambda k: lambda s: s[0] * k["k"], _one_word),
    T("shout_if_longer", ("upper_if_over_{k}", "shout_if_longer_{k}", "caps_when_long_{k}"), "s",
      lambda k: f"returns the string s in upper case if it has more than {k['k']} characters, "
      "and s unchanged otherwise", _k(1, 35),
      lambda k: lambda s: s.upper() if len(s) > k["k"] else s,
      lambda rng, k: (_letters(rng, k["k"] - 3, k["k"] + 3),)),
    T("mask_vowels", ("mask_vowels_{c}", "vowels_to_{c}", "hide_vowels_{c}"), "s",
      lambda k: f"returns the string s with every vowel (a, e, i, o, u) replaced by '{k['c']}'",
      lambda rng: {"c": rng.choice("bcdfghjklmnpqrstvwxyz0123456789")},
      lambda k: lambda s: "".join(k["c"] if ch in "aeiou" else ch for ch in s), _one_word),
    T("spread_with", ("spread_{c}", "interleave_{c}", "space_out_{c}"), "s",
      lambda k: f"returns the string s with '{k['c']}' inserted between every two neighbouring "
      "characters", lambda rng: {"c": rng.choice(string.ascii_lowercase + string.digits)},
      lambda k: lambda s: k["c"].join(s), _one_word),
    # a list of integers
    T("first_plus", ("first_plus_{k}", "head_plus_{k}", "front_plus_{k}"), "xs",
      lambda k: f"returns the first element of the non-empty list xs plus {k['k']}", _k(1, 40),
      lambda k: lambda xs: xs[0] + k["k"], _nonempty),
    T("last_times", ("last_times_{k}", "tail_times_{k}", "end_times_{k}"), "xs",
      lambda k: f"returns the last element of the non-empty list xs multiplied by {k['k']}",
      _k(2, 40), lambda k: lambda xs: xs[-1] * k["k"], _nonempty),
    T("sum_mod", ("sum_mod_{k}", "total_rem_{k}", "sum_remainder_{k}"), "xs",
      lambda k: f"returns the remainder of the sum of the numbers in the list xs divided by "
      f"{k['k']}", _k(2, 40), lambda k: lambda xs: sum(xs) % k["k"],
      lambda rng, k: (_ints(rng, rng.randint(1, 6), -9, 20 + k["k"]),)),
    T("span_plus", ("span_plus_{k}", "range_plus_{k}", "width_plus_{k}"), "xs",
      lambda k: f"returns the difference between the largest and the smallest number in the "
      f"non-empty list xs, plus {k['k']}", _k(1, 40),
      lambda k: lambda xs: max(xs) - min(xs) + k["k"], _nonempty),
    T("sum_add_each", ("sum_after_add_{k}", "shifted_sum_{k}", "sum_each_plus_{k}"), "xs",
      lambda k: f"returns the sum of the numbers in the list xs after adding {k['k']} to each of "
      "them", _k(1, 40), lambda k: lambda xs: sum(x + k["k"] for x in xs), _int_list),
    T("append_value", ("push_{k}", "with_{k}_at_end", "append_value_{k}"), "xs",
      lambda k: f"returns a new list made of the numbers in the list xs followed by {k['k']}",
      _k(-10, 30), lambda k: lambda xs: [*xs, k["k"]],
      lambda rng, k: (_ints(rng, rng.randint(0, 5)),)),
    T("replace_first", ("set_first_{k}", "replace_head_{k}", "first_becomes_{k}"), "xs",
      lambda k: f"returns a new list equal to the non-empty list xs but with its first element "
      f"replaced by {k['k']}", _k(-10, 30), lambda k: lambda xs: [k["k"], *xs[1:]], _nonempty),
    T("sum_last", ("sum_last_{k}", "tail_sum_{k}", "sum_of_last_{k}"), "xs",
      lambda k: f"returns the sum of the last {k['k']} numbers in the list xs (all of them if "
      "there are fewer)", _k(1, 30), lambda k: lambda xs: sum(xs[-k["k"]:]), _lists_near),
)
EDGE_CASES_5: dict[str, Callable[[dict], list[tuple]]] = {
    "square_of_diff": lambda k: [(k["k"],), (k["k"] + 1,), (k["k"] - 1,), (0,)],
    "round_down_to": lambda k: [(0,), (k["k"],), (k["k"] - 1,), (-1,)],
    "remainder_is": lambda k: [(k["a"],), (k["a"] + k["b"],), (k["a"] + 1,)],
    "within_of": lambda k: [(k["a"] + k["b"],), (k["a"] - k["b"],), (k["a"] + k["b"] + 1,),
                            (k["a"] - k["b"] - 1,)],
    "div_plus": lambda k: [(-1,), (k["a"] - 1,), (k["a"],), (0,)],
    "double_below": lambda k: [(k["k"],), (k["k"] - 1,), (k["k"] + 1,)],
    "last_digit_plus": lambda k: [(0,), (9,), (10,), (123,)],
    "larger_minus": lambda k: [(k["a"] - 1,), (k["a"] + 1,), (k["a"],)],
    "abs_plus": lambda k: [(0,), (-3,), (3,)],
    "pair_sum_times": lambda k: [(0, 0), (-2, 2), (-3, -4)],
    "pair_product_plus": lambda k: [(0, 5), (-2, 3), (-2, -3)],
    "pair_larger_plus": lambda k: [(1, 5), (5, 1), (-3, -7), (4, 4)],
    "pair_sum_above": lambda k: [(k["k"], 0), (k["k"], 1), (1, k["k"])],
    "same_remainder": lambda k: [(0, k["k"]), (1, k["k"]), (k["k"] - 1, 2 * k["k"] - 1)],
    "pair_smaller_times": lambda k: [(1, 5), (5, 1), (-3, -7)],
    "insert_after_first": lambda k: [("x",), ("ab",)],
    "has_either": lambda k: [("",), (k["a"],), (k["b"],), ("xzq",), (f"x{k['b']}{k['b']}",)],
    "excess_length": lambda k: [("x" * k["k"],), ("x" * (k["k"] + 1),), ("",)],
    "first_char_times": lambda k: [("a",), ("ba",)],
    "shout_if_longer": lambda k: [("x" * k["k"],), ("x" * (k["k"] + 1),), ("",)],
    "mask_vowels": lambda k: [("",), ("aeiou",), ("xyz",), ("banana",)],
    "spread_with": lambda k: [("",), ("a",), ("ab",)],
    "first_plus": lambda k: [([-3, 5],), ([0],)],
    "last_times": lambda k: [([5, -3],), ([0],)],
    "sum_mod": lambda k: [([],), ([k["k"]],), ([k["k"] - 1, 1, k["k"]],), ([-1],)],
    "span_plus": lambda k: [([5],), ([3, -2, 7, 7],)],
    "sum_add_each": lambda k: [([],), ([0],), ([-2, -2, 5],)],
    "append_value": lambda k: [([],), ([k["k"]],)],
    "replace_first": lambda k: [([5],), ([1, 2, 3],)],
    "sum_last": lambda k: [([],), (list(range(1, k["k"] + 3)),), ([5],)],
}
"""Inputs where a wrong idiom and the right answer differ, added to each task's drawn asserts."""
TEMPLATES_5 = tuple(replace(t, edge=EDGE_CASES_5[t.family]) for t in TEMPLATES_5)
BY_BATCH5 = {t.family: t for t in TEMPLATES_5}
_CLASH = set(BY_BATCH5) & (set(BY_FAMILY) | set(EDGE_CASES) | set(BY_FRESH))
if _CLASH:
    raise ImportError(f"fifth-batch families clash with earlier ones: {sorted(_CLASH)}")
