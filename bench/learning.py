"""Does RL on the recorded fixture improve the warm-started champion? Three seeds.

Before and after ``run_training`` on tests/fixtures/rl_rows.parquet (recorded from the cached
champion, see trainer/fixtures.py):
- ``pass_before/after``, ``tokens_before/after``: greedy pass rate and mean completion tokens on
  held-out tasks (the benchmark split, which no training data comes from);
- ``logged_pass_before/after``: the RL objective itself, the sampled (T = 1, the serving
  temperature of the fixture) pass rate on the first 160 of the fixture's prompts
  (``trainer.fixtures.logged_eval_tasks``), ``SAMPLES`` per prompt.

    .venv/bin/python bench/learning.py [--steps 120 --seeds 0 1 2 --heldout 300]

Writes bench/results/learning.json (means over seeds and the per-seed figures).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "learning.json"
HELDOUT_SEED = 7
SAMPLES = 8


def run(steps: int, seeds: list[int], n_heldout: int, threads: int, config: dict) -> dict:
    import torch

    from policy.toy.checkpoint import load_checkpoint
    from tasks.toy import generate_tasks
    from trainer.config import TrainerConfig
    from trainer.evaluate import evaluate
    from trainer.fixtures import champion_dir, fixture_rows, logged_eval_tasks
    from trainer.recipe import run_training

    torch.set_num_threads(threads)
    champ = champion_dir()
    rows = fixture_rows()
    heldout = generate_tasks(n_heldout, seed=HELDOUT_SEED, split="heldout")
    logged = logged_eval_tasks(SAMPLES)

    def logged_pass(model) -> float:
        return evaluate(model, logged, temperature=1.0, seed=HELDOUT_SEED).pass_rate

    champion = load_checkpoint(champ)
    before, logged_before = evaluate(champion, heldout), logged_pass(champion)
    per_seed = []
    for seed in seeds:
        cfg = TrainerConfig.model_validate({**config, "seed": seed, "steps": steps})
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            metrics = run_training(champ, rows, cfg, Path(tmp) / "cand")
            seconds = time.perf_counter() - t0
            cand = load_checkpoint(Path(tmp) / "cand")
            after, logged_after = evaluate(cand, heldout), logged_pass(cand)
        per_seed.append({"seed": seed, "pass_after": after.pass_rate,
                         "logged_pass_after": logged_after,
                         "tokens_after": after.mean_tokens, "by_kind_after": after.by_kind,
                         "train_seconds": seconds,
                         "kl_theta_ref_k3_last": metrics["kl_theta_ref_k3"]})
        print(f"seed {seed}: held-out pass {before.pass_rate:.3f} -> {after.pass_rate:.3f}, "
              f"logged prompts {logged_before:.3f} -> {logged_after:.3f}, tokens "
              f"{before.mean_tokens:.2f} -> {after.mean_tokens:.2f}, {seconds:.0f} s", flush=True)
    return {
        "pass_before": before.pass_rate,
        "pass_after": statistics.mean(s["pass_after"] for s in per_seed),
        "tokens_before": before.mean_tokens,
        "tokens_after": statistics.mean(s["tokens_after"] for s in per_seed),
        "logged_pass_before": logged_before,
        "logged_pass_after": statistics.mean(s["logged_pass_after"] for s in per_seed),
        "by_kind_before": before.by_kind, "per_seed": per_seed, "heldout_tasks": n_heldout,
        "fixture_rows": rows.num_rows, "fixture_reward_mean": statistics.mean(
            rows.column("reward").to_pylist()),
        "trainer_config": {**config, "steps": steps},
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--heldout", type=int, default=300)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--config", type=json.loads, default={},
                   help="TrainerConfig fields as JSON, e.g. '{\"lr\": 1e-4}'")
    args = p.parse_args(argv)
    result = run(args.steps, args.seeds, args.heldout, args.threads, args.config)
    print(json.dumps({k: result[k] for k in
                      ("pass_before", "pass_after", "tokens_before", "tokens_after",
                       "logged_pass_before", "logged_pass_after")}, indent=2))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
