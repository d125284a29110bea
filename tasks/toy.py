"""The toy task family: small code tasks with programmatic checkers.

Shared by the user simulator (to score what the fleet served), the trainer (SFT warm start, RL
fixtures) and the benchmark gate, so a reward and a benchmark score can never drift apart: both
call :func:`check`.

Three kinds, every answer a single Python expression:

- ``arith``: evaluate a small integer expression (``"# evaluate\\n12+7 = "`` -> ``"19"``); the
  answer must be an integer literal (an answer that repeats the expression is not accepted).
- ``complete``: write a one-line function body from a comment; variable names vary.
- ``off_by_one``: fix an off-by-one in a one-line body (index, slice or range bounds).

:func:`check` never calls ``eval``/``exec``: it parses the answer with :mod:`ast` and walks it with
a whitelist evaluator that bounds integer sizes, exponents and list lengths, so any answer —
hostile ones included — is scored in well under a millisecond or two.

Deliberately left out: natural-language tasks, multi-line answers, and any notion of reward
(rewards/ turns a :class:`CheckResult` and user signals into a scalar).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from tasks.harness import strict_eq
from tasks.syntax import check_syntax

Value = int | tuple[int, ...]
Binding = tuple[str, Value]

HELDOUT_PERCENT = 20
"""A task is held out iff the hash of its canonical content falls in this many of 100 buckets."""

MAX_ANSWER_CHARS = 400
MAX_INT_BITS = 64
MAX_LIST_LEN = 256
MAX_EXPONENT = 16
MAX_NODES = 200


@dataclass(frozen=True)
class Task:
    """One task: a prompt the model continues and how to check the continuation."""

    task_id: str
    kind: str
    prompt: str
    reference: str
    cases: tuple[tuple[Binding, ...], ...]

    def to_dict(self) -> dict:
        return {
            "task_id": self.task_id,
            "kind": self.kind,
            "prompt": self.prompt,
            "reference": self.reference,
            "cases": [[[name, list(v) if isinstance(v, tuple) else v] for name, v in case]
                      for case in self.cases],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Task:
        cases = tuple(
            tuple((str(name), tuple(v) if isinstance(v, list) else int(v)) for name, v in case)
            for case in d["cases"]
        )
        return cls(d["task_id"], d["kind"], d["prompt"], d["reference"], cases)


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one answer. ``detail`` says why, for logs and dead letters."""

    passed: bool
    malformed: bool
    no_edit: bool
    detail: str


# ---------------------------------------------------------------------------------------------
# Checking: a whitelist evaluator over the ast


class Disallowed(Exception):
    """Syntax or names outside the whitelist, or a size bound exceeded (the answer is malformed)."""


class EvalFailed(Exception):
    """A well-formed answer failed at run time on a case (unbound name, index, zero division)."""


def _bound(v: object) -> object:
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v.bit_length() > MAX_INT_BITS:
        raise Disallowed(f"integer too large ({v.bit_length()} bits)")
    if isinstance(v, list) and len(v) > MAX_LIST_LEN:
        raise Disallowed(f"list too long ({len(v)})")
    return v


def _pow(a: object, b: object) -> int:
    if not (isinstance(a, int) and isinstance(b, int)):
        raise EvalFailed("** needs integers")
    if not 0 <= b <= MAX_EXPONENT or abs(a) > 2**16:
        raise Disallowed(f"exponent out of bounds: {a} ** {b}")
    return a**b


def _mul(a: object, b: object) -> object:
    if isinstance(a, list) or isinstance(b, list):
        n = b if isinstance(a, list) else a
        if not isinstance(n, int) or n > MAX_LIST_LEN:
            raise Disallowed("list repetition out of bounds")
    return a * b  # type: ignore[operator]


_BINOPS: dict[type, Callable[[object, object], object]] = {
    ast.Add: lambda a, b: a + b,  # type: ignore[operator]
    ast.Sub: lambda a, b: a - b,  # type: ignore[operator]
    ast.Mult: _mul,
    ast.FloorDiv: lambda a, b: a // b,  # type: ignore[operator]
    ast.Mod: lambda a, b: a % b,  # type: ignore[operator]
    ast.Pow: _pow,
}
_CMPOPS: dict[type, Callable[[object, object], bool]] = {
    ast.Lt: lambda a, b: a < b,  # type: ignore[operator]
    ast.LtE: lambda a, b: a <= b,  # type: ignore[operator]
    ast.Gt: lambda a, b: a > b,  # type: ignore[operator]
    ast.GtE: lambda a, b: a >= b,  # type: ignore[operator]
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
}


