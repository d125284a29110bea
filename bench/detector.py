"""The follow-up detector on the sealed halves of every real source, then on the old fixtures.

    python bench/detector.py [--feedback-git DIR]

1. ``sources``: for each real labelled source, its sealed ``eval`` half (nothing is fitted, tuned
   or thresholded on it): ``codechat`` (follow-ups to a code assistant, ingest/detector/real.py) and
   ``feedback`` (open dialogue with a bot or a knowledgeable partner, annotated by three people,
   ingest/detector/feedback.py; needs a clone of the study, ``--feedback-git`` or
   ``$RATCHET_FEEDBACK_GIT``). Per source and per scorer - the detector, plain VADER (the compound
   score of the whole message, negated) and a plain lexicon count (VADER's word list without
   VADER's rules: negative minus positive words per word) - the AUC of dissatisfied against
   satisfied turns and against all other turns with a 95% bootstrap interval that resamples
   *conversations* (2,000 resamples, seed 0), the precision at recall 0.5, and for the detector
   the flag rate, precision and recall of its decision. Both sources label a turn 1 or 0 only,
   so "satisfied" and "all others" are the same turns here; both figures are kept so that a
   source with a neutral class reads the same way. ``leave_one_source_out``: the same sealed
   half scored by a model fitted (with the checked-in model's penalty and rules) on the fit halves
   of every *other* source only, with its interval. ``no_openers``: turns whose first word is
   "No" / "Nope" / "Nah" that are dissatisfied, against the satisfied turns (AUC, or null when
   there are none). ``pooled``: every source's sealed half together (the interval resamples
   conversations of all sources).
2. ``throughput``: turns scored per CPU second on one core (every labelled turn of both sources,
   three passes).
3. ``labels``: Cohen's kappa of the two labelling passes of the code-assistant source.
4. Secondary: ``fixture_heldout`` (hand-written by ratchet devs, tests/fixtures), ``generated``
   (the training grammar, seed 7) and ``simulator`` (2,000 simulated outcomes, pass rate 0.5, a
   fifth of the failures malformed, latency 100-3,000 ms, 2-40 tokens; seed 0: each follow-up the
   default ``SignalPolicy`` plans becomes a Followup event joined into a reward row by
   ``ingest.join.reward_row``; ``rewards.monitors.detector_agreement`` compares the detector with
   the simulator's flag).

Goals (fixed before measuring): on every source, the detector's sealed AUC and its
leave-one-source-out AUC at least VADER's AUC minus 0.01; pooled AUC >= 0.85; "No"-openers
against satisfied turns AUC >= 0.80.
Writes ``bench/results/detector.json``. Measures; chooses nothing.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _auc(scores: list[float], labels: list[int]) -> float:
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def _clustered_ci(scores: list[float], labels: list[int], groups: list[str], n: int = 2000,
                  seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the AUC when whole conversations are resampled."""
    by: dict[str, list[int]] = {}
    for i, g in enumerate(groups):
        by.setdefault(g, []).append(i)
    keys, rng, boots = sorted(by), random.Random(seed), []
    for _ in range(n):
        idx = [i for _ in keys for i in by[keys[rng.randrange(len(keys))]]]
        ys = [labels[i] for i in idx]
        if 0 < sum(ys) < len(ys):
            boots.append(_auc([scores[i] for i in idx], ys))
    boots.sort()
    return boots[int(0.025 * len(boots))], boots[int(0.975 * len(boots)) - 1]


def _precision_at_recall(scores: list[float], labels: list[int], recall: float = 0.5) -> float:
    """Precision at the highest threshold whose recall reaches ``recall`` (ties kept together)."""
    need = recall * sum(labels)
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    tp = fp = 0
    k = 0
    while k < len(order):
        s = scores[order[k]]
        while k < len(order) and scores[order[k]] == s:
            tp += labels[order[k]]
            fp += 1 - labels[order[k]]
            k += 1
        if tp >= need:
            break
    return tp / max(1, tp + fp)


def _plain_vader(text: str) -> float:
    from ingest.detector.lexicon import _analyzer

    return -_analyzer().polarity_scores(text)["compound"]


