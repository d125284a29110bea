"""Small Python-function tasks in chat form, generated from templates, graded by hidden asserts.

Each :class:`Template` is a family of requests like "Write a Python function add_7(x) that returns
x plus 7": a name, a one-line description with drawn constants, a reference implementation and a
drawer of test inputs. An independent function is a family with its constants (``count_above/k=3``,
:func:`function_id`); every task carries it in ``function``. :func:`instances` draws distinct
prompts of one family (seeded, stable ids ``pyfunc/<family>/<nnnn>``); the hidden asserts are the
reference's outputs on 3–5 drawn inputs plus the family's edge cases (:data:`EDGE_CASES`:
duplicates, empty and unsorted lists, boundaries, where a wrong idiom shows), so a task's tests
are right by construction. Answers fit in 64 tokens for a small instruct model.

:func:`grade` is the one checker: the code of the reply (its first fenced block, or the whole
reply) is graded by tasks/grader.py in the sandbox; a task passes iff every assert passes,
type-strictly. :func:`write_jsonl` / :func:`read_jsonl` use the shared suite format (one JSON
object per line: ``task_id``, ``prompt``, ``messages``, ``entry_point``, ``tests``, ``family``,
``function``). :func:`split_pools` cuts the trained families' functions into a train-traffic pool,
a gate pool and a sealed set that share no function (the sealed set uses no name alias of
training), keeps held-out families out of all but a transfer set, and gives families the model
already solves to a guard pool for the gate's regression guard (their other functions to a retain
set). ``python -m tasks.pyfuncs`` writes the pools under tasks/data (deterministic) with a
``pools.json`` manifest and prints tasks, independent functions and families per pool.

Left out: multi-function tasks, tasks that need imports, stdin/stdout tasks.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tasks.toy import CheckResult

INSTRUCTION = "Reply with only the code in a ```python block."
VERBS = ("Write", "Implement", "Define", "Create", "Code", "Please write")
WORDS = ("apple", "banana", "kiwi", "level", "radar", "hello", "world", "python", "code", "stack",
         "queue", "tree", "noon", "data", "cat", "dog", "sun", "moon")


@dataclass(frozen=True)
class Template:
    """One family: ``describe(k)`` is the text after "that", ``ref(k)`` the reference function,
    ``draw(rng)`` the constants ``k`` (a dict), ``inputs(rng, k)`` one argument tuple;
    ``edge(k)`` the family's edge-case inputs, where they are not in :data:`EDGE_CASES`."""

    family: str
    names: tuple[str, ...]
    args: str
    describe: Callable[[dict], str]
    draw: Callable[[random.Random], dict]
    ref: Callable[[dict], Callable]
    inputs: Callable[[random.Random, dict], tuple]
    edge: Callable[[dict], list[tuple]] | None = None


