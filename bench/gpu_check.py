"""The steps of scripts/gpu_check.sh that are Python: the device, one RL step, one DeepSpeed step.

    python3 bench/gpu_check.py env --out DIR [--cpu-smoke]
    python3 bench/gpu_check.py rl  --out DIR [--cpu-smoke]
    python3 -m torch.distributed.run --nproc-per-node 1 bench/gpu_check.py ds --out DIR [...]

``env``: asserts CUDA (not with ``--cpu-smoke``), prints the device and the versions that matter
→ ``env.json``. ``rl``: a tiny Qwen3-MoE (random init, built from its config class) samples rows
on the CPU in fp32 with top_p 0.9; one ``RLRecipe`` step on the device in bf16 autocast (fp32
master weights) with router replay → ``rl_step.json``: loss finite, KL(theta || ref) ≈ 0 and the
ratio pi_theta / pi_prox ≈ 1 (same weights at step 0), the importance weight pi_prox / pi_b ≈ 1
(the CPU-fp32 sampler against the device-bf16 trainer), no replayed route replaced; and the
per-token log-prob gap of a bf16 forward against an fp32 one, with the output head in fp32 (the
trainer's) and in bf16 (what fp32 logits remove). ``ds``: one DeepSpeed ZeRO-1 bf16 step of the toy
MoE with router replay, launched by torchrun (so LOCAL_RANK picks the GPU) → ``ds_step.json``:
ratio ≈ 1 and KL ≈ 0 at step 0, policy and reference both bf16, no replayed route replaced.

Each writes its JSON with every check's value, bound and verdict, and exits 1 when one fails. The
bounds were set before any GPU run. ``--cpu-smoke`` runs the same code on the CPU at the same tiny
shapes (bf16 autocast on the CPU). Left out: timing (bench/train_gpu.py does that).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
from pathlib import Path

BOUNDS = {
    "kl_theta_ref_k3": 1e-3,  # |KL| at step 0: policy and reference are the same weights
    "ratio_mean": 1e-3,  # |ratio - 1| at step 0
    "is_weight_mean": 0.05,  # |pi_prox / pi_b - 1|: CPU fp32 sampler vs device bf16 trainer
}


def _check(name: str, value: float, ok: bool, bound: str) -> dict:
    return {"name": name, "value": value, "bound": bound, "ok": bool(ok)}


def _bounded(metrics: dict, key: str, centre: float) -> dict:
    v = float(metrics[key])
    return _check(key, v, math.isfinite(v) and abs(v - centre) < BOUNDS[key],
                  f"|x - {centre}| < {BOUNDS[key]}")


def _write(out: Path, name: str, result: dict) -> int:
    result["ok"] = all(c["ok"] for c in result.get("checks", []))
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(result, indent=2, default=str))
    for c in result.get("checks", []):
        print(f"  {'ok  ' if c['ok'] else 'FAIL'} {c['name']:28s} {c['value']!s:>24s}  "
              f"({c['bound']})")
    print(f"{name}: {'ok' if result['ok'] else 'FAILED'}")
    return 0 if result["ok"] else 1


# -- env ------------------------------------------------------------------------------------

def env_step(out: Path, smoke: bool) -> int:
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "cuda_runtime": torch.version.cuda, "transformers": transformers.__version__,
            "cuda_available": cuda, "smoke": smoke}
    for dist in ("pydantic", "pydantic-core", "deepspeed", "safetensors", "pyarrow"):
        from importlib import metadata

        try:
            info[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            info[dist] = None
    if cuda:
        props = torch.cuda.get_device_properties(0)
        info.update(device=torch.cuda.get_device_name(0), capability=list(
            torch.cuda.get_device_capability(0)), memory_gib=props.total_memory / 2**30,
            device_count=torch.cuda.device_count(), bf16=torch.cuda.is_bf16_supported())
    print(json.dumps(info, indent=2))
    checks = [] if smoke else [_check("cuda_available", cuda, cuda, "True")]
    return _write(out, "env.json", {"env": info, "checks": checks})


# -- one RL step on the tiny Qwen3-MoE ------------------------------------------------------

TINY_QWEN3_MOE = dict(family="qwen3_moe", hidden=128, layers=2, heads=4, kv_heads=2,
                      moe_intermediate=64, experts=8, top_k=2, vocab=512)


def _tiny_champion(work: Path):
    import pyarrow as pa

    from policy.config import HFPolicyConfig, TinyHFSpec
    from policy.loader import load_policy
    from tasks.toy import generate_tasks
    from trainer.rollout import policy_rows

    policy = load_policy(HFPolicyConfig(build=TinyHFSpec(**TINY_QWEN3_MOE), dtype="float32"),
                         workdir=work)
    policy.save(work / "champion", metadata={"model_version": 1})
    rows = policy_rows(policy, generate_tasks(8, seed=0, split="train"), samples=2,
                       temperature=1.0, top_p=0.9, seed=0, max_new_tokens=16)  # CPU, fp32
    signs = [1.0 if i % 2 == 0 else -1.0 for i in range(rows.num_rows)]  # both signs of A
    rows = rows.set_column(rows.schema.get_field_index("reward"), "reward", pa.array(signs))
    return work / "champion", rows


def logprob_gap(recipe) -> dict:
    """Per response token: |log pi_bf16 - log pi_fp32| with the head in fp32 (the trainer's)
    and with the head in bf16 (a bf16 projection before the fp32 log-softmax); router replay on,
    temperature applied, no nucleus (the raw distribution)."""
    import torch

    from policy.base import output_head
    from trainer.recipe import autocast, policy_logprobs

    batch = recipe._collate(recipe.samples).to(recipe.device)
    kw = dict(replay=True, replay_min_ratio=recipe.config.replay_min_ratio)
    with torch.no_grad():
        fp32, _ = policy_logprobs(recipe.plug, batch, **kw)
        with autocast(recipe.device, "bf16"):
            bf16, out = policy_logprobs(recipe.plug, batch, return_hidden=True, **kw)
            logits = output_head(recipe.plug)(out.hidden)  # the projection in bf16
        temp = batch.temperature.view(-1, 1, 1)
        bf16_head = torch.log_softmax(logits.float() / temp, -1).gather(
            -1, batch.targets.unsqueeze(-1)).squeeze(-1)
    m = batch.resp_mask
    gap, gap_head = (bf16 - fp32).abs()[m], (bf16_head - fp32).abs()[m]
    return {"tokens": int(m.sum()), "head_dtype_of_bf16_run": str(logits.dtype),
            "fp32_head_mean": float(gap.mean()), "fp32_head_max": float(gap.max()),
            "bf16_head_mean": float(gap_head.mean()), "bf16_head_max": float(gap_head.max())}


def rl_step(out: Path, smoke: bool) -> int:
    import torch

    from trainer.config import TrainerConfig
    from trainer.recipe import RLRecipe

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="gpu-check-rl-") as tmp:
        champion, rows = _tiny_champion(Path(tmp))
        cfg = TrainerConfig(steps=1, batch_size=rows.num_rows, lr=1e-5, seed=0,
                            device="cpu" if smoke else "cuda", precision="bf16",
                            router_replay=True, mismatch_every=1)
        recipe = RLRecipe(champion, rows, cfg)
        recipe.setup()
        gap = logprob_gap(recipe)
        metrics = recipe.train()
        dtypes = sorted({str(p.dtype) for p in recipe.policy.parameters()})
        device = str(next(recipe.policy.parameters()).device)
        recipe.cleanup()
    checks = [
        _check("loss_finite", metrics["loss"], math.isfinite(metrics["loss"]), "finite"),
        _bounded(metrics, "kl_theta_ref_k3", 0.0),
        _bounded(metrics, "ratio_mean", 1.0),
        _bounded(metrics, "is_weight_mean", 1.0),
        _check("replay_replaced", metrics["replay_replaced"], metrics["replay_replaced"] == 0,
               "== 0"),
        _check("rows_top_p", metrics["rows_top_p"], metrics["rows_top_p"] == rows.num_rows,
               f"== {rows.num_rows} (every row top_p 0.9)"),
    ]
    result = {"model": f"tiny qwen3_moe {TINY_QWEN3_MOE}", "device": device,
              "weights": dtypes, "precision": "bf16 autocast, fp32 master weights",
              "sampled_on": "cpu fp32, temperature 1.0, top_p 0.9",
              "logprob_gap_bf16_vs_fp32": gap, "checks": checks, "metrics": metrics}
    print(f"logprob gap per token, bf16 vs fp32 forward: {gap}")
    return _write(out, "rl_step.json", result)


# -- one DeepSpeed ZeRO-1 bf16 step ---------------------------------------------------------

def ds_step(out: Path, smoke: bool) -> int:

    from trainer.config import DeepSpeedBackend, TrainerConfig
    from trainer.fixtures import tiny_champion
    from trainer.recipe import RLRecipe

    with tempfile.TemporaryDirectory(prefix="gpu-check-ds-") as tmp:
        _, champion, rows = tiny_champion(Path(tmp))  # sampled on the CPU in fp32
        cfg = TrainerConfig(steps=1, batch_size=rows.num_rows, lr=1e-5, seed=0,
                            device="cpu" if smoke else "cuda", router_replay=True,
                            mismatch_every=0,
                            backend=DeepSpeedBackend(zero_stage=1, ep_size=1, bf16=True))
        recipe = RLRecipe(champion, rows, cfg)
        recipe.setup()
        metrics = recipe.train()
        policy_dtypes = sorted({str(p.dtype) for p in recipe.policy.parameters()})
        ref_dtypes = sorted({str(p.dtype) for p in recipe.reference.parameters()})
        device = str(next(recipe.policy.parameters()).device)
        rank = recipe.rank
        recipe.cleanup()
    if rank != 0:
        return 0
    checks = [
        _check("loss_finite", metrics["loss"], math.isfinite(metrics["loss"]), "finite"),
        _bounded(metrics, "kl_theta_ref_k3", 0.0),
        _bounded(metrics, "ratio_mean", 1.0),
        _check("replay_replaced", metrics["replay_replaced"], metrics["replay_replaced"] == 0,
               "== 0"),
        _check("weights_bf16", policy_dtypes + ref_dtypes,
               policy_dtypes == ref_dtypes == ["torch.bfloat16"], "policy and reference bf16"),
    ]
    if not smoke:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        checks.append(_check("device", device, device == f"cuda:{local}", f"cuda:{local}"))
    result = {"model": "toy MoE (d 32, 2 layers, 4 experts top-2)", "device": device,
              "backend": "deepspeed zero 1, bf16, ep_size 1", "checks": checks,
              "metrics": metrics}
    return _write(out, "ds_step.json", result)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=["env", "rl", "ds"])
    p.add_argument("--out", type=Path, required=True, help="folder for the step's JSON")
    p.add_argument("--cpu-smoke", action="store_true", help="on the CPU at the same shapes")
    args = p.parse_args(argv)
    step = {"env": env_step, "rl": rl_step, "ds": ds_step}[args.step]
    return step(args.out, args.cpu_smoke)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
