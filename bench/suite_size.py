"""How many gate-suite tasks resolve the pass-rate gains the loop makes (paired SD, measured).

    python bench/suite_size.py [--size 1000] [--steps 30]

Loads the cached warm-started toy champion, makes a neighbour checkpoint by ``--steps`` more
supervised steps (what one cycle moves the model by, roughly), runs the held-out gate suite on both
(greedy), and measures the per-task paired difference d in {-1, 0, 1}: its SD, the discordant
shares, the paired-bootstrap 95% CI over distinct prompts (and over rows, for comparison), and the
suite size n = (1.96 sd / h)^2 for a CI half-width h of 0.03 and 0.04 — per task and per distinct
prompt (a repeated prompt adds no information under greedy decoding) — beside the binomial bound
(independent arms). Writes bench/results/suite_size.json.

Deliberately left out: RL-trained neighbours (an SFT step moves the model the way the loop's
updates do only roughly; the binomial bound holds whatever the neighbour).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    import numpy as np
    import torch

    from gating.config import SuiteConfig
    from gating.gates import paired_bootstrap
    from gating.stats import cluster_ids
    from gating.suite import build_suite, run_suite
    from policy.toy.checkpoint import load_checkpoint
    from tasks.toy import generate_tasks
    from trainer.sft import sft_step

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1000)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--out", default="suite_size", help="bench/results/<out>.json")
    args = p.parse_args()
    torch.manual_seed(0)
    [champ_dir] = sorted((ROOT / ".cache" / "ratchet").glob("champion-*"))
    champion = load_checkpoint(champ_dir)
    neighbour = load_checkpoint(champ_dir)
    opt = torch.optim.AdamW(neighbour.parameters(), lr=args.lr)
    rng = random.Random(1)
    for _ in range(args.steps):
        sft_step(neighbour, opt, generate_tasks(32, rng.randrange(2**31), "train"))
    neighbour.eval()
    tasks, checker = build_suite(SuiteConfig(size=args.size, seed=0))
    runs = [run_suite(m, tasks, max_new_tokens=32, seed=0, checker=checker)
            for m in (champion, neighbour)]
    a = np.array([t.passed for t in runs[0].tasks], dtype=float)
    b = np.array([t.passed for t in runs[1].tasks], dtype=float)
    d = b - a
    sd = float(d.std(ddof=1))
    keys = [t.prompt for t in tasks]
    ci = paired_bootstrap(b, a, n_resamples=2000, confidence=0.95, seed=0,
                          clusters=cluster_ids(keys))
    rows_ci = paired_bootstrap(b, a, n_resamples=2000, confidence=0.95, seed=0)
    # per distinct prompt (greedy: its rows are one observation): the SD that sizes a suite
    per_prompt = {k: float(x) for k, x in zip(keys, d)}
    d_prompt = np.array(list(per_prompt.values()))
    sd_prompt = float(d_prompt.std(ddof=1))
    pa, pb = float(a.mean()), float(b.mean())
    binom_sd = math.sqrt(pa * (1 - pa) + pb * (1 - pb))
    out = {
        "size": args.size, "neighbour_sft_steps": args.steps, "lr": args.lr, "pass_champion": pa,
        "pass_neighbour": pb, "delta": float(d.mean()), "ci_low": ci.low, "ci_high": ci.high,
        "ci": "95% paired bootstrap over distinct prompts", "distinct_prompts": len(per_prompt),
        "ci_rows_independent": [rows_ci.low, rows_ci.high], "paired_sd_per_prompt": sd_prompt,
        "n_prompts_for_halfwidth": {f"{h}": math.ceil((1.96 * sd_prompt / h) ** 2)
                                    for h in (0.03, 0.04)},
        "paired_sd": sd, "discordant_up": float((d > 0).mean()),
        "discordant_down": float((d < 0).mean()), "binomial_sd": binom_sd,
        "n_for_halfwidth": {
            f"{h}": {"paired": math.ceil((1.96 * sd / h) ** 2),
                     "binomial": math.ceil((1.96 * binom_sd / h) ** 2)} for h in (0.03, 0.04)},
        "halfwidth_at_64": 1.96 * sd / 8, "halfwidth_at_size": 1.96 * sd / math.sqrt(args.size),
    }
    print(json.dumps(out, indent=1))
    (ROOT / "bench" / "results" / f"{args.out}.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    from bench._common import show_progress

    show_progress()
    main()
