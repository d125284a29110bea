"""Small Python-function tasks in chat form, generated from templates, graded by hidden asserts.

Each :class:`Template` is a family of requests like "Write a Python function add_7(x) that returns
x plus 7": a name, a one-line description with drawn constants, a reference implementation and a
drawer of test inputs. :func:`instances` draws distinct prompts of one family (seeded, stable ids
``pyfunc/<family>/<nnnn>``); the hidden asserts are the reference's outputs on 3–5 drawn inputs
plus the family's edge cases (:data:`EDGE_CASES`: duplicates, empty and unsorted lists,
boundaries, where a wrong idiom shows), so a task's tests are right by construction. Answers fit
in 64 tokens for a small instruct model.

:func:`grade` is the one checker: the code of the reply (its first fenced block, or the whole
reply) is graded by tasks/grader.py in the sandbox; a task passes iff every assert passes,
type-strictly. :func:`write_jsonl` / :func:`read_jsonl` use the shared suite format (one JSON
object per line: ``task_id``, ``prompt``, ``messages``, ``entry_point``, ``tests``, ``family``).
:func:`split_pools` cuts the draw into a train-traffic pool, a gate pool and a sealed set that
share no prompt text, keeps held-out families out of all but a transfer set, and families the
model already solves in a guard pool for the gate's regression guard.

Left out: multi-function tasks, tasks that need imports, stdin/stdout tasks.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tasks.toy import CheckResult

INSTRUCTION = "Reply with only the code in a ```python block."
VERBS = ("Write", "Implement", "Define", "Create", "Code", "Please write")
WORDS = ("apple", "banana", "kiwi", "level", "radar", "hello", "world", "python", "code", "stack",
         "queue", "tree", "noon", "data", "cat", "dog", "sun", "moon")


@dataclass(frozen=True)
class Template:
    """One family: ``describe(k)`` is the text after "that", ``ref(k)`` the reference function,
    ``draw(rng)`` the constants ``k`` (a dict), ``inputs(rng, k)`` one argument tuple."""

    family: str
    names: tuple[str, ...]
    args: str
    describe: Callable[[dict], str]
    draw: Callable[[random.Random], dict]
    ref: Callable[[dict], Callable]
    inputs: Callable[[random.Random, dict], tuple]


@dataclass(frozen=True)
class PyTask:
    """One generated task in the shared suite format."""

    task_id: str
    prompt: str
    entry_point: str
    tests: tuple[str, ...]
    family: str

    @property
    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.prompt}]

    def to_json(self) -> dict:
        return {"task_id": self.task_id, "prompt": self.prompt, "messages": self.messages,
                "entry_point": self.entry_point, "tests": list(self.tests),
                "family": self.family}


def _ints(rng: random.Random, n: int, lo: int = -9, hi: int = 20) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


def _k(lo: int, hi: int) -> Callable[[random.Random], dict]:
    return lambda rng: {"k": rng.randint(lo, hi)}


def _word(rng: random.Random) -> str:
    return rng.choice(WORDS)


def _none(rng: random.Random) -> dict:
    return {}


def _int_list(rng: random.Random, k: dict) -> tuple:
    return (_ints(rng, rng.randint(1, 6)),)


def _pos_list(rng: random.Random, k: dict) -> tuple:
    return ([rng.randint(1, 9) for _ in range(rng.randint(1, 5))],)


def _one_int(rng: random.Random, k: dict) -> tuple:
    return (rng.randint(-20, 40),)


def _nat(rng: random.Random, k: dict) -> tuple:
    return (rng.randint(0, 9),)


def _one_word(rng: random.Random, k: dict) -> tuple:
    return (_word(rng),)


def _sentence(rng: random.Random, k: dict) -> tuple:
    return (" ".join(_word(rng) for _ in range(rng.randint(1, 4))),)


def _factorial(n: int) -> int:
    out = 1
    for i in range(2, n + 1):
        out *= i
    return out


def _product(xs: list[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


T = Template
TEMPLATES: tuple[Template, ...] = (
    T("add_const", ("add_{k}", "plus_{k}"), "x", lambda k: f"returns x plus {k['k']}",
      _k(2, 60), lambda k: lambda x: x + k["k"], _one_int),
    T("mul_const", ("times_{k}", "multiply_by_{k}"), "x",
      lambda k: f"returns x multiplied by {k['k']}", _k(2, 30), lambda k: lambda x: x * k["k"],
      _one_int),
    T("sub_const", ("minus_{k}", "subtract_{k}"), "x", lambda k: f"returns x minus {k['k']}",
      _k(2, 60), lambda k: lambda x: x - k["k"], _one_int),
    T("power_const", ("power_{k}", "pow_{k}"), "x",
      lambda k: f"returns x raised to the power {k['k']}", _k(2, 4),
      lambda k: lambda x: x ** k["k"], lambda rng, k: (rng.randint(-6, 6),)),
    T("is_multiple", ("is_multiple_of_{k}", "divisible_by_{k}"), "n",
      lambda k: f"returns True if n is divisible by {k['k']} and False otherwise", _k(2, 13),
      lambda k: lambda n: n % k["k"] == 0, lambda rng, k: (rng.choice([k["k"] * rng.randint(
          -5, 9), rng.randint(-30, 60)]),)),
    T("clamp", ("clamp", "clip"), "x",
      lambda k: f"returns x limited to the range {k['lo']} to {k['hi']} (inclusive)",
      lambda rng: (lambda lo: {"lo": lo, "hi": lo + rng.randint(2, 30)})(rng.randint(-10, 10)),
      lambda k: lambda x: max(k["lo"], min(k["hi"], x)),
      lambda rng, k: (rng.randint(k["lo"] - 15, k["hi"] + 15),)),
    T("floor_div", ("div_{k}", "floor_divide_{k}"), "x",
      lambda k: f"returns x divided by {k['k']} rounded down (integer division)", _k(2, 12),
      lambda k: lambda x: x // k["k"], _one_int),
    T("remainder", ("mod_{k}", "remainder_{k}"), "x",
      lambda k: f"returns the remainder of x divided by {k['k']}", _k(2, 12),
      lambda k: lambda x: x % k["k"], lambda rng, k: (rng.randint(0, 90),)),
    T("sum_above", ("sum_above_{k}", "sum_greater_than_{k}"), "xs",
      lambda k: f"returns the sum of the numbers in the list xs that are greater than {k['k']}",
      _k(0, 9), lambda k: lambda xs: sum(x for x in xs if x > k["k"]), _int_list),
    T("count_above", ("count_above_{k}", "count_greater_{k}"), "xs",
      lambda k: f"returns how many numbers in the list xs are greater than {k['k']}", _k(0, 9),
      lambda k: lambda xs: sum(1 for x in xs if x > k["k"]), _int_list),
    T("add_each", ("add_{k}_to_each", "shift_by_{k}"), "xs",
      lambda k: f"returns a new list with {k['k']} added to every number in the list xs",
      _k(1, 20), lambda k: lambda xs: [x + k["k"] for x in xs], _int_list),
    T("scale_each", ("scale_by_{k}", "multiply_each_by_{k}"), "xs",
      lambda k: f"returns a new list with every number in the list xs multiplied by {k['k']}",
      _k(2, 10), lambda k: lambda xs: [x * k["k"] for x in xs], _int_list),
    T("filter_above", ("keep_above_{k}", "filter_greater_{k}"), "xs",
      lambda k: f"returns a list of the numbers in the list xs that are greater than {k['k']}, "
      "in their original order", _k(0, 9), lambda k: lambda xs: [x for x in xs if x > k["k"]],
      _int_list),
    T("first_k", ("first_{k}", "take_{k}"), "xs",
      lambda k: f"returns the first {k['k']} elements of the list xs", _k(1, 4),
      lambda k: lambda xs: xs[:k["k"]], _int_list),
    T("last_k", ("last_{k}", "tail_{k}"), "xs",
      lambda k: f"returns the last {k['k']} elements of the list xs", _k(1, 4),
      lambda k: lambda xs: xs[-k["k"]:], lambda rng, k: (_ints(rng, rng.randint(k["k"], 7)),)),
    T("repeat_str", ("repeat_{k}", "repeat_{k}_times"), "s",
      lambda k: f"returns the string s repeated {k['k']} times", _k(2, 5),
      lambda k: lambda s: s * k["k"], _one_word),
    T("count_char", ("count_{c}", "count_letter_{c}"), "s",
      lambda k: f"returns how many times the letter '{k['c']}' appears in the string s",
      lambda rng: {"c": rng.choice("aeiourstn")}, lambda k: lambda s: s.count(k["c"]),
      _sentence),
    T("replace_char", ("replace_{c}_with_{d}", "swap_{c}_{d}"), "s",
      lambda k: f"returns the string s with every '{k['c']}' replaced by '{k['d']}'",
      lambda rng: dict(zip("cd", rng.sample("aeiourst", 2)))
      , lambda k: lambda s: s.replace(k["c"], k["d"]), _sentence),
    T("remove_char", ("remove_{c}", "strip_letter_{c}"), "s",
      lambda k: f"returns the string s with every '{k['c']}' removed",
      lambda rng: {"c": rng.choice("aeiourstn")}, lambda k: lambda s: s.replace(k["c"], ""),
      _sentence),
    T("starts_with", ("starts_with_{p}", "has_prefix_{p}"), "s",
      lambda k: f"returns True if the string s starts with '{k['p']}' and False otherwise",
      lambda rng: {"p": rng.choice(["a", "b", "co", "da", "he", "py", "s", "t"])},
      lambda k: lambda s: s.startswith(k["p"]), _one_word),
    T("ends_with", ("ends_with_{p}", "has_suffix_{p}"), "s",
      lambda k: f"returns True if the string s ends with '{k['p']}' and False otherwise",
      lambda rng: {"p": rng.choice(["a", "e", "n", "on", "ld", "r", "t", "ue"])},
      lambda k: lambda s: s.endswith(k["p"]), _one_word),
    T("longer_than", ("longer_than_{k}", "long_words_{k}"), "words",
      lambda k: f"returns a list of the strings in the list words that have more than {k['k']} "
      "characters, in their original order", _k(2, 5),
      lambda k: lambda words: [w for w in words if len(w) > k["k"]],
      lambda rng, k: ([_word(rng) for _ in range(rng.randint(1, 5))],)),
    T("join_sep", ("join_with_{n}", "join_{n}"), "words",
      lambda k: f"returns the strings in the list words joined with '{k['sep']}' between them",
      lambda rng: (lambda i: {"sep": ["-", ", ", "+", "/", " | "][i],
                              "n": ["dash", "comma", "plus", "slash", "bar"][i]})(
                                  rng.randrange(5)),
      lambda k: lambda words: k["sep"].join(words),
      lambda rng, k: ([_word(rng) for _ in range(rng.randint(1, 4))],)),
    T("pad_left", ("pad_{k}", "left_pad_{k}"), "s",
      lambda k: f"returns the string s padded on the left with '{k['c']}' characters to length "
      f"{k['k']} (s unchanged if it is already that long)",
      lambda rng: {"k": rng.randint(4, 9), "c": rng.choice("*0.#")},
      lambda k: lambda s: s.rjust(k["k"], k["c"]), _one_word),
    T("max_list", ("largest", "max_value", "biggest"), "xs",
      lambda k: "returns the largest number in the non-empty list xs", _none,
      lambda k: max, _int_list),
    T("min_list", ("smallest", "min_value", "lowest"), "xs",
      lambda k: "returns the smallest number in the non-empty list xs", _none,
      lambda k: min, _int_list),
    T("product", ("product", "multiply_all"), "xs",
      lambda k: "returns the product of all numbers in the list xs (1 for an empty list)", _none,
      lambda k: _product, lambda rng, k: (_ints(rng, rng.randint(0, 4), -4, 6),)),
    T("average", ("average", "mean"), "xs",
      lambda k: "returns the average of the numbers in the non-empty list xs", _none,
      lambda k: lambda xs: sum(xs) / len(xs), _pos_list),
    T("reverse_str", ("reverse", "reverse_string"), "s",
      lambda k: "returns the string s reversed", _none, lambda k: lambda s: s[::-1], _one_word),
    T("is_palindrome", ("is_palindrome", "reads_same_backwards"), "s",
      lambda k: "returns True if the string s reads the same forwards and backwards", _none,
      lambda k: lambda s: s == s[::-1], _one_word),
    T("count_vowels", ("count_vowels", "vowel_count"), "s",
      lambda k: "returns the number of vowels (a, e, i, o, u) in the lowercase string s", _none,
      lambda k: lambda s: sum(ch in "aeiou" for ch in s), _sentence),
    T("count_words", ("count_words", "word_count"), "s",
      lambda k: "returns the number of words in the string s (words are separated by spaces)",
      _none, lambda k: lambda s: len(s.split()), _sentence),
    T("capitalize", ("capitalize_first", "title_word"), "s",
      lambda k: "returns the string s with its first letter in uppercase and the rest unchanged",
      _none, lambda k: lambda s: s[:1].upper() + s[1:], _one_word),
    T("digit_sum", ("digit_sum", "sum_of_digits"), "n",
      lambda k: "returns the sum of the decimal digits of the non-negative integer n", _none,
      lambda k: lambda n: sum(int(d) for d in str(n)), lambda rng, k: (rng.randint(0, 99999),)),
    T("factorial", ("factorial", "fact"), "n",
      lambda k: "returns the factorial of the non-negative integer n", _none,
      lambda k: _factorial, _nat),
    T("sum_to_n", ("sum_to_n", "triangle"), "n",
      lambda k: "returns the sum of the integers from 1 to n (0 when n is 0)", _none,
      lambda k: lambda n: n * (n + 1) // 2, lambda rng, k: (rng.randint(0, 50),)),
    T("count_unique", ("count_unique", "distinct_count"), "xs",
      lambda k: "returns the number of distinct values in the list xs", _none,
      lambda k: lambda xs: len(set(xs)), lambda rng, k: (_ints(rng, rng.randint(0, 7), 0, 4),)),
    T("swap_pair", ("swap", "swap_pair"), "a, b",
      lambda k: "returns the tuple (b, a)", _none, lambda k: lambda a, b: (b, a),
      lambda rng, k: (rng.randint(-9, 9), rng.randint(-9, 9))),
    T("max_of_three", ("max3", "largest_of_three"), "a, b, c",
      lambda k: "returns the largest of the three numbers a, b and c", _none,
      lambda k: lambda a, b, c: max(a, b, c), lambda rng, k: tuple(_ints(rng, 3))),
    T("abs_diff", ("abs_diff", "distance"), "a, b",
      lambda k: "returns the absolute difference between the numbers a and b", _none,
      lambda k: lambda a, b: abs(a - b), lambda rng, k: tuple(_ints(rng, 2))),
    T("square_each", ("squares", "square_all"), "xs",
      lambda k: "returns a new list with the square of every number in the list xs", _none,
      lambda k: lambda xs: [x * x for x in xs], _int_list),
    T("evens", ("evens", "keep_even"), "xs",
      lambda k: "returns a list of the even numbers in the list xs, in their original order",
      _none, lambda k: lambda xs: [x for x in xs if x % 2 == 0], _int_list),
    T("second_largest", ("second_largest", "runner_up"), "xs",
      lambda k: "returns the second largest distinct number in the list xs (which has at least "
      "two distinct numbers)", _none, lambda k: lambda xs: sorted(set(xs))[-2],
      lambda rng, k: (rng.sample(range(-9, 30), rng.randint(2, 6)),)),
    T("index_of", ("index_of_{k}", "find_{k}"), "xs",
      lambda k: f"returns the index of the first {k['k']} in the list xs, or -1 if it is absent",
      _k(0, 5), lambda k: lambda xs: xs.index(k["k"]) if k["k"] in xs else -1,
      lambda rng, k: (_ints(rng, rng.randint(1, 6), 0, 6),)),
)
# The second batch, written after the first calibration kept too few families for pools that can
# resolve a gain: mostly counts, filters and tests against a drawn constant (the kind the first
# batch found in band), so each family has many distinct prompts. Calibrated on their own draw.
TEMPLATES_2: tuple[Template, ...] = (
    T("count_below", ("count_below_{k}", "count_less_than_{k}"), "xs",
      lambda k: f"returns how many numbers in the list xs are less than {k['k']}", _k(0, 9),
      lambda k: lambda xs: sum(1 for x in xs if x < k["k"]), _int_list),
    T("count_equal", ("count_{k}s", "occurrences_of_{k}"), "xs",
      lambda k: f"returns how many times the number {k['k']} appears in the list xs", _k(0, 5),
      lambda k: lambda xs: xs.count(k["k"]), lambda rng, k: (_ints(rng, rng.randint(0, 7), 0, 6),)),
    T("sum_below", ("sum_below_{k}", "sum_less_than_{k}"), "xs",
      lambda k: f"returns the sum of the numbers in the list xs that are less than {k['k']}",
      _k(0, 9), lambda k: lambda xs: sum(x for x in xs if x < k["k"]), _int_list),
    T("filter_below", ("keep_below_{k}", "filter_less_{k}"), "xs",
      lambda k: f"returns a list of the numbers in the list xs that are less than {k['k']}, "
      "in their original order", _k(0, 9), lambda k: lambda xs: [x for x in xs if x < k["k"]],
      _int_list),
    T("drop_value", ("drop_{k}", "without_{k}"), "xs",
      lambda k: f"returns a list of the numbers in the list xs that are not equal to {k['k']}, "
      "in their original order", _k(0, 5), lambda k: lambda xs: [x for x in xs if x != k["k"]],
      lambda rng, k: (_ints(rng, rng.randint(0, 7), 0, 6),)),
    T("contains", ("contains_{k}", "has_{k}"), "xs",
      lambda k: f"returns True if the number {k['k']} is in the list xs and False otherwise",
      _k(0, 6), lambda k: lambda xs: k["k"] in xs,
      lambda rng, k: (_ints(rng, rng.randint(0, 6), 0, 8),)),
    T("all_above", ("all_above_{k}", "all_greater_{k}"), "xs",
      lambda k: f"returns True if every number in the list xs is greater than {k['k']} and "
      "False otherwise", _k(0, 9), lambda k: lambda xs: all(x > k["k"] for x in xs), _int_list),
    T("any_above", ("any_above_{k}", "some_greater_{k}"), "xs",
      lambda k: f"returns True if at least one number in the list xs is greater than {k['k']} and "
      "False otherwise", _k(0, 9), lambda k: lambda xs: any(x > k["k"] for x in xs), _int_list),
    T("sum_plus", ("sum_plus_{k}", "total_plus_{k}"), "xs",
      lambda k: f"returns the sum of the numbers in the list xs plus {k['k']}", _k(1, 30),
      lambda k: lambda xs: sum(xs) + k["k"], _int_list),
    T("sum_times", ("sum_times_{k}", "scaled_total_{k}"), "xs",
      lambda k: f"returns the sum of the numbers in the list xs multiplied by {k['k']}", _k(2, 9),
      lambda k: lambda xs: sum(xs) * k["k"], _int_list),
    T("max_plus", ("max_plus_{k}", "largest_plus_{k}"), "xs",
      lambda k: f"returns the largest number in the non-empty list xs plus {k['k']}", _k(1, 30),
      lambda k: lambda xs: max(xs) + k["k"], _int_list),
    T("linear", ("f_{a}_{b}", "line_{a}_{b}"), "x",
      lambda k: f"returns x multiplied by {k['a']}, plus {k['b']}",
      lambda rng: {"a": rng.randint(2, 9), "b": rng.randint(1, 20)},
      lambda k: lambda x: x * k["a"] + k["b"], _one_int),
    T("shift_then_scale", ("g_{a}_{b}", "shift_scale_{a}_{b}"), "x",
      lambda k: f"returns x plus {k['a']}, all multiplied by {k['b']}",
      lambda rng: {"a": rng.randint(1, 20), "b": rng.randint(2, 9)},
      lambda k: lambda x: (x + k["a"]) * k["b"], _one_int),
    T("in_range", ("in_range_{lo}_{hi}", "between_{lo}_{hi}"), "x",
      lambda k: f"returns True if x is between {k['lo']} and {k['hi']} (inclusive) and False "
      "otherwise", lambda rng: (lambda lo: {"lo": lo, "hi": lo + rng.randint(2, 20)})(
          rng.randint(0, 20)),
      lambda k: lambda x: k["lo"] <= x <= k["hi"],
      lambda rng, k: (rng.randint(k["lo"] - 10, k["hi"] + 10),)),
    T("at_least", ("at_least_{k}", "max_with_{k}"), "x",
      lambda k: f"returns the larger of x and {k['k']}", _k(-5, 20),
      lambda k: lambda x: max(x, k["k"]), _one_int),
    T("at_most", ("at_most_{k}", "min_with_{k}"), "x",
      lambda k: f"returns the smaller of x and {k['k']}", _k(-5, 20),
      lambda k: lambda x: min(x, k["k"]), _one_int),
    T("square_plus", ("square_plus_{k}", "sq_add_{k}"), "x",
      lambda k: f"returns the square of x plus {k['k']}", _k(1, 20),
      lambda k: lambda x: x * x + k["k"], lambda rng, k: (rng.randint(-12, 12),)),
    T("prefix_k", ("first_{k}_chars", "prefix_{k}"), "s",
      lambda k: f"returns the first {k['k']} characters of the string s", _k(1, 4),
      lambda k: lambda s: s[:k["k"]], _one_word),
    T("add_suffix", ("add_{w}", "append_{w}"), "s",
      lambda k: f"returns the string s followed by '{k['w']}'",
      lambda rng: {"w": rng.choice(["ing", "ed", "er", "s", "ly", "ness", "ful", "est"])},
      lambda k: lambda s: s + k["w"], _one_word),
    T("add_prefix", ("prefix_{w}", "prepend_{w}"), "s",
      lambda k: f"returns '{k['w']}' followed by the string s",
      lambda rng: {"w": rng.choice(["un", "re", "pre", "dis", "mis", "non", "over", "sub"])},
      lambda k: lambda s: k["w"] + s, _one_word),
    T("wrap", ("wrap_{n}", "surround_{n}"), "s",
      lambda k: f"returns the string s with '{k['c']}' added at the start and at the end",
      lambda rng: (lambda i: {"c": "*#-_!~"[i], "n": ["star", "hash", "dash", "under", "bang",
                                                      "tilde"][i]})(rng.randrange(6)),
      lambda k: lambda s: k["c"] + s + k["c"], _one_word),
    T("word_lengths", ("word_lengths", "lengths"), "words",
      lambda k: "returns a list of the lengths of the strings in the list words", _none,
      lambda k: lambda words: [len(w) for w in words],
      lambda rng, k: ([_word(rng) for _ in range(rng.randint(0, 5))],)),
    T("total_length", ("total_length", "total_chars"), "words",
      lambda k: "returns the total number of characters in all the strings in the list words",
      _none, lambda k: lambda words: sum(len(w) for w in words),
      lambda rng, k: ([_word(rng) for _ in range(rng.randint(0, 5))],)),
    T("upper_all", ("upper_all", "shout_all"), "words",
      lambda k: "returns a new list with every string in the list words in uppercase", _none,
      lambda k: lambda words: [w.upper() for w in words],
      lambda rng, k: ([_word(rng) for _ in range(rng.randint(0, 4))],)),
    T("starting_with", ("words_starting_{c}", "starts_{c}"), "words",
      lambda k: f"returns a list of the strings in the list words that start with '{k['c']}', "
      "in their original order", lambda rng: {"c": rng.choice("abcdhknpqst")},
      lambda k: lambda words: [w for w in words if w.startswith(k["c"])],
      lambda rng, k: ([_word(rng) for _ in range(rng.randint(1, 6))],)),
    T("count_longer", ("count_longer_{k}", "num_long_{k}"), "words",
      lambda k: f"returns how many strings in the list words have more than {k['k']} characters",
      _k(2, 5), lambda k: lambda words: sum(1 for w in words if len(w) > k["k"]),
      lambda rng, k: ([_word(rng) for _ in range(rng.randint(0, 6))],)),
    T("sum_squares", ("sum_squares", "sum_of_squares"), "xs",
      lambda k: "returns the sum of the squares of the numbers in the list xs", _none,
      lambda k: lambda xs: sum(x * x for x in xs), _int_list),
    T("abs_each", ("abs_all", "absolutes"), "xs",
      lambda k: "returns a new list with the absolute value of every number in the list xs",
      _none, lambda k: lambda xs: [abs(x) for x in xs], _int_list),
    T("mod_each", ("mod_each_{k}", "remainders_{k}"), "xs",
      lambda k: f"returns a new list with the remainder of every number in the list xs divided "
      f"by {k['k']}", _k(2, 9), lambda k: lambda xs: [x % k["k"] for x in xs], _pos_list),
    T("cap_each", ("cap_at_{k}", "limit_{k}"), "xs",
      lambda k: f"returns a new list where every number in the list xs greater than {k['k']} is "
      f"replaced by {k['k']}", _k(0, 9), lambda k: lambda xs: [min(x, k["k"]) for x in xs],
      _int_list),
    T("sub_each", ("sub_{k}_from_each", "lower_by_{k}"), "xs",
      lambda k: f"returns a new list with {k['k']} subtracted from every number in the list xs",
      _k(1, 20), lambda k: lambda xs: [x - k["k"] for x in xs], _int_list),
    T("sum_first", ("sum_first_{k}", "head_sum_{k}"), "xs",
      lambda k: f"returns the sum of the first {k['k']} numbers in the list xs (all of them if "
      "there are fewer)", _k(1, 4), lambda k: lambda xs: sum(xs[:k["k"]]), _int_list),
    T("length_is", ("has_length_{k}", "is_length_{k}"), "s",
      lambda k: f"returns True if the string s has exactly {k['k']} characters and False "
      "otherwise", _k(3, 6), lambda k: lambda s: len(s) == k["k"], _one_word),
    T("count_even", ("count_even", "num_evens"), "xs",
      lambda k: "returns how many even numbers are in the list xs", _none,
      lambda k: lambda xs: sum(1 for x in xs if x % 2 == 0), _int_list),
    T("sum_odd", ("sum_odd", "odd_total"), "xs",
      lambda k: "returns the sum of the odd numbers in the list xs", _none,
      lambda k: lambda xs: sum(x for x in xs if x % 2), _int_list),
    T("double_if_above", ("double_above_{k}", "boost_above_{k}"), "xs",
      lambda k: f"returns a new list where every number in the list xs greater than {k['k']} is "
      "doubled and the others are unchanged", _k(0, 9),
      lambda k: lambda xs: [2 * x if x > k["k"] else x for x in xs], _int_list),
)
TEMPLATES = TEMPLATES + TEMPLATES_2


def _other(c: str) -> str:
    """A letter that is not ``c`` (fills edge-case strings around a drawn letter)."""
    return "z" if c != "z" else "x"


def _around(k: int) -> list[int]:
    """An unsorted list with values just below, at and above ``k``, and non-zero duplicates on
    both sides of it."""
    return [k + 3, k, k + 1, k - 1, k + 3, k - 1, -2]


_MIXED = [3, -1, 3, 0, -4, 2]
"""Unsorted, duplicates, zero and negatives: set(), sorted() and abs() idioms show here."""

EDGE_CASES: dict[str, Callable[[dict], list[tuple]]] = {
    "is_multiple": lambda k: [(0,), (-k["k"],), (k["k"] + 1,), (2 * k["k"],)],
    "clamp": lambda k: [(k["lo"] - 1,), (k["hi"] + 1,), (k["lo"],), (k["hi"],)],
    "floor_div": lambda k: [(-1,), (-(k["k"] + 1),), (k["k"] - 1,)],
    "remainder": lambda k: [(0,), (k["k"],), (k["k"] - 1,)],
    "sum_above": lambda k: [(_around(k["k"]),), ([],)],
    "count_above": lambda k: [(_around(k["k"]),), ([],)],
    "sum_below": lambda k: [(_around(k["k"]),), ([-2, -2, k["k"] + 1],), ([],)],
    "count_below": lambda k: [(_around(k["k"]),), ([-2, -2, k["k"] + 1],), ([],)],
    "filter_above": lambda k: [(_around(k["k"]),), ([],)],
    "filter_below": lambda k: [(_around(k["k"]),), ([-2, -2, k["k"] + 1],), ([],)],
    "count_equal": lambda k: [([k["k"], 9, k["k"], k["k"]],), ([],)],
    "drop_value": lambda k: [([k["k"], 9, k["k"], 7, 9],), ([],)],
    "contains": lambda k: [([],), ([k["k"] + 1, k["k"] - 1],), ([9, k["k"]],), ([k["k"], 9],)],
    "all_above": lambda k: [([],), ([k["k"] + 1, k["k"]],), ([k["k"] + 5, k["k"] + 1],)],
    "any_above": lambda k: [([],), ([k["k"], k["k"] - 1],), ([k["k"], k["k"] + 1],)],
    "add_each": lambda k: [(_MIXED,), ([],)],
    "scale_each": lambda k: [(_MIXED,), ([],)],
    "sub_each": lambda k: [(_MIXED,), ([],)],
    "square_each": lambda k: [(_MIXED,), ([],)],
    "abs_each": lambda k: [(_MIXED,), ([],)],
    "cap_each": lambda k: [(_around(k["k"]),), ([],)],
    "double_if_above": lambda k: [(_around(k["k"]),), ([],)],
    "mod_each": lambda k: [([k["k"] + 1, k["k"], 1, k["k"] + 1],), ([],)],
    "evens": lambda k: [([4, 1, 2, 4, -2, 0],), ([],)],
    "count_even": lambda k: [([4, 1, 2, 4, -2, 0],), ([],)],
    "sum_odd": lambda k: [([3, 1, 2, 3, -5],), ([],)],
    "sum_squares": lambda k: [(_MIXED,), ([],)],
    "first_k": lambda k: [([9, 8, 7, 6, 5, 4],), ([],), ([7],)],
    "last_k": lambda k: [([1, 2, 3, 4, 5, 6],), ([6, 5, 4, 3, 2, 1, 0],)],
    "sum_first": lambda k: [([9, 8, 7, 6, 5, 4],), ([],), ([7],)],
    "count_char": lambda k: [("",), (f"{k['c']}{k['c']} {_other(k['c'])}{k['c']}",)],
    "replace_char": lambda k: [(f"{k['c']}{_other(k['c'])}{k['c']}{k['c']}",), ("",)],
    "remove_char": lambda k: [(f"{k['c']}{_other(k['c'])}{k['c']}{_other(k['c'])}{k['c']}",),
                              ("",)],
    "starts_with": lambda k: [("x" + k["p"],), (k["p"][0] + "q",), (k["p"],), ("",)],
    "ends_with": lambda k: [(k["p"] + "x",), ("q" + k["p"][-1],), (k["p"],), ("",)],
    "longer_than": lambda k: [(["z" * (k["k"] + 2), "x" * k["k"], "y" * (k["k"] + 1), "ab",
                                "z" * (k["k"] + 2)],), ([],)],
    "count_longer": lambda k: [(["x" * k["k"], "y" * (k["k"] + 1), "y" * (k["k"] + 1)],),
                               ([],)],
    "starting_with": lambda k: [([k["c"] + "b", "x" + k["c"], k["c"] + "a", k["c"] + "b"],),
                                ([],)],
    "join_sep": lambda k: [(["b", "a", "b"],), ([],), (["one"],)],
    "pad_left": lambda k: [("x" * (k["k"] + 2),), ("",), ("ab",)],
    "max_list": lambda k: [([3, 9, 1],), ([-5, -2, -9],), ([-7],)],
    "min_list": lambda k: [([3, 1, 9],), ([5, 2, 9],), ([-2, -9, 4],)],
    "max_plus": lambda k: [([3, 9, 1],), ([-5, -2, -9],)],
    "product": lambda k: [([],), ([2, 3],), ([-2, 3, 0],), ([-1, -2, -3],), ([2, 2, 3],)],
    "average": lambda k: [([1, 2],), ([2, 2],), ([1, 2, 2],)],
    "reverse_str": lambda k: [("bca",), ("",), ("abba",)],
    "is_palindrome": lambda k: [("abca",), ("",), ("ab",), ("aba",)],
    "count_vowels": lambda k: [("banana",), ("sky",), ("",), ("queue",)],
    "count_words": lambda k: [("",), ("one",), ("one two three",)],
    "capitalize": lambda k: [("hELLO",), ("",), ("ab cd",)],
    "digit_sum": lambda k: [(0,), (18,), (909,)],
    "factorial": lambda k: [(0,), (1,), (5,)],
    "sum_to_n": lambda k: [(0,), (1,), (10,)],
    "count_unique": lambda k: [([1, 1, 2],), ([],), ([3, 3, 3, 3],)],
    "max_of_three": lambda k: [(3, 1, 5), (1, 9, 2), (1, 2, 9), (-1, -5, -3)],
    "abs_diff": lambda k: [(1, 5), (5, 1), (-3, 3)],
    "second_largest": lambda k: [([1, 4, 6, 9],), ([9, 9, 1, 4],), ([2, 1],)],
    "index_of": lambda k: [([9, 9],), ([k["k"], 9, k["k"]],), ([9, k["k"]],)],
    "word_lengths": lambda k: [(["bb", "a", "bb"],), ([],)],
    "upper_all": lambda k: [(["b", "a", "b"],), ([],)],
    "total_length": lambda k: [(["ab", "ab", "c"],), ([],)],
    "in_range": lambda k: [(k["lo"],), (k["hi"],), (k["lo"] - 1,), (k["hi"] + 1,)],
    "at_least": lambda k: [(k["k"] - 1,), (k["k"] + 1,)],
    "at_most": lambda k: [(k["k"] - 1,), (k["k"] + 1,)],
    "length_is": lambda k: [("x" * k["k"],), ("x" * (k["k"] + 1),), ("x" * (k["k"] - 1),)],
    "prefix_k": lambda k: [("abcdefgh",), ("",), ("a",)],
    "power_const": lambda k: [(0,), (1,), (-2,), (3,)],
}
"""Inputs where a wrong idiom and the right answer differ (duplicates, unsorted and empty lists,
values at a constant's boundary, negatives), added to every task of the family after its drawn
asserts. Fixed by the constants alone: the drawn prompts and asserts stay as they were."""
FAMILIES: tuple[str, ...] = tuple(t.family for t in TEMPLATES)
# Held out of traffic, gate and sealed pools whatever the calibration says: a transfer check (near
# relatives of trained families). Chosen before calibrating.
HELD_OUT: tuple[str, ...] = ("sub_const", "count_above", "remove_char", "ends_with", "min_list",
                             "abs_diff", "count_below", "any_above", "add_prefix", "sub_each")
BY_FAMILY = {t.family: t for t in TEMPLATES}


def _in_name(value):
    """A drawn constant as it appears in a function name: a negative number reads ``neg3``."""
    return f"neg{-value}" if isinstance(value, int) and value < 0 else value


def _render(t: Template, k: dict, name: str, verb: str) -> str:
    return (f"{verb} a Python function {name}({t.args}) that {t.describe(k)}. {INSTRUCTION}")


def instances(template: Template, n: int, *, seed: int) -> list[PyTask]:
    """``n`` tasks of one family with distinct prompts, drawn with ``seed`` (fewer if the family
    has fewer distinct prompts than that)."""
    rng = random.Random(f"{seed}/{template.family}")
    seen: set[str] = set()
    out: list[PyTask] = []
    for _ in range(n * 30):
        if len(out) == n:
            break
        k = template.draw(rng)
        name = rng.choice(template.names).format(**{a: _in_name(v) for a, v in k.items()})
        prompt = _render(template, k, name, rng.choice(VERBS))
        if prompt in seen:
            continue
        seen.add(prompt)
        out.append(PyTask(f"pyfunc/{template.family}/{seed}-{len(out):04d}", prompt, name,
                          _asserts(template, k, name, rng), template.family))
    return out


def _asserts(t: Template, k: dict, name: str, rng: random.Random) -> tuple[str, ...]:
    """3–5 distinct asserts, the reference's outputs on drawn inputs, then the family's
    :data:`EDGE_CASES` (which draw nothing from ``rng``)."""
    fn = t.ref(k)
    want = rng.randint(3, 5)
    tests: list[str] = []

    def add(args: tuple) -> None:
        line = f"assert {name}({', '.join(repr(a) for a in args)}) == {fn(*args)!r}"
        if line not in tests:
            tests.append(line)

    for _ in range(want * 20):
        if len(tests) == want:
            break
        add(t.inputs(rng, k))
    for args in EDGE_CASES.get(t.family, lambda k: [])(k):
        add(args)
    return tuple(tests)


def grade(task: PyTask | dict, reply: str, *, timeout_s: float = 5.0) -> CheckResult:
    """The gate's own grader (``tasks.jsonl_suite.grade``) on this task's JSONL record, so what a
    simulated user reacts to and what the gate counts cannot drift apart."""
    from tasks.jsonl_suite import grade as grade_record
    from tasks.jsonl_suite import parse_line

    record = task if isinstance(task, dict) else task.to_json()
    return grade_record(parse_line(json.dumps(record)), reply, timeout_s=timeout_s)


def write_jsonl(tasks: Sequence[PyTask], path: Path) -> Path:
    """The shared suite format: one ``json.dumps(..., ensure_ascii=True)`` object a line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(t.to_json(), ensure_ascii=True) + "\n" for t in tasks),
                    encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    """The tasks of a suite file (``runtime.jsonl``: split on "\\n" only, blank lines skipped)."""
    from runtime import jsonl

    return [json.loads(line) for line in jsonl.read_lines(path)]