@dataclass(frozen=True)
class PyTask:
    """One generated task in the shared suite format."""

    task_id: str
    prompt: str
    entry_point: str
    tests: tuple[str, ...]
    family: str
    function: str = ""
    """The independent function asked for: the family and its drawn constants
    (:func:`function_id`)."""

    @property
    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.prompt}]

    def to_json(self) -> dict:
        out = {"task_id": self.task_id, "prompt": self.prompt, "messages": self.messages,
               "entry_point": self.entry_point, "tests": list(self.tests), "family": self.family}
        if self.function:
            out["function"] = self.function
        return out


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
TEMPLATES_1: tuple[Template, ...] = (
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


def _lo_hi(lo: tuple[int, int], width: tuple[int, int]) -> Callable[[random.Random], dict]:
    return lambda rng: (lambda a: {"lo": a, "hi": a + rng.randint(*width)})(rng.randint(*lo))


def _a_b(a: tuple[int, int], b: tuple[int, int]) -> Callable[[random.Random], dict]:
    return lambda rng: {"a": rng.randint(*a), "b": rng.randint(*b)}


def _near_k(rng: random.Random, k: dict) -> tuple:
    return (rng.randint(k["k"] - 10, k["k"] + 10),)


def _maybe_empty(rng: random.Random, k: dict) -> tuple:
    xs = _ints(rng, rng.randint(1, 5))
    return ([] if rng.random() < 0.3 else xs,)


def _words(rng: random.Random, k: dict) -> tuple:
    return ([_word(rng) for _ in range(rng.randint(0, 6))],)


# The third batch, written so that the gate and sealed pools hold enough independent functions
# (family + constants) to resolve a gain: counts, sums, filters and tests against one or two
# drawn constants, in the spirit of the families the first two calibrations found in the band.
# Not calibrated on the model: every family of this batch is trained (split by function into
# train, gate and sealed) except the four in NEW_HELD_OUT, each a near relative of a trained
# family, declared here with the templates before any model answered them.
TEMPLATES_3: tuple[Template, ...] = (
    T("count_between", ("count_between_{lo}_{hi}", "num_between_{lo}_{hi}",
                        "count_in_range_{lo}_{hi}"), "xs",
      lambda k: f"returns how many numbers in the list xs are between {k['lo']} and {k['hi']} "
      "(inclusive)", _lo_hi((-5, 10), (2, 12)),
      lambda k: lambda xs: sum(1 for x in xs if k["lo"] <= x <= k["hi"]), _int_list),
    T("sum_between", ("sum_between_{lo}_{hi}", "total_between_{lo}_{hi}",
                      "sum_in_range_{lo}_{hi}"), "xs",
      lambda k: f"returns the sum of the numbers in the list xs that are between {k['lo']} and "
      f"{k['hi']} (inclusive)", _lo_hi((-5, 10), (2, 12)),
      lambda k: lambda xs: sum(x for x in xs if k["lo"] <= x <= k["hi"]), _int_list),
    T("filter_between", ("keep_between_{lo}_{hi}", "filter_range_{lo}_{hi}",
                         "only_between_{lo}_{hi}"), "xs",
      lambda k: f"returns a list of the numbers in the list xs that are between {k['lo']} and "
      f"{k['hi']} (inclusive), in their original order", _lo_hi((-5, 10), (2, 12)),
      lambda k: lambda xs: [x for x in xs if k["lo"] <= x <= k["hi"]], _int_list),
    T("count_outside", ("count_outside_{lo}_{hi}", "num_outside_{lo}_{hi}",
                        "count_not_between_{lo}_{hi}"), "xs",
      lambda k: f"returns how many numbers in the list xs are not between {k['lo']} and "
      f"{k['hi']} (inclusive)", _lo_hi((-5, 10), (2, 12)),
      lambda k: lambda xs: sum(1 for x in xs if not k["lo"] <= x <= k["hi"]), _int_list),
    T("affine_each", ("affine_{a}_{b}", "scale_shift_{a}_{b}", "map_linear_{a}_{b}"), "xs",
      lambda k: f"returns a new list with every number in the list xs multiplied by {k['a']}, "
      f"plus {k['b']}", _a_b((2, 9), (1, 20)),
      lambda k: lambda xs: [x * k["a"] + k["b"] for x in xs], _int_list),
    T("times_minus", ("h_{a}_{b}", "times_minus_{a}_{b}", "scale_sub_{a}_{b}"), "x",
      lambda k: f"returns x multiplied by {k['a']}, minus {k['b']}", _a_b((2, 9), (1, 20)),
      lambda k: lambda x: x * k["a"] - k["b"], _one_int),
    T("is_greater", ("is_greater_{k}", "above_{k}", "exceeds_{k}"), "x",
      lambda k: f"returns True if x is greater than {k['k']} and False otherwise", _k(-10, 30),
      lambda k: lambda x: x > k["k"], _near_k),
    T("max_with", ("largest_or_{k}", "max_including_{k}", "top_with_{k}"), "xs",
      lambda k: f"returns the largest of {k['k']} and the numbers in the list xs", _k(-10, 30),
      lambda k: lambda xs: max([k["k"], *xs]), _maybe_empty),
    T("min_with", ("smallest_or_{k}", "min_including_{k}", "bottom_with_{k}"), "xs",
      lambda k: f"returns the smallest of {k['k']} and the numbers in the list xs", _k(-10, 30),
      lambda k: lambda xs: min([k["k"], *xs]), _maybe_empty),
    T("first_or", ("first_or_{k}", "head_or_{k}", "first_else_{k}"), "xs",
      lambda k: f"returns the first element of the list xs, or {k['k']} if xs is empty",
      _k(-10, 30), lambda k: lambda xs: xs[0] if xs else k["k"], _maybe_empty),
    T("last_or", ("last_or_{k}", "tail_or_{k}", "last_else_{k}"), "xs",
      lambda k: f"returns the last element of the list xs, or {k['k']} if xs is empty",
      _k(-10, 30), lambda k: lambda xs: xs[-1] if xs else k["k"], _maybe_empty),
    T("at_least_each", ("floor_at_{k}", "raise_to_{k}", "at_least_each_{k}"), "xs",
      lambda k: f"returns a new list where every number in the list xs that is less than {k['k']} "
      f"is replaced by {k['k']}", _k(-5, 15),
      lambda k: lambda xs: [max(x, k["k"]) for x in xs], _int_list),
    T("cube_plus", ("cube_plus_{k}", "cubed_add_{k}", "cube_add_{k}"), "x",
      lambda k: f"returns the cube of x plus {k['k']}", _k(1, 40),
      lambda k: lambda x: x ** 3 + k["k"], lambda rng, k: (rng.randint(-6, 6),)),
    T("square_minus", ("square_minus_{k}", "sq_sub_{k}", "squared_less_{k}"), "x",
      lambda k: f"returns the square of x minus {k['k']}", _k(1, 60),
      lambda k: lambda x: x * x - k["k"], lambda rng, k: (rng.randint(-12, 12),)),
    T("all_below", ("all_below_{k}", "all_less_{k}", "every_below_{k}"), "xs",
      lambda k: f"returns True if every number in the list xs is less than {k['k']} and False "
      "otherwise", _k(-5, 15), lambda k: lambda xs: all(x < k["k"] for x in xs), _int_list),
    T("replace_value", ("replace_{a}_by_{b}", "swap_{a}_for_{b}", "change_{a}_to_{b}"), "xs",
      lambda k: f"returns a new list where every {k['a']} in the list xs is replaced by {k['b']}",
      _a_b((0, 5), (6, 20)), lambda k: lambda xs: [k["b"] if x == k["a"] else x for x in xs],
      lambda rng, k: (_ints(rng, rng.randint(0, 7), 0, 6),)),
    T("count_not_equal", ("count_not_{k}", "count_other_than_{k}", "num_not_{k}"), "xs",
      lambda k: f"returns how many numbers in the list xs are not equal to {k['k']}", _k(0, 9),
      lambda k: lambda xs: sum(1 for x in xs if x != k["k"]),
      lambda rng, k: (_ints(rng, rng.randint(0, 7), 0, 9),)),
    T("count_multiples", ("count_multiples_{k}", "count_divisible_{k}", "num_multiples_of_{k}"),
      "xs", lambda k: f"returns how many numbers in the list xs are divisible by {k['k']}",
      _k(2, 9), lambda k: lambda xs: sum(1 for x in xs if x % k["k"] == 0), _int_list),
    T("pad_right", ("pad_right_{k}", "right_pad_{k}", "fill_right_{k}"), "s",
      lambda k: f"returns the string s padded on the right with '{k['c']}' characters to length "
      f"{k['k']} (s unchanged if it is already that long)",
      lambda rng: {"k": rng.randint(4, 9), "c": rng.choice("*0.#")},
      lambda k: lambda s: s.ljust(k["k"], k["c"]), _one_word),
    T("suffix_k", ("last_{k}_chars", "suffix_{k}", "tail_chars_{k}"), "s",
      lambda k: f"returns the last {k['k']} characters of the string s", _k(1, 5),
      lambda k: lambda s: s[-k["k"]:], _one_word),
    T("words_of_length", ("words_of_length_{k}", "exactly_{k}_chars", "length_{k}_words"),
      "words", lambda k: f"returns a list of the strings in the list words that have exactly "
      f"{k['k']} characters, in their original order", _k(3, 6),
      lambda k: lambda words: [w for w in words if len(w) == k["k"]], _words),
    T("abs_diff_from", ("distance_to_{k}", "abs_diff_{k}", "gap_from_{k}"), "x",
      lambda k: f"returns the absolute difference between x and {k['k']}", _k(-10, 30),
      lambda k: lambda x: abs(x - k["k"]), _one_int),
    T("mod_add", ("mod_add_{a}_{b}", "shift_mod_{a}_{b}", "add_{a}_mod_{b}"), "x",
      lambda k: f"returns the remainder when x plus {k['a']} is divided by {k['b']}",
      _a_b((1, 20), (2, 9)),
      lambda k: lambda x: (x + k["a"]) % k["b"], lambda rng, k: (rng.randint(0, 90),)),
    T("count_containing", ("count_with_{c}", "num_containing_{c}", "count_words_with_{c}"),
      "words", lambda k: f"returns how many strings in the list words contain the letter "
      f"'{k['c']}'", lambda rng: {"c": rng.choice("aeiourstn")},
      lambda k: lambda words: sum(1 for w in words if k["c"] in w), _words),
)
NEW_HELD_OUT: tuple[str, ...] = ("count_outside", "min_with", "square_minus", "all_below")
"""Families of :data:`TEMPLATES_3` held out for the transfer check, each sharing its phrasing with
a trained one (``count_between``, ``max_with``, ``square_plus``, ``all_above``)."""

# Constant ranges widened after the calibration (which drew from the ranges in the templates
# above) so that calibrated families hold more independent functions; same phrasing and inputs.
WIDENED: dict[str, Callable[[random.Random], dict]] = {
    "all_above": _k(-5, 15), "at_least": _k(-20, 40), "at_most": _k(-20, 40),
    "square_plus": _k(1, 60), "prefix_k": _k(1, 6),
    "count_above": _k(-5, 15), "count_below": _k(-5, 15), "any_above": _k(-5, 15),
    "sub_each": _k(1, 40),
}
TEMPLATES_1 = tuple(replace(t, draw=WIDENED.get(t.family, t.draw)) for t in TEMPLATES_1)
TEMPLATES_2 = tuple(replace(t, draw=WIDENED.get(t.family, t.draw)) for t in TEMPLATES_2)
TEMPLATES: tuple[Template, ...] = TEMPLATES_1 + TEMPLATES_2 + TEMPLATES_3


def _other(c: str) -> str:
    """A letter that is not ``c`` (fills edge-case strings around a drawn letter)."""
    return "z" if c != "z" else "x"


def _around(k: int) -> list[int]:
    """An unsorted list with values just below, at and above ``k``, and non-zero duplicates on
    both sides of it."""
    return [k + 3, k, k + 1, k - 1, k + 3, k - 1, -2]


_MIXED = [3, -1, 3, 0, -4, 2]
"""Unsorted, duplicates, zero and negatives: set(), sorted() and abs() idioms show here."""


def _span(lo: int, hi: int) -> list[int]:
    """An unsorted list with both ends of ``lo..hi`` twice, values just outside them (one twice)
    and one inside: inclusive/exclusive, set() and sorted() idioms show here."""
    return [hi + 1, lo, hi, lo - 1, lo, hi, lo + 1, hi + 1]

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
    "add_const": lambda k: [(0,), (-1,), (-k["k"] - 5,)],
    "mul_const": lambda k: [(0,), (1,), (-3,)],
    "sub_const": lambda k: [(0,), (k["k"],), (k["k"] - 1,), (-3,)],
    "repeat_str": lambda k: [("",), ("ab",), ("a b",)],
    "swap_pair": lambda k: [(1, 2), (2, 1), (-3, 3), (5, 5)],
    "sum_plus": lambda k: [(_MIXED,), ([],), ([-2, -2],)],
    "sum_times": lambda k: [(_MIXED,), ([],), ([-2, -2],)],
    "linear": lambda k: [(0,), (-1,), (-5,)],
    "shift_then_scale": lambda k: [(0,), (-k["a"],), (-k["a"] - 1,), (-k["a"] - 5,)],
    "square_plus": lambda k: [(0,), (2,), (-1,), (-3,)],
    "add_suffix": lambda k: [("",), ("x" + k["w"],), (k["w"],)],
    "add_prefix": lambda k: [("",), (k["w"] + "x",), (k["w"],)],
    "wrap": lambda k: [("",), (k["c"] + "a" + k["c"],), ("a" + k["c"],)],
    "count_between": lambda k: [(_span(k["lo"], k["hi"]),), ([k["lo"]],), ([k["hi"]],), ([],)],
    "sum_between": lambda k: [(_span(k["lo"], k["hi"]),), ([k["lo"]],), ([k["hi"]],), ([],)],
    "filter_between": lambda k: [(_span(k["lo"], k["hi"]),), ([k["lo"]],), ([k["hi"]],), ([],)],
    "count_outside": lambda k: [(_span(k["lo"], k["hi"]),), ([k["lo"]],), ([k["hi"]],), ([],)],
    "affine_each": lambda k: [(_MIXED,), ([],)],
    "times_minus": lambda k: [(0,), (-1,), (-4,)],
    "is_greater": lambda k: [(k["k"],), (k["k"] + 1,), (k["k"] - 1,), (-abs(k["k"]) - 3,)],
    "max_with": lambda k: [([],), ([k["k"] - 3, k["k"] - 1],),
                           ([k["k"] + 2, k["k"] + 5, k["k"] + 1],), ([k["k"] + 5, k["k"] - 1],)],
    "min_with": lambda k: [([],), ([k["k"] + 3, k["k"] + 1],),
                           ([k["k"] - 2, k["k"] - 5, k["k"] - 1],), ([k["k"] - 5, k["k"] + 1],)],
    "first_or": lambda k: [([],), ([-3],), ([0, 5],), ([5, 2, 9],)],
    "last_or": lambda k: [([],), ([-3],), ([5, 0],), ([5, 9, 2],)],
    "at_least_each": lambda k: [(_around(k["k"]),), ([],)],
    "cube_plus": lambda k: [(0,), (-1,), (-2,), (3,)],
    "square_minus": lambda k: [(0,), (1,), (2,), (-3,)],
    "all_below": lambda k: [([],), ([k["k"] - 1, k["k"]],), ([k["k"] - 5, k["k"] - 1],),
                            ([k["k"] + 1, k["k"] - 1],)],
    "replace_value": lambda k: [([7, k["a"], 2, k["a"], 7],), ([],), ([k["a"]],)],
    "count_not_equal": lambda k: [([k["k"], k["k"] + 1, k["k"], k["k"] - 1, k["k"] + 1,
                                    k["k"] - 1],), ([],)],
    "count_multiples": lambda k: [([0, k["k"], -k["k"], 2 * k["k"], k["k"], 1],), ([],)],
    "pad_right": lambda k: [("x" * (k["k"] + 2),), ("",), ("ab",), ("x" * k["k"],)],
    "suffix_k": lambda k: [("abcdefgh",), ("",), ("a",), ("ab",), ("abc",), ("abcd",)],
    "words_of_length": lambda k: [(["y" * k["k"], "x" * (k["k"] + 1), "ab", "a" * k["k"],
                                    "y" * k["k"]],), ([],)],
    "abs_diff_from": lambda k: [(k["k"] - 3,), (k["k"] + 3,), (k["k"],), (-abs(k["k"]) - 2,)],
    "mod_add": lambda k: [(0,), (k["b"],), (k["b"] - 1,), (50,)],
    "count_containing": lambda k: [(["x" + k["c"] + k["c"], "y" + k["c"], "zz", "y" + k["c"],
                                     k["c"]],), ([],), (["", k["c"]],)],
}
"""Inputs where a wrong idiom and the right answer differ (duplicates, unsorted and empty lists,
values at a constant's boundary, negatives), added to every task of the family after its drawn
asserts. Fixed by the constants alone: the drawn prompts and asserts stay as they were."""
FAMILIES: tuple[str, ...] = tuple(t.family for t in TEMPLATES)
# Held out of traffic, gate and sealed pools whatever the calibration says: a transfer check (near
# relatives of trained families). Chosen before calibrating.
HELD_OUT: tuple[str, ...] = ("sub_const", "count_above", "remove_char", "ends_with", "min_list",
                             "abs_diff", "count_below", "any_above", "add_prefix", "sub_each",
                             *NEW_HELD_OUT)
