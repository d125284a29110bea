"""How much power would the real preset's sampled gate have at another size: a projection.

The measured figure is bench/results/aa_gate.json ``real_nulls`` (real candidates, the preset's
rule). This projects the same planted gain onto other gate designs, to choose the next one before
its nulls are run: functions per decision (a draw of the gate pool v2, or all of it) and samples
per function ``k``. Each function's sampled pass is its family's, as the first champion scored it
at the serving temperature (bench/results/pool_scores_v1.json); per decision the champion's and the
candidate's shares are Binomial(k, p) / k and Binomial(k, min(1, p + effect)) / k, independent (no
common random numbers, so the projection errs low); a family is better or worse by the sign of its
summed change, and the decision is the gate's primary test: the exact sign test over families at
one-sided 0.04. The guardrails and the pass bounds are left out (for a planted gain they rarely
decide). ``effect = 0`` projects the false-promotion rate of the same test.

    .venv/bin/python -m experiments.gate_power [--decisions 2000]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402

SCORES = ROOT / "bench" / "results" / "pool_scores_v1.json"
GATE_POOL = ROOT / "tasks" / "data" / "pools_v2" / "gate.jsonl"
OUT = ROOT / "bench" / "results" / "gate_power_projection.json"
LEVEL = 0.04
DESIGNS = [(50, 4), (50, 8), (50, 16), (141, 4), (141, 8), (141, 16)]


def families_of_draw(size: int, decision: int) -> list[str]:
    """The family of each function the preset's gate draws at ``decision`` (all at >= 141)."""
    from gating.suite import build_suite
    from ratchet.config import load_config

    suite = load_config(ROOT / "configs" / "smollm2-pyfuncs.json").gate.suite
    tasks, _ = build_suite(suite.model_copy(update={"path": GATE_POOL, "size": size}), decision)
    return [t.kind for t in tasks]


def promoted_share(families: list[str], p: dict[str, float], *, k: int, effect: float,
                   decisions: int, seed: int) -> float:
    """Share of ``decisions`` whose exact family sign test is below :data:`LEVEL`."""
    import numpy as np

    from gating.stats import mcnemar_exact

    rng = np.random.default_rng(seed)
    base = np.array([p[f] for f in families])
    names = sorted(set(families))
    index = np.array([names.index(f) for f in families])
    wins = 0
    for _ in range(decisions):
        champ = rng.binomial(k, base) / k
        cand = rng.binomial(k, np.minimum(1.0, base + effect)) / k
        by_family = np.bincount(index, weights=cand - champ, minlength=len(names))
        better, worse = int((by_family > 1e-12).sum()), int((by_family < -1e-12).sum())
        wins += mcnemar_exact(better, worse) < LEVEL
    return wins / decisions


def project(decisions: int, effect: float) -> dict:
    scores = json.loads(SCORES.read_text())["pools"]["gate"]["per_family"]
    p = {f: v["sampled_0.8"] for f, v in scores.items()}
    rows = []
    for size, k in DESIGNS:
        fams = families_of_draw(size, 0)
        rows.append({"functions": len(fams), "families": len(set(fams)), "k": k,
                     "decodes_per_function": k + 1,
                     f"power_{effect:.2f}": promoted_share(fams, p, k=k, effect=effect,
                                                           decisions=decisions, seed=size * k),
                     "false_promotion": promoted_share(fams, p, k=k, effect=0.0,
                                                       decisions=decisions, seed=size * k + 1)})
        print(f"{rows[-1]['functions']:>4} functions {rows[-1]['families']:>3} families k {k:>2}:"
              f" power {rows[-1][f'power_{effect:.2f}']:.2f}, "
              f"false promotion {rows[-1]['false_promotion']:.3f}", flush=True)
    return {"date": provenance.now(), "commit": provenance.commit(),
            "machine": provenance.machine(), "effect": effect, "decisions": decisions,
            "level": LEVEL, "source": "pool_scores_v1.json gate per_family sampled_0.8",
            "note": "a projection (binomial sampling, no common random numbers, the primary "
            "sign test only), not a measurement; aa_gate.json real_nulls is the measurement",
            "designs": rows}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m experiments.gate_power",
                                description=__doc__.splitlines()[0])
    p.add_argument("--decisions", type=int, default=2000)
    p.add_argument("--effect", type=float, default=0.10)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    result = project(args.decisions, args.effect)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
