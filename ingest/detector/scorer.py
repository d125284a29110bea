"""The learned tier: logistic regression over hashed n-grams, parameters read from ``model.json``.

``Scorer.probability(text, prompt, response)`` is ``sigmoid(bias + sum_i w_i x_i)`` over the
features of ingest/detector/features.py. The weights are checked in (``model.json``, written by
``python -m ingest.detector.train``); inference is pure Python.

Deliberately left out: training (train.py) and the rules (rules.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ingest.detector.features import DIMS, featurize

MODEL_PATH = Path(__file__).with_name("model.json")


@dataclass(frozen=True)
class Scorer:
    """Logistic-regression weights over ``DIMS`` hashed buckets and the decision threshold."""

    bias: float
    weights: dict[int, float]
    threshold: float

    def probability(
        self, text: str, prompt: str | None = None, response: str | None = None
    ) -> float:
        x = featurize(text, prompt, response)
        z = self.bias + sum(self.weights.get(i, 0.0) * v for i, v in x.items())
        return 1.0 / (1.0 + math.exp(-z)) if z > -500 else 0.0

    @classmethod
    def from_json(cls, raw: bytes) -> Scorer:
        d = json.loads(raw)
        if d["dims"] != DIMS:
            raise ValueError(f"model.json has dims={d['dims']}, features use {DIMS}")
        return cls(float(d["bias"]), {int(k): float(v) for k, v in d["weights"].items()},
                   float(d["threshold"]))


@cache
def load_scorer() -> Scorer:
    """The checked-in scorer (read once per process)."""
    return Scorer.from_json(MODEL_PATH.read_bytes())