BY_FAMILY = {t.family: t for t in TEMPLATES}


def _in_name(value):
    """A drawn constant as it appears in a function name: a negative number reads ``neg3``."""
    return f"neg{-value}" if isinstance(value, int) and value < 0 else value


def function_id(family: str, k: dict) -> str:
    """The id of an independent function: ``family`` alone when it draws no constant, else
    ``family/key=value,...`` (keys sorted; strings quoted), e.g. ``count_above/k=3``."""
    if not k:
        return family
    return family + "/" + ",".join(f"{a}={v if isinstance(v, int) else repr(v)}"
                                   for a, v in sorted(k.items()))


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
                          _asserts(template, k, name, rng), template.family,
                          function_id(template.family, k)))
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
    for args in (t.edge or EDGE_CASES.get(t.family, lambda k: []))(k):
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
    """The tasks of a suite file, split on "\\n" only (the writer escapes every other line break
    a reader might split on), blank lines skipped; a missing file has none."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.split("\n") if line.strip()]


def constants(template: Template, *, draws: int = 4000) -> list[dict]:
    """The constants a family draws (its independent functions), in :func:`function_id` order:
    the distinct values of ``draws`` seeded draws, so every small domain is complete (a family
    without constants has one function)."""
    rng = random.Random(f"constants/{template.family}")
    seen: dict[str, dict] = {}
    for _ in range(draws):
        k = template.draw(rng)
        seen.setdefault(function_id(template.family, k), k)
    return [seen[f] for f in sorted(seen)]


TRAIN_SIDE = ("train", "retain")
"""Pools whose prompts use a family's training aliases (every name but the last); the sealed pool
uses only the last name, so no function name of training appears in it."""
HELD_SIDE = ("sealed",)


def aliases(template: Template, pool: str) -> tuple[str, ...]:
    """The function-name templates a pool's prompts use: training pools every name but the last,
    sealed the last only, the others all."""
    if pool in TRAIN_SIDE:
        return template.names[:-1]
    if pool in HELD_SIDE:
        return template.names[-1:]
    return template.names


def function_tasks(template: Template, functions: Sequence[dict], pool: str, *, seed: int,
                   per_function: int = 1, min_tasks: int = 0, skip: set[str] | None = None
                   ) -> list[PyTask]:
    """Tasks asking for ``functions`` of one family: ``per_function`` prompts each (name alias
    from :func:`aliases` and verb drawn with ``seed``), more round-robin until ``min_tasks``
    when the prompts allow it; prompts in ``skip`` (and ones already taken, which are added to
    it) are not used. The asserts are drawn from their own seed per task, so a change to how
    asserts are drawn leaves every prompt and split where it is."""
    skip = set() if skip is None else skip
    options = []
    for k in functions:
        rng = random.Random(f"{seed}/{pool}/{function_id(template.family, k)}")
        names = [n.format(**{a: _in_name(v) for a, v in k.items()})
                 for n in aliases(template, pool)]
        combos = [(name, verb) for name in names for verb in VERBS]
        rng.shuffle(combos)
        options.append((k, [c for c in combos if _render(template, k, *c) not in skip]))
    out: list[PyTask] = []
    for round_ in range(max(per_function, min_tasks, 1)):
        if round_ >= per_function and len(out) >= min_tasks:
            break
        for k, opts in options:
            if not opts or (round_ >= per_function and len(out) >= min_tasks):
                continue
            name, verb = opts.pop(0)
            prompt = _render(template, k, name, verb)
            skip.add(prompt)
            task_id = f"pyfunc/{template.family}/{pool}-{seed}-{len(out):04d}"
            out.append(PyTask(task_id, prompt, name,
                              _asserts(template, k, name, random.Random(f"asserts/{task_id}")),
                              template.family, function_id(template.family, k)))
    return out


@dataclass(frozen=True)
class Pools:
    """Disjoint by independent function (family + constants): ``train`` (traffic), ``gate`` and
    ``sealed`` (trained families, other constants), ``transfer`` (held-out families only, never
    in any other pool), ``guard`` (families the model already solves, for the gate's regression
    guard; never in traffic) and ``retain`` (the guard families' other functions, in training
    aliases: a retain set for training, never scored)."""

    train: list[PyTask]
    gate: list[PyTask]
    sealed: list[PyTask]
    transfer: list[PyTask]
    guard: list[PyTask] = field(default_factory=list)
    retain: list[PyTask] = field(default_factory=list)


def _cut(n: int, fractions: tuple[float, float, float]) -> tuple[int, int]:
    """(gate, sealed) counts of ``n`` functions of a trained family; a family of fewer than 3
    functions is training only."""
    if n < 3:
        return 0, 0
    return max(1, int(n * fractions[1] + 0.5)), max(1, int(n * fractions[2] + 0.5))


def split_pools(families: Sequence[str], held_out: Sequence[str], *, seed: int = 0,
                fractions: tuple[float, float, float] = (0.4, 0.3, 0.3),
                max_functions: int = 40, trained_functions: int = 160,
                train_per_function: int = 2,
                exclude: Sequence[str] = (), guard_families: Sequence[str] = (),
                guard_functions: int = 8, guard_per_family: int = 8) -> Pools:
    """Split by function. Each trained family's constants (:func:`constants`, shuffled with
    ``seed``, at most ``trained_functions``: the gate's power grows with its independent
    functions) are cut into train / gate / sealed by ``fractions``;
    held-out families go whole to ``transfer``; each guard family gives ``guard_functions``
    functions (more prompts of them, up to ``guard_per_family`` tasks, where the prompts allow)
    to ``guard`` and up to ``max_functions`` of
    the rest to ``retain``. Prompts in ``exclude`` (the calibration draw) are never used."""
    groups = {"families": set(families), "held_out": set(held_out),
              "guard_families": set(guard_families)}
    for a, b in (("families", "held_out"), ("families", "guard_families"),
                 ("held_out", "guard_families")):
        if groups[a] & groups[b]:
            raise ValueError(f"{a} and {b} overlap: {sorted(groups[a] & groups[b])}")
    skip = set(exclude)

    def shuffled(fam: str) -> list[dict]:
        ks = constants(BY_FAMILY[fam])
        random.Random(f"{seed}/split/{fam}").shuffle(ks)
        return ks

    def tasks(fam: str, ks: Sequence[dict], pool: str, **kw) -> list[PyTask]:
        return function_tasks(BY_FAMILY[fam], ks, pool, seed=seed, skip=skip, **kw)

    pools: dict[str, list[PyTask]] = {p: [] for p in ("train", "gate", "sealed", "transfer",
                                                      "guard", "retain")}
    for fam in families:
        ks = shuffled(fam)[:trained_functions]
        g, s = _cut(len(ks), fractions)
        pools["gate"] += tasks(fam, ks[:g], "gate")
        pools["sealed"] += tasks(fam, ks[g:g + s], "sealed")
        pools["train"] += tasks(fam, ks[g + s:], "train", per_function=train_per_function)
    for fam in held_out:
        pools["transfer"] += tasks(fam, shuffled(fam)[:max_functions], "transfer")
    for fam in guard_families:
        ks = shuffled(fam)
        pools["guard"] += tasks(fam, ks[:guard_functions], "guard", min_tasks=guard_per_family)
        pools["retain"] += tasks(fam, ks[guard_functions:guard_functions + max_functions],
                                 "retain")
    return Pools(**pools)


def pool_stats(tasks: Sequence[PyTask | dict]) -> dict:
    """Tasks, independent functions and families of one pool (records or tasks)."""
    from tasks.jsonl_suite import cluster_key

    rows = [t.to_json() if isinstance(t, PyTask) else t for t in tasks]
    return {"tasks": len(rows), "functions": len({cluster_key(r) for r in rows}),
            "families": len({r["family"] for r in rows})}


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
"""Seed of the calibration draw (experiments/pyfuncs_calibrate.py); pools never reuse its
prompts."""
DATA = Path(__file__).resolve().parent / "data"
CALIBRATION_DRAW = DATA / "pyfuncs_calibration_draw.json"
"""The prompts the calibrations decoded (the first two drawn with the constant ranges of their
time, before :data:`WIDENED`; the third with the current ones), frozen so that later changes to
the templates cannot move them."""
CALIBRATIONS = (DATA.parents[1] / "bench" / "results" / "pyfuncs_calibration.json",
                DATA.parents[1] / "bench" / "results" / "pyfuncs_calibration_2.json",
                DATA.parents[1] / "bench" / "results" / "pyfuncs_calibration_3.json")
POOL_FILES = {"train": "pyfuncs_train.jsonl", "gate": "pyfuncs_gate.jsonl",
              "sealed": "pyfuncs_sealed.jsonl", "transfer": "pyfuncs_transfer.jsonl",
              "guard": "pyfuncs_guard.jsonl", "retain": "pyfuncs_retain.jsonl"}
MANIFEST = "pools.json"
COMMAND = "python -m tasks.pyfuncs"


def roles(records: Sequence[dict]) -> dict[str, list[str]]:
    """Each family's role: ``trained`` (the calibrations' kept families, and any family of
    :data:`TEMPLATES_3` no record calibrated outside :data:`NEW_HELD_OUT`), ``transfer``
    (held-out families the calibrations kept, and every :data:`NEW_HELD_OUT` family whatever its
    calibration: they are the phrasing twins of trained families, and a twin the model cannot do
    can only show a gain carried over, one it solves only harm), ``guard``
    (:func:`guard_families`)."""
    calibrated = {f for r in records for f in r.get("families", {})}
    new = [t.family for t in TEMPLATES_3 if t.family not in calibrated]
    trained = [f for r in records for f in r["kept"]]
    transfer = [f for r in records for f in r["held_out_kept"]]
    return {"trained": trained + [f for f in new if f not in NEW_HELD_OUT],
            "transfer": transfer + [f for f in NEW_HELD_OUT if f not in transfer],
            "guard": [f for r in records for f in guard_families(r)],
            "uncalibrated": new}


def write_pools(calibrations: Path | Sequence[Path] = CALIBRATIONS, out_dir: Path = DATA, *,
                seed: int = 0, calibration_draw: Path | None = CALIBRATION_DRAW,
                **split) -> dict[str, dict]:
    """The pool files and their manifest (``pools.json``: tasks, independent functions and
    families per pool, each family's role) under ``out_dir``, from the calibration records
    (:func:`roles`); prompts of ``calibration_draw`` are skipped. Deterministic: the same
    templates, records and ``seed`` write the same bytes. Returns the manifest's pools."""
    paths = [Path(calibrations)] if isinstance(calibrations, (str, Path)) else list(calibrations)
    records = [json.loads(Path(p).read_text()) for p in paths]
    role = roles(records)
    exclude = ([t["prompt"] for t in json.loads(Path(calibration_draw).read_text())["tasks"]]
               if calibration_draw else [])
    pools = split_pools(role["trained"], role["transfer"], seed=seed, exclude=exclude,
                        guard_families=role["guard"], **split)
    stats = {}
    for name, file in POOL_FILES.items():
        tasks = list(getattr(pools, name))
        # a seeded order, so that the first N tasks of a file spread over its families
        random.Random(f"{seed}/order/{name}").shuffle(tasks)
        write_jsonl(tasks, Path(out_dir) / file)
        stats[name] = {"file": file, **pool_stats(tasks), "per_family": {
            f: pool_stats([t for t in tasks if t.family == f])["functions"]
            for f in sorted({t.family for t in tasks})}}
    manifest = {"command": COMMAND, "seed": seed, "calibrations": [Path(p).name for p in paths],
                "roles": role, "pools": stats,
                "rule": "pools share no independent function (family + constants); the sealed "
                        "pool uses no function name alias of the train and retain pools; "
                        "transfer families appear in no other pool"}
    (Path(out_dir) / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return stats


TUNING_SHARE = 1 / 3
"""Share of each trained family's train-pool functions the tuning draw holds out of traffic."""
OUTSIDE_FUNCTIONS = 12
"""Functions of each family on the tuning draw's ``outside`` side (and at least
:data:`OUTSIDE_MIN_TASKS` prompts a family, so that a one-function family is asked more than
once)."""
OUTSIDE_MIN_TASKS = 4


def outside_families(records: Sequence[dict], role: dict[str, list[str]]) -> list[str]:
    """The calibrated families no pool uses (neither trained, held out for transfer nor guard)
    whose greedy calibration passed at least one prompt, in calibration order. They sit beside
    the pools' families (``filter_below`` beside the guard family ``sum_below``, ``min_list``
    beside the trained ``max_list``, ``filter_between`` beside ``sum_between``), where an update
    that carries the traffic's idioms into neighbouring prompts can show it, on functions no
    report scores."""
    used = {f for side in ("trained", "transfer", "guard") for f in role.get(side, [])}
    out: list[str] = []
    for r in records:
        for fam, rec in r.get("families", {}).items():
            if fam in BY_FAMILY and fam not in used and fam not in out and rec["pass1_greedy"] > 0:
                out.append(fam)
    return out


def tuning_draw(out_dir: Path = DATA, *, per_family: int = 24) -> dict[str, list[dict]]:
    """A tuning draw for choosing trainer settings, disjoint by independent function from every
    pool that scores (gate, sealed, transfer, guard) and from the retain set. Keys:

    - ``traffic``: the train pool without the held-out functions below (the rows a tuning run
      trains on come from here only);
    - ``trained``: one prompt of each held-out train-pool function (:data:`TUNING_SHARE` of each
      trained family of 3+ functions, seeded) and the trained families' constants no pool uses:
      the gain on the trained families;
    - ``guard``: the guard families' constants beyond the guard and retain pools (up to
      ``per_family`` each): collateral on what the model already solves;
    - ``transfer``: the held-out families' constants beyond the transfer pool (up to
      ``per_family`` each): carry-over to families never trained;
    - ``outside``: the families no pool uses that the model passed in calibration
      (:func:`outside_families`; up to :data:`OUTSIDE_FUNCTIONS` functions each): collateral
      next to what the traffic trains, where the pools' small guard families have no spare
      function to show it.

    Read from the pool files and manifest under ``out_dir`` and re-derived with their seed and
    split sizes; raises if a drawn function is in a scoring pool. The guard and transfer sides
    hold only the families with spare constants (their small families have none); the
    ``outside`` side looks at their neighbours instead, which is not the same view: the
    candidates that broke ``sum_below`` left ``filter_below`` as it was
    (experiments/LEARNING_RECORD.md)."""
    from tasks.jsonl_suite import cluster_key

    out_dir = Path(out_dir)
    manifest = json.loads((out_dir / MANIFEST).read_text())
    seed, role = manifest["seed"], manifest["roles"]
    per_pool = {name: read_jsonl(out_dir / file) for name, file in POOL_FILES.items()}
    skip = ({t["prompt"] for t in json.loads(CALIBRATION_DRAW.read_text())["tasks"]}
            if out_dir == DATA and CALIBRATION_DRAW.exists() else set())
    skip |= {t["prompt"] for tasks in per_pool.values() for t in tasks}
    trained_n = {f: n for f, n in manifest["pools"]["train"]["per_family"].items()}
    for pool in ("gate", "sealed"):
        for f, n in manifest["pools"][pool]["per_family"].items():
            trained_n[f] = trained_n.get(f, 0) + n

    by_function: dict[str, list[dict]] = {}
    for t in per_pool["train"]:
        by_function.setdefault(cluster_key(t), []).append(t)
    held: set[str] = set()
    for fam in sorted({t["family"] for t in per_pool["train"]}):
        fns = sorted(f for f, ts in by_function.items() if ts[0]["family"] == fam)
        if len(fns) >= 3:
            random.Random(f"{seed}/tune/{fam}").shuffle(fns)
            held.update(fns[:int(len(fns) * TUNING_SHARE + 0.5)])

    def spare(fam: str, used: int) -> list[PyTask]:
        ks = constants(BY_FAMILY[fam])
        random.Random(f"{seed}/split/{fam}").shuffle(ks)
        return function_tasks(BY_FAMILY[fam], ks[used:used + per_family], "tune", seed=seed,
                              skip=skip)

    guard_used = 8 + 40  # split_pools' guard_functions + max_functions
    records = [json.loads(p.read_text()) for p in CALIBRATIONS
               if p.name in manifest.get("calibrations", ()) and p.is_file()]

    def outside(fam: str) -> list[PyTask]:
        ks = constants(BY_FAMILY[fam])
        random.Random(f"{seed}/outside/{fam}").shuffle(ks)
        return function_tasks(BY_FAMILY[fam], ks[:OUTSIDE_FUNCTIONS], "tune", seed=seed,
                              skip=skip, min_tasks=OUTSIDE_MIN_TASKS)

    draw = {
        "traffic": [t for t in per_pool["train"] if cluster_key(t) not in held],
        "trained": [by_function[f][0] for f in sorted(held)]
        + [t.to_json() for f in role["trained"] for t in spare(f, trained_n.get(f, 0))],
        "guard": [t.to_json() for f in role["guard"] for t in spare(f, guard_used)],
        "transfer": [t.to_json() for f in role["transfer"] for t in spare(f, 40)],
        "outside": [t.to_json() for f in outside_families(records, role) for t in outside(f)],
    }
    scoring = {cluster_key(t) for name in ("gate", "sealed", "transfer", "guard", "retain")
               for t in per_pool[name]}
    for name in ("trained", "guard", "transfer", "outside"):
        clash = scoring & {cluster_key(t) for t in draw[name]}
        if clash:
            raise ValueError(f"tuning draw {name} shares functions with the pools: "
                             f"{sorted(clash)[:3]}")
    return draw


def report(out_dir: Path = DATA) -> str:
    """A table of the pool files under ``out_dir``: tasks, independent functions, families."""
    lines = [f"{'pool':<9} {'tasks':>6} {'functions':>9} {'families':>8}"]
    for name, file in POOL_FILES.items():
        path = Path(out_dir) / file
        if path.exists():
            st = pool_stats(read_jsonl(path))
            lines.append(f"{name:<9} {st['tasks']:>6} {st['functions']:>9} {st['families']:>8}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(description="Write the pyfuncs pools (split by independent "
                                "function) from the calibration records, and print their sizes.")
    p.add_argument("--calibration", type=Path, nargs="+", default=list(CALIBRATIONS))
    p.add_argument("--out", type=Path, default=DATA)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report", action="store_true",
                   help="only print the sizes of the pool files under --out")
    args = p.parse_args(argv)
    if not args.report:
        write_pools(args.calibration, args.out, seed=args.seed)
    print(report(args.out))


if __name__ == "__main__":
    main()
