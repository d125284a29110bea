"""A toy causal mixture-of-experts transformer (torch), with router replay.

Pre-norm decoder: learned positions, multi-head causal attention (``scaled_dot_product_attention``)
and, in every layer, a top-k routed MoE feed-forward (Switch/GShard style load-balance loss plus
router z-loss, ST-MoE). Experts are computed by sorting the (token, slot) pairs by expert and
running each expert once on its contiguous slice — dropless, no capacity drops; "tokens over
capacity" is only reported as a health metric. Two implementations of that step give the same
result: one grouped GEMM per weight (``F.grouped_mm`` over the stacked (E, d, d_ff) weights, with
on-device offsets: no host sync; the default for bf16 on CUDA, where its fast kernel runs) and a
per-expert loop (the CPU default: about as fast there, bench/train_cpu.py, and its row padding
bounds oneDNN's per-shape kernel cache over long runs). ``MoETransformer.set_expert_impl`` picks
one; the grouped GEMM runs only where :func:`grouped_mm_supported` allows (16-byte aligned widths,
bf16 on CUDA), else the loop does. Logits are an fp32 projection of the final hidden state
(``policy.base.fp32_logits``), whatever the autocast.

Devices: every tensor a forward pass creates lives on the input's device. Full sequences without
padding, or with right padding only, take ``is_causal=True`` attention with no explicit mask (flash
attention on CUDA); left padding and the KV cache use an explicit mask.

Router replay: ``forward(..., replay_experts=...)`` forces the logged routing while the router still
computes its gate scores (the gate weights are the router's probabilities at the forced experts, so
the router gets gradients). A replayed expert whose probability falls below
``replay_min_ratio`` times the router's own k-th largest probability is implausible and is replaced
by the router's best expert not already chosen.

Left out: tied embeddings (safetensors refuses shared storage), RoPE, expert parallelism
(trainer/ds_backend.py builds the DeepSpeed variant).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import Tensor, nn

from policy.base import fp32_logits

SHAPE_BUCKET = 32
GROUPED_MM_ALIGN_BYTES = 16
"""The grouped GEMM kernels want 16-byte aligned rows (strides) and base pointers."""


class MoEConfig(BaseModel):
    """Shape of the MoE transformer; saved as ``config.json`` next to the weights."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vocab_size: int = Field(259, ge=2, description="Token vocabulary (bytes + specials).")
    d_model: int = Field(128, ge=8, description="Residual stream width.")
    n_layers: int = Field(4, ge=1, le=128, description="Transformer blocks.")
    n_heads: int = Field(4, ge=1, description="Attention heads; must divide d_model.")
    n_experts: int = Field(4, ge=1, le=64, description="Routed experts per MoE layer.")
    top_k: int = Field(2, ge=1, le=8, description="Experts per token.")
    d_ff: int = Field(256, ge=8, description="Hidden width of one expert.")
    max_seq_len: int = Field(192, ge=8, description="Longest sequence (positions table size).")
    aux_loss_coef: float = Field(0.01, ge=0.0, description="Weight of the load-balance loss.")
    z_loss_coef: float = Field(0.001, ge=0.0, description="Weight of the router z-loss.")
    capacity_factor: float = Field(
        1.25, gt=0.0, description="Expert capacity (x fair share) for the over-capacity metric."
    )
    ffn: Literal["moe", "dense"] = Field(
        "moe", description="'dense' replaces each MoE by one MLP of width top_k * d_ff "
        "(equal active parameters; the baseline of bench/train_cpu.py)."
    )

    @model_validator(mode="after")
    def _check(self) -> MoEConfig:
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads={self.n_heads} must divide d_model={self.d_model}")
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k={self.top_k} exceeds n_experts={self.n_experts}")
        return self


@dataclass
class MoEOutput:
    """What a forward pass returns.

    logits: (B, T, V) float32. aux_loss: scalar, already weighted (load balance + z-loss).
    routed_experts: (B, T, L, k) long, the experts actually used. router_probs: L tensors (B, T, E).
    lb_loss / z_loss: unweighted scalars. replay_replaced: how many replayed (token, layer, slot)
    choices the plausibility check replaced (a 0-d tensor on the model's device: reading it syncs).
    """

    logits: Tensor
    aux_loss: Tensor
    routed_experts: Tensor
    router_probs: list[Tensor]
    lb_loss: Tensor
    z_loss: Tensor
    replay_replaced: Tensor | int = 0