def _lexicon_count(text: str) -> float:
    """(negative - positive words of VADER's word list) per word: no negation, no booster, no
    contrast - a plain sentiment lexicon."""
    from ingest.detector.features import words
    from ingest.detector.lexicon import _analyzer

    lex = _analyzer().lexicon
    ws = [w for w in words(text) if w not in ("?", "!")]
    val = [lex.get(w, 0.0) for w in ws]
    return (sum(v < 0 for v in val) - sum(v > 0 for v in val)) / max(1, len(ws))


def _scorer_figures(scores: list[float], y: list[int], groups: list[str]) -> dict:
    lo, hi = _clustered_ci(scores, y, groups)
    auc = round(_auc(scores, y), 4)
    return {"auc_vs_satisfied": auc, "auc_vs_all": auc, "ci_low": round(lo, 4),
            "ci_high": round(hi, 4),
            "precision_at_recall_0.5": round(_precision_at_recall(scores, y), 4)}


def source_items(name: str, split: str, git: Path | None):
    """(text, prompt, response, label, conversation) of one source's split."""
    from ingest.detector.train import source_items as items

    return items(name, split, git)


def _no_opener(text: str) -> bool:
    from ingest.detector.features import words

    ws = words(text)
    return bool(ws) and ws[0] in ("no", "nope", "nah")


def _no_opener_figures(scores: list[float], items) -> dict:
    """Dissatisfied "No"-openers against satisfied turns."""
    idx = [i for i, it in enumerate(items) if not it[3] or _no_opener(it[0])]
    y = [items[i][3] for i in idx]
    n_pos = sum(y)
    if not n_pos or n_pos == len(y):
        return {"dissatisfied_no_openers": n_pos,
                "all_no_openers": sum(_no_opener(it[0]) for it in items), "auc": None}
    lo, hi = _clustered_ci([scores[i] for i in idx], y, [items[i][4] for i in idx])
    return {"dissatisfied_no_openers": n_pos,
            "all_no_openers": sum(_no_opener(it[0]) for it in items),
            "auc": round(_auc([scores[i] for i in idx], y), 4), "ci_low": round(lo, 4),
            "ci_high": round(hi, 4)}


def _loso_scores(name: str, sealed, git: Path | None) -> list[float]:
    """Scores of ``sealed`` (one source's eval half) from a model fitted, with the checked-in
    model's penalty and rules, on the fit halves of every other source."""
    from ingest.detector.scorer import load_scorer
    from ingest.detector.train import (
        SOURCES,
        Config,
        detector_scores,
        featurise,
        logits,
        platt,
        rows_of,
        train_once,
    )

    scorer = load_scorer()
    cfg = Config(json.loads((ROOT / "ingest/detector/model.json").read_text())["trained_on"]
                 ["l2"], scorer.rules, scorer.strict_rules)
    others = [r for r in rows_of("dev", git) if r.source != name]
    assert len({r.source for r in others}) == len(SOURCES) - 1
    b, w = train_once(others, cfg)
    a, c = platt(logits(others, b, w), [r.label for r in others])
    rows = [featurise(t, p, r, y, g, name) for t, p, r, y, g in sealed]
    return detector_scores(rows, logits(rows, b, w), cfg.strict, a, c)


def _source_figures(name: str, items, git: Path | None) -> dict:
    from ingest.detector import detect

    y = [it[3] for it in items]
    groups = [it[4] for it in items]
    verdicts = [detect(t, p, r) for t, p, r, _, _ in items]
    s = [v.score for v in verdicts]
    d = [v.dissatisfied for v in verdicts]
    tp = sum(a and b for a, b in zip(d, y))
    fp = sum(a and not b for a, b in zip(d, y))
    det = _scorer_figures(s, y, groups)
    vader = _scorer_figures([_plain_vader(it[0]) for it in items], y, groups)
    lexicon = _scorer_figures([_lexicon_count(it[0]) for it in items], y, groups)
    det.update({"flag_rate": round(sum(d) / len(d), 4),
                "precision": round(tp / max(1, tp + fp), 4),
                "recall": round(tp / max(1, sum(y)), 4),
                "strict_rule_share": round(sum(bool(v.rules) for v in verdicts) / len(d), 4)})
    loso = _scorer_figures(_loso_scores(name, items, git), y, groups)
    return {"n": len(items), "conversations": len(set(groups)), "dissatisfied": sum(y),
            "detector": det, "vader": vader, "lexicon": lexicon,
            "leave_one_source_out": loso,
            "no_openers": {"detector": _no_opener_figures(s, items),
                           "vader": _no_opener_figures([_plain_vader(it[0]) for it in items],
                                                       items)},
            "detector_minus_vader_auc": round(det["auc_vs_satisfied"]
                                              - vader["auc_vs_satisfied"], 4),
            "loso_minus_vader_auc": round(loso["auc_vs_satisfied"]
                                          - vader["auc_vs_satisfied"], 4)}


