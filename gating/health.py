"""Health of a candidate checkpoint: finite weights and divergence from the champion.

- :func:`count_nonfinite` counts NaN/inf parameters (a NaN checkpoint must never be promoted,
  whatever its suite says).
- :func:`kl_to_champion` is the mean per-token ``KL(pi_cand || pi_champ)`` on the candidate's own
  greedy suite completions: a big value means the update moved the policy far from what was
  served, which the trainer's KL penalty should have prevented.

Expert collapse is measured from the suite's routing (gating/stats.normalised_load_entropy).
Deliberately left out: thresholds (gating/config.py) and verdicts (gating/gates.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from policy.base import Policy


def count_nonfinite(model: torch.nn.Module) -> int:
    """Number of parameter and buffer entries that are NaN or +-inf."""
    tensors = [*model.parameters(), *model.buffers()]
    return int(sum(int((~torch.isfinite(t)).sum()) for t in tensors if t.is_floating_point()))


def _right_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        tokens[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = True
    return tokens, mask


def _hidden(policy: Policy, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    ones = torch.ones(tokens.shape[0])
    return policy.token_logprobs(tokens, tokens, mask, ones, return_hidden=True).hidden


@torch.no_grad()
def kl_to_champion(
    candidate: Policy,
    champion: Policy,
    prompts: list[list[int]],
    completions: list[list[int]],
    *,
    batch_size: int = 64,
    chunk: int = 1024,
) -> float:
    """Mean over completion tokens of ``KL(pi_cand(.|prefix) || pi_champ(.|prefix))`` in nats.

    ``prompts[i]`` are the ids the prompt was fed as, ``completions[i]`` the generated ids (EOS
    included). Every position that predicts a completion token counts once. Logits are made
    only at those positions, ``chunk`` at a time (a large vocabulary fits). Both policies must
    share a tokenizer (a candidate is trained from its champion). Bare toy models are wrapped.
    """
    from policy.base import output_head
    from policy.loader import as_policy

    candidate, champion = as_policy(candidate), as_policy(champion)
    pad = candidate.tokenizer_info.pad_id
    total, count = 0.0, 0
    for i in range(0, len(prompts), batch_size):
        rows, where = [], []
        for b, (p, c) in enumerate(zip(prompts[i : i + batch_size],
                                       completions[i : i + batch_size], strict=True)):
            rows.append(list(p) + list(c))
            where += [(b, t) for t in range(len(p) - 1, len(p) - 1 + len(c))]
        if not where:
            continue
        tokens, mask = _right_pad(rows, pad)
        idx = torch.tensor(where)
        h_c = _hidden(candidate, tokens, mask)[idx[:, 0], idx[:, 1]]
        h_r = _hidden(champion, tokens, mask)[idx[:, 0], idx[:, 1]]
        for s in range(0, len(where), chunk):
            logp_c = torch.log_softmax(output_head(candidate)(h_c[s:s + chunk]).float(), -1)
            logp_r = torch.log_softmax(output_head(champion)(h_r[s:s + chunk]).float(), -1)
            total += float((logp_c.exp() * (logp_c - logp_r)).sum())
        count += len(where)
    return total / count if count else 0.0