@dataclass
class KVCache:
    """Keys/values per layer (B, H, T_past, Dh) and the pad mask of the past (B, T_past)."""

    keys: list[Tensor | None]
    values: list[Tensor | None]
    pad_mask: Tensor | None = None

    @classmethod
    def empty(cls, n_layers: int) -> KVCache:
        return cls([None] * n_layers, [None] * n_layers)

    @property
    def length(self) -> int:
        return 0 if self.pad_mask is None else self.pad_mask.shape[1]


@dataclass
class _Routing:
    idx: Tensor  # (N, k) long
    gates: Tensor  # (N, k) float
    probs: Tensor  # (N, E)
    logits: Tensor  # (N, E)
    replaced: Tensor | int = 0


def _plausible_routing(
    replay: Tensor, probs: Tensor, topk_vals: Tensor, min_ratio: float
) -> tuple[Tensor, Tensor]:
    """Replayed experts (N, k), with implausible or missing (-1) ones replaced by router choices,
    and how many valid ones were replaced (0-d). No host sync: the fill-in always runs."""
    n, k = replay.shape
    e = probs.shape[1]
    valid = (replay >= 0) & (replay < e)
    p_replay = probs.gather(1, replay.clamp(0, e - 1))
    ok = valid & (p_replay >= min_ratio * topk_vals[:, -1:])
    replaced = (valid & ~ok).sum()
    ranking = probs.argsort(dim=1, descending=True)  # (N, E)
    chosen = torch.where(ok, replay, torch.full_like(replay, -1))
    for j in range(k):
        valid_now = (chosen >= 0).long()
        in_use = torch.zeros(n, e, dtype=torch.long, device=probs.device)
        in_use.scatter_add_(1, chosen.clamp(min=0), valid_now)
        free = in_use.gather(1, ranking) == 0
        pick = ranking.gather(1, free.float().argmax(1, keepdim=True)).squeeze(1)
        chosen[:, j] = torch.where(chosen[:, j] >= 0, chosen[:, j], pick)
    return chosen, replaced


ExpertImpl = Literal["auto", "grouped", "loop"]


