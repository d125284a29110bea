"""Training throughput on CPU: the toy MoE (loop and grouped-GEMM experts), a dense model of equal
active parameters, and a tiny Hugging Face Qwen3-MoE of about the toy's size.

All see the same batches (task prompts + reference answers, right-padded) for the same number of
optimizer steps; runs alternate between the models in rounds so that load from other processes
hits all alike, and each figure is the median tokens/s. Goal: moe_over_dense >= 0.7.

- ``moe``: the toy with the per-expert loop (the CPU default); ``moe_grouped``: the same model
  with ``F.grouped_mm`` experts (the CUDA default); ``dense``: ``MoEConfig(ffn="dense")``.
- ``hf_qwen3moe``: ``Qwen3MoeForCausalLM`` from a config (random init, no download) shaped like
  the toy (vocab 259, d 128, 3 layers, 4 heads, 4 experts top-2; SwiGLU experts of width 176 so
  the parameter count matches). Its step is the same SFT step (cross-entropy on answer tokens plus
  the router's load-balance loss, AdamW).
- ``rl_toy`` / ``rl_hf_qwen3moe``: one step of the RL recipe (trainer/recipe.py: policy forward
  with router replay, clipped surrogate + KL to the champion + anchor + router aux loss, backward,
  AdamW) through the Policy plug, on reward rows each model sampled itself (8 tokens, T = 1) from
  the same task prompts: the toy MoE (loop experts) and a tiny Qwen3-MoE built by policy/tiny.py
  (its own BPE tokenizer of 512 tokens, d 128, 3 layers, 4 experts top-2, expert width 176).
  Setup (reference log-probs) is not timed; tokens are the real input positions of each batch.

    .venv/bin/python bench/train_cpu.py [--rounds 5 --steps 6 --threads 2]

``--smollm2``: instead, the regime for a real model on CPU, on the SmolLM2-135M shape (random
init from its config: vocab 49,152, d 576, 30 layers, 9 heads / 3 KV heads, tied head; no
download): ``dense`` and ``upcycled`` (policy/upcycle.py: Mixtral, 4 experts top-2), each with
every parameter trained (``full``) and with the top 8 layers only (``top8``:
trainer/trainable.py, embeddings and tied head frozen). One step = forward, cross-entropy on
every position (+ the router's load-balance loss for the MoE), backward, AdamW on the trainable
parameters, at ``--threads`` torch threads; 1 warm-up step, then ``--smollm2-steps`` timed.
Merged into train_cpu.json under ``"smollm2"`` (the toy figures are kept).

Writes bench/results/train_cpu.json. Also reports process CPU-seconds per step, which is less
sensitive than wall time to other jobs sharing the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "train_cpu.json"
HF_AUX_COEF = 0.01  # the toy's aux_loss_coef


def tiny_qwen3moe():
    """The toy-shaped Qwen3-MoE (see the module docstring)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    from policy.toy.tokenizer import BOS, EOS, PAD, VOCAB_SIZE

    cfg = Qwen3MoeConfig(
        vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=352, moe_intermediate_size=176,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, head_dim=32,
        num_experts=4, num_experts_per_tok=2, norm_topk_prob=True, max_position_embeddings=192,
        output_router_logits=True, router_aux_loss_coef=HF_AUX_COEF, tie_word_embeddings=False,
        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
    return Qwen3MoeForCausalLM(cfg)


def hf_sft_step(model, opt, tasks) -> float:
    """The toy's SFT step for an HF causal LM: CE on answer tokens + weighted router aux loss."""
    import torch
    import torch.nn.functional as F

    from trainer.sft import task_batch

    inputs, targets, mask = task_batch(tasks)
    out = model(input_ids=inputs)  # right padding: causal attention alone is exact for real rows
    ce = F.cross_entropy(out.logits[mask].float(), targets[mask])
    loss = ce + HF_AUX_COEF * out.aux_loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(ce.detach())


def rl_recipes(batch_size: int, steps: int, workdir: Path) -> dict:
    """name -> (RLRecipe set up on its own rows, batches of sample indices), toy and HF."""
    import torch

    from policy.config import TinyHFSpec
    from policy.hf import HFPolicy
    from policy.loader import as_policy
    from policy.tiny import build_model, build_tokenizer
    from policy.toy.checkpoint import save_checkpoint
    from policy.toy.model import MoEConfig, MoETransformer
    from tasks.toy import generate_tasks
    from trainer.config import TrainerConfig
    from trainer.recipe import RLRecipe
    from trainer.rollout import policy_rows

    tasks = generate_tasks(batch_size * steps, seed=0, split="train")
    torch.manual_seed(0)
    toy = MoETransformer(MoEConfig.model_validate_json(
        (Path(__file__).parents[1] / "trainer" / "configs" / "toy.json").read_text())).eval()
    save_checkpoint(toy, workdir / "toy", metadata={"model_version": 1})
    spec = TinyHFSpec(family="qwen3_moe", hidden=128, layers=3, heads=4, kv_heads=4,
                      moe_intermediate=176, experts=4, top_k=2, vocab=512, max_positions=192)
    hf = HFPolicy(*build_model(spec, build_tokenizer(vocab=512, seed=0)))
    hf.save(workdir / "hf", metadata={"model_version": 1})
    out = {}
    for name, policy, d in (("rl_toy", as_policy(toy), "toy"), ("rl_hf_qwen3moe", hf, "hf")):
        rows = policy_rows(policy, tasks, seed=0)
        recipe = RLRecipe(workdir / d, rows, TrainerConfig(batch_size=batch_size, lr=1e-4,
                                                           max_staleness=100, seed=0))
        recipe.setup()
        idx = list(range(len(recipe.samples)))
        out[name] = (recipe, [idx[i:i + batch_size] for i in range(0, len(idx), batch_size)])
    return out


def _measure_rl(recipe, batches) -> tuple[float, float, int]:
    tokens = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for idx in batches:
        recipe.train_step(idx)
        tokens += int(recipe._collate([recipe.samples[i] for i in idx]).pad_mask.sum())
    return time.perf_counter() - wall, time.process_time() - cpu, tokens


def _measure(model, opt, batches, step) -> tuple[float, float, int]:
    tokens = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for tasks in batches:
        step(model, opt, tasks)
        tokens += sum(len(t.prompt) + len(t.reference) + 2 for t in tasks)
    return time.perf_counter() - wall, time.process_time() - cpu, tokens


def _models(threads: int) -> dict:
    import torch

    from policy.toy.model import MoEConfig, MoETransformer
    from trainer.sft import sft_step

    torch.set_num_threads(threads)
    base = MoEConfig.model_validate_json(
        (Path(__file__).parents[1] / "trainer" / "configs" / "toy.json").read_text())
    models = {}
    for name, cfg, impl in (("moe", base, "loop"), ("moe_grouped", base, "grouped"),
                            ("dense", base.model_copy(update={"ffn": "dense"}), "auto")):
        torch.manual_seed(0)
        m = MoETransformer(cfg).set_expert_impl(impl).train()
        models[name] = (m, torch.optim.AdamW(m.parameters(), lr=1e-3), sft_step)
    torch.manual_seed(0)
    hf = tiny_qwen3moe().train()
    models["hf_qwen3moe"] = (hf, torch.optim.AdamW(hf.parameters(), lr=1e-3), hf_sft_step)
    return models


def run(rounds: int, steps: int, batch_size: int, threads: int) -> dict:
    import tempfile

    from tasks.toy import generate_tasks

    models = _models(threads)
    tasks = generate_tasks(batch_size * steps, seed=0, split="train")
    batches = [tasks[i * batch_size:(i + 1) * batch_size] for i in range(steps)]
    for m, opt, step in models.values():  # warm-up
        step(m, opt, batches[0])
    rl = rl_recipes(batch_size, steps, Path(tempfile.mkdtemp(prefix="bench-rl-")))
    for recipe, rl_batches in rl.values():  # warm-up
        recipe.train_step(rl_batches[0])
    tps: dict[str, list[float]] = {k: [] for k in [*models, *rl]}
    cpu_tps: dict[str, list[float]] = {k: [] for k in tps}
    for _ in range(rounds):
        runs = [(name, lambda m=m, o=o, s=s: _measure(m, o, batches, s))
                for name, (m, o, s) in models.items()]
        runs += [(name, lambda r=r, b=b: _measure_rl(r, b)) for name, (r, b) in rl.items()]
        for name, measure in runs:
            wall, cpu, n = measure()
            tps[name].append(n / wall)
            cpu_tps[name].append(n / cpu)
    med = {k: statistics.median(v) for k, v in tps.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu_tps.items()}
    moe, hf = models["moe"][0], models["hf_qwen3moe"][0]
    return {
        "moe_tokens_per_s": med["moe"], "dense_tokens_per_s": med["dense"],
        "moe_over_dense": med["moe"] / med["dense"],
        "moe_over_dense_cpu_time": cpu_med["moe"] / cpu_med["dense"],
        "moe_grouped_tokens_per_s": med["moe_grouped"],
        "grouped_over_loop": med["moe_grouped"] / med["moe"],
        "grouped_over_loop_cpu_time": cpu_med["moe_grouped"] / cpu_med["moe"],
        "hf_qwen3moe_tokens_per_s": med["hf_qwen3moe"],
        "hf_qwen3moe_over_toy_moe": med["hf_qwen3moe"] / med["moe"],
        "hf_qwen3moe_params_total": sum(p.numel() for p in hf.parameters()),
        "hf_qwen3moe_params_active": _hf_active(hf),
        "hf_qwen3moe_experts_implementation": hf.config._experts_implementation,
        "hf_qwen3moe_step": "SFT step (CE on answer tokens + router aux loss), same batches as "
        "the toy",
        "rl_toy_tokens_per_s": med["rl_toy"],
        "rl_hf_qwen3moe_tokens_per_s": med["rl_hf_qwen3moe"],
        "rl_hf_qwen3moe_over_rl_toy": med["rl_hf_qwen3moe"] / med["rl_toy"],
        "rl_hf_qwen3moe_params_total": sum(
            p.numel() for p in rl["rl_hf_qwen3moe"][0].policy.parameters()),
        "rl_step": "RLRecipe.train_step (router replay, clipped surrogate, KL to champion and "
        "anchor, aux loss, AdamW) on rows each policy sampled itself (8 new tokens, T=1); "
        "tokens = real input positions",
        "moe_params_total": moe.num_params(),
        "moe_params_active": moe.num_params(active=True),
        "dense_params": models["dense"][0].num_params(),
        "rounds": rounds, "steps_per_round": steps, "batch_size": batch_size, "threads": threads,
        "load_average_1m": _loadavg(),
    }


SMOLLM2_SHAPE = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                     num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                     max_position_embeddings=2048, tie_word_embeddings=True, rms_norm_eps=1e-5,
                     rope_theta=100000.0)