def _range(*args: object) -> list[int]:
    if not 1 <= len(args) <= 3 or not all(isinstance(a, int) for a in args):
        raise EvalFailed("range takes 1 to 3 integers")
    r = range(*args)  # type: ignore[arg-type]
    if len(r) > MAX_LIST_LEN:
        raise Disallowed(f"range too long ({len(r)})")
    return list(r)


_CALLS: dict[str, Callable[..., object]] = {
    "max": max, "min": min, "abs": abs, "len": len, "sum": sum, "range": _range,
}


class _Evaluator:
    """Evaluates a whitelisted expression ast with names bound from one case."""

    def __init__(self, env: dict[str, Value]):
        self.env = {k: list(v) if isinstance(v, tuple) else v for k, v in env.items()}

    def eval(self, node: ast.AST) -> object:
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise Disallowed(f"{type(node).__name__} is not allowed")
        try:
            return _bound(method(node))
        except (TypeError, IndexError, ZeroDivisionError) as e:
            raise EvalFailed(f"{type(e).__name__}: {e}") from None

    def _Constant(self, node: ast.Constant) -> object:
        if type(node.value) is not int:
            raise Disallowed(f"constant {node.value!r} is not an integer")
        return node.value

    def _Name(self, node: ast.Name) -> object:
        if node.id not in self.env:
            raise EvalFailed(f"name {node.id!r} is not defined")
        return self.env[node.id]

    def _List(self, node: ast.List) -> object:
        return [self.eval(e) for e in node.elts]

    def _BinOp(self, node: ast.BinOp) -> object:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise Disallowed(f"operator {type(node.op).__name__} is not allowed")
        return op(self.eval(node.left), self.eval(node.right))

    def _UnaryOp(self, node: ast.UnaryOp) -> object:
        v = self.eval(node.operand)
        if isinstance(node.op, ast.USub):
            return -v  # type: ignore[operator]
        if isinstance(node.op, ast.UAdd):
            return +v  # type: ignore[operator]
        raise Disallowed(f"unary {type(node.op).__name__} is not allowed")

    def _Compare(self, node: ast.Compare) -> object:
        left = self.eval(node.left)
        for op_node, right_node in zip(node.ops, node.comparators):
            op = _CMPOPS.get(type(op_node))
            if op is None:
                raise Disallowed(f"comparison {type(op_node).__name__} is not allowed")
            right = self.eval(right_node)
            if not op(left, right):
                return False
            left = right
        return True

    def _IfExp(self, node: ast.IfExp) -> object:
        return self.eval(node.body) if self.eval(node.test) else self.eval(node.orelse)

    def _Subscript(self, node: ast.Subscript) -> object:
        seq = self.eval(node.value)
        if not isinstance(seq, list):
            raise EvalFailed("subscript of a non-list")
        if isinstance(node.slice, ast.Slice):
            parts = [None if p is None else self.eval(p)
                     for p in (node.slice.lower, node.slice.upper, node.slice.step)]
            if parts[2] == 0:
                raise EvalFailed("slice step is zero")
            return seq[slice(*parts)]
        return seq[self.eval(node.slice)]  # type: ignore[index]

    def _Call(self, node: ast.Call) -> object:
        if not isinstance(node.func, ast.Name) or node.func.id not in _CALLS or node.keywords:
            raise Disallowed("only max/min/abs/len/sum/range calls are allowed")
        args = [self.eval(a) for a in node.args]
        try:
            return _CALLS[node.func.id](*args)
        except ValueError as e:  # e.g. max() of an empty list
            raise EvalFailed(f"{node.func.id}: {e}") from None


def _parse(answer: str) -> ast.expr:
    if len(answer) > MAX_ANSWER_CHARS:
        raise Disallowed(f"answer longer than {MAX_ANSWER_CHARS} characters")
    syntax = check_syntax(answer, mode="eval")
    if not isinstance(syntax.tree, ast.Expression):  # eval mode: an Expression when it compiles
        raise Disallowed(syntax.reason)
    tree = syntax.tree
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise Disallowed(f"expression has {len(nodes)} nodes (max {MAX_NODES})")
    for node in nodes:  # static whitelist: malformedness never depends on the branch taken
        _validate_node(node)
    return tree.body


