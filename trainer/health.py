"""MoE health metrics from one forward pass: expert load, its entropy, over-capacity tokens.

Pure functions over the routing tensors a forward pass returns. Left out: logging (the recipe
sends these to MLflow) and any intervention (no expert re-initialisation or bias updates).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def expert_load(routed: Tensor, real: Tensor, n_experts: int) -> Tensor:
    """Share of routed (token, slot) pairs per expert: routed (B,T,L,k), real (B,T) -> (L,E)."""
    r = routed[real.bool()]  # (N, L, k)
    onehot = torch.nn.functional.one_hot(r, n_experts).float()  # (N, L, k, E)
    counts = onehot.sum(dim=(0, 2))  # (L, E)
    return counts / counts.sum(-1, keepdim=True).clamp(min=1.0)


def load_entropy(load: Tensor) -> Tensor:
    """Entropy of each layer's load over experts, normalised to [0, 1] by log E: (L, E) -> (L,)."""
    p = load.clamp(min=1e-12)
    return -(p * p.log()).sum(-1) / math.log(load.shape[-1])


def over_capacity_frac(load: Tensor, capacity_factor: float) -> Tensor:
    """Share of routed pairs beyond capacity = capacity_factor x fair share, per layer (L,)."""
    fair = 1.0 / load.shape[-1]
    return (load - capacity_factor * fair).clamp(min=0.0).sum(-1)


def moe_health(routed: Tensor, real: Tensor, n_experts: int, capacity_factor: float,
               z_loss: Tensor, lb_loss: Tensor) -> dict[str, float]:
    """Flat metrics dict: ``moe/load/l{i}/e{j}``, load entropy, over-capacity, router losses."""
    load = expert_load(routed, real, n_experts)
    out = {f"moe/load/l{i}/e{j}": float(load[i, j])
           for i in range(load.shape[0]) for j in range(load.shape[1])}
    ent = load_entropy(load)
    out["moe/load_entropy"] = float(ent.mean())
    out["moe/load_entropy_min"] = float(ent.min())
    out["moe/over_capacity_frac"] = float(over_capacity_frac(load, capacity_factor).mean())
    out["moe/router_z_loss"] = float(z_loss.detach())
    out["moe/load_balance_loss"] = float(lb_loss.detach())
    return out
