"""A second, fresh set of scoring pools for the pyfuncs suite, for a confirmation that no earlier
choice of trainer settings has looked at.

The first pools (tasks/data/pyfuncs_*.jsonl, ``tasks.pyfuncs.write_pools``) have judged many
trainer settings, so a setting picked after seeing them is no longer judged blind there. This
module writes three more, disjoint by independent function from every first pool, the retain set
and the tuning draw:

- ``sealed_fresh``: the trained families asked with constants outside the whole domain they draw
  from (:data:`FRESH_CONSTANTS`, e.g. ``at_least`` with k in 41..90 where every first pool and the
  traffic draw k in -20..40), in the sealed pool's name alias: functions of the trained families
  never trained on, nor scored before;
- ``guard_fresh``: the families of :data:`TEMPLATES_4` the model already solves (greedy pass@1 >=
  ``tasks.pyfuncs.GUARD_MIN_GREEDY`` in their calibration, experiments/pyfuncs_calibrate.py
  ``--batch-of-templates 4``), outside :data:`FRESH_TRANSFER`;
- ``transfer_fresh``: the families of :data:`FRESH_TRANSFER`, declared with the templates before
  any model answered them, each a phrasing twin of a trained family (as
  ``tasks.pyfuncs.NEW_HELD_OUT``), whatever their calibration.

None of these families or constants appears in traffic, the retain set or the tuning draw.
``python -m tasks.pyfuncs_fresh`` writes the files and their manifest (``pools_fresh.json``)
under tasks/data, deterministically. ``--round 2`` writes a second round (``sealed_fresh2``, ...,
``pools_fresh2.json``): the same families asked with the next constants of the same shuffles, for
a judgement after the first round has been seen. ``--round 3`` (``*_fresh3``) asks them once more,
after both earlier rounds have been seen; the trained families those two rounds exhausted draw
from the further domains of :data:`FRESH_CONSTANTS_3`.

Left out: a fresh gate pool (the gate keeps its own); retain functions of the new families (an
anchor on them would make their guard pool a trained one).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tasks.pyfuncs import (
    BY_FAMILY,
    DATA,
    EDGE_CASES,
    GUARD_MIN_GREEDY,
    POOL_FILES,
    Template,
    _a_b,
    _int_list,
    _ints,
    _k,
    _near_k,
    _one_int,
    _one_word,
    _sentence,
    _words,
    constants,
    function_id,
    function_tasks,
    pool_stats,
    read_jsonl,
    tuning_draw,
    write_jsonl,
)

T = Template


def _pos_ints(rng: random.Random, k: dict) -> tuple:
    return ([rng.randint(1, 9) for _ in range(rng.randint(1, 6))],)


def _nonempty(rng: random.Random, k: dict) -> tuple:
    return (_ints(rng, rng.randint(1, 6)),)


TEMPLATES_4: tuple[Template, ...] = (
    # phrasing twins of trained families (FRESH_TRANSFER)
    T("any_below", ("any_below_{k}", "some_less_{k}", "any_less_than_{k}"), "xs",
      lambda k: f"returns True if at least one number in the list xs is less than {k['k']} and "
      "False otherwise", _k(-5, 15), lambda k: lambda xs: any(x < k["k"] for x in xs),
      _int_list),
    T("sum_outside", ("sum_outside_{lo}_{hi}", "total_outside_{lo}_{hi}",
                      "sum_not_between_{lo}_{hi}"), "xs",
      lambda k: f"returns the sum of the numbers in the list xs that are not between {k['lo']} "
      f"and {k['hi']} (inclusive)",
      lambda rng: (lambda a: {"lo": a, "hi": a + rng.randint(2, 12)})(rng.randint(-5, 10)),
      lambda k: lambda xs: sum(x for x in xs if not k["lo"] <= x <= k["hi"]), _int_list),
    T("mod_sub", ("mod_sub_{a}_{b}", "unshift_mod_{a}_{b}", "sub_{a}_mod_{b}"), "x",
      lambda k: f"returns the remainder when x minus {k['a']} is divided by {k['b']}",
      _a_b((1, 20), (2, 9)), lambda k: lambda x: (x - k["a"]) % k["b"],
      lambda rng, k: (rng.randint(0, 90),)),
    T("square_times", ("square_times_{k}", "sq_mul_{k}", "squared_times_{k}"), "x",
      lambda k: f"returns the square of x multiplied by {k['k']}", _k(2, 30),
      lambda k: lambda x: x * x * k["k"], lambda rng, k: (rng.randint(-12, 12),)),
    T("all_at_least", ("all_at_least_{k}", "none_below_{k}", "every_at_least_{k}"), "xs",
      lambda k: f"returns True if every number in the list xs is greater than or equal to "
      f"{k['k']} and False otherwise", _k(-5, 15),
      lambda k: lambda xs: all(x >= k["k"] for x in xs), _int_list),
    T("drop_prefix", ("drop_first_{k}", "skip_{k}_chars", "without_first_{k}"), "s",
      lambda k: f"returns the string s without its first {k['k']} characters", _k(1, 5),
      lambda k: lambda s: s[k["k"]:], _one_word),
    T("keep_value", ("keep_{k}", "only_{k}", "just_{k}"), "xs",
      lambda k: f"returns a list of the numbers in the list xs that are equal to {k['k']}",
      _k(0, 5), lambda k: lambda xs: [x for x in xs if x == k["k"]],
      lambda rng, k: (_ints(rng, rng.randint(0, 7), 0, 6),)),
    T("larger_doubled", ("double_max_{k}", "twice_larger_{k}", "max_twice_{k}"), "x",
      lambda k: f"returns twice the larger of x and {k['k']}", _k(-20, 40),
      lambda k: lambda x: 2 * max(x, k["k"]), _near_k),
    # other new families: a guard where the model already solves them. None asks what a family of
    # tasks.pyfuncs asks in other words (x times a plus b is `linear`, a list minus k `sub_each`):
    # the pools split by meaning, and the retain set trains the first guard families' functions.
    T("is_less", ("is_less_{k}", "below_{k}", "under_{k}"), "x",
      lambda k: f"returns True if x is less than {k['k']} and False otherwise", _k(-10, 30),
      lambda k: lambda x: x < k["k"], _near_k),
    T("is_equal", ("is_equal_{k}", "equals_{k}", "is_exactly_{k}"), "x",
      lambda k: f"returns True if x is equal to {k['k']} and False otherwise", _k(-10, 30),
      lambda k: lambda x: x == k["k"], _near_k),
    T("sub_from", ("from_{k}", "k_minus_x_{k}", "subtract_from_{k}"), "x",
      lambda k: f"returns {k['k']} minus x", _k(2, 60), lambda k: lambda x: k["k"] - x,
      _one_int),
    T("len_plus", ("len_plus_{k}", "length_plus_{k}", "size_plus_{k}"), "s",
      lambda k: f"returns the length of the string s plus {k['k']}", _k(1, 30),
      lambda k: lambda s: len(s) + k["k"], _one_word),
    T("count_plus", ("count_plus_{k}", "items_plus_{k}", "num_items_plus_{k}"), "xs",
      lambda k: f"returns the number of elements in the list xs plus {k['k']}", _k(1, 30),
      lambda k: lambda xs: len(xs) + k["k"], _int_list),
    T("has_char", ("has_{c}", "contains_letter_{c}", "includes_{c}"), "s",
      lambda k: f"returns True if the string s contains the letter '{k['c']}' and False "
      "otherwise", lambda rng: {"c": rng.choice("abcdeiklnoprstuvy")},
      lambda k: lambda s: k["c"] in s, _one_word),
    T("max_minus", ("max_minus_{k}", "largest_minus_{k}", "top_minus_{k}"), "xs",
      lambda k: f"returns the largest number in the non-empty list xs minus {k['k']}",
      _k(1, 30), lambda k: lambda xs: max(xs) - k["k"], _nonempty),
    T("min_plus", ("min_plus_{k}", "smallest_plus_{k}", "bottom_plus_{k}"), "xs",
      lambda k: f"returns the smallest number in the non-empty list xs plus {k['k']}",
      _k(1, 30), lambda k: lambda xs: min(xs) + k["k"], _nonempty),
    T("sum_at_most", ("sum_at_most_{k}", "sum_up_to_{k}", "total_at_most_{k}"), "xs",
      lambda k: f"returns the sum of the numbers in the list xs that are less than or equal to "
      f"{k['k']}", _k(0, 12), lambda k: lambda xs: sum(x for x in xs if x <= k["k"]),
      _int_list),
    T("count_at_least", ("count_at_least_{k}", "num_at_least_{k}", "count_from_{k}"), "xs",
      lambda k: f"returns how many numbers in the list xs are greater than or equal to {k['k']}",
      _k(0, 12), lambda k: lambda xs: sum(1 for x in xs if x >= k["k"]), _int_list),
    T("long_enough", ("long_enough_{k}", "at_least_{k}_chars", "min_length_{k}"), "s",
      lambda k: f"returns True if the string s has at least {k['k']} characters and False "
      "otherwise", _k(2, 8), lambda k: lambda s: len(s) >= k["k"], _one_word),
    T("repeat_list", ("repeat_list_{k}", "list_times_{k}", "tile_{k}"), "xs",
      lambda k: f"returns the list xs repeated {k['k']} times as one list", _k(2, 5),
      lambda k: lambda xs: xs * k["k"], _pos_ints),
    T("neg_each", ("negate_all", "neg_each", "flip_signs"), "xs",
      lambda k: "returns a new list with every number in the list xs negated", lambda rng: {},
      lambda k: lambda xs: [-x for x in xs], _int_list),
    T("word_count_plus", ("words_plus_{k}", "count_words_plus_{k}", "word_total_plus_{k}"), "s",
      lambda k: f"returns the number of words in the string s plus {k['k']}", _k(1, 20),
      lambda k: lambda s: len(s.split()) + k["k"], _sentence),
    T("join_with", ("join_with_sep", "glue_words", "concat_with"), "words",
      lambda k: f"returns the strings in the list words joined with '{k['c']}' between them",
      lambda rng: {"c": rng.choice("-+|:;/")}, lambda k: lambda words: k["c"].join(words),
      _words),
    T("first_char_upper", ("cap_first", "upper_first", "first_upper"), "s",
      lambda k: "returns the string s with its first character in upper case and the rest "
      "unchanged", lambda rng: {}, lambda k: lambda s: s[:1].upper() + s[1:], _one_word),
    T("is_at_most", ("is_at_most_{k}", "no_more_than_{k}", "at_or_below_{k}"), "x",
      lambda k: f"returns True if x is less than or equal to {k['k']} and False otherwise",
      _k(-10, 30), lambda k: lambda x: x <= k["k"], _near_k),
    T("is_at_least", ("is_at_least_{k}", "no_less_than_{k}", "at_or_above_{k}"), "x",
      lambda k: f"returns True if x is greater than or equal to {k['k']} and False otherwise",
      _k(-10, 30), lambda k: lambda x: x >= k["k"], _near_k),
    T("is_not_equal", ("is_not_{k}", "differs_from_{k}", "not_equal_{k}"), "x",
      lambda k: f"returns True if x is not equal to {k['k']} and False otherwise", _k(-10, 30),
      lambda k: lambda x: x != k["k"], _near_k),
    T("len_minus", ("len_minus_{k}", "length_minus_{k}", "size_minus_{k}"), "s",
      lambda k: f"returns the length of the string s minus {k['k']}", _k(1, 30),
      lambda k: lambda s: len(s) - k["k"], _one_word),
    T("len_times", ("len_times_{k}", "length_times_{k}", "size_times_{k}"), "s",
      lambda k: f"returns the length of the string s multiplied by {k['k']}", _k(2, 12),
      lambda k: lambda s: len(s) * k["k"], _one_word),
    T("short_enough", ("short_enough_{k}", "at_most_{k}_chars", "max_length_{k}"), "s",
      lambda k: f"returns True if the string s has at most {k['k']} characters and False "
      "otherwise", _k(2, 8), lambda k: lambda s: len(s) <= k["k"], _one_word),
    T("sum_at_least", ("sum_at_least_{k}", "sum_from_{k}", "total_at_least_{k}"), "xs",
      lambda k: f"returns the sum of the numbers in the list xs that are greater than or equal "
      f"to {k['k']}", _k(0, 12), lambda k: lambda xs: sum(x for x in xs if x >= k["k"]),
      _int_list),
    T("keep_at_most", ("keep_at_most_{k}", "filter_up_to_{k}", "only_at_most_{k}"), "xs",
      lambda k: f"returns a list of the numbers in the list xs that are less than or equal to "
      f"{k['k']}, in their original order", _k(0, 12),
      lambda k: lambda xs: [x for x in xs if x <= k["k"]], _int_list),
    T("keep_at_least", ("keep_at_least_{k}", "filter_from_{k}", "only_at_least_{k}"), "xs",
      lambda k: f"returns a list of the numbers in the list xs that are greater than or equal to "
      f"{k['k']}, in their original order", _k(0, 12),
      lambda k: lambda xs: [x for x in xs if x >= k["k"]], _int_list),
    T("sum_minus", ("sum_minus_{k}", "total_minus_{k}", "sum_less_{k}"), "xs",
      lambda k: f"returns the sum of the numbers in the list xs minus {k['k']}", _k(1, 30),
      lambda k: lambda xs: sum(xs) - k["k"], _int_list),
    T("max_times", ("max_times_{k}", "largest_times_{k}", "top_times_{k}"), "xs",
      lambda k: f"returns the largest number in the non-empty list xs multiplied by {k['k']}",
      _k(2, 9), lambda k: lambda xs: max(xs) * k["k"], _nonempty),
)
FRESH_TRANSFER: tuple[str, ...] = ("any_below", "sum_outside", "mod_sub", "square_times",
                                   "all_at_least", "drop_prefix", "keep_value", "larger_doubled")
"""The fresh transfer families, each the phrasing twin of a trained one (``all_above``,
``sum_between``, ``mod_add``, ``square_plus``, ``all_above``, ``prefix_k``, ``drop_value``,
``at_least``); declared here before any model answered them, and in the transfer pool whatever
their calibration."""
FRESH_EDGE_CASES = {
    "any_below": lambda k: [([],), ([k["k"], k["k"] + 1],), ([k["k"], k["k"] - 1],)],
    "sum_outside": lambda k: [([k["hi"] + 1, k["lo"], k["hi"], k["lo"] - 1, k["lo"] + 1],),
                              ([k["lo"]],), ([],)],
    "mod_sub": lambda k: [(0,), (k["a"],), (k["a"] - 1,)],
    "square_times": lambda k: [(0,), (-1,), (-3,)],
    "all_at_least": lambda k: [([],), ([k["k"], k["k"] + 1],), ([k["k"] - 1, k["k"] + 5],)],
    "drop_prefix": lambda k: [("abcdefgh",), ("",), ("a",)],
    "keep_value": lambda k: [([k["k"], 9, k["k"], 7],), ([],)],
    "larger_doubled": lambda k: [(k["k"] - 1,), (k["k"] + 1,), (k["k"],)],
    "is_less": lambda k: [(k["k"],), (k["k"] - 1,), (k["k"] + 1,)],
    "is_equal": lambda k: [(k["k"],), (k["k"] + 1,), (-k["k"] - 1,)],
    "sub_from": lambda k: [(0,), (k["k"],), (-3,)],
    "sum_at_most": lambda k: [([k["k"] + 1, k["k"], k["k"] - 1, -2, k["k"]],), ([],)],
    "count_at_least": lambda k: [([k["k"] + 1, k["k"], k["k"] - 1, -2, k["k"]],), ([],)],
    "long_enough": lambda k: [("x" * k["k"],), ("x" * (k["k"] - 1),), ("",)],
    "repeat_list": lambda k: [([],), ([0, 1],)],
    "neg_each": lambda k: [([3, -1, 0, 3],), ([],)],
    "word_count_plus": lambda k: [("",), ("one",)],
    "join_with": lambda k: [([],), (["one"],), (["a", "b", "a"],)],
    "first_char_upper": lambda k: [("",), ("a",), ("aBc",)],
    "is_at_most": lambda k: [(k["k"],), (k["k"] - 1,), (k["k"] + 1,)],
    "is_at_least": lambda k: [(k["k"],), (k["k"] - 1,), (k["k"] + 1,)],
    "is_not_equal": lambda k: [(k["k"],), (k["k"] + 1,)],
    "short_enough": lambda k: [("x" * k["k"],), ("x" * (k["k"] + 1),), ("",)],
    "sum_at_least": lambda k: [([k["k"] + 1, k["k"], k["k"] - 1, -2, k["k"]],), ([],)],
    "keep_at_most": lambda k: [([k["k"] + 1, k["k"], k["k"] - 1, -2, k["k"]],), ([],)],
    "keep_at_least": lambda k: [([k["k"] + 1, k["k"], k["k"] - 1, -2, k["k"]],), ([],)],
    "sum_minus": lambda k: [([],), ([-2, -2],)],
    "max_times": lambda k: [([-5, -2, -9],), ([0],)],
    "has_char": lambda k: [("",), (k["c"],)],
}
TEMPLATES_4 = tuple(replace(t, edge=FRESH_EDGE_CASES.get(t.family)) for t in TEMPLATES_4)
BY_FRESH = {t.family: t for t in TEMPLATES_4}
if set(BY_FRESH) & (set(BY_FAMILY) | set(EDGE_CASES)):
    raise ImportError("fresh families clash with the suite's: "
                      f"{sorted(set(BY_FRESH) & (set(BY_FAMILY) | set(EDGE_CASES)))}")

FRESH_CONSTANTS = {
    "at_least": _k(41, 90), "at_most": _k(41, 90), "square_plus": _k(61, 150),
    "all_above": _k(16, 40),
    "sum_between": lambda rng: (lambda a: {"lo": a, "hi": a + rng.randint(2, 12)})(
        rng.randint(11, 30)),
    "mod_add": _a_b((21, 50), (2, 9)),
}
"""Constant domains of trained families beyond every value their templates draw (so every
function is new); the test inputs are drawn around the constant where the template's own inputs
would all fall on one side of it."""
FRESH_CONSTANTS_3 = {"at_least": _k(91, 140), "at_most": _k(91, 140), "all_above": _k(41, 64)}
"""Round 3's domains for the trained families whose :data:`FRESH_CONSTANTS` rounds 1 and 2 took
whole: further beyond every value their templates and those rounds draw."""
FRESH_INPUTS = {"at_least": _near_k, "at_most": _near_k, "all_above": lambda rng, k: (
    [rng.randint(k["k"] - 6, k["k"] + 6) for _ in range(rng.randint(1, 6))],)}
SEALED_FUNCTIONS = 24
GUARD_FUNCTIONS = 8
GUARD_TASKS = 8
TRANSFER_FUNCTIONS = 16
SEED = 7
FRESH_FILES = {"sealed_fresh": "pyfuncs_sealed_fresh.jsonl",
               "transfer_fresh": "pyfuncs_transfer_fresh.jsonl",
               "guard_fresh": "pyfuncs_guard_fresh.jsonl"}
MANIFEST = "pools_fresh.json"
CALIBRATION = DATA.parents[1] / "bench" / "results" / "pyfuncs_calibration_4.json"
ROUNDS = 3
"""Round 1 is the fresh pools; round r (``*_fresh2``, ``*_fresh3``) asks the same families with
the constants after the ones the earlier rounds took from the same shuffles, its prompts drawn
with seed ``SEED + r - 1``; a family with no constant left is left out of that round, except the
trained families of :data:`FRESH_CONSTANTS_3`, which round 3 asks from their further domains."""


def round_files(round_: int) -> dict[str, str]:
    """Pool name -> file of fresh round ``round_`` (1: :data:`FRESH_FILES`)."""
    if round_ == 1:
        return dict(FRESH_FILES)
    return {f"{k}{round_}": v.replace(".jsonl", f"{round_}.jsonl") for k, v in FRESH_FILES.items()}


def round_manifest(round_: int) -> str:
    """The manifest file of fresh round ``round_``."""
    return MANIFEST if round_ == 1 else MANIFEST.replace(".json", f"{round_}.json")


def _first_round(family: str, round_: int) -> int:
    """The first round that draws from the sealed domain ``family`` has in round ``round_``."""
    return 3 if round_ >= 3 and family in FRESH_CONSTANTS_3 else 1


def fresh_sealed_template(family: str, round_: int = 1) -> Template:
    """The trained family ``family`` drawing only its fresh constants of round ``round_``."""
    t = BY_FAMILY[family]
    draw = (FRESH_CONSTANTS_3 if _first_round(family, round_) == 3 else FRESH_CONSTANTS)[family]
    return replace(t, draw=draw, inputs=FRESH_INPUTS.get(family, t.inputs))


def guard_fresh_families(record: dict) -> list[str]:
    """The families of a TEMPLATES_4 calibration record the model solves (greedy pass@1 >=
    ``GUARD_MIN_GREEDY``), outside :data:`FRESH_TRANSFER`, in template order."""
    fams = record.get("families", {})
    return [t.family for t in TEMPLATES_4 if t.family not in FRESH_TRANSFER
            and t.family in fams and fams[t.family]["pass1_greedy"] >= GUARD_MIN_GREEDY]


def fresh_pools(record: dict, *, seed: int = SEED, round_: int = 1,
                out_dir: Path = DATA) -> dict[str, list]:
    """The three fresh pools (tasks) of round ``round_`` from the TEMPLATES_4 calibration
    ``record``. Prompts of every first pool, of earlier rounds' files under ``out_dir`` and of
    the calibration draw are skipped, and the sealed side's constants are checked to lie outside
    their family's own domain."""
    skip = {t["prompt"] for f in POOL_FILES.values() for t in read_jsonl(DATA / f)}
    skip |= {t["prompt"] for r in range(1, round_) for f in round_files(r).values()
             for t in read_jsonl(Path(out_dir) / f)}
    skip |= {t["prompt"] for t in record.get("tasks", [])}
    names = list(round_files(round_))
    prompts_seed = seed + round_ - 1

    def shuffled(t: Template, tag: str) -> list[dict]:
        ks = constants(t)
        random.Random(f"{seed}/fresh/{tag}/{t.family}").shuffle(ks)
        return ks

    def taken(ks: list[dict], n: int, first: int = 1) -> list[dict]:
        return ks[(round_ - first) * n:(round_ - first + 1) * n]

    sealed = []
    for fam in FRESH_CONSTANTS:
        t = fresh_sealed_template(fam, round_)
        own = {function_id(fam, k) for k in constants(BY_FAMILY[fam])}
        ks = [k for k in shuffled(t, "sealed") if function_id(fam, k) not in own]
        sealed += function_tasks(t, taken(ks, SEALED_FUNCTIONS, _first_round(fam, round_)),
                                 "sealed", seed=prompts_seed, skip=skip)
    guard = []
    for fam in guard_fresh_families(record):
        t = BY_FRESH[fam]
        guard += function_tasks(t, taken(shuffled(t, "guard"), GUARD_FUNCTIONS), "guard",
                                seed=prompts_seed, skip=skip, min_tasks=GUARD_TASKS)
    transfer = []
    for fam in FRESH_TRANSFER:
        t = BY_FRESH[fam]
        transfer += function_tasks(t, taken(shuffled(t, "transfer"), TRANSFER_FUNCTIONS),
                                   "transfer", seed=prompts_seed, skip=skip)
    return dict(zip(names, (sealed, transfer, guard), strict=True))