class MoELayer(nn.Module):
    """Top-k routed experts (GELU MLPs) over flattened tokens (N, d)."""

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.n_experts, self.top_k = cfg.n_experts, cfg.top_k
        self.impl: ExpertImpl = "auto"
        self.router = nn.Linear(cfg.d_model, cfg.n_experts, bias=False)
        scale_in, scale_out = 1 / math.sqrt(cfg.d_model), 1 / math.sqrt(cfg.d_ff)
        self.w_in = nn.Parameter(torch.randn(cfg.n_experts, cfg.d_model, cfg.d_ff) * scale_in)
        self.w_out = nn.Parameter(torch.randn(cfg.n_experts, cfg.d_ff, cfg.d_model) * scale_out)

    def route(self, x: Tensor, replay: Tensor | None, min_ratio: float) -> _Routing:
        logits = self.router(x).float()  # (N, E)
        probs = logits.softmax(-1)
        topk_vals, topk_idx = probs.topk(self.top_k, dim=-1)
        replaced = 0
        if replay is not None:
            topk_idx, replaced = _plausible_routing(replay, probs, topk_vals, min_ratio)
        gates = probs.gather(1, topk_idx)
        gates = gates / gates.sum(-1, keepdim=True)
        return _Routing(topk_idx, gates.to(x.dtype), probs, logits, replaced)

    def grouped(self, device: torch.device, dtype: torch.dtype) -> bool:
        """Whether the grouped GEMM runs: ``impl``, or for "auto" where its fast kernel applies
        (bf16 off the CPU; on the CPU the loop, see the module docstring). Either way only where
        :func:`grouped_mm_supported` allows these shapes and dtype; elsewhere the loop runs
        (same outputs), with one warning when "grouped" was asked for."""
        if self.impl == "loop" or (self.impl == "auto" and
                                   (device.type == "cpu" or dtype != torch.bfloat16)):
            return False
        why = grouped_mm_supported(device, dtype, self.w_in.shape[1], self.w_in.shape[2])
        if why and self.impl == "grouped" and not getattr(self, "_warned", False):
            import warnings

            warnings.warn(f"expert_impl='grouped' falls back to the per-expert loop: {why}",
                          RuntimeWarning, stacklevel=2)
            self._warned = True
        return not why

    def experts(self, x: Tensor, r: _Routing) -> Tensor:
        """Sort (token, slot) pairs by expert; run each expert once on its slice."""
        flat_e = r.idx.reshape(-1)  # (N*k,)
        order = flat_e.argsort(stable=True)
        token_of = order // self.top_k
        xs = x.index_select(0, token_of)
        dtype = _compute_dtype(x)
        if self.grouped(x.device, dtype):
            offs = expert_offsets(flat_e[order], self.n_experts)
            y = grouped_ffn(xs.to(dtype), self.w_in.to(dtype), self.w_out.to(dtype), offs)
        else:
            counts = torch.bincount(flat_e, minlength=self.n_experts).tolist()
            ys = [self._expert(e, xe.to(dtype)) for e, xe in enumerate(xs.split(counts))
                  if counts[e]]
            y = torch.cat(ys)
        y = y.to(x.dtype) * r.gates.reshape(-1)[order].unsqueeze(1)
        return torch.zeros_like(x).index_add_(0, token_of, y)

    def _expert(self, e: int, xe: Tensor) -> Tensor:
        """One expert's MLP on its tokens (n, d). Rows are zero-padded to a multiple of
        SHAPE_BUCKET so the matmul sees few distinct shapes: oneDNN caches a kernel per shape,
        and per-step token counts would otherwise grow that cache (and re-JIT) without end."""
        n = xe.shape[0]
        pad = -n % SHAPE_BUCKET
        if pad:
            xe = F.pad(xe, (0, 0, 0, pad))
        return (F.gelu(xe @ self.w_in[e]) @ self.w_out[e])[:n]


def _compute_dtype(x: Tensor) -> torch.dtype:
    """The autocast dtype of x's device when autocast is on there, else x's own dtype."""
    kind = x.device.type
    if kind in ("cpu", "cuda") and torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return x.dtype


def grouped_mm_supported(device: torch.device, dtype: torch.dtype, d_model: int, d_ff: int,
                         capability: tuple[int, int] | None = None) -> str:
    """"" when ``F.grouped_mm`` takes the expert GEMMs of this shape and dtype on ``device``,
    else why not. Its rules: 16-byte aligned strides (d_model and d_ff times the element size);
    on CUDA, bf16 on SM >= 8.0 (other dtypes go to a slow fallback or fail). ``capability``
    defaults to the device's. Operands are fresh allocations (aligned base pointers)."""
    if not hasattr(F, "grouped_mm"):
        return f"torch {torch.__version__} has no torch.nn.functional.grouped_mm"
    size = dtype.itemsize
    for name, n in (("d_model", d_model), ("d_ff", d_ff)):
        if n * size % GROUPED_MM_ALIGN_BYTES:
            return (f"{name}={n} x {size} bytes is not a multiple of "
                    f"{GROUPED_MM_ALIGN_BYTES} bytes")
    if device.type == "cuda":
        if dtype != torch.bfloat16:
            return f"dtype {dtype} on CUDA (the grouped kernel is bf16)"
        cap = capability or torch.cuda.get_device_capability(device)
        if tuple(cap) < (8, 0):
            return f"compute capability {cap} < (8, 0)"
    return ""


def expert_offsets(sorted_experts: Tensor, n_experts: int) -> Tensor:
    """End offset (int32, on the input's device) of each expert's slice of the sorted ids."""
    bounds = torch.arange(n_experts, device=sorted_experts.device, dtype=sorted_experts.dtype)
    return torch.searchsorted(sorted_experts, bounds, right=True).to(torch.int32)


