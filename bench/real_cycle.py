"""Decode and training speed of the real-model preset against what the CPU allows.

    python bench/real_cycle.py --label after [--code DIR] [--config configs/smollm2-pyfuncs.json]
        [--batches 1,8,16,32] [--steps 12] [--dtype float32]

The model is the preset's policy (SmolLM2-135M-Instruct, upcycled to 4 experts top-2 in
configs/smollm2-pyfuncs.json), loaded as the loop loads it, with one torch thread. Figures:

- ``load_seconds``: the policy's load (GGUF de-quantisation or its converted cache, upcycling).
- ``decode``: per batch size, the serving engine's step (``HFStepModel``: prefill once, then one
  token per row per step, greedy, no row leaving) over the first B prompts of the preset's training
  tasks through the chat template; ``step_cpu_s`` is the median CPU time of ``--steps`` steps (one
  thread: CPU-seconds are core-seconds, the fair figure on a shared machine), ``step_wall_s`` the
  median wall time, tokens/s = B / step time. ``prefill_cpu_s`` is the prompt's forward.
- ``hardware``: read bandwidth (sum over a buffer the size of the model's weights) and matmul
  throughput at the step's own shapes: every matmul one decode step runs (attention projections,
  each expert's gate-up and down projections at B*k/E tokens, the output head), timed alone on
  random tensors of the model's dtype; throughput = their FLOPs / their time.
- ``roofline_step_s`` = max(weight bytes read per step / bandwidth, step FLOPs / throughput) and
  ``decode_limit_ratio`` = roofline / measured step CPU time, per batch size. Weight bytes count
  the experts a step can reach (min(E, B*k) of E per layer) plus every dense weight.
- ``train``: forward+backward of the policy's ``token_logprobs`` (the trainer's path) over 8
  prompt+reply sequences with the top 8 layers trainable (the preset's scope); tokens per
  CPU-second.

``--code DIR`` imports the ratchet packages from another checkout (the code before a change) so
before and after run the same script. Every figure carries the 1-minute load (os.getloadavg) at
its start and end. Results go to bench/results/real_cycle.json under ``--label``; running a label
again adds a round, and the headline figures (``decode_limit_ratio``, ``step_cpu_s``,
``decode_tokens_per_cpu_s``, ``train_tokens_per_cpu_s``) are medians over its rounds. Left out: the
per-stage seconds of a whole cycle (serve, ingest, train, gate) — bench/loop_real.py runs cycles.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "real_cycle.json"


def _median_cpu(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        c0 = time.process_time()
        fn()
        times.append(time.process_time() - c0)
    return statistics.median(times)


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def bandwidth(nbytes: int, dtype, repeats: int = 5) -> float:
    """Read bandwidth in GB/s: a sum over a buffer of ``nbytes`` (larger than any cache); use
    float32 (a bf16 sum converts every element and measures the conversion, not the reads)."""
    import torch

    buf = torch.ones(nbytes // torch.tensor([], dtype=dtype).element_size(), dtype=dtype)
    t = _median_cpu(lambda: buf.sum(dtype=torch.float32), repeats)
    return nbytes / t / 1e9


def step_shapes(config, batch: int) -> list[tuple[int, int, int, int]]:
    """(m, k, n, count) of every matmul of one decode step: (m, k) @ (k, n), ``count`` times."""
    h, layers = config.hidden_size, config.num_hidden_layers
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    hd = getattr(config, "head_dim", None) or h // heads
    inter = getattr(config, "moe_intermediate_size", None) or config.intermediate_size
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", 0)
    top_k = getattr(config, "num_experts_per_tok", 0)
    out = [(batch, h, heads * hd, 2 * layers), (batch, h, kv * hd, 2 * layers),
           (batch, h, config.vocab_size, 1)]
    if experts:
        hit = min(experts, batch * top_k)
        m = -(-batch * top_k // hit)
        out += [(m, h, 2 * inter, hit * layers), (m, inter, h, hit * layers),
                (batch, h, experts, layers)]
    else:
        out += [(batch, h, 2 * inter, layers), (batch, inter, h, layers)]
    return out


def matmul_throughput(shapes, dtype, repeats: int = 5) -> tuple[float, float, float]:
    """(GFLOP/s, FLOPs, weight bytes) of the step's matmuls, each timed alone on random tensors
    (weights stored as ``nn.Linear`` keeps them: (n, k), applied with ``F.linear``)."""
    import torch
    import torch.nn.functional as F

    flops = seconds = nbytes = 0.0
    size = torch.tensor([], dtype=dtype).element_size()
    for m, k, n, count in shapes:
        # enough distinct weights that the set outgrows the cache, as the model's do
        copies = max(1, min(count, (64 << 20) // (k * n * size) + 1))
        ws = [torch.randn(n, k).to(dtype) for _ in range(copies)]
        x = torch.randn(m, k).to(dtype)
        t = _median_cpu(lambda x=x, ws=ws: [F.linear(x, w) for w in ws], repeats) / copies
        flops += 2.0 * m * k * n * count
        seconds += t * count
        nbytes += float(k * n * size * count)
    return flops / seconds / 1e9, flops, nbytes


def decode_figures(policy, prompts: list[list[int]], batch: int, steps: int) -> dict:
    import torch

    from deploy.replica.engines.hf_step import HFStepModel

    step = HFStepModel(policy, 1)
    rows = [prompts[i % len(prompts)] for i in range(batch)]
    load0 = _load()
    with torch.inference_mode():
        c0 = time.process_time()
        session = step.open(rows)
        prefill = time.process_time() - c0
        nxt = session.logits.argmax(-1)
        cpu, wall = [], []
        for _ in range(steps + 1):
            c0, w0 = time.process_time(), time.perf_counter()
            session.advance(nxt)
            nxt = session.logits.argmax(-1)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
    cpu, wall = cpu[1:], wall[1:]  # the first step allocates
    step_cpu, step_wall = statistics.median(cpu), statistics.median(wall)
    return {"batch": batch, "prompt_width": max(len(r) for r in rows),
            "prefill_cpu_s": round(prefill, 3), "step_cpu_s": round(step_cpu, 4),
            "step_wall_s": round(step_wall, 4), "step_cpu_s_all": [round(c, 4) for c in cpu],
            "tokens_per_cpu_s": round(batch / step_cpu, 2),
            "tokens_per_s": round(batch / step_wall, 2), "load1_start": load0,
            "load1_end": _load()}


def train_figures(policy, prompts: list[list[int]], reply_tokens: int = 64,
                  rows: int = 8, repeats: int = 3) -> dict:
    import torch

    from trainer.trainable import select_trainable

    select_trainable(policy.module, scope="top_layers", top_layers=8, train_embeddings=False)
    seqs = [p + [policy.tokenizer_info.eos_ids[0]] * reply_tokens for p in prompts[:rows]]
    width = max(len(s) for s in seqs)
    pad = policy.tokenizer_info.pad_id
    ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs])
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], dtype=torch.bool)
    policy.module.train()
    load0 = _load()

    def one() -> None:
        out = policy.token_logprobs(ids[:, :-1], ids[:, 1:], mask[:, 1:],
                                    torch.ones(len(seqs)))
        loss = -(out.logprobs * mask[:, 1:]).sum() / mask[:, 1:].sum()
        loss.backward()
        policy.module.zero_grad(set_to_none=True)

    t = _median_cpu(one, repeats)
    policy.module.eval()
    for p in policy.module.parameters():
        p.requires_grad_(True)
    tokens = int(mask[:, 1:].sum())
    return {"rows": len(seqs), "tokens": tokens, "step_cpu_s": round(t, 3),
            "tokens_per_cpu_s": round(tokens / t, 1), "trainable": "top 8 layers",
            "load1_start": load0, "load1_end": _load()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True)
    ap.add_argument("--code", type=Path, default=ROOT)
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "smollm2-pyfuncs.json")
    ap.add_argument("--batches", default="1,8,16,32")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--dtype", default=None, help="override the policy's dtype (e.g. bfloat16)")
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--commit", default=None, help="the commit --code was exported from")
    args = ap.parse_args()
    sys.path.insert(0, str(args.code.resolve()))
    import torch

    from policy.config import HFPolicyConfig
    from policy.loader import load_policy

    torch.set_num_threads(1)
    cfg = json.loads(args.config.read_text())
    pcfg = HFPolicyConfig(**cfg["policy"])
    w0, c0, load0 = time.perf_counter(), time.process_time(), _load()
    policy = load_policy(pcfg, dtype=args.dtype)
    load = {"wall_s": round(time.perf_counter() - w0, 1),
            "cpu_s": round(time.process_time() - c0, 1), "load1_start": load0,
            "load1_end": _load()}
    print("load", load, flush=True)
    tasks = [json.loads(line) for line in
             (ROOT / cfg["simulator"]["tasks_path"]).read_text().splitlines() if line.strip()]
    prompts = [policy.encode_prompt(t["prompt"]) for t in tasks[:32]]
    model_cfg = policy.module.config
    dtype = next(policy.module.parameters()).dtype
    params = sum(p.numel() for p in policy.module.parameters())

    decode, hardware = {}, {}
    for b in [int(x) for x in args.batches.split(",")]:
        d = decode_figures(policy, prompts, b, args.steps)
        shapes = step_shapes(model_cfg, b)
        gflops, flops, wbytes = matmul_throughput(shapes, dtype)
        bw = bandwidth(max(int(wbytes), 256 << 20), torch.float32)  # bytes are bytes
        roof = max(wbytes / (bw * 1e9), flops / (gflops * 1e9))
        d.update({"step_gflop": round(flops / 1e9, 3), "weight_gb_read": round(wbytes / 1e9, 3),
                  "read_gb_per_s": round(bw, 2), "matmul_gflop_per_s": round(gflops, 2),
                  "roofline_step_s": round(roof, 4),
                  "decode_limit_ratio": round(roof / d["step_cpu_s"], 3)})
        decode[str(b)] = d
        hardware[str(b)] = {"read_gb_per_s": round(bw, 2), "matmul_gflop_per_s": round(gflops, 2)}
        print("decode", {k: v for k, v in d.items() if k != "step_cpu_s_all"}, flush=True)
    train = None if args.no_train else train_figures(policy, prompts)
    print("train", train, flush=True)

    commit = args.commit or subprocess.run(
        ["git", "-C", str(args.code), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True).stdout.strip() or "exported tree"
    entry = {
        "label": args.label, "code": commit, "config": str(args.config.relative_to(ROOT)),
        "model": f"{model_cfg.model_type}, {params / 1e6:.1f}M parameters, {dtype}",
        "threads": 1, "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()}-core CPU (shared), "
                   f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GB",
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "load_seconds": load, "decode": decode, "hardware": hardware, "train": train,
        "cycle_stages": None,
        "cycle_stages_note": "not measured here: bench/loop_real.py runs whole cycles",
    }
    data = json.loads(OUT.read_text()) if OUT.exists() else {}
    # a rerun under the same label adds a round: the headline figures are medians over rounds
    rounds = data.get(args.label, {}).get("rounds", []) + [
        {"date": entry["date"], "code": commit, "uptime": entry["uptime"], "decode": decode,
         "train": train}]
    entry["rounds"] = rounds
    entry["decode_limit_ratio"] = {b: statistics.median(r["decode"][b]["decode_limit_ratio"]
                                                        for r in rounds if b in r["decode"])
                                   for b in decode}
    entry["step_cpu_s"] = {b: statistics.median(r["decode"][b]["step_cpu_s"]
                                                for r in rounds if b in r["decode"])
                           for b in decode}
    entry["decode_tokens_per_cpu_s"] = {b: round(int(b) / entry["step_cpu_s"][b], 2)
                                        for b in decode}
    trains = [r["train"]["tokens_per_cpu_s"] for r in rounds if r.get("train")]
    entry["train_tokens_per_cpu_s"] = statistics.median(trains) if trains else None
    data[args.label] = entry
    OUT.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(json.dumps({"decode_limit_ratio": entry["decode_limit_ratio"], "load": load}))


if __name__ == "__main__":
    main()
