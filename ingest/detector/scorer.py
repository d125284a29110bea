"""The detector's model: a calibrated logistic regression over named features, read from
``model.json``.

``Scorer.probability(text, prompt, response)`` is ``sigmoid(a * z + c)`` with

    z = bias + sum_k w_k d_k

- ``d``: the dense features (``dense_features``, every one listed in ``DENSE`` and in
  docs/FOLLOWUP_LABELS.md): VADER sentiment with negation and contrast (lexicon.py); how the
  message opens ("No" / "Nope" / "Nah", a "no" with a restatement after it, a polite "no, thanks");
  correction, confusion and acceptance cues; repetition of the previous user turn (closeness and
  word overlap); a pasted error, code share, length; and the hand rules that training kept
  (``model.json`` ``rules``: each kept for a measured gain on held-out sources);
- ``(a, c)``: Platt calibration fitted on out-of-fold scores of the real fit halves, so a score
  reads as a probability on real text.

There is no vocabulary: words reach the score only through VADER's human-rated lexicon and the
named cues, so the model cannot learn the phrasing of the sets it was fitted on. The weights are
checked in (``model.json``, written by ``python -m ingest.detector.train``); inference is pure
Python. Deliberately left out: training (train.py) and the strict-rule decision
(``ingest.detector.detect``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ingest.detector.features import (
    code_share,
    cues,
    length_bucket,
    looks_like_trace,
    opening,
    prompt_overlap,
    reask_ratio,
)
from ingest.detector.lexicon import sentiment
from ingest.detector.rules import RULES, fired_rules

MODEL_PATH = Path(__file__).with_name("model.json")
MODEL_FORMAT = 4
"""Layout of model.json (1: hashed n-grams; 2: dense + vocabulary + calibration; 3: 2 with the
dialogue cues and sign-constrained sentiment weights; 4: named features only, the kept rules and
the strict rules listed in the file)."""
CUES = ("cue:no_correction", "cue:confused", "cue:affirm")
LENGTHS = ("len:1", "len:3", "len:8", "len:30", "len:long")
OPENINGS = ("open:no", "open:no_more", "open:polite_no")
DENSE = (
    "vader:compound", "vader:neg", "vader:pos", "vader:tail_neg", "vader:contrast",
    *OPENINGS, "question_mark", "rep:prompt_ratio", "rep:prompt_overlap", "ctx:trace",
    "code_share", *LENGTHS, *CUES, *(f"rule:{r}" for r in RULES),
)
"""Names of every feature the model may weigh, in a fixed order."""
SIGNS = {"vader:compound": -1.0, "vader:neg": 1.0, "vader:pos": -1.0, "vader:tail_neg": 1.0,
         "open:no": 1.0}
"""Directions the weights are held to in training and checked on load: a more negative message
never lowers the logit, and neither does opening with "No" / "Nope" / "Nah" (how users most
often open a correction in task dialogue: "No, I need a cheaper one")."""
SENTIMENT_SIGNS = SIGNS


def dense_features(text: str, prompt: str | None = None, response: str | None = None,
                   rules: Sequence[str] | None = None) -> dict[str, float]:
    """The named features of one follow-up in its context (zeros left out); ``rules``: the names
    ``fired_rules`` returns for it, when the caller has them already. ``response`` is read by
    the rules only: whether the answer asked a question is deliberately no feature (it marks
    whole kinds of dialogue rather than complaints)."""
    s = sentiment(text)
    f = {
        "vader:compound": s.compound, "vader:neg": s.neg, "vader:pos": s.pos,
        "vader:tail_neg": max(0.0, -s.tail), "vader:contrast": float(s.contrast),
        "question_mark": float(text.rstrip().endswith("?")),
        "rep:prompt_ratio": reask_ratio(text, prompt) / 100.0,
        "rep:prompt_overlap": prompt_overlap(text, prompt),
        "ctx:trace": float(looks_like_trace(text)), "code_share": code_share(text),
        length_bucket(text): 1.0,
    }
    f.update(opening(text))
    for r in fired_rules(text, prompt, response) if rules is None else rules:
        f[f"rule:{r}"] = 1.0
    f.update(cues(text))
    return {k: v for k, v in f.items() if v}


@dataclass(frozen=True)
class Scorer:
    """Weights of the named features, the kept and strict rules, calibration, threshold."""

    bias: float
    dense: dict[str, float]
    rules: tuple[str, ...]
    """Rule families that enter the model (each kept for a measured held-out gain)."""
    strict_rules: tuple[str, ...]
    """Rule families whose hit is a decision by itself (a subset of ``rules``)."""
    calibration: tuple[float, float]
    threshold: float

    def logit(self, text: str, prompt: str | None = None, response: str | None = None,
              rules: Sequence[str] | None = None) -> float:
        """The uncalibrated logit ``z``; ``rules``: the kept rules that fired, if known."""
        if rules is None:
            rules = fired_rules(text, prompt, response, self.rules)
        d = dense_features(text, prompt, response, rules)
        return self.bias + sum(self.dense.get(k, 0.0) * v for k, v in d.items())

    def probability(self, text: str, prompt: str | None = None, response: str | None = None,
                    rules: Sequence[str] | None = None) -> float:
        a, c = self.calibration
        z = a * self.logit(text, prompt, response, rules) + c
        return 1.0 / (1.0 + math.exp(-z)) if z > -500 else 0.0

    @classmethod
    def from_json(cls, raw: bytes) -> Scorer:
        d = json.loads(raw)
        if d["format"] != MODEL_FORMAT:
            raise ValueError(f"model.json has format={d['format']}, this code reads "
                             f"{MODEL_FORMAT}")
        unknown = set(d["dense"]) - set(DENSE)
        if unknown:
            raise ValueError(f"model.json names features this code lacks: {sorted(unknown)}")
        bad_rules = (set(d["rules"]) | set(d["strict_rules"])) - set(RULES)
        if bad_rules or not set(d["strict_rules"]) <= set(d["rules"]):
            raise ValueError(f"model.json names unknown or unkept rules: {d['strict_rules']}")
        wrong = [k for k, sign in SIGNS.items() if d["dense"].get(k, 0.0) * sign < 0]
        if wrong:
            raise ValueError(f"model.json weighs features against their prior: {wrong}")
        return cls(float(d["bias"]), {k: float(v) for k, v in d["dense"].items()},
                   tuple(d["rules"]), tuple(d["strict_rules"]),
                   (float(d["calibration"][0]), float(d["calibration"][1])),
                   float(d["threshold"]))


@cache
def load_scorer() -> Scorer:
    """The checked-in scorer (read once per process)."""
    return Scorer.from_json(MODEL_PATH.read_bytes())