_ALLOWED_NODES = (ast.Expression, ast.Constant, ast.Name, ast.List, ast.BinOp, ast.UnaryOp,
                  ast.Compare, ast.IfExp, ast.Subscript, ast.Slice, ast.Call, ast.Load,
                  *_BINOPS, *_CMPOPS, ast.USub, ast.UAdd)


def _validate_node(node: ast.AST) -> None:
    if not isinstance(node, _ALLOWED_NODES):
        raise Disallowed(f"{type(node).__name__} is not allowed")
    if isinstance(node, ast.Constant) and type(node.value) is not int:
        raise Disallowed(f"constant {node.value!r} is not an integer")
    if isinstance(node, ast.Name) and node.id.startswith("__"):
        raise Disallowed(f"name {node.id!r} is not allowed")
    if isinstance(node, ast.Call) and (
        not isinstance(node.func, ast.Name) or node.func.id not in _CALLS or node.keywords
    ):
        raise Disallowed("only max/min/abs/len/sum/range calls are allowed")


def evaluate(expr: str, bindings: tuple[Binding, ...] = ()) -> object:
    """Evaluate one expression with the whitelist evaluator. Raises Disallowed or EvalFailed."""
    return _Evaluator(dict(bindings)).eval(_parse(expr))


def _same(a: object, b: object) -> bool:
    """Type-strict at every depth: ``[True]`` is not ``[1]`` (the grader's own equality)."""
    return strict_eq(a, b)


def check(task: Task, answer: str) -> CheckResult:
    """Score ``answer`` (the model's continuation, EOS removed) against ``task``."""
    text = answer.strip()
    if not text or text.endswith("?"):
        return CheckResult(False, False, True, "empty answer" if not text else "asks a question")
    try:
        tree = _parse(text)
        if task.kind == "arith" and not _is_int_literal(tree):
            return CheckResult(False, False, False, "arith answer is not an integer literal")
        for case in task.cases or ((),):
            got = _Evaluator(dict(case)).eval(tree)
            want = evaluate(task.reference, case)
            if not _same(got, want):
                detail = f"on {dict(case)}: got {got!r}, want {want!r}"
                return CheckResult(False, False, False, detail)
    except Disallowed as e:
        return CheckResult(False, True, False, str(e))
    except EvalFailed as e:
        return CheckResult(False, False, False, str(e))
    return CheckResult(True, False, False, "ok")


