"""Training throughput and MFU on one GPU: an HF-family MoE sized for an H100, and the toy MoE.

Models, random init (no download): ``olmoe`` is OLMoE-1B-7B-shaped (d 2048, 64 experts top-8,
expert width 1024, vocab 50304) with 4 of its 16 layers; ``qwen3moe`` is Qwen3-30B-A3B-shaped
(d 2048, 128 experts top-8, expert width 768, GQA 32/4 heads, vocab 151936) with 4 of its 48
layers; ``toy`` is trainer/configs/gpu_h100.json (this repo's MoE, grouped-GEMM experts). Built
from ``transformers`` config classes (SDPA attention, grouped_mm experts). Training: fused AdamW,
random tokens of full length (throughput does not depend on the data), next-token loss plus the
router's load-balance loss. Precision: the toy runs bf16 autocast over fp32 weights; the HF models
hold bf16 weights (``--hf-weights``), because transformers' grouped_mm casts its input to the
weights' dtype, so fp32 weights would run the experts in fp32 (torch's slow fallback, a host sync).

MFU = 6 x N_active x tokens/s / peak, with N_active the parameters one token multiplies (top-k of
the experts, the LM head; not the input embeddings, a lookup) and the peak the H100 SXM bf16 dense
figure, 989 TFLOP/s (``--peak-tflops`` for another GPU). ``mfu_incl_attention`` adds the
attention term 12 x layers x d_attn x seq_len per token (PaLM's convention). Goal >= 40%.

    .venv/bin/python bench/train_gpu.py [--models olmoe,toy --batch 8 --seq 2048 --steps 10]
    .venv/bin/python bench/train_gpu.py --smoke      # tiny shapes on the CPU: the code path only

Writes bench/results/train_gpu.json, or ``--out`` (top level: the first HF model's ``model``,
``tokens_per_s``, ``mfu``, ``peak_mem_gb``; every model under ``runs``, each with those keys).
Without CUDA it says so and writes nothing; ``--smoke`` writes only to an explicit ``--out``.
``--profile N`` runs one more step under ``torch.profiler`` and records, per run, the step's
device time split into matrix multiplies, attention, optimizer and the rest, and its N kernels
of most self time (``profile``; CPU time under ``--smoke``). ``--sdpa`` pins the attention
backend (flash, cudnn, efficient, math) where torch's own choice is slower; ``--causal-only``
gives the HF models attention with no materialized mask (SDPA's ``is_causal``; the rows here
have no padding, so it computes the same).
Left out: torch.compile by default (``--compile``), activation checkpointing, FP8.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "train_gpu.json"
TOY_CONFIG = Path(__file__).parents[1] / "trainer" / "configs" / "gpu_h100.json"
H100_SXM_BF16_DENSE_TFLOPS = 989.0

HF_SHAPES: dict[str, tuple[str, dict]] = {
    "olmoe": ("olmoe", dict(
        hidden_size=2048, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=16,
        num_key_value_heads=16, num_experts=64, num_experts_per_tok=8, vocab_size=50304,
        max_position_embeddings=4096)),
    "qwen3moe": ("qwen3_moe", dict(
        hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_hidden_layers=4, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        num_experts=128, num_experts_per_tok=8, vocab_size=151936, norm_topk_prob=True,
        max_position_embeddings=4096)),
}
SMOKE_OVERRIDES = dict(hidden_size=64, intermediate_size=64, moe_intermediate_size=32,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, num_experts=8, num_experts_per_tok=2, vocab_size=512)


CAUSAL_SDPA = "sdpa_causal"
"""An attention implementation name: transformers' SDPA forward with no mask function behind it,
so no mask is built and SDPA runs with ``is_causal`` (exact for rows without padding)."""


def hf_moe(name: str, smoke: bool = False, *, causal_only: bool = False):
    """A random-init HF MoE causal LM of the named shape (``HF_SHAPES``). ``causal_only``: its
    attention gets no materialized mask (:data:`CAUSAL_SDPA`); under torch.compile transformers
    otherwise passes a (batch, 1, seq, seq) boolean mask, which keeps SDPA off its flash kernels."""
    from transformers import AttentionInterface, AutoConfig, AutoModelForCausalLM
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    attention = "sdpa"
    if causal_only:
        AttentionInterface.register(CAUSAL_SDPA, sdpa_attention_forward)
        attention = CAUSAL_SDPA
    model_type, shape = HF_SHAPES[name]
    if smoke:
        shape = {**shape, **{k: v for k, v in SMOKE_OVERRIDES.items() if k in shape},
                 "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}
    cfg = AutoConfig.for_model(model_type, **shape, output_router_logits=True)
    return AutoModelForCausalLM.from_config(cfg, attn_implementation=attention)


def hf_active_params(model) -> int:
    """Parameters one token multiplies: experts count top_k / n_experts, input embeddings not."""
    cfg = model.config
    k, e = cfg.num_experts_per_tok, cfg.num_experts
    total = 0
    for name, p in model.named_parameters():
        if p is model.get_input_embeddings().weight:
            continue
        total += p.numel() * k // e if ".experts." in name else p.numel()
    return total


def toy_active_params(model) -> int:
    embeddings = model.tok_emb.weight.numel() + model.pos_emb.weight.numel()
    return model.num_params(active=True) - embeddings


SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                 "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}
"""``--sdpa`` names and torch's ``SDPBackend`` members; ``auto`` leaves the choice to torch."""


