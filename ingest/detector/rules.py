"""High-precision rules for complaints about an answer: the first tier of the detector.

Each rule is a name and a predicate over the follow-up and its context; ``fired_rules`` returns
the names of those that match. A rule is written to be precise rather than complete: the learned
scorer (scorer.py) covers what the rules miss, e.g. complaints without any keyword.

Rule families (each with unit tests on real phrasings, docs/FOLLOWUP_LABELS.md):
``error_pasted`` (a traceback, compiler or runtime error pasted after an answer: "the code gives
this error : NameError ..."), ``still_failing`` ("still the same error", "The error is still
there", "wrong again"), ``wrong``, ``does_not_work`` ("it doesnt work", "i cant download the
file"), ``misunderstood`` ("not what I asked", "I mean ...", "My question was ..."),
``no_restatement`` (a leading "no, ..." followed by a restatement: "no, when you install
elementor on wp it comes with ..."; not a polite "No, thank you", not a "no" answering a
question the answer asked), ``ignored_instruction`` ("you forgot the introduction", "i only need
latex code", "3 line limit still applies"), ``doubt`` ("Are you sure it prints ...",
"what did you change other than the names?"), ``regenerate``, ``unhelpful`` ("it's not the
improvement i was looking for", "that's nice and all, but ..."), ``reask`` (a near-duplicate
of the previous prompt), ``too_long``, ``too_slow``, ``no_correction`` (a leading "no" followed
by a correction in any dialogue, whatever the answer asked: "No, it's the 11th", "No, find some
other movies", "no, I said Friday").

Deliberately left out: neutral rules. A plain "no" answering a clarifying question fires no rule
here; the scorer sees the question in the answer (``ctx:question``) and scores it low.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from ingest.detector.features import (
    REASK_RULE_RATIO,
    asked_question,
    looks_like_trace,
    negated_correction,
    normalise,
    reask_ratio,
)

_NEG = r"(?:does ?n'?t|did ?n'?t|wo ?n'?t|is ?n'?t|are ?n'?t|not|fails? to|failed to)"
_PATTERNS: dict[str, re.Pattern[str]] = {
    "still_failing": re.compile(
        r"\bstill\b.{0,30}\b(?:fail\w*|error\w*|broken|wrong|crash\w*|exception|bug\w*|"
        r"not work\w*|does ?n'?t work|the same|same)\b|\bsame (?:error|problem|issue|exception|"
        r"bug|traceback|failure|crash|wrong|result|output)\b|\b(?:wrong|broken|failing|fails|"
        r"failed|crash(?:es|ed)?|errors?) again\b|\bagain[,:]? (?:the )?same\b|"
        r"\b(?:error|problem|issue|bug|exception|crash) is still (?:there|here|happening)\b|"
        r"\bstill (?:giv\w*|throw\w*|show\w*|get\w*|see\w*|seeing|returns?|print\w*|"
        r"crash\w*|fail\w*|produc\w*|has|have|having|happen\w*) (?:me )?(?:the |a |an |this |"
        r"that |same |lots of |a lot of )*(?:\w+ )?(?:errors?|exceptions?|issues?|problems?|bugs?|"
        r"false positives|warnings?|wrong)\b|^.{0,80}\b(?:it|this|that|the \w+|code|output|result|"
        r"error|page|app|script|program|function|file|list)(?: is|'s| are)? still (?:\w+ing|returns|gives|shows|"
        r"prints|fails|crashes|(?:is |it'?s )?(?:a |an )?(?:blank|empty|broken|wrong|the same|not|"
        r"no|nothing))\b"
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
        r"\b(?:is|'s|are|'re|looks|seems|totally|completely) broken\b|"
        r"\b(?:does ?n'?t|did ?n'?t|not|never) work(?:s|ed|ing)?\b|"
        r"\b(?:ca ?n'?t|cannot|could ?n'?t|unable to) (?:download|open|run|install|import|"
        r"find|see|load|compile|build|access)\b|\bno longer (?:work|be|able)\w*\b|"
        r"\b(?:it|this|that|the code|the script|the program) (?:still )?(?:gives?|gave|throws?|"
        r"returns?|shows?|says?|prints?|raises?) (?:me )?(?:an? |this |that |the following )?"
        r"(?:error|exception|warning)s?\b|\b(?:after|with) (?:the|this|that|your) "
        r"(?:modification|change|fix|update|code)s?,? (?:i|it) (?:get|got|gives?|gave|throws?)\b|"
        r"^(?:now )?i (?:get|got|encounter\w*|receive\w*|see) (?:this|the following|an?|"
        r"this \*\*)?\s?(?:error|exception)\b|\bthis is what i get\b|"
        r"\bit (?:does ?n'?t|did ?n'?t|does not|did not)[.!]*$"
    ),
    "misunderstood": re.compile(
        r"\bnot what i (?:meant|asked|wanted|said|need(?:ed)?)\b|\byou (?:misunderstood|"
        r"misread|ignored|didn'?t read|missed the point)\b|\bi (?:said|asked for|told you)\b"
        r"|\bread (?:my|the) (?:question|prompt) again\b|\b(?:was|is) ?n'?t (?:really |quite |"
        r"exactly )?what i (?:asked|meant|wanted|said|need(?:ed)?|was looking for)\b|"
        r"\bnot what i was (?:asking|looking) for\b|\bmy question (?:was|is)\b|"
        r"^i mean\b|\byou(?:'re| are) misunderstanding\b|\byou (?:got|get) (?:it|that|this|me) "
        r"wrong\b|\bwhat i was getting at\b|\bthat'?s not (?:it|what)\b|^(?:we are|we're|"
        r"i am|i'm) talking (?:about )?\b"
    ),
    "ignored_instruction": re.compile(
        r"\byou (?:forgot|missed|skipped|ignored|omitted|left out|did ?n'?t (?:do|include|add|"
        r"use|answer|follow|read|finish|complete)|did not (?:do|include|add|use|answer|follow|"
        r"read|finish|complete))\b|\bi only (?:need|want|asked for)\b|\bi just (?:asked for|"
        r"wanted)\b|"
        r"\b(?:limit|rule|constraint|requirement|instruction)s? still appl(?:y|ies)\b|"
        r"\bi (?:already )?(?:said|told you|asked you|asked for|specified)\b|"
        r"\b(?:as|like) i (?:said|asked|mentioned)\b|\b(?:cannot|can ?n'?t|must not|should ?n'?t) "
        r"be (?:broken|changed|split|modified) (?:up )?(?:in|like) this\b|\bit looks (?:like )?you"
        r" (?:missed|not including|are not including|forgot)\b|\bnot including everything\b"
    ),
    "doubt": re.compile(
        r"^are you sure\b|\bare you sure (?:it|this|that|about)\b|\bshould ?n'?t (?:it|this|that|"
        r"those|these|the|there|we|you)\b.{0,80}(?:\?|$)|\bwhat did you (?:change|do|fix)\b|"
        r"\bwhy (?:did ?n'?t|did not|do ?n'?t|does ?n'?t|is ?n'?t|are ?n'?t|are there no|is there "
        r"no) (?:you|it|the|this|that|they)?\b.{0,60}\?|\bwhy\b.{1,40}\b(?:are|is) no \w+\b"
    ),
    "regenerate": re.compile(
        r"^(?:please )?(?:regenerate|try again|redo(?: it)?|again|one more time|retry)[.!]*$|"
        r"^redo it but\b|\bregenerate (?:the|your) (?:answer|response)\b"
    ),
    "unhelpful": re.compile(
        r"^i (?:still )?(?:do ?n'?t|did ?n'?t|do not) (?:understand|get it|follow)\b|"
        r"\bnot (?:the|an?) (?:\w+ )?(?:improvement|answer|result|solution|output|code) i "
        r"(?:was |am )?(?:looking for|wanted|expected|needed)\b|\b(?:not|un)helpful\b|\buseless\b|"
        r"\b(?:that'?s|this is|it'?s) (?:nice|good|great|fine) and all,? but\b|"
        r"\bthat (?:is ?n'?t|did ?n'?t|does ?n'?t|wo ?n'?t) (?:going to )?(?:work|help)\b|"
        r"\bthat did ?n'?t work\b|\bthis is too (?:short|long|vague|generic) now\b|"
        r"\b(?:that|this|it)(?:'s| is) not (?:going to )?work\w*\b"
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


_LEADING_NO = re.compile(
    r"^(?:(?:erm|hmm+|um+|uh+|ah|well|oh)[,.]?\s+)?(?:no|nope|nah|not really)"
    r"(?:\s*[,.!:;-]+\s*|\s+(?=(?:i|it|that|this|you|we|the|not|just|when|what|actually|"
    r"rather|instead)\b))(\S.*)$"
)
_CLOSING = re.compile(
    r"^(?:(?:thanks?|thank you|thx|ty|that'?s (?:all|it|fine|ok(?:ay)?)|i'?m (?:good|fine|all "
    r"set)|all good|(?:very|so) much|(?:you'?ve|you have) been (?:very |so |really )?(?:helpful|"
    r"great|kind)|bye|goodbye|have a (?:nice|good|great) (?:day|one)|nothing else|not now|for now|"
    r"cheers|great|perfect|worries|problem|need|again|i do ?n'?t)[\s,.!]*)+$"
)


def _no_restatement(text: str, response: str | None) -> bool:
    """A leading "no" followed by at least three more words that are not thanks or closing."""
    m = _LEADING_NO.match(normalise(text))
    if not m or asked_question(response):
        return False
    rest = m.group(1)
    return len(rest.split()) >= 3 and not _CLOSING.match(rest)


_CONTINUE = re.compile(r"^(?:please )?(?:create |give me |write |make |list )?(?:another|more|"
                       r"continue|continues|next|go on|keep going)\b")


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
        "error_pasted": lambda text, _p, _r: looks_like_trace(text),
        "still_failing": pattern("still_failing"),
        "wrong": lambda text, _p, _r: _wrong(text),
        "does_not_work": pattern("does_not_work"),
        "misunderstood": lambda text, _p, response: _misunderstood(text, response),
        "no_restatement": lambda text, _p, response: _no_restatement(text, response),
        "no_correction": lambda text, _p, _r: negated_correction(text),
        "ignored_instruction": pattern("ignored_instruction"),
        "doubt": pattern("doubt"),
        "regenerate": pattern("regenerate"),
        "unhelpful": pattern("unhelpful"),
        "reask": lambda text, prompt, _r: (reask_ratio(text, prompt) >= REASK_RULE_RATIO
                                            and not _CONTINUE.match(normalise(text))),
        "too_long": pattern("too_long"),
        "too_slow": pattern("too_slow"),
    }


RULES = _rule_table()
"""Rule name -> predicate ``(text, prompt, response) -> bool``."""


def fired_rules(text: str, prompt: str | None = None, response: str | None = None,
                names: Iterable[str] | None = None) -> list[str]:
    """Names of the rules (all, or those in ``names``) that match this follow-up, in ``RULES``
    order."""
    wanted = RULES if names is None else set(names)
    return [name for name, rule in RULES.items() if name in wanted and rule(text, prompt, response)]
