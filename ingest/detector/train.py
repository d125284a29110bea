"""Train the learned tier of the follow-up detector and write ``model.json``.

    python -m ingest.detector.train [--n 6000] [--seed 1] [--out PATH]

Training data: the real follow-ups of the ``dev`` half (ingest/detector/real.py, labelled by
hand, docs/FOLLOWUP_LABELS.md) plus the generated corpus (ingest/detector/corpus.py, ``n``
examples with seed ``seed``), the real rows weighted so that their total weight is ``alpha``
times the generated rows' total.

Steps (the ``eval`` half is never read):
1. choose ``alpha``, the L2 penalty and the lexical cap by the sum of two AUCs of the whole
   detector (rules included): 5-fold cross-validation on ``dev`` grouped by conversation, and
   a generated validation corpus (seed ``seed + 1``, ``n // 3`` examples), so that the
   detector keeps the code-assistant complaints the grammar covers (slow, long, a wrong
   value) that few real ``dev`` follow-ups show;
2. fit a Platt calibration ``(a, c)`` on the out-of-fold logits of the real follow-ups;
3. pick the decision threshold that maximises F1 of the whole detector on those out-of-fold
   calibrated scores;
4. refit on all of ``dev`` + the generated corpus and write the weights.

Logistic regression with full-batch Adam in numpy over a CSR matrix: dense features
(scorer.DENSE) and the vocabulary (word uni/bigrams seen at least ``MIN_COUNT`` times).
Deliberately left out: sklearn (not a dependency; the model is twenty lines of numpy).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ingest.detector.corpus import generate
from ingest.detector.features import lexical_tokens
from ingest.detector.real import labelled
from ingest.detector.scorer import DENSE, MODEL_FORMAT, MODEL_PATH, dense_features

MIN_COUNT = 2
"""A token enters the vocabulary when at least this many training messages contain it."""
CAPS = (1.5, 3.0, 6.0)
"""Candidate bounds on the lexical part of the logit (words the model saw; unseen words have no
weight whatever the bound)."""
ALPHAS = (0.25, 1.0, 4.0, 16.0)
"""Candidate ratios of the real follow-ups' total training weight to the generated ones'."""
L2S = (1e-4, 1e-3, 1e-2)
FOLDS = 5


@dataclass(frozen=True)
class Row:
    """One training message, featurised once."""

    dense: dict[str, float]
    tokens: tuple[str, ...]
    label: int
    real: bool
    group: str
    ruled: bool


def featurise(text: str, prompt: str | None, response: str | None, label: int, real: bool,
              group: str) -> Row:
    d = dense_features(text, prompt, response)
    return Row(d, tuple(lexical_tokens(text)), label, real, group,
               any(k.startswith("rule:") for k in d))


def vocabulary(rows: Sequence[Row]) -> list[str]:
    counts = Counter(t for r in rows for t in set(r.tokens))
    return sorted(t for t, c in counts.items() if c >= MIN_COUNT)


def design(rows: Sequence[Row], vocab: Sequence[str]):
    """CSR (indptr, indices, data) over ``DENSE + vocab``, one row per message."""
    col = {name: i for i, name in enumerate(DENSE)}
    col.update({t: len(DENSE) + i for i, t in enumerate(vocab)})
    indptr, indices, data = [0], [], []
    for r in rows:
        for k, v in r.dense.items():
            indices.append(col[k])
            data.append(v)
        known = sorted({col[t] for t in r.tokens if t in col})
        scale = 1.0 / math.sqrt(max(1, len(r.tokens)))
        counts = Counter(col[t] for t in r.tokens if t in col)
        indices += known
        data += [counts[i] * scale for i in known]
        indptr.append(len(indices))
    return np.array(indptr), np.array(indices, dtype=np.int64), np.array(data, dtype=float)


def _logits(csr, w: np.ndarray, b: float) -> np.ndarray:
    indptr, indices, data = csr
    per = data * w[indices]
    sums = np.add.reduceat(per, indptr[:-1]) if len(per) else np.zeros(len(indptr) - 1)
    sums[np.diff(indptr) == 0] = 0.0
    return sums + b


def fit(csr, y: np.ndarray, weight: np.ndarray, dims: int, l2: float, steps: int = 500,
        lr: float = 0.05):
    """Weights and bias minimising weighted mean log loss + ``l2 * |w|^2 / 2`` (Adam).

    Shapes: ``y``, ``weight`` (n,), returned ``w`` (dims,)."""
    indptr, indices, data = csr
    rows = np.repeat(np.arange(len(y)), np.diff(indptr))
    weight = weight / weight.sum()
    theta = np.zeros(dims + 1)
    m, v = np.zeros_like(theta), np.zeros_like(theta)
    for t in range(1, steps + 1):
        p = 1.0 / (1.0 + np.exp(-_logits(csr, theta[:-1], theta[-1])))
        r = (p - y) * weight
        grad = np.empty_like(theta)
        grad[:-1] = np.bincount(indices, weights=data * r[rows], minlength=dims) + l2 * theta[:-1]
        grad[-1] = r.sum()
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad**2
        theta -= lr * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    return theta[:-1], float(theta[-1])


def _weights(rows: Sequence[Row], alpha: float) -> np.ndarray:
    real = np.array([r.real for r in rows])
    n_real, n_gen = real.sum(), (~real).sum()
    if n_gen == 0:
        return np.ones(len(rows))
    w_real = alpha * n_gen / max(1, n_real)
    return np.where(real, w_real, 1.0)


def train_once(rows: Sequence[Row], alpha: float, l2: float):
    """(bias, dense weights, vocab weights) fitted on ``rows``."""
    vocab = vocabulary(rows)
    csr = design(rows, vocab)
    y = np.array([r.label for r in rows], dtype=float)
    w, b = fit(csr, y, _weights(rows, alpha), len(DENSE) + len(vocab), l2)
    return b, dict(zip(DENSE, w[:len(DENSE)])), dict(zip(vocab, w[len(DENSE):]))


def logit_parts(row: Row, b: float, dense: dict[str, float],
                vocab: dict[str, float]) -> tuple[float, float]:
    """(dense part incl. bias, unclipped lexical part) of the uncalibrated logit."""
    lex = sum(vocab.get(t, 0.0) for t in row.tokens) / math.sqrt(max(1, len(row.tokens)))
    return b + sum(dense[k] * v for k, v in row.dense.items()), lex


def capped(parts: Sequence[tuple[float, float]], cap: float) -> list[float]:
    """Logits with the lexical part clipped to ``[-cap, cap]`` (what scorer.py computes)."""
    return [d + max(-cap, min(cap, x)) for d, x in parts]


def auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """P(random positive outscores random negative), ties one half."""
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def detector_scores(rows: Sequence[Row], z: Sequence[float], a: float = 1.0,
                    c: float = 0.0) -> list[float]:
    """Scores of the whole detector: rule hits map to [RULE_FLOOR, 1], the rest to p."""
    from ingest.detector import RULE_FLOOR

    p = [1.0 / (1.0 + math.exp(-(a * zi + c))) for zi in z]
    return [RULE_FLOOR + (1 - RULE_FLOOR) * pi if r.ruled else pi for r, pi in zip(rows, p)]


def _fold(group: str) -> int:
    return hashlib.sha256(f"fold:{group}".encode()).digest()[0] % FOLDS


def out_of_fold(dev: Sequence[Row], generated: Sequence[Row], alpha: float, l2: float):
    """Out-of-fold logit parts of every ``dev`` row (folds grouped by conversation)."""
    z = [(0.0, 0.0)] * len(dev)
    for k in range(FOLDS):
        train = [r for r in dev if _fold(r.group) != k] + list(generated)
        b, dense, vocab = train_once(train, alpha, l2)
        for i, r in enumerate(dev):
            if _fold(r.group) == k:
                z[i] = logit_parts(r, b, dense, vocab)
    return z


def platt(z: Sequence[float], y: Sequence[int]) -> tuple[float, float]:
    """(a, c) minimising log loss of sigmoid(a z + c) (Newton steps, tiny ridge)."""
    zz, yy = np.array(z), np.array(y, dtype=float)
    a, c = 1.0, 0.0
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-(a * zz + c)))
        g = np.array([((p - yy) * zz).sum(), (p - yy).sum()]) + 1e-3 * np.array([a - 1, c])
        s = p * (1 - p)
        h = np.array([[(s * zz * zz).sum(), (s * zz).sum()], [(s * zz).sum(), s.sum()]])
        a, c = np.array([a, c]) - np.linalg.solve(h + 1e-3 * np.eye(2), g)
    return float(a), float(c)


def best_threshold(scores: Sequence[float], ruled: Sequence[bool],
                   y: Sequence[int]) -> tuple[float, float]:
    """(threshold, F1) of ``ruled | score >= threshold`` maximising F1 over a grid."""
    best = (0.5, -1.0)
    for th in np.arange(0.05, 0.96, 0.01):
        pred = [r or s >= th for s, r in zip(scores, ruled)]
        tp = sum(p and t for p, t in zip(pred, y))
        f1 = 2 * tp / max(1, sum(pred) + sum(y))
        if f1 > best[1]:
            best = (round(float(th), 2), f1)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=6000, help="Generated training examples.")
    ap.add_argument("--seed", type=int, default=1, help="Generated corpus seed.")
    ap.add_argument("--out", type=Path, default=MODEL_PATH, help="Where to write the weights.")
    args = ap.parse_args(argv)
    dev = [featurise(f.text, f.prompt, None, f.label, True, f.conversation_id)
           for f in labelled("dev")]
    gen = [featurise(e.text, e.prompt, e.response, e.label, False, f"gen{i}")
           for i, e in enumerate(generate(args.n, args.seed))]
    val = [featurise(e.text, e.prompt, e.response, e.label, False, f"val{i}")
           for i, e in enumerate(generate(args.n // 3, args.seed + 1))]
    y_dev, y_val = [r.label for r in dev], [r.label for r in val]
    # 1. model selection: grouped cross-validation on dev + the generated validation corpus
    cv = {}
    for alpha in ALPHAS:
        for l2 in L2S:
            parts = out_of_fold(dev, gen, alpha, l2)
            b, dense, vocab = train_once(dev + gen, alpha, l2)
            parts_val = [logit_parts(r, b, dense, vocab) for r in val]
            for cap in CAPS:
                z = capped(parts, cap)
                cv[(alpha, l2, cap)] = (auc(detector_scores(dev, z), y_dev),
                                        auc(detector_scores(val, capped(parts_val, cap)), y_val),
                                        z)
    alpha, l2, cap = max(cv, key=lambda k: cv[k][0] + cv[k][1])
    z = cv[(alpha, l2, cap)][2]
    # 2. calibration and 3. threshold on the out-of-fold logits
    a, c = platt(z, y_dev)
    scores = detector_scores(dev, z, a, c)
    p_oof = [1.0 / (1.0 + math.exp(-(a * zi + c))) for zi in z]
    threshold, f1 = best_threshold(p_oof, [r.ruled for r in dev], y_dev)
    # 4. final fit
    b, dense, vocab = train_once(dev + gen, alpha, l2)
    model = {
        "format": MODEL_FORMAT, "bias": round(b, 5), "threshold": threshold,
        "lexical_cap": cap, "calibration": [round(a, 5), round(c, 5)],
        "trained_on": {"real": "ingest/detector/data (split dev)", "real_n": len(dev),
                       "corpus": "ingest/detector/corpus.py", "n": args.n, "seed": args.seed,
                       "validation_seed": args.seed + 1,
                       "alpha": alpha, "l2": l2, "min_count": MIN_COUNT},
        "dense": {k: round(float(v), 5) for k, v in dense.items()},
        "vocab": {k: round(float(v), 4) for k, v in sorted(vocab.items()) if abs(v) >= 5e-4},
    }
    args.out.write_text(json.dumps(model, separators=(",", ":")) + "\n")
    from ingest.detector import detector_version

    version = detector_version() if args.out == MODEL_PATH else "(not the checked-in weights)"
    print(json.dumps({
        "dev_n": len(dev), "generated_n": len(gen),
        "selection": {"alpha={},l2={},cap={}".format(*k): {"dev": round(v[0], 4),
                                                           "gen": round(v[1], 4)}
                      for k, v in cv.items()},
        "chosen": {"alpha": alpha, "l2": l2, "lexical_cap": cap},
        "dev_oof_auc": round(auc(scores, y_dev), 4),
        "calibration": [round(a, 4), round(c, 4)], "threshold": threshold,
        "dev_oof_f1": round(f1, 4), "vocab": len(model["vocab"]),
        "detector_version": version}))


if __name__ == "__main__":
    main()
