"""The one syntax check of a model's code in this process: does it compile, answered as a verdict
(ok, or malformed with the reason), never as an exception.

Every checker that refuses an uncompilable answer as malformed before grading it (HumanEval,
JSONL suites and pyfuncs, toy expressions) asks :func:`check_syntax`. CPython's parser and
compiler recurse once per level of an expression, so a degenerate answer (a line of thousands of
``-``, ``((((…`` thousands deep, ``x.a.a.a…``) makes ``compile`` raise ``MemoryError`` or
``RecursionError`` rather than ``SyntaxError``, at a depth that moves with the interpreter's
recursion limit. The check refuses such sources before compiling them, from two linear scans:
the source's length (:data:`MAX_SOURCE_CHARS`) and, per logical line, the operator tokens and
bracket depth that make an expression deep (:data:`MAX_OPERATORS_PER_LINE`,
:data:`MAX_BRACKET_DEPTH`); anything that still fails to compile (``SyntaxError``,
``ValueError`` for a NUL byte, ``MemoryError``, ``RecursionError``) is malformed with its reason.
The bounds sit far above the code a task's answer and tests need and well below the depth where
the compiler gives up.

Left out: running the code (the sandbox does that) and any judgement of what it does.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass
from typing import Literal

MAX_SOURCE_CHARS = 100_000
"""Longest source compiled here: tens of times a task's answer and tests."""
MAX_OPERATORS_PER_LINE = 500
"""Most operator tokens (``-``, ``.``, ``**``, ``not``, ``lambda``, …) in one logical line, a
bound on how deep its expression can nest (the compiler gives up near 3,000 levels)."""
MAX_BRACKET_DEPTH = 100
"""Deepest nesting of brackets (CPython's own tokenizer stops at 200)."""

_FLAT_OPS = frozenset("()[]{},:;")
_DEEP_KEYWORDS = frozenset({"not", "lambda", "await", "if", "else", "and", "or", "in", "is"})
_OPEN, _CLOSE = frozenset("([{"), frozenset(")]}")


@dataclass(frozen=True)
class SyntaxCheck:
    """``ok``: the source compiles; else ``reason`` says why it is malformed. ``tree``: its ast
    when ok."""

    ok: bool
    reason: str = ""
    tree: ast.AST | None = None


def _too_deep(source: str) -> str:
    """Why ``source`` is too large or deep to compile here, or "" (a linear scan, no
    recursion; a source the tokenizer rejects is left to the compiler to explain)."""
    if len(source) > MAX_SOURCE_CHARS:
        return f"source of {len(source)} characters (max {MAX_SOURCE_CHARS})"
    ops = depth = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.NEWLINE:
                ops = 0
            elif tok.type == tokenize.OP:
                if tok.string in _OPEN:
                    depth += 1
                    if depth > MAX_BRACKET_DEPTH:
                        return f"brackets nested over {MAX_BRACKET_DEPTH} deep"
                elif tok.string in _CLOSE:
                    depth = max(0, depth - 1)
                elif tok.string not in _FLAT_OPS:
                    ops += 1
            elif tok.type == tokenize.NAME and tok.string in _DEEP_KEYWORDS:
                ops += 1
            if ops > MAX_OPERATORS_PER_LINE:
                return f"over {MAX_OPERATORS_PER_LINE} operators in one line"
    except (tokenize.TokenError, SyntaxError):
        return ""
    return ""


def check_syntax(source: str, *, mode: Literal["exec", "eval"] = "exec",
                 filename: str = "<answer>") -> SyntaxCheck:
    """Whether ``source`` compiles in ``mode``, within the bounds above; never raises for any
    string."""
    why = _too_deep(source)
    if why:
        return SyntaxCheck(False, f"does not compile: {why}")
    try:
        tree = ast.parse(source, filename, mode)
        compile(tree, filename, mode)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        detail = str(e) or type(e).__name__
        return SyntaxCheck(False, f"does not compile: {type(e).__name__}: {detail}"[:300])
    return SyntaxCheck(True, tree=tree)
