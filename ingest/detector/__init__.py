"""The dissatisfied-follow-up detector: decides from the user's next message (and the answer it
follows) whether they were unhappy with the answer.

Two tiers. Strict rules for complaints (rules.py, ``STRICT_RULES``: pasted errors, "still",
"wrong", "doesn't work", "not what I asked" / "I said", a leading "no" followed by a correction
such as "No, it's the 11th", ...) fire first: a hit is a dissatisfied decision with a score of at
least ``RULE_FLOOR``. Otherwise a calibrated logistic regression gives the score and the decision
is ``score >= threshold``: VADER sentiment with negation and contrast (lexicon.py; its weights
are held to the prior's direction, so a more negative message never lowers the score), the
dialogue cues (a "no" that answers or closes, confusion, acceptance such as "That is correct."),
every rule family, the context and a capped known vocabulary (scorer.py, ``model.json``). The
model was chosen by its worst real source and fitted on the ``dev`` halves of two kinds of real
user turns (code-assistant follow-ups and open dialogue, docs/FOLLOWUP_LABELS.md) plus the
generated corpus; the ``eval`` halves only report (bench/detector.py).

``detector_version()`` is ``fu3-`` (the detector's generation) + a content hash of the weights,
the deciding code and the VADER lexicon: any change to what decides gives a new version,
recorded in every reward row.

Deliberately left out: the producer's own ``dissatisfied`` flag (ingest compares it, never
trusts it) and training (``python -m ingest.detector.train``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ingest.detector.rules import fired_rules
from ingest.detector.scorer import MODEL_PATH, load_scorer

RULE_FLOOR = 0.9
"""Smallest score of a follow-up that a strict rule flagged (the scorer's probability lifts it
above)."""
STRICT_RULES = frozenset({"error_pasted", "still_failing", "wrong", "does_not_work",
                          "misunderstood", "regenerate", "unhelpful", "too_slow",
                          "no_correction"})
"""Rules whose hit is a decision. The others (a leading "no, ..." restatement, "i only need",
"are you sure", a re-ask, "just the code") also read as answers or new requests in task and open
dialogue ("No, I just need the address"); they only enter the scorer as features."""
_HASHED = ("features.py", "lexicon.py", "rules.py", "scorer.py", "__init__.py")
GENERATION = 3
"""Bumped when the detector's design changes (1: hashed n-grams on generated text only; 2: rules
+ a calibrated scorer fitted on code-assistant follow-ups; 3: strict rules only, dialogue cues,
a sign-constrained sentiment prior, model chosen by its worst source)."""


@dataclass(frozen=True)
class Verdict:
    """The detector's decision on one follow-up."""

    score: float
    """In [0, 1]: how likely the follow-up is a complaint about the answer."""
    dissatisfied: bool
    rules: tuple[str, ...]
    """Names of the strict rules that fired (empty: the learned scorer decided)."""


@cache
def detector_version() -> str:
    """``fu3-`` + the first 12 hex digits of sha256 over the weights, the deciding code and the
    VADER lexicon."""
    import vaderSentiment

    h = hashlib.sha256(MODEL_PATH.read_bytes())
    here = Path(__file__).parent
    for name in _HASHED:
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    h.update((Path(vaderSentiment.__file__).parent / "vader_lexicon.txt").read_bytes())
    return f"fu{GENERATION}-{h.hexdigest()[:12]}"


def detect(text: str, prompt: str | None = None, response: str | None = None) -> Verdict:
    """Score one follow-up ``text`` sent after ``response`` to ``prompt``."""
    scorer = load_scorer()
    fired = fired_rules(text, prompt, response)
    p = scorer.probability(text, prompt, response, fired)
    rules = tuple(r for r in fired if r in STRICT_RULES)
    if rules:
        return Verdict(RULE_FLOOR + (1.0 - RULE_FLOOR) * p, True, rules)
    return Verdict(p, p >= scorer.threshold, ())