def _is_int_literal(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


# ---------------------------------------------------------------------------------------------
# Generation

_FUNC_NAMES = ("f", "g", "h", "calc", "compute", "op", "fn", "combine", "solve", "apply")
_INT_NAMES = ("a", "b", "c", "x", "y", "z", "n", "m", "k", "p", "q", "u", "v", "w",
              "lo", "hi", "val", "num", "left", "right", "first", "second")
_LIST_NAMES = ("xs", "ys", "items", "vals", "nums", "arr", "data", "seq", "values", "lst")

# (comment, reference, number of int params, needs nonzero second param)
_COMPLETE = (
    ("sum of {0} and {1}", "{0} + {1}", 2, False),
    ("difference of {0} and {1}", "{0} - {1}", 2, False),
    ("product of {0} and {1}", "{0} * {1}", 2, False),
    ("larger of {0} and {1}", "max({0}, {1})", 2, False),
    ("smaller of {0} and {1}", "min({0}, {1})", 2, False),
    ("absolute value of {0}", "abs({0})", 1, False),
    ("negate {0}", "-{0}", 1, False),
    ("square of {0}", "{0} * {0}", 1, False),
    ("double {0}", "2 * {0}", 1, False),
    ("triple {0}", "3 * {0}", 1, False),
    ("{0} plus one", "{0} + 1", 1, False),
    ("{0} minus one", "{0} - 1", 1, False),
    ("{0} modulo {1}", "{0} % {1}", 2, True),
    ("{0} divided by {1}, rounded down", "{0} // {1}", 2, True),
    ("{0} if positive, else zero", "max({0}, 0)", 1, False),
    ("sum of {0}, {1} and {2}", "{0} + {1} + {2}", 3, False),
    ("largest of {0}, {1} and {2}", "max({0}, {1}, {2})", 3, False),
    ("average of {0} and {1}, rounded down", "({0} + {1}) // 2", 2, False),
)

# (function names, params as "L" list / "I" int, comment, buggy, fixed); {0},{1} are the params.
_OFF_BY_ONE = (
    (("last", "final", "get_last"), "L", "the last item", "{0}[len({0})]", "{0}[len({0}) - 1]"),
    (("last_index", "end_index"), "L", "index of the last item", "len({0})", "len({0}) - 1"),
    (("first", "head"), "L", "the first item", "{0}[1]", "{0}[0]"),
    (("second", "next_item"), "L", "the second item", "{0}[2]", "{0}[1]"),
    (("total_to", "sum_upto", "triangle"), "I", "sum of 1 to {0} inclusive",
     "sum(range(1, {0}))", "sum(range(1, {0} + 1))"),
    (("count_between", "span"), "II", "how many integers from {0} to {1} inclusive",
     "{1} - {0}", "{1} - {0} + 1"),
    (("prefix_sum", "head_sum"), "LI", "sum of the first {1} items",
     "sum({0}[:{1} + 1])", "sum({0}[:{1}])"),
    (("tail_sum", "rest_sum"), "L", "sum of all items but the first", "sum({0}[2:])",
     "sum({0}[1:])"),
    (("but_last", "drop_last"), "L", "all items but the last", "{0}[:len({0}) - 2]",
     "{0}[:len({0}) - 1]"),
    (("indices", "positions"), "L", "every valid index of {0}", "range(len({0}) + 1)",
     "range(len({0}))"),
)


def _content_hash(*parts: str) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _case_rng(prompt: str) -> random.Random:
    """Cases depend on the prompt alone, so one prompt is always one task."""
    return random.Random(_content_hash("cases", prompt))


def _make(kind: str, prompt: str, reference: str, cases: tuple) -> Task:
    return Task(_content_hash(kind, prompt, reference)[:16], kind, prompt, reference, cases)


def is_heldout(task: Task) -> bool:
    """The split is a function of the content alone: the same task always lands in one split."""
    return int(_content_hash(task.kind, task.prompt, task.reference)[16:24], 16) % 100 < (
        HELDOUT_PERCENT
    )


def _arith(rng: random.Random) -> Task:
    op = rng.choice("+-*")
    if op == "*":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
    elif op == "+":
        a, b = rng.randint(0, 30), rng.randint(0, 30)
    else:
        a = rng.randint(0, 30)
        b = rng.randint(0, a)
    expr = f"{a}{op}{b}"
    value = evaluate(expr)
    return _make("arith", f"# evaluate\n{expr} = ", str(value), ())


def _complete(rng: random.Random) -> Task:
    comment, ref, n_params, nonzero = rng.choice(_COMPLETE)
    names = rng.sample(_INT_NAMES, n_params)
    fname = rng.choice(_FUNC_NAMES)
    prompt = f"def {fname}({', '.join(names)}):\n    # {comment.format(*names)}\n    return "
    rng = _case_rng(prompt)
    cases = []
    for _ in range(6):
        vals = [rng.randint(-20, 20) for _ in names]
        if nonzero and vals[1] == 0:
            vals[1] = rng.choice((-3, 7))
        cases.append(tuple(zip(names, vals)))
    return _make("complete", prompt, ref.format(*names), tuple(cases))


def _off_by_one(rng: random.Random) -> Task:
    fnames, sig, comment, buggy, fixed = rng.choice(_OFF_BY_ONE)
    names = [rng.choice(_LIST_NAMES) if s == "L" else "" for s in sig]
    pool = [n for n in _INT_NAMES if n not in names]
    ints = iter(rng.sample(pool, sig.count("I")))
    names = [n or next(ints) for n in names]
    prompt = (f"# fix the off-by-one\ndef {rng.choice(fnames)}({', '.join(names)}):\n"
              f"    # {comment.format(*names)}\n    return {buggy.format(*names)}\n"
              f"# fixed:\n    return ")
    case_rng = _case_rng(prompt)
    cases = tuple(_obo_case(case_rng, sig, names) for _ in range(5))
    return _make("off_by_one", prompt, fixed.format(*names), cases)


def _obo_case(rng: random.Random, sig: str, names: list[str]) -> tuple[Binding, ...]:
    out: list[Binding] = []
    length = rng.randint(3, 7)
    for s, name in zip(sig, names):
        if s == "L":
            out.append((name, tuple(rng.randint(-9, 9) for _ in range(length))))
        else:
            out.append((name, rng.randint(1, length - 1)))
    if sig == "II":  # a <= b for a count
        lo, hi = sorted(v for _, v in out)  # type: ignore[type-var]
        out = [(names[0], lo), (names[1], hi + rng.randint(0, 5))]
    return tuple(out)


_KINDS: dict[str, Callable[[random.Random], Task]] = {
    "arith": _arith, "complete": _complete, "off_by_one": _off_by_one,
}
KINDS = tuple(_KINDS)


Split = Literal["train", "heldout", "gate", "fresh", "sealed"]

SEALED_PERCENT = 50
"""Of the held-out bucket, the prompts whose text hashes into this many of 100 buckets form the
sealed side (``fresh``); the rest is the gate pool (``gate``)."""

FRESH_EXCLUDES = ((7, 1000),)
"""(seed, n) of the held-out draws that chose hyper-parameters (bench/learning.py's and the
learning test's held-out set is ``generate_tasks(300, 7, "heldout")``, the tuning log used up to
1,000 of that draw): no task with their content is ever in the ``fresh`` split."""
FRESH_SEED = 0
FRESH_SIZE = 2000


def is_sealed(task: Task) -> bool:
    """Whether a held-out task's prompt TEXT is on the sealed side (a function of the prompt alone,
    so one prompt is never on both sides whatever its task id)."""
    return int(_content_hash("sealed", task.prompt)[:8], 16) % 100 < SEALED_PERCENT


def generate_tasks(n: int, seed: int, split: Split) -> list[Task]:
    """``n`` tasks of the given split, kinds in equal shares, deterministic in ``seed``.

    Tasks are drawn with replacement (a small family such as off_by_one repeats); a task lands in
    the held-out bucket iff its content hash falls in the fixed 20% bucket, whatever the seed.
    Splits, disjoint by prompt text where it matters:

    - ``train``: outside the held-out bucket (what the simulator serves and the trainer sees);
    - ``heldout``: the whole held-out bucket (the tuning draws ``FRESH_EXCLUDES`` come from it);
    - ``gate``: the gate pool: held-out prompts off the sealed side (:func:`is_sealed`); the gate
      draws a fresh suite from it per decision;
    - ``fresh`` (alias ``sealed``): the sealed set: held-out prompts on the sealed side that no
      tuning draw holds. No gate, tuning run or training row touches it; it only reports
      (benchmarks, the demo's gain line).

    The held-out bucket holds only about 300 distinct arith and 325 off_by_one prompts, so a
    large draw repeats them: compare on it with prompt-clustered statistics (gating/stats.py).
    """
    if split not in ("train", "heldout", "gate", "fresh", "sealed"):
        raise ValueError(
            f"split must be 'train', 'heldout', 'gate', 'fresh' or 'sealed', got {split!r}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    split = "fresh" if split == "sealed" else split
    # the seed string, kept: it fixes every split
    rng = random.Random(f"ratchet.tasks/{seed}/{split}")
    excluded = _tuning_task_ids() if split == "fresh" else frozenset()
    want_heldout = split != "train"
    out: list[Task] = []
    while len(out) < n:
        kind = KINDS[len(out) % len(KINDS)]
        task = _KINDS[kind](rng)
        if is_heldout(task) != want_heldout or task.task_id in excluded:
            continue
        if split == "gate" and is_sealed(task) or split == "fresh" and not is_sealed(task):
            continue
        out.append(task)
    return out


def fresh_tasks(n: int = FRESH_SIZE, seed: int = FRESH_SEED) -> list[Task]:
    """The fresh evaluation set, the sealed set (split ``fresh``): scores learning, never chooses
    a setting, never gates, never trains."""
    return generate_tasks(n, seed, "fresh")


@functools.cache
def _tuning_task_ids() -> frozenset[str]:
    return frozenset(t.task_id for seed, n in FRESH_EXCLUDES
                     for t in generate_tasks(n, seed, "heldout"))
