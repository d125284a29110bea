"""The simulated users' follow-up messages: a paraphrase bank per intent, drawn with a seed.

Each intent is a product of fragment lists (opener x core x closer) with numbers and names
filled at draw time, so a few hundred templates give thousands of distinct texts. Complaint
intents (``wrong``, ``error``, ``misread``, ``slow``, ``long``) include ones with no negation
and no keyword; neutral intents (``thanks``, ``next``, ``decline``, ``question``) include plain
"no" / "nope" messages that decline further help, not complain.

This bank is written apart from the detector's training grammar (ingest/detector/corpus.py):
other templates and wording, tuned to the toy tasks (arith, complete, off_by_one), so a demo's
detector-vs-simulator agreement is not a measure of fitting the training strings. Each drawn
text keeps the intent's ground truth, which the simulator sends as the producer flag.

Deliberately left out: when a user writes which intent (simulation/signal_policy.py) and sending.
"""

from __future__ import annotations

import itertools
import random
from functools import cache

_WRONG_CORES = (
    "the result is off: I get {a}, the checker wants {b}",
    "that evaluates to {a} but should be {b}",
    "expected {b}, yours gives {a}",
    "fails my check, {b} expected",
    "{a} isn't the answer",
    "this returns garbage for [1, 2, 3]",
    "the empty-list case blows up",
    "you're off by one on the upper bound",
    "the slice drops the last element",
    "that isn't the right index",
    "my test suite goes red with this",
    "checker says FAIL on case {c}",
    "case {c} fails: got {a}",
    "the loop stops one short",
    "doesn't give {b} for the sample input",
    "range({c}) should include {c}, yours doesn't",
    "hmm, {a}? the correct value is {b}",
    "still returning {a} for me",
    "I ran it and the numbers are way off",
    "nope, this is the same bug as my version",
)
_ERROR_CORES = (
    'Traceback (most recent call last):\n  File "<stdin>", line 1, in <module>\n'
    "IndexError: list index out of range",
    '  File "<stdin>", line 1\n    return xs[{c}:\n              ^\nSyntaxError: invalid syntax',
    "NameError: name 'x{c}' is not defined",
    "TypeError: 'int' object is not iterable",
    "ValueError: invalid literal for int() with base 10: '{a}x'",
    "it threw IndexError on the first call",
    "got a SyntaxError when I pasted it",
)
_MISREAD_CORES = (
    "I asked for the body, not a whole def",
    "I only wanted the number, not code",
    "the task was to fix the bound, you rewrote everything",
    "that solves a different problem than the comment describes",
    "read the comment again, it says sum, not product",
    "no, I meant the index of the last element",
)
_SLOW_CORES = (
    "waited ages for that one",
    "the reply crawled in",
    "response time is killing me",
    "that answer was sluggish",
    "can it be quicker next time",
    "it took {c} seconds to show up",
    "I could have typed it myself in that time",
    "faster please, I'm in a flow here",
)
_LONG_CORES = (
    "I only wanted the expression",
    "trim it down to one line",
    "keep answers to the expression itself",
    "lots of extra tokens there, the value is all I need",
    "no need to ramble",
    "one line would have done",
    "all that for {b}?",
    "cut the filler",
)
_THANKS_CORES = (
    "cheers, passes now", "ta, that's it", "spot on", "yep, all green", "sweet, merged",
    "works for me", "nice one", "exactly right", "lgtm", "appreciated", "good stuff",
    "that'll do",
)
_NEXT_CORES = (
    "next: evaluate {a}*{b}",
    "another one, {a}+{b}-{c}",
    "now one that returns the max of xs",
    "moving on: a body that counts the evens in xs",
    "ok, now sum the first {c} items",
    "next task: reverse xs without slicing",
    "let's do the product of xs now",
    "new one: is n divisible by {c}?",
)
_DECLINE_CORES = (
    "no, that's everything",
    "no further changes",
    "nope, moving on",
    "no more for this file",
    "no need to explain",
    "nope, all set",
    "no",
    "nah, I'm done here",
)
_QUESTION_CORES = (
    "why does the range start at 1?",
    "is there a builtin for that?",
    "what would this be in numpy?",
    "does this handle negative n?",
    "how fast is that for a million items?",
)

_BANK: dict[str, tuple[bool, tuple[tuple[str, ...], ...]]] = {
    "wrong": (True, (("", "hmm ", "erm, ", "wait, ", "uh "), _WRONG_CORES,
                     ("", " fix pls", ", have another look", ", redo it", " ...", "?"))),
    "error": (True, (("", "", "ran it:\n", "this is what I see:\n"), _ERROR_CORES)),
    "misread": (True, (("", "hmm, ", "erm "), _MISREAD_CORES, ("", ".", " please"))),
    "slow": (True, (("", "meh, ", "ugh "), _SLOW_CORES, ("", ".", "!"))),
    "long": (True, (("", "pls, ", "hey "), _LONG_CORES, ("", ".", " next time"))),
    "thanks": (False, (("", "ok ", "great, "), _THANKS_CORES, ("", "!", " :)", ", thanks"))),
    "next": (False, (("", "ok. ", "great. "), _NEXT_CORES, ("", ".", " please"))),
    "decline": (False, (("", "ok, ", "thanks - "), _DECLINE_CORES, ("", ".", "!"))),
    "question": (False, (("", "quick q: ", "curious, "), _QUESTION_CORES)),
}
COMPLAINTS = tuple(k for k, (bad, _) in _BANK.items() if bad)
NEUTRAL = tuple(k for k, (bad, _) in _BANK.items() if not bad)


@cache
def paraphrases(intent: str) -> tuple[str, ...]:
    """Every template of ``intent`` (numbers still as ``{a}``, ``{b}``, ``{c}``)."""
    _, parts = _BANK[intent]
    return tuple("".join(p) for p in itertools.product(*parts))


def dissatisfied(intent: str) -> bool:
    """Ground truth of ``intent``: is it a complaint?"""
    return _BANK[intent][0]


def draw(intent: str, rng: random.Random) -> str:
    """One follow-up of ``intent``: a template chosen and filled by ``rng``."""
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    if a == b:
        b += 1
    return rng.choice(paraphrases(intent)).format(a=a, b=b, c=rng.randint(2, 12))
