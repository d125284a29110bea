"""Top-p (nucleus) truncated log-probs, chunk by chunk over positions, so a large vocabulary fits.

Rows sampled with top_p < 1 are scored over the champion's nucleus (trainer/rl.py says why): the
champion's nucleus N_t at each response token is computed once, and pi_prox and pi_theta are both
log-softmaxed over N_t only. Done on full (B, T, V) logits that costs B*T*V floats and a sort over
them — out of reach at V = 49,152 (SmolLM2) or 150k (Qwen). Here only the positions that need it are
scored, ``chunk`` at a time: a chunk's logits are made from the final hidden states by the output
head, in fp32; the nucleus is computed from them (the champion: :func:`nucleus_logprobs` with
``top_p``) or read back (the policy: with ``packed``), and with gradients on, each chunk is
recomputed in backward (activation checkpointing), so at most ``chunk x V`` floats are alive at
once. The champion's nucleus is kept per token as a bit-packed V-wide mask (V / 8 bytes).

The rule is :func:`trainer.rl.nucleus_keep`'s (the same as the sampler's), so both paths agree.
Left out: vocabulary-parallel heads (the head is applied whole to each chunk).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from policy.base import fp32_logits
from trainer import rl

CHUNK = 1024
"""Positions per chunk: 1,024 x 49,152 fp32 logits are 200 MB."""


def pack_mask(mask: Tensor) -> Tensor:
    """(N, V) bool -> (N, ceil(V / 8)) uint8, bit j of byte b = mask[:, 8 b + j]."""
    n, v = mask.shape
    bits = nn.functional.pad(mask.to(torch.int32), (0, (-v) % 8)).view(n, -1, 8)
    shifts = torch.arange(8, device=mask.device, dtype=torch.int32)
    return (bits << shifts).sum(-1).to(torch.uint8)


def unpack_mask(packed: Tensor, vocab: int) -> Tensor:
    """Inverse of :func:`pack_mask`: (N, ceil(V / 8)) uint8 -> (N, V) bool."""
    shifts = torch.arange(8, device=packed.device, dtype=torch.int32)
    bits = (packed.to(torch.int32).unsqueeze(-1) >> shifts) & 1
    return bits.view(packed.shape[0], -1)[:, :vocab].bool()


def _piece(h: Tensor, y: Tensor, temp: Tensor, packed: Tensor, head: nn.Module) -> Tensor:
    logits = fp32_logits(head, h) / temp.view(-1, 1)
    keep = unpack_mask(packed, logits.shape[-1])
    logits = logits.masked_fill(~keep, float("-inf"))
    return torch.log_softmax(logits, -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)


def _keep(h: Tensor, temp: Tensor, top_p: Tensor, head: nn.Module) -> Tensor:
    logits = fp32_logits(head, h)
    return rl.nucleus_keep(logits.unsqueeze(1), temp, top_p).squeeze(1)


def nucleus_logprobs(hidden: Tensor, head: nn.Module, targets: Tensor, temperature: Tensor, *,
                     top_p: Tensor | None = None, packed: Tensor | None = None,
                     chunk: int = CHUNK) -> tuple[Tensor, Tensor, Tensor]:
    """(log pi(targets), inside, packed nucleus), each over N positions.

    hidden (N, D): final hidden states at the positions predicting ``targets`` (N,); temperature
    (N,). Give ``top_p`` (N,) to compute the nucleus of these logits (the champion's), or
    ``packed`` (N, ceil(V/8)) uint8 to renormalise over a nucleus computed before. ``inside`` is
    False where the target lies outside the nucleus (its logp is 0 there, with no gradient).
    """
    if (top_p is None) == (packed is None):
        raise ValueError("give exactly one of top_p (compute the nucleus) and packed (reuse it)")
    grad = torch.is_grad_enabled() and hidden.requires_grad
    out, masks = [], []
    for s in range(0, hidden.shape[0], chunk):
        h, y, t = hidden[s:s + chunk], targets[s:s + chunk], temperature[s:s + chunk]
        if top_p is not None:
            with torch.no_grad():
                p = pack_mask(_keep(h, t, top_p[s:s + chunk], head))
        else:
            p = packed[s:s + chunk]
        masks.append(p)
        out.append(checkpoint(_piece, h, y, t, p, head, use_reentrant=False) if grad
                   else _piece(h, y, t, p, head))
    if not out:
        width = (head.weight.shape[0] + 7) // 8
        empty = hidden.new_zeros(0)
        return empty.float(), empty.bool(), torch.zeros(0, width, dtype=torch.uint8)
    logp = torch.cat(out)
    inside = torch.isfinite(logp)
    return torch.where(inside, logp, torch.zeros_like(logp)), inside, torch.cat(masks)
