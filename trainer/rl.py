"""Off-policy policy-gradient losses on logged completions, written like the papers.

Notation (per token t of sequence i, all (B, T) unless said):
- ``logp``    log pi_theta(y_t)          — the policy being trained (has gradients)
- ``logp_b``  log pi_b(y_t)              — the behaviour policy, as logged at serving time
- ``logp_ref`` log pi_ref(y_t)           — the reference (the champion the update starts from)
- ``mask``    1 on response tokens that count, 0 on padding
- ``adv``     A_i = R_i - b_i  (B,)      — reward minus baseline, no std division by default

- ``logp_prox`` log pi_prox(y_t)          — the proximal policy: the one this update started from
                                           (the champion); defaults to ``logp_b``

Objectives (decoupled PPO, Hilton et al. 2021: the trust region is around pi_prox, the correction
for the logged data's stale behaviour policy is a separate, truncated importance weight):
- token_clip: rho_t = pi_theta / pi_prox, w_t = min(pi_prox / pi_b, C) (detached),
  surrogate_t = w_t * min(min(rho_t, C) * A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) * A_t).
  min(rho_t, C) is dual-clip PPO for A < 0. Fresh data (pi_b == pi_prox) gives w = 1 and plain
  PPO against the logged logprobs.
- sequence_gspo (GSPO, Zheng et al. 2025): s_i = exp(mean_t(logp - logp_prox)), the same clipped
  surrogate on s_i, weighted by w_i = min(exp(mean_t(logp_prox - logp_b)), C); sequences whose
  total ratio exp(mean_t(logp - logp_b)) leaves [band_low, band_high] are masked out (their
  behaviour policy is too far for the correction to be trusted).
KL to the reference uses the k1 estimator, k1_t = logp - logp_ref = -log r, r = pi_ref / pi_theta,
folded into the per-token advantage as a penalty A_t = A_i - beta * k1_t (detached), whose
expected gradient is the gradient of KL(pi_theta || pi_ref).
Losses are token means over the batch (every token weighs the same, long answers get no bonus).

Left out: value functions / GAE (rewards are per sequence), entropy bonuses.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch import Tensor


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def kl_k1(logp: Tensor, logp_ref: Tensor) -> Tensor:
    """k1 estimator per token: log pi_theta - log pi_ref = -log r, r = pi_ref / pi_theta."""
    return logp - logp_ref


def clipped_surrogate(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float,
                      cap: float) -> Tensor:
    """min(min(ratio, C) * A, clip(ratio, 1-eps_low, 1+eps_high) * A), elementwise."""
    truncated = ratio.clamp(max=cap)
    return torch.minimum(truncated * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)


def _token_adv(adv: Tensor, logp: Tensor, logp_ref: Tensor | None, kl_coef: float) -> Tensor:
    """A_t = A_i - beta * k1_t, (B, T); the KL term is a detached penalty."""
    a = adv.unsqueeze(1).expand_as(logp)
    if logp_ref is None or kl_coef == 0.0:
        return a
    return a - kl_coef * kl_k1(logp, logp_ref).detach()


def token_clip_loss(
    logp: Tensor, logp_b: Tensor, adv: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
    is_cap: float, logp_ref: Tensor | None = None, kl_coef: float = 0.0,
    row_weight: Tensor | None = None, logp_prox: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Token-level clipped, truncated-IS policy loss. Shapes (B, T) except adv, row_weight (B,)."""
    mask = mask.bool()
    logp_prox = logp_b if logp_prox is None else logp_prox
    ratio = (logp - logp_prox).exp()  # rho: pi_theta / pi_prox per token
    behaviour = (logp_prox - logp_b).exp().detach()  # pi_prox / pi_b per token
    is_w = behaviour.clamp(max=is_cap)  # w: truncated at C
    a_t = _token_adv(adv, logp, logp_ref, kl_coef)
    surrogate = is_w * clipped_surrogate(ratio, a_t, eps_low, eps_high, is_cap)
    w = _row_weight(row_weight, mask)
    loss = -masked_mean(surrogate * w, mask)
    clipped = ((ratio > 1 + eps_high) & (a_t > 0)) | ((ratio < 1 - eps_low) & (a_t < 0))
    metrics = _ratio_metrics(ratio.detach(), mask, is_cap)
    metrics.update(_is_weight_metrics(behaviour, mask, is_cap))
    metrics["clip_frac"] = float(masked_mean(clipped.float(), mask))
    metrics.update(_kl_metrics(logp, logp_b, logp_ref, mask))
    return loss, metrics