def _attention(sdpa: str):
    """A context pinning scaled_dot_product_attention to one backend (``auto``: no pin)."""
    import contextlib

    if sdpa == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[sdpa]))


def _step_fn(kind: str, model, opt, device, vocab: int, sdpa: str = "auto"):
    import torch
    import torch.nn.functional as F

    def step(x):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"), \
                _attention(sdpa):
            if kind == "hf":
                loss = model(input_ids=x, labels=x).loss  # includes router_aux_loss_coef x aux
            else:
                out = model(x[:, :-1])
                loss = F.cross_entropy(out.logits.reshape(-1, vocab), x[:, 1:].reshape(-1))
                loss = loss + out.aux_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


PROFILE_KINDS = (("attention", ("flash", "attention", "sdpa", "fmha")),
                 ("optimizer", ("adam", "foreach", "multi_tensor")),
                 ("matmul", ("gemm", "grouped_mm", "matmul", "mm", "addmm", "cutlass", "nvjet",
                             "sm90_xmma", "cublas")))
"""How :func:`kernel_kind` names a kernel: the first kind one of whose words is in its
lower-cased name; everything else is ``other`` (elementwise, norms, softmax, copies, routing)."""


def kernel_kind(name: str) -> str:
    low = name.lower()
    for kind, words in PROFILE_KINDS:
        if any(w in low for w in words):
            return kind
    return "other"


