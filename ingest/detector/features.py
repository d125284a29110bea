"""Text features of a follow-up and its context, shared by the rules, training and inference.

- ``asked_question``: the answer ended with a question (the rules read it: a bare "no" to a
  clarifying question is no restatement);
- ``reask_ratio``: how close the follow-up is to the previous prompt (rapidfuzz ratio);
- ``looks_like_trace``: a pasted traceback, compiler or runtime error message;
- ``length_bucket``, ``code_share``: coarse shape of the message;
- ``cues``: how a follow-up in any dialogue corrects, questions or accepts the previous turn
  ("No, it's the 11th", "what do you mean?", "That is correct.");
- ``opening``: a "No" / "Nope" / "Nah" opening, with a restatement after it or only thanks;
- ``prompt_overlap``: how many of the previous user turn's words the follow-up repeats.

Pure Python. Deliberately left out: the weights and the dense feature vector (scorer.py), the
rules (rules.py) and sentiment (lexicon.py).
"""

from __future__ import annotations

import re
from functools import lru_cache

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


@lru_cache(maxsize=256)
def normalise(text: str) -> str:
    """Lower case, straight apostrophes, collapsed whitespace (the rules ask for the same text's
    form many times: the last few are kept)."""
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


ASKED_TAIL = 160
"""How many closing characters of an answer are searched for a question mark."""


def asked_question(response: str | None) -> bool:
    """The answer closes with a question to the user: a "?" in its last line, within its last
    ``ASKED_TAIL`` characters ("Do you like being outside? I hike." asked one too)."""
    if not response or not response.strip():
        return False
    tail = response.strip().splitlines()[-1]
    return "?" in tail[-ASKED_TAIL:]


def reask_ratio(text: str, prompt: str | None) -> float:
    """rapidfuzz ratio of the normalised follow-up and prompt (0 without a prompt)."""
    if not prompt:
        return 0.0
    a = " ".join(words(text))
    b = " ".join(words(prompt))
    if len(a) < 12 or len(b) < 12:
        return 0.0
    return float(fuzz.ratio(a, b))


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


_CONFUSED = re.compile(
    r"\bwhat (?:do|did) (?:you|u) mean\b|\bwhat (?:are|r) (?:you|u) (?:talking|going on) about\b|"
    r"\b(?:does ?n'?t|doesn|does not|did ?n'?t|did not|do ?n'?t|do not|makes? no|making no|not "
    r"making(?: any)?) (?:make )?(?:any |much )?sense\b|\bno idea what (?:you|u)\b|"
    r"\bi (?:do ?n'?t|do not|did ?n'?t|did not) (?:understand|get) (?:you|what you|that|your|it)\b|"
    r"^(?:huh|what|wut|wha|eh|excuse me|come again|pardon(?: me)?|sorry)\W*$|\bhuh\b|"
    r"\bwhy (?:would|did|do) (?:you|u) (?:say|ask|think) (?:that|so)\b|"
    r"\bwhat does (?:that|this|it) (?:have to do|mean)\b|\bthat'?s (?:random|not an answer)\b|"
    r"\b(?:you|u) (?:did ?n'?t|did not|do ?n'?t|never) answer(?:ed)?\b|\bi did ?n'?t (?:ask|say)\b|"
    r"\bnot what i (?:asked|said|meant|wanted)\b|\b(?:you|u) (?:are|'re|r) (?:not|n'?t) "
    r"(?:making sense|listening)\b|\bare (?:you|u) (?:even )?(?:listening|a bot|a robot)\b"
)
_LEAD_NO = re.compile(r"^(?:(?:erm|hmm+|um+|uh+|ah|well|oh)[,.]?\s+)?(?:no|nope|nah|not really|"
                      r"wrong|incorrect)\b[\s,.!:;-]*(.*)$")
_NO_ANSWER = re.compile(
    r"^(?:$|thanks?\b|thank you|thx|ty\b|that'?s (?:all|it|ok|okay|fine|everything)|that (?:is|will "
    r"be|would be) (?:all|it|everything)|that'?ll be|i'?m (?:good|fine|ok|okay|all set|done)|i am "
    r"(?:good|fine|ok|okay|all set|done)|all good|not (?:right )?now|not (?:at )?(?:this|the) "
    r"(?:time|moment)|not yet|not today|maybe later|nothing|none|no problem|worries|i (?:do ?n'?t|do "
    r"not) (?:need|have|care|mind|think|want)|i just need|i only need|i (?:will|'ll) |let me|"
    r"i think (?:that'?s|that is|i'?m)|bye|goodbye|have a)"
)
_CORRECTS = re.compile(
    r"^(?:it'?s|it is|its|it was|that'?s not|that is not|that was not|the\b|i said|i asked|i meant|"
    r"i mean|i wanted|i want|i'?d like|i would like|i need (?:a |an |the |it |to )|i was (?:asking|"
    r"looking|talking)|i'?m (?:looking|asking|talking)|i am (?:looking|asking|talking)|find|show|"
    r"give|look|search|try|get me|another|other|different|something else|not (?:that|this|the|"
    r"what|those|these|a|an)\b|you\b|your\b|on the|at the|in the|for the|my\b|actually|rather|"
    r"instead|wrong|please)"
)
_CORRECTS_STRONG = re.compile(
    r"^(?:i said|i asked|i meant|i mean\b|i wanted|i was (?:asking|looking|talking)|that'?s not|"
    r"that is not|that was not|not (?:that|this|the|what|those|these)\b(?! (?:time|moment|now|"
    r"today|week|year|evening|morning))|(?:please )?(?:find|show|"
    r"give|get|suggest|recommend|try)(?: me)? (?:\w+ )?(?:another|other|different|something "
    r"else|some other)\b|another\b(?! time)|other\b(?! than)|different\b|something else|"
    r"wrong|incorrect|"
    r"it'?s (?:the|on|at|in|for|actually) |it is (?:the|on|at|in|for|actually) |the \w+ (?:is|was) )"
)
"""A correction whatever the answer asked ("Do you want the 12th?" - "No, it's the 11th")."""
_AFFIRM = re.compile(
    r"^(?:(?:yes|yeah|yep|yup|yes please|correct|right|exactly|sure|ok|okay|great|perfect|awesome|"
    r"excellent|good|nice|cool|wonderful|thanks?|thank you|sounds (?:good|great|perfect)|that(?:'s| "
    r"is| was| sounds| looks| works) (?:correct|right|great|perfect|good|fine|it|helpful|all|"
    r"everything)|that(?:'s| is) (?:exactly|just) (?:it|right|what i)|it works|works)\b[\s,.!]*)+"
)
_NEGATION = re.compile(r"\b(?:not|no|n'?t|never|but|however|wrong|incorrect|error)\b")