@dataclass(frozen=True)
class Pools:
    """Disjoint by prompt text: ``train`` (traffic), ``gate``, ``sealed`` (kept families),
    ``transfer`` (held-out families only, never in traffic) and ``guard`` (families the model
    already solves, for the gate's regression guard; never in traffic)."""

    train: list[PyTask]
    gate: list[PyTask]
    sealed: list[PyTask]
    transfer: list[PyTask]
    guard: list[PyTask] = field(default_factory=list)


def split_pools(families: Sequence[str], held_out: Sequence[str], *, per_family: int,
                fractions: tuple[float, float, float] = (0.5, 0.25, 0.25), seed: int = 0,
                exclude: Sequence[str] = (), guard_families: Sequence[str] = (),
                guard_per_family: int = 8) -> Pools:
    """Draw ``per_family`` tasks of each family (prompts in ``exclude``, e.g. the calibration
    draw, are skipped) and cut kept families into train/gate/sealed by ``fractions``; held-out
    families go to ``transfer`` only, ``guard_families`` (``guard_per_family`` each) to ``guard``
    only."""
    groups = {"families": set(families), "held_out": set(held_out),
              "guard_families": set(guard_families)}
    for a, b in (("families", "held_out"), ("families", "guard_families"),
                 ("held_out", "guard_families")):
        if groups[a] & groups[b]:
            raise ValueError(f"{a} and {b} overlap: {sorted(groups[a] & groups[b])}")
    skip = set(exclude)

    def draw(fam: str, n: int) -> list[PyTask]:
        return [t for t in instances(BY_FAMILY[fam], 3 * n, seed=seed) if t.prompt not in skip][:n]

    train, gate, sealed, transfer = [], [], [], []
    for fam in (*families, *held_out):
        drawn = draw(fam, per_family)
        if fam in groups["held_out"]:
            transfer += drawn
            continue
        a = round(len(drawn) * fractions[0])
        b = a + round(len(drawn) * fractions[1])
        train += drawn[:a]
        gate += drawn[a:b]
        sealed += drawn[b:]
    guard = [t for fam in guard_families for t in draw(fam, guard_per_family)]
    return Pools(train, gate, sealed, transfer, guard)


