"""High-precision rules for code-assistant complaints: the first tier of the detector.

Each rule is a name and a predicate over the follow-up and its context; ``fired_rules`` returns
the names of those that match. A rule is written to be precise rather than complete: the learned
scorer (scorer.py) covers what the rules miss, e.g. complaints without any keyword.

Rules: ``error_pasted`` (a traceback or compiler error pasted right after an answer),
``still_failing`` ("still / again / same error"), ``wrong``, ``does_not_work`` ("doesn't work /
compile", "it crashes"), ``misunderstood`` ("no, I meant", "not what I asked"), ``reask`` (a
near-duplicate of the previous prompt), ``too_long`` ("too long / just the code / be concise"),
``too_slow``.

Deliberately left out: neutral rules. A plain "no" answering a clarifying question fires no rule
here; the scorer sees the question in the answer (``ctx:question``) and scores it low.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ingest.detector.features import (
    REASK_RATIO,
    asked_question,
    looks_like_trace,
    normalise,
    reask_ratio,
)

_NEG = r"(?:does ?n'?t|did ?n'?t|wo ?n'?t|is ?n'?t|are ?n'?t|not|fails? to|failed to)"
_PATTERNS: dict[str, re.Pattern[str]] = {
    "still_failing": re.compile(
        r"\bstill\b.{0,30}\b(?:fail\w*|error\w*|broken|wrong|crash\w*|exception|bug\w*|"
        r"not work\w*|does ?n'?t work|the same|same)\b|\bsame (?:error|problem|issue|exception|"
        r"bug|traceback|failure|crash|wrong|result|output)\b|\b(?:wrong|broken|failing|fails|"
        r"failed|crash(?:es|ed)?|errors?) again\b|\bagain[,:]? (?:the )?same\b"
    ),
    "wrong": re.compile(
        r"(?:^|[.!?]\s*)(?:wrong|incorrect)\b|\b(?:is|are|was|were|'s|'re|looks|seems|still|"
        r"totally|completely|all|just|plain|dead) (?:\w+ )?(?:wrong|incorrect)\b|"
        r"\bwrong (?:answer|result|output|values?|number|type|language|file|function|approach|"
        r"order|sign|format|again)\b|\bgives? (?:me )?(?:a |the )?wrong\b"
    ),
    "does_not_work": re.compile(
        rf"\b{_NEG} (?:even |really |actually )?(?:work|working|compile|compiling|build|"
        r"building)\b|\b(?:do|does|did|wo) ?n'?t (?:even )?(?:work|run|pass)\b|"
        r"\b(?:it|this|that|code|tests?|build|script|function|program|snippet|answer) (?:\w+ )?"
        r"(?:crash(?:es|ed)?|fails|failed|breaks|broke|errors out|blows up|throws|threw)\b|"
        r"\b(?:is|'s|are|'re|looks|seems|totally|completely) broken\b"
    ),
    "misunderstood": re.compile(
        r"\bnot what i (?:meant|asked|wanted|said|need(?:ed)?)\b|\byou (?:misunderstood|"
        r"misread|ignored|didn'?t read|missed the point)\b|\bi (?:said|asked for|told you)\b"
        r"|\bread (?:my|the) (?:question|prompt) again\b"
    ),
    "too_long": re.compile(
        r"\btoo (?:long|verbose|wordy|much (?:text|explanation|prose))\b|\bjust (?:give me |show "
        r"me |write |paste |send )?(?:the )?(?:code|answer|function|snippet|diff|one-liner|"
        r"command|expression|fix)\b|\b(?:be|more) (?:concise|brief|terse)\b|"
        r"\b(?:make it|way|much|a lot|keep it) shorter\b|\bshorter,? please\b|"
        r"\b(?:skip|drop|cut|less|without) (?:the |all the )?(?:explanation|essay|prose|"
        r"commentary|lecture|chatter|preamble)\b|\btl;?dr\b"
    ),
    "too_slow": re.compile(
        r"\b(?:too|so|really|very|painfully|way too) slow\b|\btook (?:way |far |much |so )?"
        r"(?:too )?long\b|\btakes? forever\b|\btook ages\b"
    ),
}
_NO_I_MEANT = re.compile(r"^(?:no|nope|nah)\b[,.!\s-]*(?:i|what i) (?:meant|mean|asked|wanted)\b")


_NOT_A_COMPLAINT = re.compile(r"\b(?:what|nothing|anything|something)(?:'s| is)? wrong\b")


def _wrong(text: str) -> bool:
    t = _NOT_A_COMPLAINT.sub(" ", normalise(text))
    return bool(_PATTERNS["wrong"].search(t))


def _misunderstood(text: str, response: str | None) -> bool:
    t = normalise(text)
    if _PATTERNS["misunderstood"].search(t):
        return True
    return bool(_NO_I_MEANT.search(t)) and not asked_question(response)


def _rule_table() -> dict[str, Callable[[str, str | None, str | None], bool]]:
    def pattern(name: str) -> Callable[[str, str | None, str | None], bool]:
        return lambda text, _p, _r: bool(_PATTERNS[name].search(normalise(text)))

    return {
        "error_pasted": lambda text, _p, response: bool(response) and looks_like_trace(text),
        "still_failing": pattern("still_failing"),
        "wrong": lambda text, _p, _r: _wrong(text),
        "does_not_work": pattern("does_not_work"),
        "misunderstood": lambda text, _p, response: _misunderstood(text, response),
        "reask": lambda text, prompt, _r: reask_ratio(text, prompt) >= REASK_RATIO,
        "too_long": pattern("too_long"),
        "too_slow": pattern("too_slow"),
    }


RULES = _rule_table()
"""Rule name -> predicate ``(text, prompt, response) -> bool``."""


def fired_rules(text: str, prompt: str | None = None, response: str | None = None) -> list[str]:
    """Names of the rules that match this follow-up, in ``RULES`` order."""
    return [name for name, rule in RULES.items() if rule(text, prompt, response)]