def grouped_ffn(xs: Tensor, w_in: Tensor, w_out: Tensor, offs: Tensor) -> Tensor:
    """GELU MLP of each expert on its rows of ``xs`` (sorted by expert, slices ending at ``offs``):
    two grouped GEMMs over the stacked weights (E, d, d_ff) and (E, d_ff, d)."""
    return F.grouped_mm(F.gelu(F.grouped_mm(xs, w_in, offs=offs)), w_out, offs=offs)


class DenseFFN(nn.Module):
    """One GELU MLP of width top_k * d_ff: the dense model of equal active parameters."""

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.top_k = cfg.top_k
        self.up = nn.Linear(cfg.d_model, cfg.top_k * cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.top_k * cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.norm1 = nn.RMSNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.norm2 = nn.RMSNorm(cfg.d_model)
        self.ffn: nn.Module = MoELayer(cfg) if cfg.ffn == "moe" else DenseFFN(cfg)

    def attend(self, x: Tensor, mask: Tensor | None, cache: KVCache | None, i: int) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if cache is not None:
            if cache.keys[i] is not None:
                k = torch.cat([cache.keys[i], k], dim=2)
                v = torch.cat([cache.values[i], v], dim=2)
            cache.keys[i], cache.values[i] = k, v
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class MoETransformer(nn.Module):
    """Causal LM whose every feed-forward is a top-k MoE (or dense, see ``MoEConfig.ffn``)."""

    def __init__(self, config: MoEConfig):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.max_seq_len, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = nn.RMSNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        nn.init.normal_(self.tok_emb.weight, std=0.02)
        nn.init.normal_(self.pos_emb.weight, std=0.02)

    def set_expert_impl(self, impl: ExpertImpl) -> MoETransformer:
        """"grouped" (grouped GEMM), "loop" (one matmul per expert) or "auto" (grouped for bf16
        off the CPU); every MoE layer, same outputs. Not part of the checkpoint."""
        for block in self.blocks:
            if isinstance(block.ffn, MoELayer):
                block.ffn.impl = impl
        return self

    def num_params(self, active: bool = False) -> int:
        """Parameter count; ``active`` counts only top_k of the n_experts expert weights."""
        total = sum(p.numel() for p in self.parameters())
        if not active or self.config.ffn == "dense":
            return total
        c = self.config
        per_expert = 2 * c.d_model * c.d_ff
        return total - c.n_layers * (c.n_experts - c.top_k) * per_expert

    def forward(
        self,
        tokens: Tensor,
        *,
        replay_experts: Tensor | None = None,
        pad_mask: Tensor | None = None,
        cache: KVCache | None = None,
        replay_min_ratio: float = 0.1,
        right_padded: bool | None = None,
    ) -> MoEOutput:
        """tokens (B, T) long; replay_experts (B, T, L, k) long, -1 = use the router;
        pad_mask (B, T) bool, True on real tokens (left or right padding); cache: a KVCache
        that this call extends (tokens are then the new positions only). right_padded: True
        when the caller knows pad_mask has right padding only (causal attention without a mask,
        no host sync); None checks it (one sync); outputs at pad positions are unspecified."""
        b, t = tokens.shape
        mask, positions, real = self._masks(tokens, pad_mask, cache, right_padded)
        h = self.tok_emb(tokens) + self.pos_emb(positions)
        routed, probs, lb, zl = [], [], [], []
        replaced = tokens.new_zeros(())
        for i, block in enumerate(self.blocks):
            h = h + block.attend(block.norm1(h), mask, cache, i)
            x = block.norm2(h).reshape(b * t, -1)
            if not isinstance(block.ffn, MoELayer):  # dense, or a DeepSpeed MoE returning l_aux
                y = block.ffn(x)
                if isinstance(y, tuple):
                    y, l_aux = y
                    lb.append(l_aux)
                h = h + y.view(b, t, -1)
                continue
            rep = None if replay_experts is None else replay_experts[:, :, i].reshape(b * t, -1)
            r = block.ffn.route(x, rep, replay_min_ratio)
            h = h + block.ffn.experts(x, r).view(b, t, -1)
            replaced += r.replaced
            routed.append(r.idx.view(b, t, -1))
            probs.append(r.probs.view(b, t, -1))
            lb.append(self._load_balance(r, real))
            zl.append(self._z_loss(r, real))
        logits = fp32_logits(self.lm_head, self.norm(h))  # fp32 before any log-softmax
        return self._output(logits, routed, probs, lb, zl, replaced, b, t)

    def _masks(
        self, tokens: Tensor, pad_mask: Tensor | None, cache: KVCache | None,
        right_padded: bool | None = None,
    ) -> tuple[Tensor | None, Tensor, Tensor]:
        b, t = tokens.shape
        dev = tokens.device
        past = 0 if cache is None else cache.length
        new_mask = (torch.ones(b, t, dtype=torch.bool, device=dev) if pad_mask is None
                    else pad_mask.bool())
        full = new_mask if cache is None or cache.pad_mask is None else torch.cat(
            [cache.pad_mask, new_mask], dim=1)
        if cache is not None:
            cache.pad_mask = full
        positions = (full.long().cumsum(1) - 1).clamp(min=0)[:, past:]
        if past + t > self.config.max_seq_len:
            raise ValueError(f"sequence length {past + t} exceeds max_seq_len "
                             f"{self.config.max_seq_len}")
        if past == 0 and (pad_mask is None or _only_right_padding(new_mask, right_padded)):
            return None, positions, new_mask.reshape(-1)  # causal alone is exact: no mask
        q_pos = torch.arange(past, past + t, device=dev).view(t, 1)
        k_pos = torch.arange(past + t, device=dev).view(1, -1)
        allowed = (k_pos <= q_pos).unsqueeze(0) & full.unsqueeze(1)  # (B, t, past + t)
        allowed = allowed | (k_pos == q_pos).unsqueeze(0)
        return allowed.unsqueeze(1), positions, new_mask.reshape(-1)

    def _load_balance(self, r: _Routing, real: Tensor) -> Tensor:
        """Switch loss E * sum_e f_e * P_e over real tokens (f: share of routed slots)."""
        e = self.config.n_experts
        w = real.float().unsqueeze(1)
        n = w.sum().clamp(min=1)
        onehot = F.one_hot(r.idx, e).float().sum(1)  # (N, E)
        f = (onehot * w).sum(0) / (n * self.config.top_k)
        p = (r.probs * w).sum(0) / n
        return e * (f * p).sum()

    def _z_loss(self, r: _Routing, real: Tensor) -> Tensor:
        w = real.float()
        return (torch.logsumexp(r.logits, -1).square() * w).sum() / w.sum().clamp(min=1)

    def _output(self, logits: Tensor, routed: list[Tensor], probs: list[Tensor], lb: list[Tensor],
                zl: list[Tensor], replaced: int, b: int, t: int) -> MoEOutput:
        c = self.config
        zero = logits.new_zeros(())
        lb_loss = torch.stack(lb).mean() if lb else zero
        z_loss = torch.stack(zl).mean() if zl else zero
        aux = c.aux_loss_coef * lb_loss + c.z_loss_coef * z_loss
        if routed:
            routed_t = torch.stack(routed, dim=2)
        else:
            routed_t = torch.zeros(b, t, c.n_layers, c.top_k, dtype=torch.long,
                                   device=logits.device)
        return MoEOutput(logits, aux, routed_t, probs, lb_loss, z_loss, replaced)


def _only_right_padding(mask: Tensor, declared: bool | None) -> bool:
    """True when no real token follows a pad (B, T): ``declared`` if given, else checked."""
    if declared is not None:
        return declared
    return not bool((mask[:, 1:] & ~mask[:, :-1]).any())


def sequence_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    """log pi(targets) at temperature 1: logits (B, T, V), targets (B, T) -> (B, T)."""
    return torch.log_softmax(logits.float(), -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


__all__ = ["MoEConfig", "MoEOutput", "MoETransformer", "KVCache", "sequence_logprobs"]
