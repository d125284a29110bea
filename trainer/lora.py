"""LoRA of our own: low-rank adapters on any weight tensor, merged into it at save.

``peft`` is not among the project's dependencies, and its ``LoraConfig`` wraps ``nn.Linear``
(and a few conv/embedding types): the upcycled experts of the HF MoE families are 3-D parameters
(``mlp.experts.gate_up_proj``: E x 2I x D), the HF routers and the toy's experts are bare
parameters too, none of them ``nn.Linear``. So an adapter here is a parametrization
(``torch.nn.utils.parametrize``) of the weight itself: W' = W + (alpha / r) * B @ A, with A
(..., r, in) random and B (..., out, r) zero (a 3-D weight gets one pair per expert, batched), so
W' = W at the start and whatever module reads the attribute (a Linear, a per-expert loop, a
grouped GEMM) computes with the adapted weight. The original W is frozen; only A and B train.
:func:`merge_lora` writes W' into the weights and removes the adapters, leaving a plain model for
``save_pretrained`` / the toy checkpoint, serving and the registry.

Left out: dropout on the adapter input, rank-stabilised scaling, adapters on embeddings or the
output head. Cost: W' is materialised per forward (one E x out x in add per adapted tensor; the
activations are unchanged), which a fused LoRA matmul would avoid.
"""

from __future__ import annotations

import fnmatch
import math

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize


class LoRADelta(nn.Module):
    """The parametrization W -> W + scale * B @ A of one weight (2-D, or 3-D: one per expert)."""

    def __init__(self, weight: Tensor, rank: int, alpha: float, generator: torch.Generator):
        super().__init__()
        *lead, rows, cols = weight.shape
        a = torch.randn(*lead, rank, cols, generator=generator) / math.sqrt(cols)
        self.lora_A = nn.Parameter(a.to(weight.device, weight.dtype))
        self.lora_B = nn.Parameter(torch.zeros(*lead, rows, rank, device=weight.device,
                                               dtype=weight.dtype))
        self.scale = alpha / rank

    def forward(self, weight: Tensor) -> Tensor:
        return weight + (self.scale * (self.lora_B @ self.lora_A)).to(weight.dtype)


def _targets(model: nn.Module, patterns: tuple[str, ...]) -> list[tuple[nn.Module, str, str]]:
    """(owning module, attribute, qualified name) of every >= 2-D parameter whose name matches
    one of ``patterns`` (tied tensors once)."""
    owners = {name: m for name, m in model.named_modules()}
    out, seen = [], set()
    for name, p in model.named_parameters():
        if p.dim() < 2 or id(p) in seen or not any(fnmatch.fnmatchcase(name, pat)
                                                      for pat in patterns):
            continue
        seen.add(id(p))
        owner, _, attr = name.rpartition(".")
        out.append((owners[owner], attr, name))
    return out


def apply_lora(model: nn.Module, *, rank: int, alpha: float, targets: tuple[str, ...],
               seed: int = 0) -> dict[str, int]:
    """Freeze every parameter and put an adapter on each weight matching ``targets``; returns
    the counts of :func:`trainer.trainable.select_trainable` plus ``lora_tensors``. A pattern
    list matching nothing is an error (an adapter-less update would train nothing)."""
    found = _targets(model, targets)
    if not found:
        names = [n for n, _ in model.named_parameters()][:6]
        raise ValueError(f"lora_targets {list(targets)} match no weight of "
                         f"{type(model).__name__} (its parameters start {names})")
    for p in model.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(seed)
    for owner, attr, _ in found:
        delta = LoRADelta(getattr(owner, attr).detach(), rank, alpha, gen)
        parametrize.register_parametrization(owner, attr, delta)
        getattr(owner.parametrizations, attr).original.requires_grad_(False)
    ps = list(model.parameters())
    return {"params_total": sum(p.numel() for p in ps if not _is_adapter(model, p)),
            "params_trainable": sum(p.numel() for p in ps if p.requires_grad),
            "layers_trainable": 0, "lora_tensors": len(found)}


def _is_adapter(model: nn.Module, p: Tensor) -> bool:
    return any(p is d.lora_A or p is d.lora_B for d in model.modules()
               if isinstance(d, LoRADelta))


def has_lora(model: nn.Module) -> bool:
    return any(isinstance(m, LoRADelta) for m in model.modules())


@torch.no_grad()
def merge_lora(model: nn.Module) -> int:
    """Write W + scale * B @ A into every adapted weight and remove the adapters (a plain
    model again, same parameter names); returns how many weights were merged."""
    merged = 0
    for m in list(model.modules()):
        if not parametrize.is_parametrized(m):
            continue
        for attr in list(m.parametrizations.keys()):
            if any(isinstance(p, LoRADelta) for p in m.parametrizations[attr]):
                parametrize.remove_parametrizations(m, attr, leave_parametrized=True)
                merged += 1
    return merged
