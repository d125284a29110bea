"""Fit the follow-up detector's model and write ``model.json``.

    python -m ingest.detector.train [--feedback-git DIR] [--out PATH] [--report PATH]

Training data: the fit halves (``dev``) of every real labelled source (``SOURCES``: the
code-assistant follow-ups, ingest/detector/real.py, and the open-dialogue feedback turns,
ingest/detector/feedback.py, read from a clone given by ``--feedback-git`` or
``$RATCHET_FEEDBACK_GIT``), each source weighing the same in total. No sealed half (``eval``) is
read, and nothing generated: every weight comes from human labels.

Steps:
1. choose the L2 penalty by the *worst* AUC over every source, each measured twice: fitted
   without that whole source (``leave_source_out``: a kind of conversation the model never saw)
   and by 5-fold cross-validation grouped by conversation; ties within ``WORST_MARGIN`` go to
   the best mean;
2. keep each hand rule only for a measured gain on held-out sources: for every rule family, the
   mean leave-one-source-out AUC with the rule as a strict decision, as a feature only, and
   dropped; a rule stays strict only when that beats feature-only, and stays at all only when
   that beats dropping it (``rule_gains`` in the report);
3. fit a Platt calibration ``(a, c)`` on the out-of-fold logits of all fit rows;
4. pick the smallest decision threshold whose pooled out-of-fold precision reaches
   ``TARGET_PRECISION``;
5. refit on all fit rows and write the weights.

Logistic regression with full-batch Adam in numpy over the named features (scorer.DENSE). The
weights in ``scorer.SIGNS`` are projected onto their sign after every step.
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

from ingest.detector.rules import RULES
from ingest.detector.scorer import DENSE, MODEL_FORMAT, MODEL_PATH, SIGNS, dense_features

SOURCES = ("codechat", "feedback")
"""Every real labelled source (docs/FOLLOWUP_LABELS.md)."""
L2S = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
"""Candidate L2 penalties."""
START_STRICT = ("error_pasted", "still_failing", "wrong", "does_not_work", "misunderstood",
                "regenerate", "unhelpful", "too_slow", "no_correction")
"""Rule families tried as decisions by themselves (step 2 keeps those that earn it)."""
FOLDS = 5
WORST_MARGIN = 0.01
"""L2 candidates whose worst AUC is within this of the best worst AUC count as tied."""
TARGET_PRECISION = 0.8
"""The decision threshold is the smallest whose pooled out-of-fold precision reaches this."""
FEEDBACK_ENV = "RATCHET_FEEDBACK_GIT"
"""Environment variable naming a clone of the open-dialogue feedback study (feedback.py)."""
REPORT_PATH = Path(__file__).resolve().parents[2] / "bench/results/detector_train.json"


@dataclass(frozen=True)
class Row:
    """One labelled message, featurised once (every rule family evaluated)."""

    dense: dict[str, float]
    label: int
    group: str
    source: str

    @property
    def fired(self) -> tuple[str, ...]:
        return tuple(k[5:] for k in self.dense if k.startswith("rule:"))


@dataclass(frozen=True)
class Config:
    """What a fit uses: the penalty, the rules kept as features and those that decide."""

    l2: float
    rules: tuple[str, ...]
    strict: tuple[str, ...]

    def columns(self) -> list[str]:
        return [k for k in DENSE if not k.startswith("rule:") or k[5:] in self.rules]


def featurise(text: str, prompt: str | None, response: str | None, label: int, group: str,
              source: str) -> Row:
    return Row(dense_features(text, prompt, response), label, group, source)


def design(rows: Sequence[Row], columns: Sequence[str]) -> np.ndarray:
    """Feature matrix ``(n, len(columns))``."""
    col = {k: i for i, k in enumerate(columns)}
    x = np.zeros((len(rows), len(columns)))
    for i, r in enumerate(rows):
        for k, v in r.dense.items():
            if k in col:
                x[i, col[k]] = v
    return x


def fit(x: np.ndarray, y: np.ndarray, weight: np.ndarray, columns: Sequence[str], l2: float,
        steps: int = 600, lr: float = 0.05) -> tuple[np.ndarray, float]:
    """Weights and bias minimising weighted mean log loss + ``l2 * |w|^2 / 2`` (Adam), the
    weights named in ``SIGNS`` held to their sign. Shapes: ``x`` (n, d), ``y``, ``weight`` (n,);
    returned ``w`` (d,)."""
    weight = weight / weight.sum()
    d = x.shape[1]
    theta = np.zeros(d + 1)
    signs = np.zeros(d + 1)
    for i, name in enumerate(columns):
        signs[i] = SIGNS.get(name, 0.0)
    m, v = np.zeros_like(theta), np.zeros_like(theta)
    for t in range(1, steps + 1):
        z = x @ theta[:-1] + theta[-1]
        p = 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))
        r = (p - y) * weight
        grad = np.empty_like(theta)
        grad[:-1] = x.T @ r + l2 * theta[:-1]
        grad[-1] = r.sum()
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad**2
        theta -= lr * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        theta[signs * theta < 0] = 0.0
    return theta[:-1], float(theta[-1])


def source_weights(rows: Sequence[Row]) -> np.ndarray:
    """Each source weighs the same in total."""
    per = Counter(r.source for r in rows)
    return np.array([1.0 / per[r.source] for r in rows])


def train_once(rows: Sequence[Row], cfg: Config) -> tuple[float, dict[str, float]]:
    """(bias, weights by feature name) fitted on ``rows``."""
    cols = cfg.columns()
    w, b = fit(design(rows, cols), np.array([r.label for r in rows], dtype=float),
               source_weights(rows), cols, cfg.l2)
    return b, dict(zip(cols, (float(x) for x in w)))


def logits(rows: Sequence[Row], b: float, weights: dict[str, float]) -> list[float]:
    """Uncalibrated logits of ``rows`` (a rule missing from ``weights`` adds nothing)."""
    return [b + sum(weights.get(k, 0.0) * v for k, v in r.dense.items()) for r in rows]


def auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """P(random positive outscores random negative), ties one half."""
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def detector_scores(rows: Sequence[Row], z: Sequence[float], strict: Sequence[str],
                    a: float = 1.0, c: float = 0.0) -> list[float]:
    """Scores of the whole detector: strict rule hits map to [RULE_FLOOR, 1], the rest to p."""
    from ingest.detector import RULE_FLOOR

    p = [1.0 / (1.0 + math.exp(-max(-500.0, min(500.0, a * zi + c)))) for zi in z]
    return [RULE_FLOOR + (1 - RULE_FLOOR) * pi if set(r.fired) & set(strict) else pi
            for r, pi in zip(rows, p)]


def _fold(group: str) -> int:
    return hashlib.sha256(f"fold:{group}".encode()).digest()[0] % FOLDS


def out_of_fold(rows: Sequence[Row], cfg: Config) -> list[float]:
    """Out-of-fold logits of every row (folds grouped by conversation)."""
    z = [0.0] * len(rows)
    for k in range(FOLDS):
        b, w = train_once([r for r in rows if _fold(r.group) != k], cfg)
        idx = [i for i, r in enumerate(rows) if _fold(r.group) == k]
        for i, zi in zip(idx, logits([rows[i] for i in idx], b, w)):
            z[i] = zi
    return z


def leave_source_out(rows: Sequence[Row], cfg: Config) -> list[float]:
    """Logits of every row from a model fitted without its whole source."""
    z = [0.0] * len(rows)
    for src in sorted({r.source for r in rows}):
        b, w = train_once([r for r in rows if r.source != src], cfg)
        idx = [i for i, r in enumerate(rows) if r.source == src]
        for i, zi in zip(idx, logits([rows[i] for i in idx], b, w)):
            z[i] = zi
    return z


def per_source_auc(rows: Sequence[Row], scores: Sequence[float]) -> dict[str, float]:
    out = {}
    for src in sorted({r.source for r in rows}):
        idx = [i for i, r in enumerate(rows) if r.source == src]
        out[src] = auc([scores[i] for i in idx], [rows[i].label for i in idx])
    return out


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


def threshold_for_precision(scores: Sequence[float], y: Sequence[int],
                            target: float = TARGET_PRECISION) -> tuple[float, float, float]:
    """(threshold, precision, recall) of ``score >= threshold``: the smallest threshold on a 0.01
    grid whose precision reaches ``target`` (the largest-precision one if none does)."""
    best = None
    for th in np.arange(0.05, 0.991, 0.01):
        pred = [s >= th for s in scores]
        tp = sum(p and t for p, t in zip(pred, y))
        prec = tp / max(1, sum(pred))
        rec = tp / max(1, sum(y))
        if prec >= target:
            return round(float(th), 2), prec, rec
        if best is None or prec > best[1]:
            best = (round(float(th), 2), prec, rec)
    return best


def feedback_git(arg: Path | None) -> Path | None:
    """The clone of the open-dialogue feedback study: ``arg``, else ``$RATCHET_FEEDBACK_GIT``."""
    if arg is not None:
        return arg
    env = os.environ.get(FEEDBACK_ENV)
    return Path(env) if env else None


def source_items(name: str, split: str, git: Path | None
                 ) -> list[tuple[str, str | None, str | None, int, str]]:
    """(text, prompt, response, label, conversation) of one source's split (``dev``: the fit
    half, ``eval``: the sealed half)."""
    if name == "codechat":
        from ingest.detector.real import labelled

        return [(f.text, f.prompt, None, f.label, f.conversation_id) for f in labelled(split)]
    if name == "feedback":
        if git is None:
            raise SystemExit(f"the open-dialogue source needs its clone: --feedback-git DIR or "
                             f"${FEEDBACK_ENV}")
        from ingest.detector.feedback import labelled as feedback_labelled

        return [(t.text, t.prompt, t.response, t.label, t.conversation_id)
                for t in feedback_labelled(git, split)]
    raise ValueError(f"unknown source {name!r}")


def rows_of(split: str, git: Path | None) -> list[Row]:
    """Featurised rows of every source's ``split``."""
    return [featurise(t, p, r, y, g, name) for name in SOURCES
            for t, p, r, y, g in source_items(name, split, git)]