def cues(text: str) -> dict[str, float]:
    """Correction, confusion and acceptance cues of a follow-up in any dialogue.

    - ``cue:no_correction``: a leading "no" / "wrong" followed by a correction or a restated
      request ("No, it's the 11th", "No, find some other movies", "no, I said Friday"), unless
      what follows only closes ("No, that's all", "No, thanks");
    - ``cue:confused``: the user cannot follow the answer ("what do you mean?", "that doesn't make
      sense", "what are you talking about");
    - ``cue:affirm``: the follow-up opens by accepting the answer ("That is correct.",
      "Yes, thanks", "perfect") and says nothing negative after it.

    Whether the answer asked a question is no part of a cue: a "No, I need a cheaper one" after
    "Shall I book it?" corrects as much as one after a plain answer.
    """
    t = normalise(prose_of(text))
    out: dict[str, float] = {}
    m = _LEAD_NO.match(t)
    if m:
        rest = m.group(1)
        if _CORRECTS_STRONG.match(rest) or (
                not _NO_ANSWER.match(rest) and (_CORRECTS.match(rest) or len(rest.split()) >= 2)):
            out["cue:no_correction"] = 1.0
    if _CONFUSED.search(t):
        out["cue:confused"] = 1.0
    a = _AFFIRM.match(t)
    if a and not _NEGATION.search(t[a.end():]):
        out["cue:affirm"] = 1.0
    return out


_OPEN_NO = ("no", "nope", "nah")
_POLITE_REST = re.compile(
    r"^(?:(?:thanks?|thank you|thx|ty|that'?s (?:all|it|fine|ok(?:ay)?)|i'?m (?:good|fine|all "
    r"set)|all good|(?:very|so) much|bye|goodbye|have a (?:nice|good|great) (?:day|one)|nothing "
    r"else|not now|for now|again|cheers|great|perfect|problem|worries)[\s,.!]*)+$"
)


def opening(text: str) -> dict[str, float]:
    """How the follow-up opens (zeros left out):

    - ``open:no``: its first word is "no", "nope" or "nah", whatever follows;
    - ``open:no_more``: such a "no" with at least two more words that are not only thanks or a
      closing ("No, I need a cheaper one", "nope the other file");
    - ``open:polite_no``: such a "no" followed only by thanks or a closing ("No, thanks, that's
      all.")."""
    ws = words(prose_of(text))
    if not ws or ws[0] not in _OPEN_NO:
        return {}
    rest = [w for w in ws[1:] if w not in ("?", "!")]
    out = {"open:no": 1.0}
    tail = normalise(prose_of(text))
    tail = tail[len(ws[0]):].lstrip(" ,.!:;-")
    if rest and _POLITE_REST.match(tail):
        out["open:polite_no"] = 1.0
    elif len(rest) >= 2:
        out["open:no_more"] = 1.0
    return out


def prompt_overlap(text: str, prompt: str | None) -> float:
    """Share of the previous user turn's distinct words that the follow-up repeats (0 without
    a prompt; words of one or two letters and "?" / "!" left out): a user asking again repeats
    their words."""
    if not prompt:
        return 0.0
    a = {w for w in words(prose_of(text, 2000)) if len(w) > 2}
    b = {w for w in words(prose_of(prompt, 2000)) if len(w) > 2}
    if len(a) < 2 or len(b) < 2:
        return 0.0
    return len(a & b) / len(b)


def negated_correction(text: str) -> bool:
    """A leading "no" / "wrong" followed by a correction whatever the answer asked: "No, it's the
    11th", "No, find some other movies", "no, I said Friday", "No, that's not it"."""
    m = _LEAD_NO.match(normalise(prose_of(text)))
    return bool(m and _CORRECTS_STRONG.match(m.group(1)))


def prose_of(text: str, limit: int = 400) -> str:
    """The first ``limit`` characters of ``text`` (cues read how a message opens)."""
    return text[:limit]
