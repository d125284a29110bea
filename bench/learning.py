"""Does RL on the recorded fixture improve the warm-started champion? Three seeds.

Held-out greedy pass rate and mean completion tokens before and after ``run_training`` on
tests/fixtures/rl_rows.parquet (recorded from the cached champion, see trainer/fixtures.py).

    .venv/bin/python bench/learning.py [--steps 40 --seeds 0 1 2 --heldout 300]

Writes bench/results/learning.json with pass_before, pass_after, tokens_before, tokens_after (means
over seeds) and the per-seed figures.
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


def run(steps: int, seeds: list[int], n_heldout: int, threads: int, config: dict) -> dict:
    import torch

    from ratchet.tasks import generate_tasks
    from trainer.checkpoint import load_checkpoint
    from trainer.config import TrainerConfig
    from trainer.evaluate import evaluate
    from trainer.fixtures import champion_dir, fixture_rows
    from trainer.recipe import run_training

    torch.set_num_threads(threads)
    champ = champion_dir()
    rows = fixture_rows()
    heldout = generate_tasks(n_heldout, seed=HELDOUT_SEED, split="heldout")
    before = evaluate(load_checkpoint(champ), heldout)
    per_seed = []
    for seed in seeds:
        cfg = TrainerConfig.model_validate({**config, "seed": seed, "steps": steps})
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            metrics = run_training(champ, rows, cfg, Path(tmp) / "cand")
            seconds = time.perf_counter() - t0
            after = evaluate(load_checkpoint(Path(tmp) / "cand"), heldout)
        per_seed.append({"seed": seed, "pass_after": after.pass_rate,
                         "tokens_after": after.mean_tokens, "by_kind_after": after.by_kind,
                         "train_seconds": seconds, "kl_k1_last": metrics["kl_k1"]})
        print(f"seed {seed}: pass {before.pass_rate:.3f} -> {after.pass_rate:.3f}, tokens "
              f"{before.mean_tokens:.2f} -> {after.mean_tokens:.2f}, {seconds:.0f} s", flush=True)
    return {
        "pass_before": before.pass_rate,
        "pass_after": statistics.mean(s["pass_after"] for s in per_seed),
        "tokens_before": before.mean_tokens,
        "tokens_after": statistics.mean(s["tokens_after"] for s in per_seed),
        "by_kind_before": before.by_kind, "per_seed": per_seed, "heldout_tasks": n_heldout,
        "fixture_rows": rows.num_rows, "fixture_reward_mean": statistics.mean(
            rows.column("reward").to_pylist()),
        "trainer_config": {**config, "steps": steps},
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--heldout", type=int, default=300)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--config", type=json.loads, default={},
                   help="TrainerConfig fields as JSON, e.g. '{\"lr\": 1e-4}'")
    args = p.parse_args(argv)
    result = run(args.steps, args.seeds, args.heldout, args.threads, args.config)
    print(json.dumps({k: result[k] for k in
                      ("pass_before", "pass_after", "tokens_before", "tokens_after")}, indent=2))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
