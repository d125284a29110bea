"""Training throughput and MFU of the GPU-sized MoE (trainer/configs/gpu_h100.json) on one GPU.

bf16 autocast, fused AdamW, random byte sequences of full length (throughput does not depend on
the data). MFU = achieved model FLOPs / peak bf16 dense FLOPs, with model FLOPs per token =
6 x active parameters + 12 x layers x d_model x seq_len (attention scores and values, Kaplan /
PaLM convention). Goal >= 40% on an H100.

    .venv/bin/python bench/train_gpu.py [--batch 16 --steps 20 --peak-tflops 989]

Writes bench/results/train_gpu.json (or, without CUDA, a record saying it was skipped).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "train_gpu.json"
CONFIG = Path(__file__).parents[1] / "trainer" / "configs" / "gpu_h100.json"


def model_flops_per_token(active_params: int, n_layers: int, d_model: int, seq_len: int) -> float:
    return 6.0 * active_params + 12.0 * n_layers * d_model * seq_len


def run(batch: int, steps: int, warmup: int, peak_tflops: float, compile_model: bool) -> dict:
    import torch

    from policy.toy.model import MoEConfig, MoETransformer

    if not torch.cuda.is_available():
        return {"skipped": "no CUDA device available"}
    cfg = MoEConfig.model_validate_json(CONFIG.read_text())
    torch.manual_seed(0)
    model = MoETransformer(cfg).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    step_fn = torch.compile(model) if compile_model else model
    t = cfg.max_seq_len
    x = torch.randint(0, 256, (batch, t), device="cuda")
    for i in range(warmup + steps):
        if i == warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = step_fn(x[:, :-1])
            loss = torch.nn.functional.cross_entropy(
                out.logits.reshape(-1, cfg.vocab_size), x[:, 1:].reshape(-1)) + out.aux_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    tokens = steps * batch * (t - 1)
    tps = tokens / seconds
    flops = model_flops_per_token(model.num_params(active=True), cfg.n_layers, cfg.d_model, t - 1)
    return {
        "device": torch.cuda.get_device_name(), "tokens_per_s": tps,
        "mfu": tps * flops / (peak_tflops * 1e12), "peak_tflops": peak_tflops,
        "params_total": model.num_params(), "params_active": model.num_params(active=True),
        "batch": batch, "seq_len": t - 1, "steps": steps, "compiled": compile_model,
        "max_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--peak-tflops", type=float, default=989.0, help="H100 SXM bf16 dense")
    p.add_argument("--compile", action="store_true")
    args = p.parse_args(argv)
    result = run(args.batch, args.steps, args.warmup, args.peak_tflops, args.compile)
    print(json.dumps(result, indent=2))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
