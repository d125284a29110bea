"""Old and new intervals of a finished bench/learning.py run, side by side, without re-training.

    python -m experiments.recluster_learning [--results bench/results/learning.json]

A learning run keeps every run's per-task greedy verdicts in its sidecar (``*_runs.jsonl``). Its
published CIs resample the 2,000 tasks of the fresh set as independent rows; the fresh set of that
run (the rule before the sealed split: held-out bucket minus the tuning draw, seed 0) holds only
952 distinct prompts, and greedy answers to a repeated prompt are identical. This rebuilds that
task list (checked: the "before" pass rate and the row CI must reproduce the published figures
exactly), then recomputes each arm's 95% CI resampling distinct prompts
(``gating.stats.cluster_bootstrap``) on the same verdicts.

Writes ``bench/results/<results stem>_reclustered.json``. Deliberately left out: the loop
(bench/loop.py keeps no per-task verdicts, so its intervals can only be recomputed by a re-run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> None:
    import numpy as np

    from bench.learning import BOOTSTRAP, legacy_fresh_tasks, paired_bootstrap

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", type=Path, default=ROOT / "bench/results/learning.json")
    args = p.parse_args(argv)
    res = json.loads(args.results.read_text())
    if res["eval_set"] != "fresh":
        raise SystemExit(f"{args.results}: eval set {res['eval_set']!r}, not the fresh set")
    n = res["sizes"]["fresh_tasks"]
    tasks = legacy_fresh_tasks(n)
    keys = [t.prompt for t in tasks]
    sidecar = args.results.with_name(res["runs_file"])
    runs: dict[tuple[str, str], list] = {}
    befores: dict[str, dict] = {}
    for line in sidecar.read_text().splitlines():
        r = json.loads(line)
        if r["key"] != res["run_keys"].get(r["arm"]):
            continue
        if r["arm"] == "before":
            befores[r["start"]] = r["result"]
        else:
            runs.setdefault((r["arm"], r["start"]), []).append(r)
    champ = befores["champion"]
    if abs(float(np.mean(champ["passed"])) - res["pass_before"]) > 1e-12:
        raise SystemExit("the sidecar's verdicts do not match the published before pass rate")
    out = {"results": args.results.name, "tasks": n, "distinct_prompts": len(set(keys)),
           "bootstrap": BOOTSTRAP, "arms": {}}
    for (arm, start), rs in sorted(runs.items()):
        rs = sorted(rs, key=lambda r: r["seed"])[:len(res["seeds"])]
        before = befores[start]["passed"]
        afters = [r["result"]["passed"] for r in rs]
        d_rows, lo_rows, hi_rows = paired_bootstrap(before, afters)
        d, lo, hi = paired_bootstrap(before, afters, keys=keys)
        published = res["arms"][arm]
        out["arms"][arm] = {
            "delta": d, "seeds": len(rs),
            "published_ci_rows": [published["ci_low"], published["ci_high"]],
            "recomputed_ci_rows": [lo_rows, hi_rows],
            "ci_prompts": [lo, hi],
            "width_ratio": (hi - lo) / (hi_rows - lo_rows) if hi_rows > lo_rows else None,
        }
        print(f"{arm:14s} {d:+.4f}  rows [{lo_rows:+.4f}, {hi_rows:+.4f}]  prompts "
              f"[{lo:+.4f}, {hi:+.4f}]  (published [{published['ci_low']:+.4f}, "
              f"{published['ci_high']:+.4f}])")
    dest = args.results.with_name(args.results.stem + "_reclustered.json")
    dest.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {dest}")


if __name__ == "__main__":
    main()
