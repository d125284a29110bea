"""Hashed n-gram features of a follow-up and its context, shared by training and inference.

``featurize(text, prompt, response)`` returns ``{index: value}`` over ``DIMS`` hashed buckets:
word unigrams and bigrams (with a start marker, so "no" as the first word differs from a "no"
inside), character 3- to 5-grams inside words (robust to typos), and context tokens computed from
the prompt and answer the follow-up came after:

- ``ctx:question``: the answer ended with a question (a clarifying question), so a short "no"
  is an answer, not a complaint;
- ``ctx:reask``: the follow-up is a near-duplicate of the previous prompt (rapidfuzz ratio);
- ``ctx:trace``: the follow-up looks like a pasted traceback or compiler error;
- ``len:*``: a coarse length bucket.

Values are binary, L2-normalised per message. Hashing is ``zlib.crc32`` (stable across
processes, unlike ``hash``). Pure Python; no numpy needed at inference.

Deliberately left out: the weights (ingest/detector/scorer.py) and the rules (rules.py).
"""

from __future__ import annotations

import math
import re
import zlib

from rapidfuzz import fuzz

DIMS = 1 << 14
"""Number of hashed feature buckets."""
REASK_RATIO = 85.0
"""rapidfuzz ``ratio`` (0-100) of the normalised follow-up and prompt from which it is a re-ask."""

_WORD = re.compile(r"[a-z0-9_]+(?:'[a-z]+)?|[?!]")
_TRACE = re.compile(
    r"traceback \(most recent call last\)|^\s*file \"[^\"]+\", line \d+|"
    r"^\s*[\w.]*(?:error|exception)(?:\[\w+\])?: |"
    r"(?<![\w/.-])[\w/.-]{1,200}\.\w{1,10}:\d+(?::\d+)?: (?:fatal )?error|"
    r"^error(?:\[e\d+\])?:|segmentation fault|panicked at|npm err!|exception in thread|"
    r"undefined reference to|^\s+at [\w.$<>]+\(",
    re.MULTILINE,
)


def normalise(text: str) -> str:
    """Lower case, straight apostrophes, collapsed whitespace."""
    text = text.lower().replace("\u2019", "'").replace("\u2018", "'")
    return " ".join(text.split())


def words(text: str) -> list[str]:
    return _WORD.findall(normalise(text))


def looks_like_trace(text: str) -> bool:
    """A pasted traceback, stack frame or compiler/linker error."""
    return bool(_TRACE.search(text.lower()))


def asked_question(response: str | None) -> bool:
    """The answer ends with a question to the user (a clarifying question)."""
    if not response:
        return False
    tail = response.strip().splitlines()[-1] if response.strip() else ""
    return tail.rstrip().endswith("?")


def reask_ratio(text: str, prompt: str | None) -> float:
    """rapidfuzz ratio of the normalised follow-up and prompt (0 without a prompt)."""
    if not prompt:
        return 0.0
    a = " ".join(words(text))
    b = " ".join(words(prompt))
    if len(a) < 12 or len(b) < 12:
        return 0.0
    return float(fuzz.ratio(a, b))


def _bucket(token: str) -> int:
    return zlib.crc32(token.encode("utf-8")) % DIMS


def tokens(text: str, prompt: str | None = None, response: str | None = None) -> list[str]:
    """Every feature token of one follow-up in its context (before hashing)."""
    ws = words(text)
    out = [f"w:{w}" for w in ws]
    seq = ["^", *ws, "$"]
    out += [f"b:{a} {b}" for a, b in zip(seq, seq[1:])]
    for w in ws:
        padded = f"<{w}>"
        for n in (3, 4, 5):
            out += [f"c:{padded[i:i + n]}" for i in range(max(0, len(padded) - n + 1))]
    if asked_question(response):
        out.append("ctx:question")
        out += [f"q:{w}" for w in ws[:3]]
    if reask_ratio(text, prompt) >= REASK_RATIO:
        out.append("ctx:reask")
    if looks_like_trace(text):
        out.append("ctx:trace")
    n = len(ws)
    out.append("len:1" if n <= 1 else "len:3" if n <= 3 else "len:8" if n <= 8 else "len:long")
    return out


def featurize(
    text: str, prompt: str | None = None, response: str | None = None
) -> dict[int, float]:
    """``{bucket: value}``: binary hashed features, L2-normalised."""
    idx = {_bucket(t) for t in tokens(text, prompt, response)}
    v = 1.0 / math.sqrt(len(idx)) if idx else 0.0
    return {i: v for i in idx}