def loso_mean(rows: Sequence[Row], cfg: Config) -> float:
    """Mean over sources of the AUC fitted without that source (the held-out measure)."""
    by = per_source_auc(rows, detector_scores(rows, leave_source_out(rows, cfg), cfg.strict))
    return sum(by.values()) / len(by)


def choose_rules(rows: Sequence[Row], l2: float) -> tuple[Config, dict[str, dict[str, float]]]:
    """Step 2: each rule family as strict / feature / dropped, by held-out AUC, one at a time
    in ``RULES`` order, each step starting from the previous choice."""
    cfg = Config(l2, tuple(RULES), START_STRICT)
    gains: dict[str, dict[str, float]] = {}
    for rule in RULES:
        strict = tuple(s for s in cfg.strict if s != rule)
        feature = Config(l2, cfg.rules, strict)
        dropped = Config(l2, tuple(r for r in cfg.rules if r != rule), strict)
        m_feature, m_dropped = loso_mean(rows, feature), loso_mean(rows, dropped)
        g = {"feature_minus_dropped": round(m_feature - m_dropped, 4),
             "fires_in_fit_rows": sum(rule in r.fired for r in rows)}
        if rule in cfg.strict:
            m_strict = loso_mean(rows, cfg)
            g["strict_minus_feature"] = round(m_strict - m_feature, 4)
            if m_strict > m_feature and m_strict > m_dropped:
                gains[rule] = {**g, "kept": "strict"}
                continue
        if m_feature > m_dropped:
            cfg, kept = feature, "feature"
        else:
            cfg, kept = dropped, "dropped"
        gains[rule] = {**g, "kept": kept}
    return cfg, gains


