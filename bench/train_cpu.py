"""Training throughput of the toy MoE against a dense model of equal active parameters, on CPU.

Both models see the same batches (task prompts + reference answers, right-padded) for the same
number of optimizer steps; runs alternate MoE / dense in rounds so that load from other processes
hits both alike, and the figure is the ratio of median tokens/s. Goal: moe_over_dense >= 0.7.

    .venv/bin/python bench/train_cpu.py [--rounds 5 --steps 6 --threads 2]

Writes bench/results/train_cpu.json. Also reports process CPU-seconds per step, which is less
sensitive than wall time to other jobs sharing the machine.

``--hf`` adds a tiny random-init HF Qwen3-MoE of the toy's width (hidden 128, 3 layers, 4 experts,
top-2, expert width 256, local BPE tokenizer) trained through the Policy plug
(``token_logprobs`` + AdamW), measured in the same rounds; its tokens are BPE tokens (several
bytes each), so ``hf_moe_bytes_per_s`` is the figure comparable with the toy's byte tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "train_cpu.json"


def _measure(model, opt, batches, step) -> tuple[float, float, int]:
    """Wall and CPU seconds for one pass over ``batches``, and the tokens seen. ``step`` returns
    its token count, or None for the toy (bytes of prompt + answer, plus BOS and EOS)."""
    tokens = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for tasks in batches:
        n = step(model, opt, tasks)
        tokens += n if n is not None else sum(len(t.prompt) + len(t.reference) + 2 for t in tasks)
    return time.perf_counter() - wall, time.process_time() - cpu, tokens


def _toy(sft_step):
    def step(model, opt, tasks) -> None:  # token count: the caller's byte rule
        sft_step(model, opt, tasks)

    return step


def _hf_model():
    """(policy, optimizer, step function, bytes-per-token) for the tiny HF Qwen3-MoE."""
    import torch

    from policy.config import TinyHFSpec
    from policy.hf import HFPolicy
    from policy.tiny import build_model

    spec = TinyHFSpec(family="qwen3_moe", hidden=128, layers=3, heads=4, kv_heads=2,
                      intermediate=256, moe_intermediate=256, experts=4, top_k=2, vocab=512)
    model, tok = build_model(spec)
    policy = HFPolicy(model.train(), tok)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(_, opt, tasks) -> int:
        rows = [policy.encode_prompt(t.prompt + t.reference) for t in tasks]
        width = max(len(r) for r in rows) - 1
        x = torch.zeros(len(rows), width, dtype=torch.long)
        y, mask = torch.zeros_like(x), torch.zeros_like(x, dtype=torch.bool)
        for i, r in enumerate(rows):
            x[i, : len(r) - 1], y[i, : len(r) - 1] = torch.tensor(r[:-1]), torch.tensor(r[1:])
            mask[i, : len(r) - 1] = True
        out = policy.token_logprobs(x, y, mask, torch.ones(len(rows)))
        loss = -out.logprobs[mask].mean() + out.aux_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return int(mask.sum())

    return policy, opt, step


def run(rounds: int, steps: int, batch_size: int, threads: int, hf: bool = False) -> dict:
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
        models[name] = (m, torch.optim.AdamW(m.parameters(), lr=1e-3), _toy(sft_step))
    if hf:
        models["hf_moe"] = _hf_model()
    tasks = generate_tasks(batch_size * steps, seed=0, split="train")
    batches = [tasks[i * batch_size:(i + 1) * batch_size] for i in range(steps)]
    for m, opt, step in models.values():  # warm-up
        step(m, opt, batches[0])
    tps: dict[str, list[float]] = {k: [] for k in models}
    cpu_tps: dict[str, list[float]] = {k: [] for k in models}
    for _ in range(rounds):
        for name, (m, opt, step) in models.items():
            wall, cpu, n = _measure(m, opt, batches, step)
            tps[name].append(n / wall)
            cpu_tps[name].append(n / cpu)
    med = {k: statistics.median(v) for k, v in tps.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu_tps.items()}
    result = {
        "moe_tokens_per_s": med["moe"], "dense_tokens_per_s": med["dense"],
        "moe_over_dense": med["moe"] / med["dense"],
        "moe_over_dense_cpu_time": cpu_med["moe"] / cpu_med["dense"],
        "moe_params_total": models["moe"][0].num_params(),
        "moe_params_active": models["moe"][0].num_params(active=True),
        "dense_params": models["dense"][0].num_params(),
        "rounds": rounds, "steps_per_round": steps, "batch_size": batch_size, "threads": threads,
        "load_average_1m": _loadavg(),
    }
    if hf:
        policy = models["hf_moe"][0]
        n_bytes = sum(len((t.prompt + t.reference).encode()) + 1 for t in tasks)
        n_tok = sum(len(policy.encode_prompt(t.prompt + t.reference)) - 1 for t in tasks)
        result.update({
            "hf_moe_model": "qwen3_moe hidden=128 layers=3 experts=4 top_k=2 (random init)",
            "hf_moe_tokens_per_s": med["hf_moe"],
            "hf_moe_bytes_per_s": med["hf_moe"] * n_bytes / n_tok,
            "hf_moe_params_total": policy.describe()["params"],
        })
    return result


def _loadavg() -> float:
    import os

    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--hf", action="store_true", help="also a tiny HF Qwen3-MoE via the plug")
    args = p.parse_args(argv)
    result = run(args.rounds, args.steps, args.batch_size, args.threads, hf=args.hf)
    for k, v in result.items():
        print(f"{k:28s} {v:.3f}" if isinstance(v, float) else f"{k:28s} {v}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