def check_disjoint(pools: dict[str, list], out_dir: Path = DATA, *,
                   earlier: dict[str, Path] | None = None) -> None:
    """Raises unless the fresh pools share no independent function with one another, with any
    first pool (retain included), with the tuning draw or with the files ``earlier`` (pool name
    -> path: an earlier round's pools)."""
    from tasks.jsonl_suite import cluster_key

    seen: dict[str, str] = {}
    for name, file in POOL_FILES.items():
        for t in read_jsonl(Path(out_dir) / file):
            seen[cluster_key(t)] = name
    for name, path in (earlier or {}).items():
        for t in read_jsonl(path):
            seen[cluster_key(t)] = name
    for side, tasks in tuning_draw(out_dir).items():
        for t in tasks:
            seen.setdefault(cluster_key(t), f"tuning {side}")
    for name, tasks in pools.items():
        for t in tasks:
            key = cluster_key(t.to_json())
            if seen.get(key, name) != name:
                raise ValueError(f"{name} shares {key} with {seen[key]}")
            seen[key] = name


def write_fresh_pools(calibration: Path = CALIBRATION, out_dir: Path = DATA, *,
                      round_: int = 1) -> dict:
    """The fresh pool files of round ``round_`` and their manifest under ``out_dir``, checked
    against the first pools under tasks/data and the earlier rounds' files under ``out_dir``;
    deterministic. Returns the manifest."""
    if not 1 <= round_ <= ROUNDS:
        raise ValueError(f"round {round_}: the rounds are 1..{ROUNDS}")
    record = json.loads(Path(calibration).read_text())
    pools = fresh_pools(record, round_=round_, out_dir=out_dir)
    check_disjoint(pools, earlier={name: Path(out_dir) / f for r in range(1, round_)
                                   for name, f in round_files(r).items()})
    files = round_files(round_)
    stats = {}
    for name, tasks in pools.items():
        tasks = list(tasks)
        random.Random(f"{SEED}/order/{name}").shuffle(tasks)
        write_jsonl(tasks, Path(out_dir) / files[name])
        stats[name] = {"file": files[name], **pool_stats(tasks), "per_family": {
            f: pool_stats([t for t in tasks if t.family == f])["functions"]
            for f in sorted({t.family for t in tasks})}}
    manifest = {"command": "python -m tasks.pyfuncs_fresh", "seed": SEED,
                "calibration": Path(calibration).name, "pools": stats,
                "guard_families": guard_fresh_families(record),
                "transfer_families": list(FRESH_TRANSFER),
                "rule": "no independent function shared with each other, any first pool, the "
                        "retain set or the tuning draw; sealed_fresh: trained families' constants "
                        "outside their own domain, in the sealed name alias"}
    if round_ > 1:
        manifest.update({
            "command": f"python -m tasks.pyfuncs_fresh --round {round_}", "round": round_,
            "guard_families": sorted({t.family for t in pools[f"guard_fresh{round_}"]}),
            "transfer_families": sorted({t.family for t in pools[f"transfer_fresh{round_}"]}),
            "rule": manifest["rule"] + f"; nor with the files of rounds 1..{round_ - 1}"})
    (Path(out_dir) / round_manifest(round_)).write_text(
        json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(description="Write the fresh pyfuncs pools from the TEMPLATES_4 "
                                "calibration and print their sizes.")
    p.add_argument("--calibration", type=Path, default=CALIBRATION)
    p.add_argument("--out", type=Path, default=DATA)
    p.add_argument("--round", type=int, default=1, choices=range(1, ROUNDS + 1),
                   help="1: the fresh pools; 2, 3: the same families' next constants "
                   "(*_fresh2, *_fresh3)")
    args = p.parse_args(argv)
    manifest = write_fresh_pools(args.calibration, args.out, round_=args.round)
    for name, st in manifest["pools"].items():
        print(f"{name:<15} {st['tasks']:>5} tasks {st['functions']:>4} functions "
              f"{st['families']:>3} families")


if __name__ == "__main__":
    main()
