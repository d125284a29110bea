"""The learned tier: a calibrated logistic regression, parameters read from ``model.json``.

``Scorer.probability(text, prompt, response)`` is ``sigmoid(a * z + c)`` with

    z = bias + sum_k w_k d_k + clip(sum_{t in known} v_t / sqrt(n_tokens), -L, L)

- ``d``: dense features (``dense_features``): VADER sentiment with negation and contrast
  (lexicon.py), which rule families fired (rules.py), the context (the answer asked a question,
  closeness to the previous prompt, a pasted error) and the message's length and code share;
- ``v``: weights of the word unigrams/bigrams the training data contained at least twice. A token
  the model never saw has no weight, and the whole lexical part is clipped to ``[-L, L]``
  (``lexical_cap``): words cannot move a message far, and words never seen cannot move it at all
  (they only dilute ``n_tokens``);
- ``(a, c)``: Platt calibration fitted on out-of-fold scores of the real development follow-ups,
  so a score reads as a probability on real text.

The weights are checked in (``model.json``, written by ``python -m ingest.detector.train``);
inference is pure Python. Deliberately left out: training (train.py) and the rule decision
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
    asked_question,
    code_share,
    length_bucket,
    cues,
    lexical_tokens,
    looks_like_trace,
    reask_ratio,
    words,
)
from ingest.detector.lexicon import sentiment
from ingest.detector.rules import RULES, fired_rules

MODEL_PATH = Path(__file__).with_name("model.json")
MODEL_FORMAT = 3
"""Layout of model.json (1: hashed n-grams; 2: dense + vocabulary + calibration; 3: 2 with the
dialogue cues and sign-constrained sentiment weights)."""
CUES = ("cue:no_correction", "cue:no_answer", "cue:confused", "cue:affirm")
LENGTHS = ("len:1", "len:3", "len:8", "len:30", "len:long")
DENSE = (
    "vader:compound", "vader:neg", "vader:pos", "vader:tail_neg", "vader:contrast",
    "vader:polite_no", "starts_no", "question_mark", "ctx:question", "ctx:no_after_question",
    "ctx:prompt_ratio", "ctx:trace", "code_share", *LENGTHS, *(f"rule:{r}" for r in RULES),
    *CUES,
)
SENTIMENT_SIGNS = {"vader:compound": -1.0, "vader:neg": 1.0, "vader:pos": -1.0,
                   "vader:tail_neg": 1.0}
"""The sentiment prior's direction, enforced in training: a more negative message never lowers
the logit (train.py projects these weights onto their sign after every step)."""
"""Names of the dense features, in a fixed order."""


def dense_features(text: str, prompt: str | None = None, response: str | None = None,
                   rules: Sequence[str] | None = None) -> dict[str, float]:
    """The named dense features of one follow-up in its context (zeros left out); ``rules``:
    the names ``fired_rules`` returns for it, when the caller has them already."""
    s = sentiment(text)
    ws = words(text)
    starts_no = bool(ws) and ws[0] in ("no", "nope", "nah")
    question = asked_question(response)
    f = {
        "vader:compound": s.compound, "vader:neg": s.neg, "vader:pos": s.pos,
        "vader:tail_neg": max(0.0, -s.tail), "vader:contrast": float(s.contrast),
        "vader:polite_no": float(s.polite_no), "starts_no": float(starts_no),
        "question_mark": float(text.rstrip().endswith("?")),
        "ctx:question": float(question), "ctx:no_after_question": float(question and starts_no),
        "ctx:prompt_ratio": reask_ratio(text, prompt) / 100.0,
        "ctx:trace": float(looks_like_trace(text)), "code_share": code_share(text),
        length_bucket(text): 1.0,
    }
    for r in fired_rules(text, prompt, response) if rules is None else rules:
        f[f"rule:{r}"] = 1.0
    f.update(cues(text, response))
    return {k: v for k, v in f.items() if v}


@dataclass(frozen=True)
class Scorer:
    """Weights of the dense features and the known vocabulary, the cap, calibration, threshold."""

    bias: float
    dense: dict[str, float]
    vocab: dict[str, float]
    lexical_cap: float
    calibration: tuple[float, float]
    threshold: float

    def parts(self, text: str, prompt: str | None = None, response: str | None = None,
              rules: Sequence[str] | None = None) -> tuple[float, float]:
        """(dense part incl. bias, clipped lexical part) of the uncalibrated logit ``z``."""
        d = dense_features(text, prompt, response, rules)
        dense = self.bias + sum(self.dense.get(k, 0.0) * v for k, v in d.items())
        toks = lexical_tokens(text)
        lex = sum(self.vocab.get(t, 0.0) for t in toks) / math.sqrt(max(1, len(toks)))
        return dense, max(-self.lexical_cap, min(self.lexical_cap, lex))

    def probability(self, text: str, prompt: str | None = None, response: str | None = None,
                    rules: Sequence[str] | None = None) -> float:
        dense, lex = self.parts(text, prompt, response, rules)
        a, c = self.calibration
        z = a * (dense + lex) + c
        return 1.0 / (1.0 + math.exp(-z)) if z > -500 else 0.0

    @classmethod
    def from_json(cls, raw: bytes) -> Scorer:
        d = json.loads(raw)
        if d["format"] != MODEL_FORMAT:
            raise ValueError(f"model.json has format={d['format']}, this code reads "
                             f"{MODEL_FORMAT}")
        unknown = set(d["dense"]) - set(DENSE)
        if unknown:
            raise ValueError(f"model.json names dense features this code lacks: {sorted(unknown)}")
        wrong = [k for k, sign in SENTIMENT_SIGNS.items() if d["dense"].get(k, 0.0) * sign < 0]
        if wrong:
            raise ValueError(f"model.json weighs sentiment against its prior: {wrong}")
        return cls(float(d["bias"]), {k: float(v) for k, v in d["dense"].items()},
                   {k: float(v) for k, v in d["vocab"].items()}, float(d["lexical_cap"]),
                   (float(d["calibration"][0]), float(d["calibration"][1])),
                   float(d["threshold"]))


@cache
def load_scorer() -> Scorer:
    """The checked-in scorer (read once per process)."""
    return Scorer.from_json(MODEL_PATH.read_bytes())
