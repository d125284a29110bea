"""Train the learned tier of the follow-up detector and write ``model.json``.

    python -m ingest.detector.train [--n 6000] [--seed 1] [--l2 1e-4] [--out PATH]

Trains a logistic regression on the generated corpus (ingest/detector/corpus.py, seed ``seed``)
with full-batch gradient descent (Adam) in numpy over a CSR matrix of hashed features, then picks
the decision threshold that maximises F1 of the whole detector (rules + scorer) on a validation
corpus generated with seed ``seed + 1``. Prints training/validation figures and the new
``detector_version``. Never reads the hand-written held-out fixture.

Deliberately left out: sklearn (not a dependency; the model is twenty lines of numpy).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ingest.detector.corpus import Example, generate
from ingest.detector.features import DIMS, featurize
from ingest.detector.rules import fired_rules
from ingest.detector.scorer import MODEL_PATH


def design(examples: Sequence[Example]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR (indptr, indices, data) of the hashed features, one row per example."""
    indptr, indices, data = [0], [], []
    for e in examples:
        f = featurize(e.text, e.prompt, e.response)
        indices += list(f)
        data += list(f.values())
        indptr.append(len(indices))
    return np.array(indptr), np.array(indices, dtype=np.int64), np.array(data)


def _logits(csr, w: np.ndarray, b: float) -> np.ndarray:
    indptr, indices, data = csr
    per = data * w[indices]
    sums = np.add.reduceat(per, indptr[:-1]) if len(per) else np.zeros(len(indptr) - 1)
    sums[np.diff(indptr) == 0] = 0.0
    return sums + b


def fit(csr, y: np.ndarray, l2: float, steps: int = 600, lr: float = 0.05):
    """Weights and bias minimising mean log loss + ``l2 * |w|^2 / 2`` (Adam, full batch).

    Shapes: ``y`` (n,), returned ``w`` (DIMS,)."""
    indptr, indices, data = csr
    rows = np.repeat(np.arange(len(y)), np.diff(indptr))
    theta = np.zeros(DIMS + 1)
    m, v = np.zeros_like(theta), np.zeros_like(theta)
    for t in range(1, steps + 1):
        p = 1.0 / (1.0 + np.exp(-_logits(csr, theta[:-1], theta[-1])))
        r = (p - y) / len(y)
        grad = np.empty_like(theta)
        grad[:-1] = np.bincount(indices, weights=data * r[rows], minlength=DIMS) + l2 * theta[:-1]
        grad[-1] = r.sum()
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad**2
        theta -= lr * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    return theta[:-1], float(theta[-1])


def best_threshold(p: np.ndarray, ruled: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(threshold, F1) of ``ruled | p >= threshold`` maximising F1 over a grid."""
    best = (0.5, -1.0)
    for th in np.arange(0.05, 0.96, 0.01):
        pred = ruled | (p >= th)
        tp = float((pred & (y == 1)).sum())
        f1 = 2 * tp / max(1.0, pred.sum() + (y == 1).sum())
        if f1 > best[1]:
            best = (round(float(th), 2), f1)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=6000, help="Training examples.")
    ap.add_argument("--seed", type=int, default=1, help="Corpus seed (validation: seed + 1).")
    ap.add_argument("--l2", type=float, default=1e-4, help="L2 penalty.")
    ap.add_argument("--out", type=Path, default=MODEL_PATH, help="Where to write the weights.")
    args = ap.parse_args(argv)
    train, val = generate(args.n, args.seed), generate(args.n // 3, args.seed + 1)
    y_tr = np.array([e.label for e in train], dtype=float)
    w, b = fit(design(train), y_tr, args.l2)
    p_val = 1.0 / (1.0 + np.exp(-_logits(design(val), w, b)))
    y_val = np.array([e.label for e in val])
    ruled = np.array([bool(fired_rules(e.text, e.prompt, e.response)) for e in val])
    threshold, f1 = best_threshold(p_val, ruled, y_val)
    acc_tr = float(((_logits(design(train), w, b) > 0) == (y_tr == 1)).mean())
    model = {
        "dims": DIMS,
        "bias": round(b, 5),
        "threshold": threshold,
        "trained_on": {"corpus": "ingest/detector/corpus.py", "n": args.n, "seed": args.seed,
                       "l2": args.l2, "validation_seed": args.seed + 1},
        "weights": {str(i): round(float(x), 4) for i, x in enumerate(w) if abs(x) >= 5e-4},
    }
    args.out.write_text(json.dumps(model, separators=(",", ":")) + "\n")
    from ingest.detector import detector_version

    version = detector_version() if args.out == MODEL_PATH else "(not the checked-in weights)"
    print(json.dumps({"train_examples": len(train), "validation_examples": len(val),
                      "train_accuracy": round(acc_tr, 4), "validation_f1": round(f1, 4),
                      "threshold": threshold, "nonzero_weights": len(model["weights"]),
                      "detector_version": version}))


if __name__ == "__main__":
    main()
