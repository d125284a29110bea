"""Small Python-function tasks in chat form, generated from templates, graded by hidden asserts.

Each :class:`Template` is a family of requests like "Write a Python function add_7(x) that returns
x plus 7": a name, a one-line description with drawn constants, a reference implementation and a
drawer of test inputs. :func:`instances` draws distinct prompts of one family (seeded, stable ids
``pyfunc/<family>/<nnnn>``); the hidden asserts (3–5) are the reference's outputs on drawn inputs,
so a task's tests are right by construction. Answers fit in 64 tokens for a small instruct model.

:func:`grade` is the one checker: the code of the reply (its first fenced block, or the whole
reply) plus the asserts run in the sandbox (tasks/sandbox.py); a task passes iff every assert
passes. :func:`write_jsonl` / :func:`read_jsonl` use the shared suite format (one JSON object per
line: ``task_id``, ``prompt``, ``messages``, ``entry_point``, ``tests``, ``family``).
:func:`split_pools` cuts the draw into a train-traffic pool, a gate pool and a sealed set that
share no prompt text, and keeps held-out families out of all but a transfer set.

Left out: multi-function tasks, tasks that need imports, stdin/stdout tasks.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
FAMILIES: tuple[str, ...] = tuple(t.family for t in TEMPLATES)
# Held out of traffic, gate and sealed pools whatever the calibration says: a transfer check (near
# relatives of trained families). Chosen before calibrating.
HELD_OUT: tuple[str, ...] = ("sub_const", "count_above", "remove_char", "ends_with", "min_list",
                             "abs_diff")
BY_FAMILY = {t.family: t for t in TEMPLATES}


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
        name = rng.choice(template.names).format(**k)
        prompt = _render(template, k, name, rng.choice(VERBS))
        if prompt in seen:
            continue
        seen.add(prompt)
        out.append(PyTask(f"pyfunc/{template.family}/{seed}-{len(out):04d}", prompt, name,
                          _asserts(template, k, name, rng), template.family))
    return out


def _asserts(t: Template, k: dict, name: str, rng: random.Random) -> tuple[str, ...]:
    """3–5 distinct asserts: the reference's outputs on drawn inputs."""
    fn = t.ref(k)
    want = rng.randint(3, 5)
    tests: list[str] = []
    for _ in range(want * 20):
        if len(tests) == want:
            break
        args = t.inputs(rng, k)
        line = f"assert {name}({', '.join(repr(a) for a in args)}) == {fn(*args)!r}"
        if line not in tests:
            tests.append(line)
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
    """Disjoint by prompt text: ``train`` (traffic), ``gate``, ``sealed`` (kept families) and
    ``transfer`` (held-out families only, never in traffic)."""

    train: list[PyTask]
    gate: list[PyTask]
    sealed: list[PyTask]
    transfer: list[PyTask]


def split_pools(families: Sequence[str], held_out: Sequence[str], *, per_family: int,
                fractions: tuple[float, float, float] = (0.5, 0.25, 0.25), seed: int = 0,
                exclude: Sequence[str] = ()) -> Pools:
    """Draw ``per_family`` tasks of each family (prompts in ``exclude``, e.g. the calibration
    draw, are skipped) and cut kept families into train/gate/sealed by ``fractions``; held-out
    families go to ``transfer`` only."""
    if set(families) & set(held_out):
        raise ValueError(f"families and held_out overlap: {sorted(set(families) & set(held_out))}")
    skip = set(exclude)
    train, gate, sealed, transfer = [], [], [], []
    for fam in (*families, *held_out):
        drawn = [t for t in instances(BY_FAMILY[fam], 3 * per_family, seed=seed)
                 if t.prompt not in skip][:per_family]
        if fam in held_out:
            transfer += drawn
            continue
        a = round(len(drawn) * fractions[0])
        b = a + round(len(drawn) * fractions[1])
        train += drawn[:a]
        gate += drawn[a:b]
        sealed += drawn[b:]
    return Pools(train, gate, sealed, transfer)


CALIBRATION_SEED = 1000
"""Seed of the calibration draw (bench/pyfuncs_calibrate.py); pools never reuse its prompts."""
POOL_FILES = {"train": "pyfuncs_train.jsonl", "gate": "pyfuncs_gate.jsonl",
              "sealed": "pyfuncs_sealed.jsonl", "transfer": "pyfuncs_transfer.jsonl"}


def write_pools(calibration: Path, out_dir: Path, *, per_family: int = 40, seed: int = 0
                ) -> dict[str, int]:
    """The four pool files under ``out_dir`` from a calibration record's ``kept`` and
    ``held_out_kept`` families (the calibration draw's prompts excluded); returns their sizes."""
    record = json.loads(Path(calibration).read_text())
    calib = [t.prompt for tpl in TEMPLATES
             for t in instances(tpl, record["per_family"], seed=record["seed"])]
    pools = split_pools(record["kept"], record["held_out_kept"], per_family=per_family,
                        seed=seed, exclude=calib)
    sizes = {}
    for name, file in POOL_FILES.items():
        tasks = getattr(pools, name)
        write_jsonl(tasks, Path(out_dir) / file)
        sizes[name] = len(tasks)
    return sizes


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(description="Write the pyfuncs pools from a calibration record.")
    p.add_argument("--calibration", type=Path, default=Path("bench/results/"
                                                            "pyfuncs_calibration.json"))
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "data")
    p.add_argument("--per-family", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(write_pools(args.calibration, args.out, per_family=args.per_family, seed=args.seed))


if __name__ == "__main__":
    main()
