"""The toy demo over several seeds, with a shuffled-reward placebo arm.

    python bench/demo_seeds.py [--seeds 0 1 2] [--placebo-seeds 0] [--cycles 5]
        [--config configs/toy-lazy-fix.json] [--workdir .cache/demo-seeds]

Each arm is one `ratchet demo` process (its own broker, MLflow server and replicas, stopped when
it ends) on the preset with ``simulator.seed`` and ``trainer.seed`` set to the seed; a placebo arm
also sets ``trainer.shuffle_rewards`` (the same traffic, rewards permuted across each cycle's
rows). From each arm's ``demo_summary.json``: promotions, audits, the gate's one-line decisions
and the sealed-set gain of the final champion over the first (95% paired CI over prompts).
Writes bench/results/demo_seeds.json after every arm (``complete`` once all ran).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "demo_seeds.json"


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def arm_config(preset: Path, seed: int, placebo: bool, out: Path) -> Path:
    """The preset with the arm's seeds (and the placebo switch) written beside the arm's run."""
    cfg = json.loads(preset.read_text())
    cfg.setdefault("simulator", {})["seed"] = seed
    trainer = cfg.setdefault("trainer", {})
    trainer["seed"] = seed
    if placebo:
        trainer["shuffle_rewards"] = True
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(cfg, indent=1) + "\n")
    return out


def summarize(summary: dict) -> dict:
    """What the arm shows: promotions, audits, decisions, the sealed gain and its CI."""
    cycles = summary["cycles"]
    gain = summary.get("gain") or {}
    return {
        "promotions": summary["promotions"],
        "cycles": len(cycles),
        "decisions": [c.get("gate_decision") for c in cycles],
        "audits": [c["audit"] for c in cycles if c.get("audit")],
        "sealed": {k: gain[k] for k in ("first_version", "final_version", "pass_first",
                                         "pass_final", "delta", "ci_low", "ci_high", "tasks")
                   if k in gain},
        "seconds": summary["total_seconds"],
    }


def run_arm(args, seed: int, placebo: bool) -> dict:
    name = f"{'placebo' if placebo else 'rl'}-seed{seed}"
    workdir = args.workdir / name
    config = arm_config(args.config, seed, placebo, args.workdir / "configs" / f"{name}.json")
    say(f"[{name}] ratchet demo --cycles {args.cycles} (log: {workdir}.log)")
    t0 = time.perf_counter()
    with open(f"{workdir}.log", "w") as log:
        rc = subprocess.run([sys.executable, "-m", "ratchet.cli", "demo", "--config", str(config),
                             "--workdir", str(workdir), "--cycles", str(args.cycles)],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    path = workdir / "demo_summary.json"
    if rc != 0 or not path.exists():
        say(f"[{name}] failed (exit {rc}); see {workdir}.log")
        return {"arm": name, "seed": seed, "placebo": placebo, "exit": rc,
                "seconds": round(time.perf_counter() - t0, 1)}
    out = {"arm": name, "seed": seed, "placebo": placebo, "exit": 0,
           **summarize(json.loads(path.read_text()))}
    s = out["sealed"]
    say(f"[{name}] {out['promotions']} promotion(s) in {out['cycles']} cycles; sealed "
        f"{s.get('delta', float('nan')):+.3f} [{s.get('ci_low', float('nan')):+.3f}, "
        f"{s.get('ci_high', float('nan')):+.3f}]; {out['seconds']:.0f} s")
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--placebo-seeds", type=int, nargs="*", default=[0])
    p.add_argument("--cycles", type=int, default=5)
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "toy-lazy-fix.json")
    p.add_argument("--workdir", type=Path, default=ROOT / ".cache" / "demo-seeds")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True, check=False).stdout.strip()
    result = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit, "machine": f"{os.cpu_count()}-core x86_64 machine",
        "config": str(args.config.relative_to(ROOT)) if args.config.is_relative_to(ROOT)
        else str(args.config), "cycles": args.cycles, "arms": [], "complete": False,
        "target": "rl arms: >= 2 promotions in 5 cycles and the sealed CI above 0; placebo: none",
    }
    plan = [(s, False) for s in args.seeds] + [(s, True) for s in args.placebo_seeds]
    for seed, placebo in plan:
        result["arms"].append(run_arm(args, seed, placebo))
        result["load1"] = round(os.getloadavg()[0], 2)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    result["complete"] = True
    rl = [a for a in result["arms"] if not a["placebo"] and a["exit"] == 0]
    result["rl_arms_on_target"] = sum(a["promotions"] >= 2 and (a["sealed"].get("ci_low") or 0) > 0
                                for a in rl)
    result["placebo_promotions"] = sum(a.get("promotions", 0) for a in result["arms"]
                                       if a["placebo"])
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    say(f"wrote {args.out}")


if __name__ == "__main__":
    main()