GUARD_MIN_GREEDY = 0.75
"""A calibrated family whose greedy pass@1 is at least this (3 of 4 prompts), neither kept nor held
out, is one the model already solves: it goes to the guard pool (what an update must not break).
Fixed before any guard was scored."""


def guard_families(record: dict) -> list[str]:
    """The families of a calibration record that the model already solves (greedy pass@1 >=
    :data:`GUARD_MIN_GREEDY`), neither kept for training nor held out."""
    return [fam for fam, r in record.get("families", {}).items()
            if r["pass1_greedy"] >= GUARD_MIN_GREEDY and not r["kept"] and fam not in HELD_OUT]


CALIBRATION_SEED = 1000
"""Seed of the calibration draw (bench/pyfuncs_calibrate.py); pools never reuse its prompts."""
POOL_FILES = {"train": "pyfuncs_train.jsonl", "gate": "pyfuncs_gate.jsonl",
              "sealed": "pyfuncs_sealed.jsonl", "transfer": "pyfuncs_transfer.jsonl",
              "guard": "pyfuncs_guard.jsonl"}


def write_pools(calibrations: Path | Sequence[Path], out_dir: Path, *, per_family: int = 40,
                seed: int = 0, guard_per_family: int = 8) -> dict[str, int]:
    """The pool files under ``out_dir`` from the ``kept``, ``held_out_kept`` and already-solved
    (:func:`guard_families`) families of one or more calibration records (every record's
    calibration draw excluded); returns their sizes."""
    paths = [Path(calibrations)] if isinstance(calibrations, (str, Path)) else list(calibrations)
    kept: list[str] = []
    held: list[str] = []
    guard: list[str] = []
    calib: list[str] = []
    for path in paths:
        record = json.loads(Path(path).read_text())
        kept += record["kept"]
        held += record["held_out_kept"]
        guard += guard_families(record)
        calib += [t.prompt for tpl in TEMPLATES
                  for t in instances(tpl, record["per_family"], seed=record["seed"])]
    pools = split_pools(kept, held, per_family=per_family, seed=seed, exclude=calib,
                        guard_families=guard, guard_per_family=guard_per_family)
    sizes = {}
    for name, file in POOL_FILES.items():
        tasks = getattr(pools, name)
        write_jsonl(tasks, Path(out_dir) / file)
        sizes[name] = len(tasks)
    return sizes


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(description="Write the pyfuncs pools from a calibration record.")
    p.add_argument("--calibration", type=Path, nargs="+",
                   default=[Path("bench/results/pyfuncs_calibration.json"),
                            Path("bench/results/pyfuncs_calibration_2.json")])
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "data")
    p.add_argument("--per-family", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(write_pools(args.calibration, args.out, per_family=args.per_family, seed=args.seed))


if __name__ == "__main__":
    main()