def gspo_loss(
    logp: Tensor, logp_b: Tensor, adv: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
    band_low: float, band_high: float, is_cap: float, logp_ref: Tensor | None = None,
    kl_coef: float = 0.0, row_weight: Tensor | None = None, logp_prox: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Sequence-level GSPO loss with band masking. Shapes (B, T) except adv, row_weight (B,)."""
    mask = mask.bool()
    m = mask.float()
    logp_prox = logp_b if logp_prox is None else logp_prox
    n_tok = m.sum(1).clamp(min=1.0)  # |y_i|
    # s_i = (prod_t pi_theta / pi_prox) ** (1 / |y_i|); behaviour_i: the same for pi_prox / pi_b
    s = (((logp - logp_prox) * m).sum(1) / n_tok).exp()
    behaviour = (((logp_prox - logp_b) * m).sum(1) / n_tok).exp().detach()
    total = s.detach() * behaviour  # (prod_t pi_theta / pi_b) ** (1 / |y_i|)
    in_band = (total >= band_low) & (total <= band_high) & mask.any(1)
    # GSPO gradient flows through every token of the sequence via s; the KL penalty stays
    # per token, so its advantage is attached to a per-token copy of s_i.
    s_t = s.unsqueeze(1).expand_as(logp)
    a_t = _token_adv(adv, logp, logp_ref, kl_coef)
    is_w = behaviour.clamp(max=is_cap).unsqueeze(1)
    surrogate = is_w * clipped_surrogate(s_t, a_t, eps_low, eps_high, is_cap)
    keep = mask & in_band.unsqueeze(1)
    w = _row_weight(row_weight, mask)
    loss = -(surrogate * w * keep.float()).sum() / m.sum().clamp(min=1.0)
    clipped = ((s > 1 + eps_high) & (adv > 0)) | ((s < 1 - eps_low) & (adv < 0))
    seqs = mask.any(1)
    metrics = _ratio_metrics(s.detach().unsqueeze(1), seqs.unsqueeze(1), is_cap)
    metrics.update(_is_weight_metrics(behaviour.unsqueeze(1), seqs.unsqueeze(1), is_cap))
    metrics["clip_frac"] = float(masked_mean(clipped.float(), seqs))
    metrics["band_masked_frac"] = float(masked_mean((~in_band).float(), seqs))
    metrics.update(_kl_metrics(logp, logp_b, logp_ref, mask))
    return loss, metrics


def _row_weight(row_weight: Tensor | None, mask: Tensor) -> Tensor:
    if row_weight is None:
        return torch.ones_like(mask, dtype=torch.float32)
    return row_weight.float().unsqueeze(1).expand(mask.shape)


def _ratio_metrics(ratio: Tensor, mask: Tensor, cap: float) -> dict[str, float]:
    r = ratio[mask]
    if r.numel() == 0:
        return {"ratio_mean": 1.0, "ratio_max": 1.0, "ratio_min": 1.0, "is_truncated_frac": 0.0}
    return {
        "ratio_mean": float(r.mean()),
        "ratio_max": float(r.max()),
        "ratio_min": float(r.min()),
        "is_truncated_frac": float((r > cap).float().mean()),
    }


def _is_weight_metrics(weight: Tensor, mask: Tensor, cap: float) -> dict[str, float]:
    """Statistics of the behaviour importance weight pi_prox / pi_b before truncation at C."""
    w = weight.detach()[mask]
    if w.numel() == 0:
        return {"is_weight_mean": 1.0, "is_weight_max": 1.0, "is_weight_truncated_frac": 0.0}
    return {"is_weight_mean": float(w.mean()), "is_weight_max": float(w.max()),
            "is_weight_truncated_frac": float((w > cap).float().mean())}


def _kl_metrics(logp: Tensor, logp_b: Tensor, logp_ref: Tensor | None,
                mask: Tensor) -> dict[str, float]:
    out = {"kl_behaviour_k1": float(masked_mean((logp_b - logp).detach(), mask))}
    if logp_ref is not None:
        out["kl_k1"] = float(masked_mean(kl_k1(logp, logp_ref).detach(), mask))
    return out


class RunningBaseline:
    """Per-task-kind running mean of rewards (EMA); the first batch of a kind seeds it."""

    def __init__(self, momentum: float):
        self.momentum = momentum
        self.mean: dict[str, float] = {}

    def baseline(self, kinds: list[str], rewards: Tensor) -> Tensor:
        """b_i for each row (the value before this batch), then update with the batch."""
        batch: dict[str, list[float]] = defaultdict(list)
        for k, r in zip(kinds, rewards.tolist()):
            batch[k].append(r)
        batch_mean = {k: sum(v) / len(v) for k, v in batch.items()}
        b = torch.tensor([self.mean.get(k, batch_mean[k]) for k in kinds], dtype=torch.float32)
        for k, m in batch_mean.items():
            old = self.mean.get(k, m)
            self.mean[k] = self.momentum * old + (1 - self.momentum) * m
        return b


def group_baseline(group_ids: list[str], rewards: Tensor) -> tuple[Tensor, Tensor]:
    """(b, has_group): mean reward of each row's group; has_group where the group has >= 2 rows."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for g, r in zip(group_ids, rewards.tolist()):
        sums[g] += r
        counts[g] += 1
    b = torch.tensor([sums[g] / counts[g] for g in group_ids], dtype=torch.float32)
    has = torch.tensor([counts[g] >= 2 for g in group_ids])
    return b, has


def normalize_std(adv: Tensor, eps: float = 1e-6) -> Tensor:
    """Optional A / std(A) (GRPO); off by default (Dr. GRPO)."""
    return adv / (adv.std(unbiased=False) + eps)
