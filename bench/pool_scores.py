"""One checkpoint's greedy pass rates on the pyfuncs pools, per pool and per family, with every
task's verdict kept so a later checkpoint can be compared with it paired by function.

The checkpoint is ``--checkpoint DIR`` (a saved HF policy) or, without it, the preset's first
champion (``--config``, default configs/smollm2-pyfuncs.json: SmolLM2-135M-Instruct upcycled to
4 experts top-2, built once under ``--workdir``). Each task is answered greedily as one chat turn
and graded by its hidden asserts (``bench.loop_real.score_sealed``, the scorer of the loop bench).
Per pool: tasks, independent functions (family + constants), pass rate with a 95% bootstrap over
functions (``gating.stats.cluster_bootstrap``), pass count per family. Writes ``--out``
(default bench/results/pool_scores.json).

    .venv/bin/python -m bench.pool_scores [--checkpoint DIR] [--pools sealed,gate,transfer]

Left out: sampled (temperature > 0) answers and HumanEval (``bench/humaneval_smollm2.py``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import CONFIG, POOLS, build_champion, choices, commit, say, score, show_progress  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "pool_scores.json"
BOOTSTRAP = 2000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.pool_scores",
                                description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=CONFIG, help="ratchet preset (its policy)")
    p.add_argument("--checkpoint", type=Path, default=None, help="saved policy (default: the "
                   "preset's first champion)")
    p.add_argument("--label", default="v1", help="name of the checkpoint in the results")
    p.add_argument("--pools", type=choices(tuple(POOLS)), default=["sealed", "gate", "transfer"])
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workdir", type=Path, default=ROOT / ".cache" / "local_update")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--tiny", action="store_true", help="dry run on a tiny random Mixtral")
    return p.parse_args(argv)


def summarize(tasks: list[dict], passed: list[bool], *, seed: int = 0) -> dict:
    """Pass rate over tasks with its 95% interval resampling functions
    (``gating.stats.cluster_bootstrap``), the mean of per-function rates, per-family counts and
    every task's verdict."""
    import numpy as np

    from bench.loop_real import by_cluster, clusters
    from gating.stats import cluster_bootstrap, cluster_ids

    keys = clusters(tasks)
    rates = list(by_cluster(keys, passed).values())
    ci = cluster_bootstrap(np.asarray(passed, dtype=float), cluster_ids(keys),
                           n_resamples=BOOTSTRAP, seed=seed)
    fam_pass: Counter = Counter()
    fam_tasks: Counter = Counter()
    for t, ok in zip(tasks, passed, strict=True):
        fam_tasks[t.get("family") or "?"] += 1
        fam_pass[t.get("family") or "?"] += int(ok)
    return {"tasks": len(tasks), "functions": len(rates), "pass_rate": sum(passed) / len(tasks),
            "function_mean": sum(rates) / len(rates), "function_ci95": [ci.low, ci.high],
            "per_family": {f: [fam_pass[f], fam_tasks[f]] for f in sorted(fam_tasks)},
            "verdicts": {t["task_id"]: ok for t, ok in zip(tasks, passed, strict=True)}}


def run(args: argparse.Namespace) -> dict:
    from tasks.pyfuncs import read_jsonl

    t0 = time.perf_counter()
    checkpoint = args.checkpoint
    if checkpoint is None:
        workdir = args.workdir / ("tiny" if args.tiny else "real")
        workdir.mkdir(parents=True, exist_ok=True)
        checkpoint = build_champion(args, workdir)
    pools = {name: read_jsonl(POOLS[name]) for name in args.pools}
    say(f"scoring {args.label} ({checkpoint}) on {sum(map(len, pools.values()))} pool tasks")
    scores = score(checkpoint, pools, args)
    result = {
        "date": datetime.date.today().isoformat(), "commit": commit(),
        "machine": f"{os.cpu_count()} CPU cores", "load_end": round(os.getloadavg()[0], 2),
        "config": str(args.config), "checkpoint": args.label, "tiny": args.tiny,
        "max_new_tokens": args.max_new_tokens,
        "pools": {k: summarize(pools[k], scores[k]) for k in pools},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    for name, pool in result["pools"].items():
        lo, hi = pool["function_ci95"]
        say(f"{name}: {pool['pass_rate']:.3f} of {pool['tasks']} tasks [{lo:.3f}, {hi:.3f}] "
            f"over {pool['functions']} functions")
    return result


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    say(f"wrote {args.out} in {result['seconds']} s")


if __name__ == "__main__":
    show_progress()
    main()
