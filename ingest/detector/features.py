"""Text features of a follow-up and its context, shared by the rules, training and inference.

- ``lexical_tokens``: word unigrams and bigrams with start/end markers, so "no" as the first
  word differs from a "no" inside (the learned tier keeps only tokens it saw in training);
- ``asked_question``: the answer ended with a question (a clarifying question), so a short "no"
  is an answer, not a complaint;
- ``reask_ratio``: how close the follow-up is to the previous prompt (rapidfuzz ratio);
- ``looks_like_trace``: a pasted traceback, compiler or runtime error message;
- ``length_bucket``, ``code_share``: coarse shape of the message.

Pure Python. Deliberately left out: the weights and the dense feature vector (scorer.py), the
rules (rules.py) and sentiment (lexicon.py).
"""

from __future__ import annotations

import re

from rapidfuzz import fuzz

REASK_RATIO = 85.0
"""rapidfuzz ``ratio`` (0-100) of the normalised follow-up and prompt from which it is a re-ask."""
REASK_RULE_RATIO = 100.0
"""The ``reask`` rule asks for the same words again: real users re-send a prompt with one more
requirement (ratio 85-99.9), which is a refinement, not a complaint."""

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


_ERROR_NAME = re.compile(
    r"\b[A-Z][a-zA-Z]*(?:Error|Exception)\b(?::|\s+at\b)|\bUncaught \w+|\bError in [`\w.$]|"
    r"\bError:|\bERROR:|\bInternal Server Error\b|\bFatal error\b|\bWarning message|"
    r"\bNo such file or directory\b|\b(?:object|command|module|function|package) [`'‘\"]?\S+? "
    r"not found\b|^\s*\S+ not found\s*$|\bthere is no package called\b|"
    r"\b(?:got|get|getting|throws?|threw|gives?|gave|raises?|raised|shows?) (?:me )?(?:a |an |the |"
    r"this |that )?[A-Z][a-zA-Z]*(?:Error|Exception)\b"
)


def looks_like_trace(text: str) -> bool:
    """A pasted traceback, stack frame, compiler/linker or runtime error message."""
    return bool(_TRACE.search(text.lower()) or _ERROR_NAME.search(text))


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


def lexical_tokens(text: str) -> list[str]:
    """Word unigrams (``w:``) and bigrams with start/end markers (``b:``) of the follow-up.

    No character n-grams: they let a word the model never saw borrow the weight of a word it did
    ("appreciate" from "appreciated"), which made the old scorer over-confident on unseen text."""
    ws = words(text)[:400]
    seq = ["^", *ws, "$"]
    return [f"w:{w}" for w in ws] + [f"b:{a} {b}" for a, b in zip(seq, seq[1:])]


def length_bucket(text: str) -> str:
    n = len(words(text))
    return ("len:1" if n <= 1 else "len:3" if n <= 3 else "len:8" if n <= 8 else
            "len:30" if n <= 30 else "len:long")


def code_share(text: str) -> float:
    """Share of non-empty lines that look like code (braces, semicolons, keywords, indentation)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return 0.0
    code = sum(bool(_CODE.search(ln)) for ln in lines)
    return code / len(lines)


_CODE = re.compile(r"[{};]\s*$|^\s{2,}\S|^\s*(?:def|class|import|from|return|const|let|var|"
                   r"function|public|private|#include|SELECT|library)\b|=>|\)\s*\{|<-|::")