"""SmolLM2-135M(-Instruct)'s LlamaConfig fields."""


def smollm2_model(kind: str):
    """The SmolLM2-shaped model, random init: ``dense`` (Llama) or ``upcycled`` (Mixtral, 4
    experts top-2, every expert a copy of the dense MLP)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from policy.upcycle import upcycle_model

    torch.manual_seed(0)
    dense = LlamaForCausalLM(LlamaConfig(**SMOLLM2_SHAPE))
    if kind == "dense":
        return dense
    moe = upcycle_model(dense, 4, 2)
    moe.config.output_router_logits = True
    return moe


def _smollm2_step(model, opt, ids) -> None:
    import torch
    import torch.nn.functional as F

    out = model(input_ids=ids[:, :-1])
    loss = F.cross_entropy(out.logits.flatten(0, 1).float(), ids[:, 1:].flatten())
    aux = getattr(out, "aux_loss", None)
    if aux is not None:
        loss = loss + HF_AUX_COEF * aux
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    opt.step()


def run_smollm2(steps: int, batch_size: int, seq_len: int, threads: int) -> dict:
    """tokens per second (wall) and per CPU-second of each regime; see the module docstring."""
    import gc

    import torch

    from trainer.trainable import select_trainable

    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, SMOLLM2_SHAPE["vocab_size"], (batch_size, seq_len + 1), generator=gen)
    tokens = batch_size * seq_len
    out: dict = {}
    for kind in ("dense", "upcycled"):
        for regime, scope in (("full", "all"), ("top8", "top_layers")):
            model = smollm2_model(kind).train()
            counts = select_trainable(model, scope=scope, top_layers=8, train_embeddings=False)
            opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
            _smollm2_step(model, opt, ids)  # warm-up (and the optimizer state)
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(steps):
                _smollm2_step(model, opt, ids)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            out[f"{kind}_{regime}"] = {
                "tokens_per_s": tokens * steps / wall, "tokens_per_cpu_s": tokens * steps / cpu,
                "seconds_per_step": wall / steps, **counts}
            print(f"{kind}_{regime}: {out[f'{kind}_{regime}']}", flush=True)
            del model, opt
            gc.collect()
    return {"regimes": out, "steps": steps, "batch_size": batch_size, "seq_len": seq_len,
            "threads": threads, "load_average_1m": _loadavg(),
            "step": "forward, CE on every position (+ 0.01 x router load-balance loss for the "
            "MoE), backward, AdamW on the trainable parameters; random-init SmolLM2 shape",
            "date": time.strftime("%Y-%m-%d", time.gmtime())}


def _hf_active(model) -> int:
    k, e = model.config.num_experts_per_tok, model.config.num_experts
    return sum(p.numel() * k // e if ".experts." in n else p.numel()
               for n, p in model.named_parameters())


def _loadavg() -> float:
    import os

    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--smollm2", action="store_true",
                   help="the SmolLM2-shaped regimes instead (merged under 'smollm2')")
    p.add_argument("--smollm2-steps", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=128)
    args = p.parse_args(argv)
    if args.smollm2:
        figures = run_smollm2(args.smollm2_steps, args.batch_size, args.seq_len, args.threads)
        old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        RESULTS.write_text(json.dumps({**old, "smollm2": figures}, indent=2))
        return
    result = run(args.rounds, args.steps, args.batch_size, args.threads)
    for k, v in result.items():
        print(f"{k:36s} {v:.3f}" if isinstance(v, float) else f"{k:36s} {v}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
