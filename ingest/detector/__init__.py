"""The dissatisfied-follow-up detector: decides from the user's next message (and the answer it
follows) whether they were unhappy with the answer.

Two tiers. High-precision rules for code-assistant complaints (rules.py) fire first: a rule hit
is a dissatisfied decision with a score of at least ``RULE_FLOOR``. Otherwise a small logistic
regression over hashed n-grams and context features (scorer.py, weights in ``model.json``)
gives the score, and the decision is ``score >= threshold`` (the threshold is chosen by train.py
on a generated validation split, never on the hand-written held-out fixture).

``DETECTOR_VERSION`` is a content hash of the weights, the rules and the feature code: any change
to what decides gives a new version, recorded in every reward row.

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
"""Smallest score of a follow-up that a rule flagged (the scorer's probability lifts it above)."""
_HASHED = ("features.py", "rules.py", "scorer.py", "__init__.py")


@dataclass(frozen=True)
class Verdict:
    """The detector's decision on one follow-up."""

    score: float
    """In [0, 1]: how likely the follow-up is a complaint about the answer."""
    dissatisfied: bool
    rules: tuple[str, ...]
    """Names of the rules that fired (empty: the learned scorer decided)."""


@cache
def detector_version() -> str:
    """``fu-`` + the first 12 hex digits of sha256 over the weights and the deciding code."""
    h = hashlib.sha256(MODEL_PATH.read_bytes())
    here = Path(__file__).parent
    for name in _HASHED:
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    return f"fu-{h.hexdigest()[:12]}"


def detect(text: str, prompt: str | None = None, response: str | None = None) -> Verdict:
    """Score one follow-up ``text`` sent after ``response`` to ``prompt``."""
    scorer = load_scorer()
    p = scorer.probability(text, prompt, response)
    rules = tuple(fired_rules(text, prompt, response))
    if rules:
        return Verdict(RULE_FLOOR + (1.0 - RULE_FLOOR) * p, True, rules)
    return Verdict(p, p >= scorer.threshold, ())
