"""The follow-up detector on the labelled fixture: AUC, precision and recall at its threshold.

    python bench/detector.py

Reads ``tests/fixtures/followups_labelled.jsonl`` and reports, per split (``heldout``:
hand-written after the generator was fixed; ``generated``: the training grammar, seed 7), the
AUC with a bootstrap 95% interval (1000 resamples, seed 0), precision/recall/F1 of the decision,
the precision of the rule tier alone and how often it fires. Then ``simulator``: 2,000 simulated
outcomes (pass rate 0.5, a fifth of the failures malformed, latency 100-3,000 ms, 2-40 tokens;
seed 0) go through the default ``SignalPolicy``; each follow-up it plans becomes a Followup event
joined into a reward row by ``ingest.join.reward_row``, and ``rewards.monitors.detector_agreement``
compares the detector with the simulator's flag. Writes ``bench/results/detector.json``.
Measures; chooses nothing.
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

    from deploy.signal_policy import Outcome, SignalPolicy, followup
    from ingest.join import reward_row
    from ingest.kafka_io import KafkaRecord
    from ingest.parse import classify
    from ingest.schema import REWARD_SCHEMA, TOPICS, Followup
    from ingest.synthetic import T0, completion
    from rewards.config import RewardConfig
    from rewards.monitors import detector_agreement

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
    from ingest.detector import detector_version
    from ingest.detector.scorer import load_scorer

    fixture = ROOT / "tests/fixtures/followups_labelled.jsonl"
    rows = [json.loads(line) for line in fixture.read_text().splitlines() if line.strip()]
    out = {"detector_version": detector_version(), "threshold": load_scorer().threshold}
    for split in ("heldout", "generated"):
        out[split] = _split_figures([r for r in rows if r["split"] == split])
    out["simulator"] = _simulator_agreement()
    print(json.dumps(out, indent=1))
    (ROOT / "bench/results/detector.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