def _pooled(items) -> dict:
    from ingest.detector import detect

    y = [it[3] for it in items]
    groups = [it[4] for it in items]
    s = [detect(t, p, r).score for t, p, r, _, _ in items]
    return {"n": len(items), "dissatisfied": sum(y), "detector": _scorer_figures(s, y, groups),
            "vader": _scorer_figures([_plain_vader(it[0]) for it in items], y, groups),
            "lexicon": _scorer_figures([_lexicon_count(it[0]) for it in items], y, groups),
            "no_openers": _no_opener_figures(s, items)}


def _throughput(items, passes: int = 3) -> dict:
    import time

    from ingest.detector import detect

    t0 = time.process_time()
    for _ in range(passes):
        for t, p, r, _, _ in items:
            detect(t, p, r)
    cpu = time.process_time() - t0
    return {"turns": len(items) * passes, "cpu_s": round(cpu, 3),
            "turns_per_cpu_s": round(len(items) * passes / cpu, 1)}


def _kappa() -> dict:
    from ingest.detector.real import LABELS, LABELS_PASS2

    def read(path: Path) -> dict[str, int]:
        return {json.loads(x)["id"]: int(json.loads(x)["label"])
                for x in path.read_text().splitlines() if x.strip()}

    a, b = read(LABELS), read(LABELS_PASS2)
    common = sorted(set(a) & set(b))
    n = len(common)
    po = sum(a[k] == b[k] for k in common) / n
    pa, pb = sum(a[k] for k in common) / n, sum(b[k] for k in common) / n
    pe = pa * pb + (1 - pa) * (1 - pb)
    return {"n": n, "agreement": round(po, 4), "kappa": round((po - pe) / (1 - pe), 4),
            "annotators": "one (both passes by the same person; an upper bound)"}


def _split_figures(rows: list[dict]) -> dict:
    from ingest.detector import detect

    verdicts = [detect(r["text"], r["prompt"], r["response"]) for r in rows]
    y = [int(r["label"]) for r in rows]
    s = [v.score for v in verdicts]
    d = [v.dissatisfied for v in verdicts]
    tp = sum(a and b for a, b in zip(d, y))
    fp = sum(a and not b for a, b in zip(d, y))
    fn = sum(b and not a for a, b in zip(d, y))
    ruled = [bool(v.rules) for v in verdicts]
    rule_tp = sum(a and b for a, b in zip(ruled, y))
    rng = random.Random(0)
    boots = []
    for _ in range(1000):
        idx = [rng.randrange(len(rows)) for _ in rows]
        ys = [y[i] for i in idx]
        if 0 < sum(ys) < len(ys):
            boots.append(_auc([s[i] for i in idx], ys))
    boots.sort()
    return {
        "n": len(rows), "positives": sum(y), "auc": round(_auc(s, y), 4),
        "auc_ci95": [round(boots[int(0.025 * len(boots))], 4),
                     round(boots[int(0.975 * len(boots))], 4)],
        "precision": round(tp / max(1, tp + fp), 4), "recall": round(tp / max(1, tp + fn), 4),
        "f1": round(2 * tp / max(1, 2 * tp + fp + fn), 4),
        "rule_fired_share": round(sum(ruled) / len(rows), 4),
        "rule_precision": round(rule_tp / max(1, sum(ruled)), 4),
        "rule_recall": round(rule_tp / max(1, sum(y)), 4),
    }


