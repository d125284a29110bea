"""What an answer offers the user to keep: its code, and whether it is an answer at all.

- ``code_of(text)``: the fenced code block(s) of a chat reply, joined by a newline; the whole
  text when it has no fence (a raw completion is all code). This is what a user inserts into a
  file, so edit persistence is measured over it (``persistence``): prose around the code, or
  padding, earns nothing.
- ``answer_kind(text)``: ``"empty"`` (no code at all: an empty reply, whitespace, an empty
  fence), ``"refused"`` (no fence and a refusal phrase, without a ``def``/``return``/``=`` that
  would make it code) or ``"code"``. The reward scores an empty or refused answer at the floor
  (rewards/signals.py), the monitors count them (rewards/monitors.py) and the simulated users
  report no persistence for them (nothing was inserted).

Deliberately left out: grading (tasks/), and any judgement of whether the code is right.
"""

from __future__ import annotations

import re
from typing import Literal

AnswerKind = Literal["empty", "refused", "code"]

_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_+-]*[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_REFUSAL = re.compile(
    r"\b(?:I\s*(?:can(?:no|['\u2019]|)t|won['\u2019]?t|will\s+not|am\s+(?:unable|not\s+able)"
    r"|'m\s+(?:unable|not\s+able|sorry))|unable\s+to\s+(?:help|assist|comply)|sorry|apologi[sz]e"
    r"|as\s+an\s+AI)\b",
    re.IGNORECASE,
)
_CODE_HINT = re.compile(r"\bdef\s+\w+\s*\(|\breturn\b|\blambda\b|[^=!<>]=[^=]")


def code_of(text: str) -> str:
    """The code a user can keep: the fenced blocks joined by ``\\n``, or the whole text."""
    blocks = _FENCE.findall(text)
    if not blocks and "```" not in text:
        return text
    return "\n".join(b.strip("\n") for b in blocks)


def answer_kind(text: str) -> AnswerKind:
    """``"empty"``, ``"refused"`` or ``"code"`` (see the module docstring)."""
    code = code_of(text)
    if not code.strip():
        return "empty"
    if "```" not in text and _REFUSAL.search(text) and not _CODE_HINT.search(text):
        return "refused"
    return "code"


def persistence(served_text: str, text_now: str) -> float:
    """Edit persistence of a served answer: 1 - normalised Levenshtein distance (rapidfuzz)
    between the code served and the code as it stands now (``code_of`` of each, without the
    blank space around it: a client may send the code alone or the reply as edited).
    1.0 = untouched, 0.0 = all rewritten.

    Raises ``ValueError`` when the served answer holds no code: nothing could be inserted, so
    there is nothing whose persistence to measure (two empty texts are not "100% kept")."""
    from rapidfuzz.distance import Levenshtein

    served = code_of(served_text).strip()
    if not served:
        raise ValueError("the served answer holds no code: nothing to measure persistence on")
    return float(Levenshtein.normalized_similarity(served, code_of(text_now).strip()))
