"""Train the learned tier of the follow-up detector and write ``model.json``.

    python -m ingest.detector.train [--feedback-git DIR] [--n 6000] [--seed 1] [--out PATH]

Training data: the ``dev`` halves of every real labelled source - the code-assistant follow-ups
(ingest/detector/real.py) and the open-dialogue feedback turns (ingest/detector/feedback.py,
read from a clone given by ``--feedback-git`` or ``$RATCHET_FEEDBACK_GIT``) - plus, optionally,
the generated corpus (ingest/detector/corpus.py, ``n`` examples with seed ``seed``). Each real
source gets the same total weight, ``alpha`` times the generated rows' total.

Steps (no ``eval`` half is ever read):
1. choose ``alpha``, the L2 penalty, the lexical cap and whether the generated corpus is used by
   the *worst* AUC of the whole detector (strict rules included) over every real source, each
   measured twice: 5-fold cross-validation grouped by conversation (the source seen in training)
   and fitted without that whole source (``leave_source_out``: a kind of conversation the model
   never saw, as in production). Candidates within ``WORST_MARGIN`` of the best worst AUC are
   tied; among them the best mean of those AUCs wins;
2. fit a Platt calibration ``(a, c)`` on the out-of-fold logits of all real rows;
3. pick the smallest decision threshold whose out-of-fold precision on the pooled ``dev`` rows
   is at least ``TARGET_PRECISION``;
4. refit on all ``dev`` rows (+ the generated corpus when chosen) and write the weights.

Logistic regression with full-batch Adam in numpy over a CSR matrix: dense features
(scorer.DENSE) and the vocabulary (word uni/bigrams seen at least ``MIN_COUNT`` times). The
sentiment weights are projected onto the prior's sign after every step
(``scorer.SENTIMENT_SIGNS``): a more negative message never lowers the logit.
Deliberately left out: sklearn (not a dependency; the model is twenty lines of numpy).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ingest.detector.corpus import generate
from ingest.detector.features import lexical_tokens
from ingest.detector.real import labelled
from ingest.detector.scorer import (
    DENSE,
    MODEL_FORMAT,
    MODEL_PATH,
    SENTIMENT_SIGNS,
    dense_features,
)

MIN_COUNT = 2
"""A token enters the vocabulary when at least this many training messages contain it."""
CAPS = (0.0, 0.75, 1.5)
"""Candidate bounds on the lexical part of the logit (words the model saw; unseen words have no
weight whatever the bound)."""
ALPHAS = (1.0, 4.0)
"""Candidate ratios of each real source's total training weight to the generated rows' total."""
L2S = ((1e-3, 1e-3), (1e-3, 1e-2), (1e-3, 3e-2), (1e-2, 1e-2), (1e-2, 3e-2), (3e-2, 3e-2))
"""Candidate (dense features', vocabulary's) L2 penalties."""
GENERATED = (True, False)
"""With and without the generated code-assistant corpus."""
FOLDS = 5
WORST_MARGIN = 0.025
"""Candidates whose worst-source AUC is within this of the best worst-source AUC count as tied
(the smallest ``dev`` half has 19 dissatisfied turns: an AUC's standard error there is about
0.04); among them the best mean wins."""
TARGET_PRECISION = 0.8
"""The decision threshold is the smallest whose pooled out-of-fold ``dev`` precision reaches
this."""
FEEDBACK_ENV = "RATCHET_FEEDBACK_GIT"
"""Environment variable naming a clone of the open-dialogue feedback study (feedback.py)."""


@dataclass(frozen=True)
class Row:
    """One training message, featurised once."""

    dense: dict[str, float]
    tokens: tuple[str, ...]
    label: int
    real: bool
    group: str
    ruled: bool
    """A strict rule fired (the detector's score is then at least RULE_FLOOR)."""
    source: str = "generated"


def featurise(text: str, prompt: str | None, response: str | None, label: int, real: bool,
              group: str, source: str = "generated") -> Row:
    from ingest.detector import STRICT_RULES

    d = dense_features(text, prompt, response)
    return Row(d, tuple(lexical_tokens(text)), label, real, group,
               any(k[5:] in STRICT_RULES for k in d if k.startswith("rule:")), source)


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


def fit(csr, y: np.ndarray, weight: np.ndarray, dims: int, l2: float | tuple[float, float],
        steps: int = 500,
        lr: float = 0.05):
    """Weights and bias minimising weighted mean log loss + ``l2 * |w|^2 / 2`` (Adam); ``l2``
    is one penalty or ``(dense features' penalty, vocabulary's penalty)``.

    Shapes: ``y``, ``weight`` (n,), returned ``w`` (dims,)."""
    indptr, indices, data = csr
    rows = np.repeat(np.arange(len(y)), np.diff(indptr))
    weight = weight / weight.sum()
    theta = np.zeros(dims + 1)
    l2_dense, l2_vocab = l2 if isinstance(l2, tuple) else (l2, l2)
    pen = np.full(dims, l2_vocab)
    pen[:min(dims, len(DENSE))] = l2_dense
    signs = np.zeros(dims + 1)
    for name, sign in SENTIMENT_SIGNS.items():
        if name in DENSE and DENSE.index(name) < dims:
            signs[DENSE.index(name)] = sign
    m, v = np.zeros_like(theta), np.zeros_like(theta)
    for t in range(1, steps + 1):
        p = 1.0 / (1.0 + np.exp(-_logits(csr, theta[:-1], theta[-1])))
        r = (p - y) * weight
        grad = np.empty_like(theta)
        grad[:-1] = np.bincount(indices, weights=data * r[rows], minlength=dims) + pen * theta[:-1]
        grad[-1] = r.sum()
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad**2
        theta -= lr * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        wrong = signs * theta < 0
        theta[wrong] = 0.0
    return theta[:-1], float(theta[-1])


def _weights(rows: Sequence[Row], alpha: float) -> np.ndarray:
    """Each real source totals ``alpha`` times the generated rows' total (the same total each
    when there are no generated rows); a generated row weighs 1."""
    per = Counter(r.source for r in rows if r.real)
    n_gen = sum(not r.real for r in rows)
    total = alpha * n_gen if n_gen else 1.0
    return np.array([total / per[r.source] if r.real else 1.0 for r in rows])


def train_once(rows: Sequence[Row], alpha: float, l2):
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


def out_of_fold(dev: Sequence[Row], generated: Sequence[Row], alpha: float, l2):
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


def feedback_git(arg: Path | None) -> Path | None:
    """The clone of the open-dialogue feedback study: ``arg``, else ``$RATCHET_FEEDBACK_GIT``."""
    if arg is not None:
        return arg
    env = os.environ.get(FEEDBACK_ENV)
    return Path(env) if env else None


def real_dev_rows(git: Path | None) -> list[Row]:
    """Featurised ``dev`` rows of every real source (the feedback source needs its clone)."""
    rows = [featurise(f.text, f.prompt, None, f.label, True, f.conversation_id, "codechat")
            for f in labelled("dev")]
    if git is None:
        raise SystemExit(f"the open-dialogue source needs its clone: --feedback-git DIR or "
                         f"${FEEDBACK_ENV}")
    from ingest.detector.feedback import labelled as feedback_labelled

    rows += [featurise(t.text, t.prompt, t.response, t.label, True, t.conversation_id,
                       "feedback") for t in feedback_labelled(git, "dev")]
    return rows


def leave_source_out(dev: Sequence[Row], generated: Sequence[Row], alpha: float, l2):
    """Logit parts of every ``dev`` row from a model fitted without its whole source (how the
    detector does on a kind of conversation it never saw)."""
    z = [(0.0, 0.0)] * len(dev)
    for src in sorted({r.source for r in dev}):
        b, dense, vocab = train_once([r for r in dev if r.source != src] + list(generated),
                                     alpha, l2)
        for i, r in enumerate(dev):
            if r.source == src:
                z[i] = logit_parts(r, b, dense, vocab)
    return z


def per_source_auc(rows: Sequence[Row], scores: Sequence[float]) -> dict[str, float]:
    out = {}
    for src in sorted({r.source for r in rows}):
        idx = [i for i, r in enumerate(rows) if r.source == src]
        out[src] = auc([scores[i] for i in idx], [rows[i].label for i in idx])
    return out


def threshold_for_precision(scores: Sequence[float], ruled: Sequence[bool], y: Sequence[int],
                            target: float = TARGET_PRECISION) -> tuple[float, float, float]:
    """(threshold, precision, recall) of ``ruled | score >= threshold``: the smallest threshold
    on a 0.01 grid whose precision reaches ``target`` (the largest-precision one if none does)."""
    best = None
    for th in np.arange(0.05, 0.991, 0.01):
        pred = [r or s >= th for s, r in zip(scores, ruled)]
        tp = sum(p and t for p, t in zip(pred, y))
        prec = tp / max(1, sum(pred))
        rec = tp / max(1, sum(y))
        if prec >= target:
            return round(float(th), 2), prec, rec
        if best is None or prec > best[1]:
            best = (round(float(th), 2), prec, rec)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--feedback-git", type=Path, default=None,
                    help=f"Clone of the feedback study (default ${FEEDBACK_ENV}).")
    ap.add_argument("--n", type=int, default=6000, help="Generated training examples.")
    ap.add_argument("--seed", type=int, default=1, help="Generated corpus seed.")
    ap.add_argument("--out", type=Path, default=MODEL_PATH, help="Where to write the weights.")
    args = ap.parse_args(argv)
    dev = real_dev_rows(feedback_git(args.feedback_git))
    gen = [featurise(e.text, e.prompt, e.response, e.label, False, f"gen{i}")
           for i, e in enumerate(generate(args.n, args.seed))]
    y_dev = [r.label for r in dev]
    # 1. model selection by the worst real source (grouped cross-validation on dev)
    cv = {}
    for use_gen in GENERATED:
        for alpha in (ALPHAS if use_gen else (1.0,)):
            for l2 in L2S:
                parts = out_of_fold(dev, gen if use_gen else [], alpha, l2)
                unseen = leave_source_out(dev, gen if use_gen else [], alpha, l2)
                for cap in CAPS:
                    z = capped(parts, cap)
                    by = per_source_auc(dev, detector_scores(dev, z))
                    loso = per_source_auc(dev, detector_scores(dev, capped(unseen, cap)))
                    both = [*by.values(), *loso.values()]
                    cv[(use_gen, alpha, l2, cap)] = (min(both), sum(both) / len(both), by, z,
                                                     loso)
    best_worst = max(v[0] for v in cv.values())
    near = [k for k, v in cv.items() if v[0] >= best_worst - WORST_MARGIN]
    key = max(near, key=lambda k: (round(cv[k][1], 4), cv[k][0]))
    use_gen, alpha, l2, cap = key
    z = cv[key][3]
    # 2. calibration and 3. threshold on the out-of-fold logits
    a, c = platt(z, y_dev)
    scores = detector_scores(dev, z, a, c)
    threshold, precision, recall = threshold_for_precision(scores, [r.ruled for r in dev],
                                                           y_dev)
    # 4. final fit
    b, dense, vocab = train_once(dev + (gen if use_gen else []), alpha, l2)
    model = {
        "format": MODEL_FORMAT, "bias": round(b, 5), "threshold": threshold,
        "lexical_cap": cap, "calibration": [round(a, 5), round(c, 5)],
        "trained_on": {"real": "dev halves: ingest/detector/data (codechat), "
                               "ingest/detector/feedback.py (feedback)",
                       "real_n": {s: sum(r.source == s for r in dev)
                                  for s in sorted({r.source for r in dev})},
                       "corpus": "ingest/detector/corpus.py" if use_gen else None,
                       "n": args.n if use_gen else 0, "seed": args.seed,
                       "alpha": alpha, "l2": list(l2), "min_count": MIN_COUNT,
                       "target_precision": TARGET_PRECISION},
        "dense": {k: round(float(v), 5) for k, v in dense.items()},
        "vocab": ({k: round(float(v), 4) for k, v in sorted(vocab.items()) if abs(v) >= 5e-4}
                  if cap > 0 else {}),
    }
    args.out.write_text(json.dumps(model, separators=(",", ":")) + "\n")
    from ingest.detector import detector_version

    version = detector_version() if args.out == MODEL_PATH else "(not the checked-in weights)"
    print(json.dumps({
        "dev_n": len(dev), "generated_n": len(gen) if use_gen else 0,
        "selection": {"gen={},alpha={},l2={},cap={}".format(*k): {
            "worst": round(v[0], 4), "mean": round(v[1], 4),
            **{s: round(x, 4) for s, x in v[2].items()},
            **{f"{s}_unseen": round(x, 4) for s, x in v[4].items()}} for k, v in cv.items()},
        "chosen": {"generated": use_gen, "alpha": alpha, "l2": list(l2), "lexical_cap": cap},
        "dev_oof_auc": {s: round(x, 4) for s, x in per_source_auc(dev, scores).items()},
        "calibration": [round(a, 4), round(c, 4)], "threshold": threshold,
        "dev_oof_precision": round(precision, 4), "dev_oof_recall": round(recall, 4),
        "vocab": len(model["vocab"]), "detector_version": version}))


if __name__ == "__main__":
    main()
