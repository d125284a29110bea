"""How much can RL on the toy lift the champion on fresh tasks? Two analyses, no tuning.

1. Headroom: the committed champion's greedy pass rate on a train-split draw (content the SFT
   warm start learned from) and on the fresh set, and pass@k at T = 1 on the fresh set. RL that
   only sharpens the policy towards answers it already samples is bounded by about pass@k minus
   greedy.
2. Transfer (``--transfer-seeds``): two RL arms identical but for the prompt source — train-split
   prompts (what the simulator serves, largely memorised by the warm start) and held-out-bucket
   prompts of the seed-7 tuning draw (content never trained on; disjoint from the fresh set by
   ``tasks.toy.FRESH_EXCLUDES``). Each samples 1,000 prompts x 4 at T = 1 from the champion, trains
   120 steps x 64 rows with the trainer's defaults, and is scored greedy on the fresh set with a
   paired-bootstrap 95% CI.

    .venv/bin/python -m bench.headroom [--k 4 --transfer-seeds 0]

Writes bench/results/headroom.json. Nothing here chooses a setting: it explains bench/learning.py.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "headroom.json"


def _by_kind(tasks, passed) -> dict[str, float]:
    kinds = sorted({t.kind for t in tasks})
    return {k: sum(p for t, p in zip(tasks, passed) if t.kind == k)
            / sum(t.kind == k for t in tasks) for k in kinds}


def headroom(model, fresh, k: int) -> tuple[dict, list[bool]]:
    """The headroom figures, and the champion's greedy per-task results on ``fresh``."""
    import numpy as np

    from tasks.toy import generate_tasks
    from trainer.evaluate import evaluate

    train = generate_tasks(1000, 123, "train")
    greedy_train, greedy = evaluate(model, train), evaluate(model, fresh)
    samples = np.array([evaluate(model, fresh, temperature=1.0, seed=1000 * i).passed
                        for i in range(k)], dtype=float)
    at_k = samples.max(axis=0)
    figures = {"train_greedy": greedy_train.pass_rate, "train_by_kind": greedy_train.by_kind,
               "fresh_greedy": greedy.pass_rate, "fresh_by_kind": greedy.by_kind,
               "fresh_t1_mean": float(samples.mean()), f"fresh_pass_at_{k}": float(at_k.mean()),
               f"fresh_pass_at_{k}_by_kind": _by_kind(fresh, at_k)}
    return figures, greedy.passed


def transfer(champion: Path, model, fresh, before: list[bool], seed: int) -> dict:
    import numpy as np

    from bench.learning import paired_bootstrap
    from policy.toy.checkpoint import load_checkpoint
    from tasks.toy import generate_tasks
    from trainer.config import TrainerConfig
    from trainer.evaluate import evaluate
    from trainer.recipe import run_training
    from trainer.rollout import sample_rows

    out = {}
    sources = {"train_prompts": generate_tasks(1000, 99 + seed, "train"),
               "heldout_prompts": generate_tasks(1000, 7, "heldout")}
    for arm, tasks in sources.items():
        t0 = time.perf_counter()
        rows = sample_rows(model, tasks, samples_per_task=4, temperature=1.0, model_version=1,
                           seed=seed)
        with tempfile.TemporaryDirectory() as tmp:
            run_training(champion, rows, TrainerConfig(seed=seed, steps=120, mismatch_every=0),
                         Path(tmp) / "c")
            after = evaluate(load_checkpoint(Path(tmp) / "c"), fresh)
        delta, lo, hi = paired_bootstrap(before, [after.passed], keys=[t.prompt for t in fresh])
        out[arm] = {"pass_after": after.pass_rate, "delta": delta, "ci_low": lo, "ci_high": hi,
                    "by_kind_after": after.by_kind, "tokens_after": after.mean_tokens,
                    "reward_mean": float(np.mean(rows.column("reward").to_pylist())),
                    "seconds": round(time.perf_counter() - t0, 1)}
        print(f"seed {seed} {arm}: fresh {after.pass_rate:.4f} ({delta:+.4f} [{lo:+.4f}, "
              f"{hi:+.4f}]), {out[arm]['seconds']:.0f} s", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    import torch

    from policy.toy.checkpoint import load_checkpoint
    from tasks.toy import fresh_tasks
    from trainer.fixtures import champion_dir

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--transfer-seeds", type=int, nargs="*", default=[0])
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    champion = champion_dir()
    model, fresh = load_checkpoint(champion), fresh_tasks()
    print("[1/2] headroom: greedy on train and fresh, pass@k at T=1 on fresh", flush=True)
    figures, before = headroom(model, fresh, args.k)
    result = {"champion": champion.name, "fresh_tasks": len(fresh), "headroom": figures}
    print(json.dumps(figures, indent=1), flush=True)
    for i, seed in enumerate(args.transfer_seeds, 1):
        print(f"[2/2] transfer seed {seed} ({i}/{len(args.transfer_seeds)})", flush=True)
        result.setdefault("transfer", {})[str(seed)] = transfer(champion, model, fresh, before,
                                                                seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
