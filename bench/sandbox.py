"""Grading throughput of the sandbox: tasks per second for a trivial passing program, sequentially.

    python -m bench.sandbox [--tasks 60] [--label after] [--out bench/results/sandbox.json]

Each task is one :func:`tasks.sandbox.run_sandboxed` call on a program that defines a function and
asserts on it (what a pyfuncs or HumanEval grade runs, minus the problem's size), so the figure is
the fixed cost of one box: start, limits, interpreter start-up, teardown. Also times a HumanEval
canonical solution through :func:`tasks.humaneval.grade`. Prints the figures with the load average
before and after, and writes them under ``--label`` in the JSON file (other labels already there are
kept, so a run of the previous sandbox and of this one sit side by side).

Deliberately left out: parallel grading (the gate grades sequentially) and programs that do real
work (their own run time is the same inside and outside the box).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROGRAM = "def add(a, b):\n    return a + b\n\nassert add(2, 3) == 5\nprint('ok')\n"


def main() -> None:
    from tasks.humaneval import grade, load_problems
    from tasks.sandbox import run_sandboxed

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=60)
    p.add_argument("--label", default="after")
    p.add_argument("--out", type=Path, default=ROOT / "bench/results/sandbox.json")
    args = p.parse_args()

    load_before = os.getloadavg()
    run_sandboxed(PROGRAM, timeout_s=10)  # first call: probes and one-time set-up, not timed
    seconds = []
    for _ in range(args.tasks):
        start = time.perf_counter()
        r = run_sandboxed(PROGRAM, timeout_s=10)
        seconds.append(time.perf_counter() - start)
        if not r.passed:
            raise SystemExit(f"the trivial program did not pass: {r}")
    problem = load_problems()["HumanEval/0"]
    he = []
    for _ in range(max(5, args.tasks // 6)):
        start = time.perf_counter()
        g = grade(problem, problem["canonical_solution"], timeout_s=10)
        he.append(time.perf_counter() - start)
        if not g.passed:
            raise SystemExit(f"the canonical solution did not pass: {g}")
    load_after = os.getloadavg()
    total = sum(seconds)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    figures = {
        "tasks": args.tasks,
        "tasks_per_s": round(args.tasks / total, 2),
        "median_s": round(statistics.median(seconds), 4),
        "p90_s": round(sorted(seconds)[int(0.9 * (len(seconds) - 1))], 4),
        "humaneval_grades": len(he),
        "humaneval_median_s": round(statistics.median(he), 4),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{os.cpu_count()}-core {platform.machine()}, Linux {platform.release()}",
    }
    print(json.dumps(figures, indent=2))
    stored = json.loads(args.out.read_text()) if args.out.exists() else {}
    stored[args.label] = figures
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(stored, indent=2) + "\n")


if __name__ == "__main__":
    main()
