"""Grading throughput: a trivial pyfuncs task (add_const) graded sequentially, one sandboxed run
per answer, right and wrong answers alternating.

Run it from a checkout's root (``PYTHONPATH=$PWD python bench/grader_throughput.py --label
after``); to compare with an older grader, run the same file from a checkout of that commit with
``--label before --results <this checkout>/bench/results/grader_throughput.json``. Each label's
figures are stored with the commit, the machine and the load average around the run. Measures;
chooses nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(n: int) -> dict:
    from tasks.pyfuncs import BY_FAMILY, grade, instances

    task = instances(BY_FAMILY["add_const"], 1, seed=0)[0]
    k = int(task.prompt.split(" plus ")[1].split(".")[0])
    right = f"```python\ndef {task.entry_point}(x):\n    return x + {k}\n```"
    wrong = f"```python\ndef {task.entry_point}(x):\n    return x\n```"
    grade(task, right)  # warm imports
    seconds, verdicts = [], []
    for i in range(n):
        answer = right if i % 2 == 0 else wrong
        start = time.perf_counter()
        verdicts.append(grade(task, answer).passed == (answer is right))
        seconds.append(time.perf_counter() - start)
    return {"tasks": n, "asserts_per_task": len(task.tests), "all_verdicts_right": all(verdicts),
            "tasks_per_s": round(n / sum(seconds), 2),
            "median_s": round(statistics.median(seconds), 4),
            "p90_s": round(sorted(seconds)[int(0.9 * n) - 1], 4)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=60)
    p.add_argument("--label", default="after")
    p.add_argument("--results", type=Path, default=ROOT / "bench/results/grader_throughput.json")
    args = p.parse_args(argv)
    load_before = os.getloadavg()[0]
    figures = measure(args.n)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    figures["measured"] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit,
        "machine": f"{os.cpu_count()}-core machine ({platform.machine()})",
        "load_1m_before": round(load_before, 2), "load_1m_after": round(os.getloadavg()[0], 2)}
    print(json.dumps({args.label: figures}, indent=1))
    out = json.loads(args.results.read_text()) if args.results.exists() else {}
    out[args.label] = figures
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