def choose_l2(rows: Sequence[Row]) -> tuple[float, dict]:
    """Step 1, with every rule a feature and the starting strict rules."""
    table = {}
    for l2 in L2S:
        cfg = Config(l2, tuple(RULES), START_STRICT)
        cv = per_source_auc(rows, detector_scores(rows, out_of_fold(rows, cfg), cfg.strict))
        lo = per_source_auc(rows, detector_scores(rows, leave_source_out(rows, cfg), cfg.strict))
        both = [*cv.values(), *lo.values()]
        table[l2] = {"worst": min(both), "mean": sum(both) / len(both),
                     **{f"{s}_cv": round(x, 4) for s, x in cv.items()},
                     **{f"{s}_unseen": round(x, 4) for s, x in lo.items()}}
    best = max(v["worst"] for v in table.values())
    l2 = max((k for k, v in table.items() if v["worst"] >= best - WORST_MARGIN),
             key=lambda k: table[k]["mean"])
    return l2, {str(k): {kk: round(vv, 4) for kk, vv in v.items()} for k, v in table.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--feedback-git", type=Path, default=None,
                    help=f"Clone of the feedback study (default ${FEEDBACK_ENV}).")
    ap.add_argument("--out", type=Path, default=MODEL_PATH, help="Where to write the weights.")
    ap.add_argument("--report", type=Path, default=None,
                    help="Where to write the selection report (default: none, unless --out is "
                         "the checked-in model, then bench/results/detector_train.json).")
    args = ap.parse_args(argv)
    rows = rows_of("dev", feedback_git(args.feedback_git))
    y = [r.label for r in rows]
    l2, l2_table = choose_l2(rows)                        # 1. penalty
    cfg, gains = choose_rules(rows, l2)                   # 2. rules
    z = out_of_fold(rows, cfg)                            # 3. calibration
    a, c = platt(z, y)
    scores = detector_scores(rows, z, cfg.strict, a, c)   # 4. threshold
    threshold, precision, recall = threshold_for_precision(scores, y)
    b, weights = train_once(rows, cfg)                    # 5. final fit
    model = {
        "format": MODEL_FORMAT, "bias": round(b, 5), "threshold": threshold,
        "calibration": [round(a, 5), round(c, 5)],
        "rules": list(cfg.rules), "strict_rules": list(cfg.strict),
        "trained_on": {"real": "fit halves (dev) of " + ", ".join(SOURCES),
                       "n": {s: sum(r.source == s for r in rows) for s in SOURCES},
                       "l2": l2, "target_precision": TARGET_PRECISION},
        "dense": {k: round(v, 5) for k, v in weights.items() if abs(v) >= 5e-5},
    }
    args.out.write_text(json.dumps(model, indent=1) + "\n")
    report = {
        "fit_n": len(rows), "l2_selection": l2_table, "chosen_l2": l2, "rule_gains": gains,
        "rules": list(cfg.rules), "strict_rules": list(cfg.strict),
        "fit_oof_auc": {s: round(x, 4) for s, x in per_source_auc(rows, scores).items()},
        "fit_unseen_auc": {s: round(x, 4) for s, x in per_source_auc(rows, detector_scores(
            rows, leave_source_out(rows, cfg), cfg.strict)).items()},
        "calibration": [round(a, 4), round(c, 4)], "threshold": threshold,
        "fit_oof_precision": round(precision, 4), "fit_oof_recall": round(recall, 4),
    }
    print(json.dumps(report, indent=1))
    report_path = args.report or (REPORT_PATH if args.out == MODEL_PATH else None)
    if report_path is not None:
        report_path.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
