"""JSON Lines that any line reader reads back: one record per ``\\n``-terminated line.

A JSON encoder escapes the C0 controls (``\\n``, ``\\r``, ``\\x0b`` …) inside strings, but not
U+0085 (NEL), the other C1 controls, U+2028 (LINE SEPARATOR) or U+2029 (PARAGRAPH SEPARATOR):
pydantic's ``model_dump_json`` and ``json.dumps(..., ensure_ascii=False)`` leave them raw, and
``str.splitlines``, Python's universal-newline text mode and many other readers split a line on
them. A lone surrogate (``json.loads('"\\ud800"')`` makes one) cannot be encoded as UTF-8 at
all. ``safe_line`` escapes them (in a JSON text they can only stand inside a string, where
``\\uXXXX`` means the same character), and ``split_lines`` splits on ``\\n`` only, so files
written before the escaping read back too.

Deliberately left out: streaming large files (the callers' files are per span, and small).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def safe_line(text: str) -> str:
    """``text`` (one JSON value) with every character a line reader may split on escaped.

    Raises ``ValueError`` for a raw ``\\n`` or ``\\r``: no JSON encoder writes one inside a
    value, so one here means ``text`` is not a single JSON value.
    """
    if "\n" in text or "\r" in text:
        raise ValueError("a JSON line cannot hold a raw newline; encode the value without indent")
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def dumps(value: Any) -> str:
    """One JSON line for a plain value (no trailing newline)."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


def encode(lines: Iterable[str]) -> bytes:
    """UTF-8 bytes of ``lines`` (JSON texts), each made safe and ended by ``\\n``."""
    return "".join(safe_line(line) + "\n" for line in lines).encode("utf-8")


def split_lines(text: str) -> list[str]:
    """The non-empty lines of ``text``, split on ``\\n`` only (a trailing ``\\r`` is dropped)."""
    return [ln.removesuffix("\r") for ln in text.split("\n") if ln.strip()]


def read_lines(path: Path) -> list[str]:
    """``split_lines`` of a UTF-8 file; a missing file has none."""
    try:
        return split_lines(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
