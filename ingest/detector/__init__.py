"""The dissatisfied-follow-up detector: decides from the user's next message (and the previous
user turn and the answer it follows) whether they were unhappy with the answer.

One calibrated logistic regression over named features (scorer.py, ``model.json``): VADER
sentiment with negation and contrast (lexicon.py), how the message opens (a "No" / "Nope" /
"Nah", with a restatement after it or only thanks), correction, confusion and acceptance cues,
repetition of the previous user turn, a pasted error, the message's shape, and the hand rules
(rules.py) that training kept because each raised the AUC on sources it was not fitted on. The
rules training also found worth a decision by themselves (``Scorer.strict_rules``: a hit scores
at least ``RULE_FLOOR``) decide first; otherwise the decision is ``score >= threshold``. The
weights are fitted on the fit halves of every real labelled source
(docs/FOLLOWUP_LABELS.md); their sealed halves only report (bench/detector.py).

``detector_version()`` is ``fu4-`` (the detector's generation) + a content hash of the weights,
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
_HASHED = ("features.py", "lexicon.py", "rules.py", "scorer.py", "__init__.py")
GENERATION = 4
"""Bumped when the detector's design changes (1: hashed n-grams on generated text only; 2: rules
+ a calibrated scorer fitted on code-assistant follow-ups; 3: strict rules only, dialogue cues,
a sign-constrained sentiment prior, model chosen by its worst source; 4: named features only, no
vocabulary, a "No" opening that never lowers the score, each rule kept for a held-out gain)."""


@dataclass(frozen=True)
class Verdict:
    """The detector's decision on one follow-up."""

    score: float
    """In [0, 1]: how likely the follow-up is a complaint about the answer."""
    dissatisfied: bool
    rules: tuple[str, ...]
    """Names of the strict rules that fired (empty: the score decided)."""


@cache
def detector_version() -> str:
    """``fu4-`` + the first 12 hex digits of sha256 over the weights, the deciding code and the
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
    fired = fired_rules(text, prompt, response, scorer.rules)
    p = scorer.probability(text, prompt, response, fired)
    rules = tuple(r for r in fired if r in scorer.strict_rules)
    if rules:
        return Verdict(RULE_FLOOR + (1.0 - RULE_FLOOR) * p, True, rules)
    return Verdict(p, p >= scorer.threshold, ())