def profile_step(step, x, device, top: int) -> dict:
    """One ``step(x)`` under torch.profiler: its device (CPU under --smoke) self time by
    :func:`kernel_kind` and its ``top`` kernels of most self time, in ms and as shares."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        step(x)
        _sync(device)
    # On CUDA only the kernels themselves: a CPU op's self device time and a range annotated
    # on the device timeline (the optimizer's step) repeat the time of the kernels inside them.
    events = [(e.key, (e.self_device_time_total if cuda else e.self_cpu_time_total) / 1e3)
              for e in prof.key_averages()
              if not e.is_user_annotation and (not cuda or e.device_type == DeviceType.CUDA)]
    events = sorted(((k, kernel_kind(k), ms) for k, ms in events
                     if ms > 0 and not k.startswith("ProfilerStep")), key=lambda e: -e[2])
    total = sum(ms for *_, ms in events) or 1.0
    kinds: Counter = Counter()
    for _, kind, ms in events:
        kinds[kind] += ms
    return {"clock": "device" if cuda else "cpu", "total_ms": total,
            "by_kind": {k: {"ms": ms, "share": ms / total} for k, ms in kinds.most_common()},
            "top": [{"name": k[:160], "kind": kind, "ms": ms, "share": ms / total}
                    for k, kind, ms in events[:top]]}


def measure(name: str, *, batch: int, seq: int, steps: int, warmup: int, peak_tflops: float,
            compile_model: bool, smoke: bool, hf_weights: str = "bf16", profile: int = 0,
            sdpa: str = "auto", causal_only: bool = False) -> dict:
    """Train ``name`` for warmup + steps steps; tokens/s over the timed steps and MFU."""
    import torch

    device = torch.device("cpu" if smoke else "cuda")
    torch.manual_seed(0)
    if name == "toy":
        from policy.toy.model import MoEConfig, MoETransformer

        cfg = MoEConfig.model_validate_json(TOY_CONFIG.read_text())
        if smoke:
            cfg = cfg.model_copy(update=dict(d_model=64, n_layers=2, d_ff=64, n_heads=4))
        seq = min(seq, cfg.max_seq_len)
        model, kind, vocab = MoETransformer(cfg), "toy", cfg.vocab_size
        n_active, layers, d_attn = toy_active_params(model), cfg.n_layers, cfg.d_model
    else:
        with device:  # random init on the device: seconds, not minutes, for 1.9B parameters
            model, kind = hf_moe(name, smoke, causal_only=causal_only), "hf"
        c = model.config
        vocab, n_active, layers = c.vocab_size, hf_active_params(model), c.num_hidden_layers
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        d_attn = c.num_attention_heads * head_dim
    if kind == "hf" and hf_weights == "bf16" and not smoke:
        model = model.to(torch.bfloat16)
    model = model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    run = torch.compile(model) if compile_model else model
    step = _step_fn(kind, run, opt, device, vocab, sdpa)
    x = torch.randint(0, min(vocab, 256 if kind == "toy" else vocab), (batch, seq), device=device)
    for _ in range(warmup):
        step(x)
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step(x)
    _sync(device)
    seconds = time.perf_counter() - start
    tokens_per_step = batch * (seq - 1 if kind == "toy" else seq)
    tps = steps * tokens_per_step / seconds
    peak = peak_tflops * 1e12
    extra = {"profile": profile_step(step, x, device, profile)} if profile else {}
    return {
        "model": name if kind == "toy" else f"{name} ({model.config.model_type}, "
        f"{layers} layers, random init)",
        "tokens_per_s": tps, "mfu": 6.0 * n_active * tps / peak,
        "mfu_incl_attention": (6.0 * n_active + 12.0 * layers * d_attn * seq) * tps / peak,
        "params_total": sum(p.numel() for p in model.parameters()), "params_active": n_active,
        "batch": batch, "seq_len": seq, "steps": steps, "warmup": warmup,
        "compiled": compile_model, "sdpa": sdpa,
        "attention_mask": "none (is_causal)" if causal_only or kind == "toy" else "transformers'",
        "max_memory_gib": _max_memory_gib(device),
        "peak_mem_gb": _peak_mem_gb(device),
        "weights": str(next(model.parameters()).dtype).removeprefix("torch."),
        **extra,
    }


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _max_memory_gib(device) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None


def _peak_mem_gb(device) -> float | None:
    """Peak allocated device memory in GB (1e9 bytes); the process's peak RSS on the CPU."""
    import resource

    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="olmoe,toy", help="comma list of olmoe, qwen3moe, toy")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=2048, help="sequence length (toy: its max)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--peak-tflops", type=float, default=H100_SXM_BF16_DENSE_TFLOPS,
                   help="bf16 dense peak of the GPU (default: H100 SXM, 989)")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--hf-weights", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--sdpa", choices=["auto", *SDPA_BACKENDS], default="auto",
                   help="pin scaled_dot_product_attention's backend (default: torch's choice)")
    p.add_argument("--causal-only", action="store_true",
                   help="HF models: no materialized attention mask, SDPA with is_causal")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="profile one more step; keep its N kernels of most self time")
    p.add_argument("--smoke", action="store_true",
                   help="tiny shapes on the CPU; writes only to an explicit --out")
    p.add_argument("--out", type=Path, default=None, help=f"JSON path (default {RESULTS})")
    args = p.parse_args(argv)
    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("train_gpu: skipped, no CUDA device (torch.cuda.is_available() is False); "
              "nothing written. --smoke runs the code path on the CPU.", file=sys.stderr)
        return 0
    kw = dict(batch=2, seq=32, steps=1, warmup=1) if args.smoke else dict(
        batch=args.batch, seq=args.seq, steps=args.steps, warmup=args.warmup)
    runs = [measure(m.strip(), peak_tflops=args.peak_tflops, compile_model=args.compile,
                    smoke=args.smoke, hf_weights=args.hf_weights, profile=args.profile,
                    sdpa=args.sdpa, causal_only=args.causal_only, **kw)
            for m in args.models.split(",")]
    for r in runs:
        print(f"{r['model']:48s} {r['tokens_per_s']:12.0f} tok/s  MFU {r['mfu']:.1%} "
              f"(incl. attention {r['mfu_incl_attention']:.1%})")
        if "profile" in r:
            print("  profiled step, " + r["profile"]["clock"] + " time: " + ", ".join(
                f"{k} {v['share']:.0%}" for k, v in r["profile"]["by_kind"].items()))
    if args.smoke and args.out is None:
        return 0
    head = next((r for r in runs if r["model"] != "toy"), runs[0])
    result = {"model": head["model"], "tokens_per_s": head["tokens_per_s"], "mfu": head["mfu"],
              "peak_mem_gb": head["peak_mem_gb"],
              "peak_tflops": args.peak_tflops, "peak": "H100 SXM bf16 dense 989 TFLOP/s"
              if args.peak_tflops == H100_SXM_BF16_DENSE_TFLOPS else "user-given",
              "device": "cpu (smoke: tiny shapes, not a measurement)" if args.smoke
              else torch.cuda.get_device_name(),
              "precision": "bf16 autocast; each run's weights dtype under runs",
              "runs": runs}
    out = args.out or RESULTS
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
