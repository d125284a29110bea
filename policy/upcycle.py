"""Sparse upcycling: a dense HF causal LM becomes an MoE of the matching family shape.

``python -m policy.upcycle SRC DST --experts E --top-k K`` (``--gguf-file`` for a GGUF source)
reads a dense Llama / Qwen2 / Qwen3 model (SmolLM2 is a Llama), builds the MoE config of the
same shape — Llama -> Mixtral, Qwen2 -> Qwen2-MoE, Qwen3 -> Qwen3-MoE (Komatsuzaki et al.,
"Sparse Upcycling", 2023) — copies every non-MLP weight, makes each of the E experts a copy of
the dense MLP, and gives each layer a new router initialised small and random. The gate weights
renormalise over the top-k (Mixtral always, Qwen-MoE with ``norm_topk_prob=True``), so at
initialisation the MoE computes the dense model's function whatever the router says. Qwen2-MoE's
shared expert is kept at zero output (its down projection and gate are zero). The result is
saved with ``save_pretrained`` (safetensors + config + tokenizer), the layout vLLM and SGLang
load. Left out: expert noise/perturbation schemes, partial upcycling of some layers only.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from policy.config import PolicyLoadError

TARGETS = {"llama": "mixtral", "qwen2": "qwen2_moe", "qwen3": "qwen3_moe"}
_DROP = ("model_type", "architectures", "transformers_version", "auto_map", "_name_or_path",
         "dtype", "torch_dtype", "quantization_config")


def moe_config(dense_config, experts: int, top_k: int):
    """The MoE config of the matching family for ``dense_config`` (a transformers config)."""
    import transformers

    src = dense_config.model_type
    if src not in TARGETS:
        raise PolicyLoadError(f"config.json: field 'model_type' = '{src}' cannot be upcycled; "
                              f"supported dense families: {sorted(TARGETS)}")
    if not 1 <= top_k <= experts:
        raise ValueError(f"need 1 <= top_k <= experts, got top_k={top_k}, experts={experts}")
    base = {k: v for k, v in dense_config.to_dict().items() if k not in _DROP}
    inter = dense_config.intermediate_size
    if src == "llama":
        return transformers.MixtralConfig(**{**base, "num_local_experts": experts,
                                             "num_experts_per_tok": top_k,
                                             "sliding_window": None})
    moe = dict(num_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=inter,
               norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[])
    if src == "qwen2":
        return transformers.Qwen2MoeConfig(**{**base, **moe,
                                              "shared_expert_intermediate_size": inter})
    return transformers.Qwen3MoeConfig(**{**base, **moe})


def upcycle_model(dense, experts: int, top_k: int, *, router_std: float = 0.02, seed: int = 0):
    """The upcycled MoE model (same dtype as ``dense``), see the module docstring."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    config = moe_config(dense.config, experts, top_k)
    torch.manual_seed(seed)
    # every weight is set below: the parameters start empty (no random init of the experts,
    # seconds of CPU at SmolLM2's size); buffers (rotary tables) are built as usual
    with init_empty_weights(include_buffers=False):
        moe = AutoModelForCausalLM.from_config(config, dtype=next(dense.parameters()).dtype)
    dense_state = dense.state_dict()
    moe_state = moe.state_dict()
    new = {k: v.clone() for k, v in dense_state.items() if ".mlp." not in k}
    dropped = sorted(set(new) - set(moe_state))
    if dropped:  # e.g. attention biases the MoE family has no place for
        raise PolicyLoadError(f"config.json: {config.model_type} has no weight for {dropped[:3]}; "
                              f"this {dense.config.model_type} cannot be upcycled losslessly")
    gen = torch.Generator().manual_seed(seed)
    for i in range(config.num_hidden_layers):
        new.update(_layer_experts(dense_state, moe_state, i, experts, router_std, gen))
    missing = set(moe_state) - set(new)
    if missing:
        raise RuntimeError(f"upcycle left weights unset: {sorted(missing)[:5]}")
    moe.load_state_dict(new, strict=True, assign=True)
    if getattr(config, "tie_word_embeddings", False):
        moe.tie_weights()
    return moe.eval()


def _layer_experts(dense_state: dict, moe_state: dict, i: int, experts: int, router_std: float,
                   gen) -> dict:
    import torch

    d = f"model.layers.{i}.mlp."
    gate, up, down = (dense_state[d + n + ".weight"] for n in ("gate_proj", "up_proj",
                                                               "down_proj"))
    router = moe_state[d + "gate.weight"]
    out = {
        d + "experts.gate_up_proj": torch.cat([gate, up], 0).unsqueeze(0).repeat(experts, 1, 1),
        d + "experts.down_proj": down.unsqueeze(0).repeat(experts, 1, 1),
        d + "gate.weight": (torch.randn(router.shape, generator=gen) * router_std).to(router.dtype),
    }
    for k, v in moe_state.items():  # Qwen2-MoE's shared expert: zero output at init
        if k.startswith(d + "shared_expert"):
            zero = "down_proj" in k or "shared_expert_gate" in k
            out[k] = torch.zeros(v.shape, dtype=v.dtype) if zero \
                else torch.randn(v.shape, generator=gen).to(v.dtype) * 0.02
    return out


def upcycle(src: Path, dst: Path, *, experts: int, top_k: int, gguf_file: str | None = None,
            router_std: float = 0.02, seed: int = 0) -> Path:
    """Read the dense model at ``src``, write the upcycled MoE to ``dst``; returns ``dst``."""
    import torch

    from policy import hf_checks

    src, dst = Path(src), Path(dst)
    if gguf_file is not None:
        dense, tokenizer = hf_checks.load_gguf(src, gguf_file, torch.float32)
    else:
        hf_checks.check_dir(src)
        dense, tokenizer = hf_checks.load_dir(src, torch.float32)
    hf_checks.check_tokenizer(tokenizer, src)
    moe = upcycle_model(dense, experts, top_k, router_std=router_std, seed=seed)
    dst.mkdir(parents=True, exist_ok=True)
    moe.save_pretrained(dst)
    tokenizer.save_pretrained(dst)
    return dst


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m policy.upcycle",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("src", type=Path, help="dense HF model directory (or folder of a GGUF file)")
    ap.add_argument("dst", type=Path, help="output directory for the MoE")
    ap.add_argument("--experts", type=int, default=4, help="experts per MoE layer")
    ap.add_argument("--top-k", type=int, default=2, help="experts per token")
    ap.add_argument("--gguf-file", default=None, help="GGUF file name inside SRC")
    ap.add_argument("--router-std", type=float, default=0.02, help="std of the new routers")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    out = upcycle(a.src, a.dst, experts=a.experts, top_k=a.top_k, gguf_file=a.gguf_file,
                  router_std=a.router_std, seed=a.seed)
    print(out)


if __name__ == "__main__":
    main()
