"""Health of a candidate checkpoint: finite weights and divergence from the champion.

- :func:`count_nonfinite` counts NaN/inf parameters (a NaN checkpoint must never be promoted,
  whatever its suite says).
- :func:`kl_to_champion` is the mean per-token ``KL(pi_cand || pi_champ)`` on the candidate's own
  greedy suite completions: a big value means the update moved the policy far from what was
  served, which the trainer's KL penalty should have prevented.

Expert collapse is measured from the suite's routing (gating/gates.normalised_load_entropy).
Deliberately left out: thresholds (gating/config.py) and verdicts (gating/gates.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from policy.toy.generate import encode_prompt
from policy.toy.tokenizer import PAD

if TYPE_CHECKING:
    from policy.toy.model import MoETransformer


def count_nonfinite(model: torch.nn.Module) -> int:
    """Number of parameter and buffer entries that are NaN or +-inf."""
    tensors = [*model.parameters(), *model.buffers()]
    return int(sum(int((~torch.isfinite(t)).sum()) for t in tensors if t.is_floating_point()))


def _right_pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), PAD, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = True
    return tokens, mask


@torch.no_grad()
def kl_to_champion(
    candidate: MoETransformer,
    champion: MoETransformer,
    prompts: list[str],
    completions: list[list[int]],
    *,
    batch_size: int = 64,
) -> float:
    """Mean over completion tokens of ``KL(pi_cand(.|prefix) || pi_champ(.|prefix))`` in nats.

    ``completions[i]`` are the generated token ids of ``prompts[i]`` (EOS included). Every
    position that predicts a completion token counts once.
    """
    total, count = 0.0, 0
    for i in range(0, len(prompts), batch_size):
        rows, targets = [], []
        for p, c in zip(prompts[i : i + batch_size], completions[i : i + batch_size], strict=True):
            prefix = encode_prompt(p)
            rows.append(prefix + list(c))
            targets.append((len(prefix) - 1, len(prefix) - 1 + len(c)))  # predicting positions
        tokens, mask = _right_pad(rows)  # (B, T)
        logp_c = torch.log_softmax(candidate(tokens, pad_mask=mask).logits, -1)  # (B, T, V)
        logp_r = torch.log_softmax(champion(tokens, pad_mask=mask).logits, -1)  # (B, T, V)
        kl = (logp_c.exp() * (logp_c - logp_r)).sum(-1)  # (B, T)
        for b, (lo, hi) in enumerate(targets):
            total += float(kl[b, lo:hi].sum())
            count += hi - lo
    return total / count if count else 0.0
