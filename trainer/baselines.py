"""Baselines conditioned on the prompt, for logs with one completion per prompt.

With one logged completion per prompt, R - (mean reward of the task kind) mostly measures how
hard the prompt is. :class:`ValueBaseline` is a small value head (linear, or a one-hidden-layer
MLP) on the policy's prompt representation — the final hidden state (the input of ``lm_head``)
mean-pooled over the prompt's positions, detached — regressed on the logged rewards for a few
steps per batch with its own optimizer; it never sends gradients into the policy.
The recipe gets that hidden state from the Policy plug (``token_logprobs(return_hidden=True)``);
:func:`capture_final_hidden` reads it from any module with an ``lm_head`` by a forward pre-hook.
:class:`CrossFitValueBaseline` splits prompts into folds, one head per fold, so a row's
baseline never comes from a head fitted on its own reward.
Leave-one-out group means live in trainer/rl.py (``loo_baseline``).

Left out: per-token values (GAE) — rewards are per sequence.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import Tensor, nn

from trainer import rl


@contextmanager
def capture_final_hidden(model: nn.Module):
    """Yields a dict whose ``"hidden"`` is set to the (B, T, D) input of ``model.lm_head`` during
    forwards run inside the block."""
    head = getattr(model, "lm_head", None)
    if head is None:
        raise ValueError(f"{type(model).__name__} has no lm_head to read hidden states from")
    store: dict[str, Tensor] = {}
    handle = head.register_forward_pre_hook(lambda _m, args: store.__setitem__("hidden", args[0]))
    try:
        yield store
    finally:
        handle.remove()


def prompt_features(hidden: Tensor, prompt_mask: Tensor) -> Tensor:
    """(B, D): the mean of the detached hidden states over each row's prompt positions."""
    m = prompt_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden.detach().float() * m).sum(1) / m.sum(1).clamp(min=1.0)


class ValueBaseline:
    """V(prompt features) ~ E[reward | prompt]; ``predict`` then ``fit`` once per batch."""

    def __init__(self, d_in: int, *, hidden: int, lr: float, steps: int, seed: int = 0):
        gen = torch.Generator().manual_seed(seed)
        if hidden > 0:
            self.head = nn.Sequential(nn.Linear(d_in, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        else:
            self.head = nn.Linear(d_in, 1)
        with torch.no_grad():
            for p in self.head.parameters():  # seeded init, independent of the global RNG
                p.copy_(torch.randn(p.shape, generator=gen) * 0.01)
        self.opt = torch.optim.Adam(self.head.parameters(), lr=lr)
        self.steps = steps

    @torch.no_grad()
    def predict(self, feats: Tensor) -> Tensor:
        return self.head(feats).squeeze(-1)

    def fit(self, feats: Tensor, target: Tensor, weight: Tensor | None = None) -> float:
        """``steps`` Adam steps on the (weighted) squared error; gradients are averaged over
        data-parallel ranks. Returns the last step's loss."""
        w = torch.ones_like(target) if weight is None else weight.float()
        loss = torch.zeros(())
        for _ in range(self.steps):
            self.opt.zero_grad(set_to_none=True)
            err = (self.head(feats).squeeze(-1) - target.float()).square()
            loss = (err * w).sum() / rl.dist_sum(w.sum()).clamp(min=1.0) * rl.world_size()
            loss.backward()
            for p in self.head.parameters():
                if rl.world_size() > 1:
                    torch.distributed.all_reduce(p.grad)
                    p.grad /= rl.world_size()
            self.opt.step()
        return float(loss.detach())


class CrossFitValueBaseline:
    """K value heads, one per fold of prompts: a row of fold k is predicted by head k, and head k
    is fitted only on the rows of the other folds, so a row's own reward (and any reward of its
    prompt) never sets its baseline, in any pass over the data. Folds are a hash of the prompt
    (:meth:`folds_of`), the same in every batch and run."""

    def __init__(self, d_in: int, *, folds: int, hidden: int, lr: float, steps: int,
                 seed: int = 0):
        if folds < 2:
            raise ValueError(f"folds={folds}: cross-fitting needs at least 2")
        self.heads = [ValueBaseline(d_in, hidden=hidden, lr=lr, steps=steps, seed=seed + k)
                      for k in range(folds)]

    def folds_of(self, prompts: list[str]) -> Tensor:
        """(B,) long: each prompt's fold, from a stable digest of its text."""
        import hashlib

        k = len(self.heads)
        return torch.tensor([int.from_bytes(hashlib.blake2b(p.encode(), digest_size=8).digest(),
                                            "big") % k for p in prompts], dtype=torch.long)

    @torch.no_grad()
    def predict(self, feats: Tensor, fold: Tensor) -> Tensor:
        """(B,): row i predicted by the head of its fold."""
        preds = torch.stack([h.predict(feats) for h in self.heads], dim=1)  # (B, K)
        return preds.gather(1, fold.view(-1, 1)).squeeze(1)

    def fit(self, feats: Tensor, target: Tensor, fold: Tensor,
            weight: Tensor | None = None) -> float:
        """Head k fitted on the rows outside fold k; returns the mean of the heads' losses."""
        w = torch.ones_like(target) if weight is None else weight.float()
        losses = [h.fit(feats, target, weight=w * (fold != k).float())
                  for k, h in enumerate(self.heads)]
        return sum(losses) / len(losses)