def _simulator_agreement(n: int = 2000, seed: int = 0) -> dict:
    from datetime import timedelta

    import pyarrow as pa

    from ingest.join import reward_row
    from ingest.kafka_io import KafkaRecord
    from ingest.parse import classify
    from ingest.schema import REWARD_SCHEMA, TOPICS, Followup
    from ingest.synthetic import T0, completion
    from rewards.config import RewardConfig
    from rewards.monitors import detector_agreement
    from simulation.signal_policy import Outcome, SignalPolicy, followup

    def item(event, offset):
        ts = int(event.event_time.timestamp() * 1000)
        rec = KafkaRecord(TOPICS[event.kind], 0, offset, None, event.to_json(), ts)
        return classify(rec, max_event_bytes=10**6, max_future_skew_s=60, max_age_s=86400)[1]

    rng, policy, rows = random.Random(seed), SignalPolicy(), []
    for i in range(n):
        passed = rng.random() < 0.5
        outcome = Outcome(passed, not passed and rng.random() < 0.2, False,
                          rng.uniform(100, 3000), rng.randint(2, 40))
        reply = followup(outcome, policy, rng)
        if reply is None:
            continue
        rid = f"sim-{i}"
        fu = Followup(event_id=f"fu-{i}", response_id=rid, event_time=T0 + timedelta(seconds=9),
                      text=reply[0], dissatisfied=reply[1])
        rows.append(reward_row(rid, item(completion(rid, T0), 2 * i), [item(fu, 2 * i + 1)],
                               RewardConfig()))
    out = detector_agreement(pa.Table.from_pylist(rows, schema=REWARD_SCHEMA))
    return {"outcomes": n, "seed": seed, **{k: round(v, 4) for k, v in out.items()}}


def main() -> None:
    import argparse
    import os
    import platform
    import subprocess
    from datetime import UTC, datetime

    from ingest.detector import detector_version
    from ingest.detector.scorer import load_scorer
    from ingest.detector.train import feedback_git

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--feedback-git", type=Path, default=None)
    args = ap.parse_args()
    git = feedback_git(args.feedback_git)
    if git is None:
        raise SystemExit("the feedback source needs its clone: --feedback-git DIR or "
                         "$RATCHET_FEEDBACK_GIT")
    from ingest.detector.train import SOURCES

    sealed = {name: source_items(name, "eval", git) for name in SOURCES}
    sources = {name: _source_figures(name, items, git) for name, items in sealed.items()}
    pooled = _pooled([it for items in sealed.values() for it in items])
    every = [it for name in SOURCES for split in ("dev", "eval")
             for it in source_items(name, split, git)]
    no_aucs = [v["no_openers"]["detector"]["auc"] for v in sources.values()]
    no_aucs = [a for a in [*no_aucs, pooled["no_openers"]["auc"]] if a is not None]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    out = {
        "sources": sources, "pooled": pooled,
        "goals": {
            "sealed_at_least_vader_minus_0.01_every_source": all(
                v["detector_minus_vader_auc"] >= -0.01 for v in sources.values()),
            "loso_at_least_vader_minus_0.01_every_source": all(
                v["loso_minus_vader_auc"] >= -0.01 for v in sources.values()),
            "pooled_auc_at_least_0.85": pooled["detector"]["auc_vs_satisfied"] >= 0.85,
            "no_openers_auc_at_least_0.80": (all(a >= 0.80 for a in no_aucs) if no_aucs
                                             else None),
        },
        "throughput": _throughput(every),
        "labels": _kappa(), "detector_version": detector_version(),
        "threshold": load_scorer().threshold,
        "measured": {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "commit": commit,
                     "machine": f"{os.cpu_count()}-core machine ({platform.machine()})",
                     "load_1m": round(os.getloadavg()[0], 2)},
    }
    fixture = ROOT / "tests/fixtures/followups_labelled.jsonl"
    rows = [json.loads(line) for line in fixture.read_text().splitlines() if line.strip()]
    out["fixture_heldout"] = _split_figures([r for r in rows if r["split"] == "heldout"])
    out["generated"] = _split_figures([r for r in rows if r["split"] == "generated"])
    out["simulator"] = _simulator_agreement()
    print(json.dumps(out, indent=1))
    (ROOT / "bench/results/detector.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
