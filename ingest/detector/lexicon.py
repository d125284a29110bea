"""Sentiment features of a follow-up from the VADER lexicon, with negation and contrast.

``sentiment(text)`` returns VADER's scores for the natural-language part of the message (pasted
code and tracebacks are cut out first: "error" in a stack trace is not the user's mood) plus two
features VADER does not give directly:

- ``tail``: the compound score of the clause after the *last* contrast marker ("but",
  "however", "though", "although", "yet", "except"), so "nice, but it still crashes" reads as
  the complaint it ends on. VADER itself already handles negation inside a clause ("not
  helpful") and damps the clause before "but".
- ``polite_no``: the message opens with "no"/"nope" and is then only thanks or closing words
  ("No, thanks, that's all."), a polite end of the exchange, not a correction.

VADER (Hutto & Gilbert 2014, the ``vaderSentiment`` package, MIT) is a lexicon of about 7,500
words rated by humans, so words the detector's training data never saw still get a valence.
Deliberately left out: the decision (scorer.py, rules.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

_CODE_LINE = re.compile(
    r"^\s*(?:[{}()\[\];<>#@$]|def |class |import |from \S+ import|return |const |let |var |"
    r"function|public |private |if \(|for \(|while \(|File \"|at |\w+Error\b|Traceback)"
)
_CONTRAST = re.compile(r"\b(?:but|however|though|although|yet|except)\b", re.IGNORECASE)
_POLITE_NO = re.compile(
    r"^\s*(?:no|nope|nah)\b[\s,.!]*(?:(?:thanks?|thank you|thx|ty|that'?s (?:all|it|fine|ok(?:ay)?)"
    r"|i'?m (?:good|fine|all set)|all good|(?:very|so) much|(?:you'?ve|you have) been (?:very |so "
    r"|really )?(?:helpful|great|kind)|bye|goodbye|have a (?:nice|good|great) (?:day|one)|"
    r"nothing else|not now|for now|again|cheers|great|perfect)[\s,.!]*)+$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Sentiment:
    compound: float
    """VADER compound score in [-1, 1] of the prose part."""
    pos: float
    neg: float
    tail: float
    """Compound score of the clause after the last contrast marker (= compound without one)."""
    contrast: bool
    polite_no: bool


@cache
def _analyzer():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return SentimentIntensityAnalyzer()


def prose(text: str, limit: int = 600) -> str:
    """The lines of ``text`` that do not look like code or a stack trace, cut to ``limit``."""
    lines = [ln for ln in text.splitlines() if not _CODE_LINE.match(ln)]
    out = " ".join(" ".join(lines).split())
    return out if len(out) <= limit else out[: limit // 2] + " " + out[-limit // 2:]


def sentiment(text: str) -> Sentiment:
    """VADER scores of the prose of ``text`` with the contrast tail and the polite "no"."""
    p = prose(text)
    if not p:
        return Sentiment(0.0, 0.0, 0.0, 0.0, False, False)
    s = _analyzer().polarity_scores(p)
    parts = _CONTRAST.split(p)
    contrast = len(parts) > 1 and bool(parts[-1].strip())
    tail = _analyzer().polarity_scores(parts[-1])["compound"] if contrast else s["compound"]
    return Sentiment(s["compound"], s["pos"], s["neg"], tail, contrast,
                     bool(_POLITE_NO.match(p)))
