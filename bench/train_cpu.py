"""Training throughput of the toy MoE against a dense model of equal active parameters, on CPU.

Both models see the same batches (task prompts + reference answers, right-padded) for the same
number of optimizer steps; runs alternate MoE / dense in rounds so that load from other processes
hits both alike, and the figure is the ratio of median tokens/s. Goal: moe_over_dense >= 0.7.

    .venv/bin/python bench/train_cpu.py [--rounds 5 --steps 6 --threads 2]

Writes bench/results/train_cpu.json. Also reports process CPU-seconds per step, which is less
sensitive than wall time to other jobs sharing the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "train_cpu.json"


def _measure(model, opt, batches, sft_step) -> tuple[float, float, int]:
    tokens = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for tasks in batches:
        sft_step(model, opt, tasks)
        tokens += sum(len(t.prompt) + len(t.reference) + 2 for t in tasks)
    return time.perf_counter() - wall, time.process_time() - cpu, tokens


def run(rounds: int, steps: int, batch_size: int, threads: int) -> dict:
    import torch

    from policy.toy.model import MoEConfig, MoETransformer
    from tasks.toy import generate_tasks
    from trainer.sft import sft_step

    torch.set_num_threads(threads)
    base = MoEConfig.model_validate_json(
        (Path(__file__).parents[1] / "trainer" / "configs" / "toy.json").read_text())
    models = {}
    for name, cfg in (("moe", base), ("dense", base.model_copy(update={"ffn": "dense"}))):
        torch.manual_seed(0)
        m = MoETransformer(cfg).train()
        models[name] = (m, torch.optim.AdamW(m.parameters(), lr=1e-3))
    tasks = generate_tasks(batch_size * steps, seed=0, split="train")
    batches = [tasks[i * batch_size:(i + 1) * batch_size] for i in range(steps)]
    for m, opt in models.values():  # warm-up
        sft_step(m, opt, batches[0])
    tps: dict[str, list[float]] = {"moe": [], "dense": []}
    cpu_tps: dict[str, list[float]] = {"moe": [], "dense": []}
    for _ in range(rounds):
        for name, (m, opt) in models.items():
            wall, cpu, n = _measure(m, opt, batches, sft_step)
            tps[name].append(n / wall)
            cpu_tps[name].append(n / cpu)
    med = {k: statistics.median(v) for k, v in tps.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu_tps.items()}
    return {
        "moe_tokens_per_s": med["moe"], "dense_tokens_per_s": med["dense"],
        "moe_over_dense": med["moe"] / med["dense"],
        "moe_over_dense_cpu_time": cpu_med["moe"] / cpu_med["dense"],
        "moe_params_total": models["moe"][0].num_params(),
        "moe_params_active": models["moe"][0].num_params(active=True),
        "dense_params": models["dense"][0].num_params(),
        "rounds": rounds, "steps_per_round": steps, "batch_size": batch_size, "threads": threads,
        "load_average_1m": _loadavg(),
    }


def _loadavg() -> float:
    import os

    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    result = run(args.rounds, args.steps, args.batch_size, args.threads)
    for k, v in result.items():
        print(f"{k:28s} {v:.3f}" if isinstance(v, float) else f"{k:28s} {v}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
