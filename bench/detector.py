"""The follow-up detector on real human follow-ups first, then on the older fixtures.

    python bench/detector.py

1. ``real_heldout``: the ``eval`` half of the real follow-ups (ingest/detector/data, labelled by
   hand following docs/FOLLOWUP_LABELS.md; nothing is fitted or tuned on it). AUC with a 95%
   bootstrap interval that resamples *conversations* (2,000 resamples, seed 0), precision /
   recall / F1 of the decision, the rule tier's precision and how often it fires; the same for
   two controls on the same items: VADER's compound score alone (negated) and the rules alone.
2. ``labels``: Cohen's kappa of the two labelling passes on their common items.
3. Secondary: ``fixture_heldout`` (hand-written by ratchet devs, tests/fixtures), ``generated``
   (the training grammar, seed 7) and ``simulator`` (2,000 simulated outcomes, pass rate 0.5, a
   fifth of the failures malformed, latency 100-3,000 ms, 2-40 tokens; seed 0: each follow-up the
   default ``SignalPolicy`` plans becomes a Followup event joined into a reward row by
   ``ingest.join.reward_row``; ``rewards.monitors.detector_agreement`` compares the detector with
   the simulator's flag).

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


def _real_figures(split: str) -> dict:
    from ingest.detector import detect
    from ingest.detector.lexicon import sentiment
    from ingest.detector.real import labelled

    items = labelled(split)
    verdicts = [detect(f.text, f.prompt, None) for f in items]
    y = [f.label for f in items]
    groups = [f.conversation_id for f in items]
    s = [v.score for v in verdicts]
    d = [v.dissatisfied for v in verdicts]
    ruled = [bool(v.rules) for v in verdicts]
    tp = sum(a and b for a, b in zip(d, y))
    fp = sum(a and not b for a, b in zip(d, y))
    fn = sum(b and not a for a, b in zip(d, y))
    lo, hi = _clustered_ci(s, y, groups)
    vader = [-sentiment(f.text).compound for f in items]
    v_lo, v_hi = _clustered_ci(vader, y, groups)
    r_lo, r_hi = _clustered_ci([float(r) for r in ruled], y, groups)
    return {
        "n": len(items), "conversations": len(set(groups)), "positives": sum(y),
        "auc": round(_auc(s, y), 4), "ci_low": round(lo, 4), "ci_high": round(hi, 4),
        "precision": round(tp / max(1, tp + fp), 4), "recall": round(tp / max(1, tp + fn), 4),
        "f1": round(2 * tp / max(1, 2 * tp + fp + fn), 4),
        "rule_fired_share": round(sum(ruled) / len(items), 4),
        "rule_precision": round(sum(a and b for a, b in zip(ruled, y)) / max(1, sum(ruled)), 4),
        "rule_recall": round(sum(a and b for a, b in zip(ruled, y)) / max(1, sum(y)), 4),
        "control_vader_only": {"auc": round(_auc(vader, y), 4), "ci_low": round(v_lo, 4),
                               "ci_high": round(v_hi, 4)},
        "control_rules_only": {"auc": round(_auc([float(r) for r in ruled], y), 4),
                               "ci_low": round(r_lo, 4), "ci_high": round(r_hi, 4)},
    }


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
    import os
    import platform
    from datetime import UTC, datetime

    from ingest.detector import detector_version
    from ingest.detector.scorer import load_scorer

    fixture = ROOT / "tests/fixtures/followups_labelled.jsonl"
    rows = [json.loads(line) for line in fixture.read_text().splitlines() if line.strip()]
    out = {"real_heldout": _real_figures("eval"), "labels": _kappa(),
           "detector_version": detector_version(), "threshold": load_scorer().threshold,
           "measured": {"date": datetime.now(UTC).strftime("%Y-%m-%d"),
                        "machine": f"{os.cpu_count()}-core CPU box ({platform.machine()})",
                        "load_1m": round(os.getloadavg()[0], 2)}}
    out["fixture_heldout"] = _split_figures([r for r in rows if r["split"] == "heldout"])
    out["generated"] = _split_figures([r for r in rows if r["split"] == "generated"])
    out["simulator"] = _simulator_agreement()
    print(json.dumps(out, indent=1))
    (ROOT / "bench/results/detector.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
