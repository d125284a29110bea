"""Off-policy policy-gradient losses on logged completions, written like the papers.

Notation (per token t of sequence i, all (B, T) unless said):
- ``logp``    log pi_theta(y_t)          — the policy being trained (has gradients)
- ``logp_b``  log pi_b(y_t)              — the behaviour policy, as logged at serving time
- ``logp_ref`` log pi_ref(y_t)           — the trust-region reference: the previous champion,
                                           the one this update starts from
- ``logp_anchor`` log pi_anchor(y_t)     — a fixed anchor (the first champion, or one chosen in
                                           config) that keeps many cycles from drifting
- ``mask``    1 on response tokens that count, 0 on padding, greedy rows and tokens outside the
              proximal nucleus (see below)
- ``adv``     A_i = R_i - b_i  (B,)      — reward minus baseline, no std division by default

- ``logp_prox`` log pi_prox(y_t)          — the proximal policy: the one this update started from
                                           (the champion), or the detached policy of this
                                           step (``TrainerConfig.proximal``); defaults to
                                           ``logp_b``

Top-p: rows sampled with top_p < 1 log pi_b under the temperature-scaled, nucleus-renormalised
distribution. pi_prox and pi_theta are then computed under the same truncation: the nucleus N_t
is the smallest set of tokens reaching top_p under the champion's (pi_prox's) logits / T, and
both logp_prox and logp are log-softmax over N_t only (:func:`nucleus_keep`,
:func:`truncated_logprobs`). A logged token outside N_t has pi_prox = 0, hence an importance
weight pi_prox / pi_b = 0: it is left out of the mask (counted as ``tokens_outside_nucleus``).

Objectives (decoupled PPO, Hilton et al. 2021: the trust region is around pi_prox, the correction
for the logged data's stale behaviour policy is a separate, truncated importance weight):
- token_clip: rho_t = pi_theta / pi_prox, w_t = min(pi_prox / pi_b, C) (detached),
  surrogate_t = w_t * min(min(rho_t, c) * A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) * A_t).
  min(rho_t, c) is dual-clip PPO (Ye et al. 2020) for A < 0, with its own constant c
  (``dual_clip_c``), separate from the IS cap C. Token mean over the batch.
- sequence_gspo (GSPO, Zheng et al. 2025): s_i = exp(mean_t(logp - logp_prox)), the same clipped
  surrogate on s_i, weighted by w_i = min(exp(mean_t(logp_prox - logp_b)), C); sequences whose
  behaviour ratio exp(mean_t(logp_prox - logp_b)) leaves [band_low, band_high] are masked out
  (their behaviour policy is too far from pi_prox for the correction to be trusted). Sequence
  mean: every sequence weighs the same at equal advantage, whatever its length.
- cispo (CISPO, MiniMax-M1 2025): surrogate_t = w_t * sg(clip(rho_t, 1 - eps_low, 1 + eps_high))
  * A_t * logp_t: the weight is clipped, the gradient never is. Token mean.
- filtered_imitation (RAFT / ReST-EM / STaR on logged rows): the token mean, over the tokens of
  rows rewarded above a threshold only, of the NLL -log pi_theta(y_t) importance-weighted by
  w_t * rho_t = min(pi_prox / pi_b, C) * pi_theta / pi_prox (= pi_theta / pi_b below the cap),
  written as token_clip's surrogate with A_i = 1 on those rows: a token whose rho_t passes
  1 + eps_high gets no gradient, so imitation stops at the champion's trust region. No baseline,
  no negative term; the other rows are not in the mean.
- asymmetric: token_clip with the advantages of rows below their baseline (A_i < 0) multiplied
  by ``negative_scale`` (:func:`scale_negatives`) before the KL penalties fold in.
Greedy rows (temperature 0) have no behaviour probability: :func:`greedy_imitation_loss` imitates
the rewarded ones inside the champion's trust region. Options next to the objective: an NLL
anchor on rewarded rows (:func:`nll_anchor_loss`), scaled-down negative advantages
(:func:`scale_negatives`), and rows of zero-variance groups left out (:func:`zero_variance_groups`).
KL in the loss uses the k1 estimator, k1_t = logp - logp_ref, folded into the per-token advantage
as a detached penalty A_t = A_i - beta * k1_t - beta_anchor * (logp - logp_anchor).
KL metrics are k3 estimates (Schulman 2020) of KL(pi_theta || pi_ref), importance-weighted from
behaviour samples to pi_theta: mean_t[(pi_theta / pi_b) * (r - 1 - log r)], r = pi_ref / pi_theta;
each term is >= 0 (``kl_theta_ref_k3``, ``kl_theta_anchor_k3``). Per token, the prefixes come from
the behaviour policy.
Data parallelism: normalisers (token and sequence counts) are summed over ranks
(:func:`dist_sum`), so each rank's loss is its share of the global mean once gradients are
averaged over ranks.

Left out: value functions / GAE (rewards are per sequence), entropy bonuses.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch import Tensor


def _distributed() -> bool:
    return (torch.distributed.is_available() and torch.distributed.is_initialized()
            and torch.distributed.get_world_size() > 1)


def world_size() -> int:
    return torch.distributed.get_world_size() if _distributed() else 1


def dist_sum(x: Tensor) -> Tensor:
    """The sum of ``x`` over data-parallel ranks (a detached copy; ``x`` itself off one rank)."""
    x = x.detach().clone()
    if _distributed():
        torch.distributed.all_reduce(x)
    return x


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def global_mean(x: Tensor, mask: Tensor) -> Tensor:
    """This rank's share of the mean of ``x`` over ``mask`` across every rank: sum_local /
    (count_global / world_size). Averaging gradients over ranks then gives the global mean."""
    m = mask.to(x.dtype)
    count = dist_sum(m.sum()) / world_size()
    return (x * m).sum() / count.clamp(min=1e-8) if float(count) > 0 else (x * m).sum()


def nucleus_keep(logits: Tensor, temperature: Tensor, top_p: Tensor) -> Tensor:
    """(B, T, V) bool: the nucleus of softmax(logits / T) per position — the smallest set of
    tokens, most probable first, whose mass reaches top_p (every token where top_p >= 1). The
    same rule as ``policy.toy.generate.sampling_logprobs``. temperature, top_p: (B,)."""
    logp = torch.log_softmax(logits.float() / temperature.view(-1, 1, 1), -1)
    sorted_logp, order = logp.sort(-1, descending=True)
    p = sorted_logp.exp()
    drop_sorted = (p.cumsum(-1) - p) >= top_p.view(-1, 1, 1)
    drop_sorted &= (top_p < 1.0).view(-1, 1, 1)
    return ~torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)


def truncated_logprobs(logits: Tensor, targets: Tensor, temperature: Tensor,
                       keep: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(log pi(targets), inside): log-softmax of logits / T over the tokens in ``keep`` (all when
    None), (B, T); ``inside`` is False where the target is outside ``keep`` (its logp is set to 0
    there, with no gradient: mask it out)."""
    scaled = logits / temperature.view(-1, 1, 1)
    if keep is not None:
        scaled = scaled.masked_fill(~keep, float("-inf"))
    logp = torch.log_softmax(scaled, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    inside = torch.isfinite(logp)
    return torch.where(inside, logp, torch.zeros_like(logp)), inside


def kl_k1(logp: Tensor, logp_ref: Tensor) -> Tensor:
    """k1 per token: log pi_theta - log pi_ref (the loss's penalty; a poor metric off-policy)."""
    return logp - logp_ref


def kl_k3_weighted(logp: Tensor, logp_ref: Tensor, logp_b: Tensor, mask: Tensor) -> Tensor:
    """Estimate of KL(pi_theta || pi_ref) from tokens sampled by pi_b: the token mean of
    (pi_theta / pi_b) * (r - 1 - log r), r = pi_ref / pi_theta. Every term is >= 0."""
    logp, logp_ref, logp_b = logp.detach(), logp_ref.detach(), logp_b.detach()
    log_r = logp_ref - logp
    k3 = log_r.exp() - 1.0 - log_r
    return masked_mean((logp - logp_b).exp() * k3, mask)


def clipped_surrogate(ratio: Tensor, adv: Tensor, eps_low: float, eps_high: float,
                      dual_clip_c: float) -> Tensor:
    """min(min(ratio, c) * A, clip(ratio, 1-eps_low, 1+eps_high) * A), elementwise."""
    truncated = ratio.clamp(max=dual_clip_c)
    return torch.minimum(truncated * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)


def _token_adv(adv: Tensor, logp: Tensor, logp_ref: Tensor | None, kl_coef: float,
               logp_anchor: Tensor | None = None, anchor_kl_coef: float = 0.0) -> Tensor:
    """A_t = A_i - beta * k1_ref_t - beta_anchor * k1_anchor_t, (B, T); detached penalties."""
    a = adv.unsqueeze(1).expand_as(logp)
    if logp_ref is not None and kl_coef != 0.0:
        a = a - kl_coef * kl_k1(logp, logp_ref).detach()
    if logp_anchor is not None and anchor_kl_coef != 0.0:
        a = a - anchor_kl_coef * kl_k1(logp, logp_anchor).detach()
    return a


def token_clip_loss(
    logp: Tensor, logp_b: Tensor, adv: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
    is_cap: float, dual_clip_c: float = 3.0, logp_ref: Tensor | None = None,
    kl_coef: float = 0.0, row_weight: Tensor | None = None, logp_prox: Tensor | None = None,
    logp_anchor: Tensor | None = None, anchor_kl_coef: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """Token-level clipped, truncated-IS policy loss. Shapes (B, T) except adv, row_weight (B,)."""
    mask = mask.bool()
    logp_prox = logp_b if logp_prox is None else logp_prox
    ratio = (logp - logp_prox).exp()  # rho: pi_theta / pi_prox per token
    behaviour = (logp_prox - logp_b).exp().detach()  # pi_prox / pi_b per token
    is_w = behaviour.clamp(max=is_cap)  # w: truncated at C
    a_t = _token_adv(adv, logp, logp_ref, kl_coef, logp_anchor, anchor_kl_coef)
    surrogate = is_w * clipped_surrogate(ratio, a_t, eps_low, eps_high, dual_clip_c)
    w = _row_weight(row_weight, mask)
    loss = -global_mean(surrogate * w, mask)
    clipped = ((ratio > 1 + eps_high) & (a_t > 0)) | ((ratio < 1 - eps_low) & (a_t < 0))
    metrics = _ratio_metrics(ratio.detach(), mask, is_cap)
    metrics.update(_is_weight_metrics(behaviour, mask, is_cap))
    metrics["clip_frac"] = float(masked_mean(clipped.float(), mask))
    metrics["dual_clip_frac"] = float(masked_mean(((ratio > dual_clip_c) & (a_t < 0)).float(),
                                                  mask))
    metrics.update(_kl_metrics(logp, logp_b, logp_ref, logp_anchor, mask))
    return loss, metrics


def gspo_loss(
    logp: Tensor, logp_b: Tensor, adv: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
    band_low: float, band_high: float, is_cap: float, dual_clip_c: float = 3.0,
    logp_ref: Tensor | None = None, kl_coef: float = 0.0, row_weight: Tensor | None = None,
    logp_prox: Tensor | None = None, logp_anchor: Tensor | None = None,
    anchor_kl_coef: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """Sequence-level GSPO loss, sequence mean, band on pi_prox / pi_b. Shapes as token_clip."""
    mask = mask.bool()
    m = mask.float()
    logp_prox = logp_b if logp_prox is None else logp_prox
    n_tok = m.sum(1).clamp(min=1.0)  # |y_i|
    # s_i = (prod_t pi_theta / pi_prox) ** (1 / |y_i|); behaviour_i: the same for pi_prox / pi_b
    s = (((logp - logp_prox) * m).sum(1) / n_tok).exp()
    behaviour = (((logp_prox - logp_b) * m).sum(1) / n_tok).exp().detach()
    seqs = mask.any(1)
    in_band = (behaviour >= band_low) & (behaviour <= band_high) & seqs
    # The KL penalties stay per token: each token's advantage meets a copy of s_i, and the
    # sequence's term is the mean over its tokens (= the clipped s_i * A_i without KL).
    s_t = s.unsqueeze(1).expand_as(logp)
    a_t = _token_adv(adv, logp, logp_ref, kl_coef, logp_anchor, anchor_kl_coef)
    is_w = behaviour.clamp(max=is_cap).unsqueeze(1)
    surrogate = is_w * clipped_surrogate(s_t, a_t, eps_low, eps_high, dual_clip_c)
    per_seq = (surrogate * _row_weight(row_weight, mask) * m).sum(1) / n_tok  # (B,)
    loss = -global_mean(per_seq, in_band)
    clipped = ((s > 1 + eps_high) & (adv > 0)) | ((s < 1 - eps_low) & (adv < 0))
    metrics = _ratio_metrics(s.detach().unsqueeze(1), seqs.unsqueeze(1), is_cap)
    metrics.update(_is_weight_metrics(behaviour.unsqueeze(1), seqs.unsqueeze(1), is_cap))
    metrics["clip_frac"] = float(masked_mean(clipped.float(), seqs))
    metrics["band_masked_frac"] = float(masked_mean((~in_band).float(), seqs))
    metrics["dual_clip_frac"] = float(masked_mean(((s > dual_clip_c) & (adv < 0)).float(), seqs))
    metrics.update(_kl_metrics(logp, logp_b, logp_ref, logp_anchor, mask))
    return loss, metrics


def cispo_loss(
    logp: Tensor, logp_b: Tensor, adv: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
    is_cap: float, logp_ref: Tensor | None = None, kl_coef: float = 0.0,
    row_weight: Tensor | None = None, logp_prox: Tensor | None = None,
    logp_anchor: Tensor | None = None, anchor_kl_coef: float = 0.0, **_: float,
) -> tuple[Tensor, dict[str, float]]:
    """CISPO (MiniMax-M1, 2025): surrogate_t = w_t * sg(clip(rho_t, 1 - eps_low, 1 + eps_high))
    * A_t * logp_t, token mean; rho_t = pi_theta / pi_prox, w_t = min(pi_prox / pi_b, C). The
    weight is clipped, the gradient is not: d(-surrogate_t)/d logp_t = -w_t * clip(rho_t) * A_t.
    Shapes as :func:`token_clip_loss` (``dual_clip_c`` is accepted and unused)."""
    mask = mask.bool()
    logp_prox = logp_b if logp_prox is None else logp_prox
    ratio = (logp - logp_prox).exp().detach()
    behaviour = (logp_prox - logp_b).exp().detach()
    is_w = behaviour.clamp(max=is_cap)
    a_t = _token_adv(adv, logp, logp_ref, kl_coef, logp_anchor, anchor_kl_coef)
    weight = ratio.clamp(1 - eps_low, 1 + eps_high)
    surrogate = is_w * weight * a_t * logp
    loss = -global_mean(surrogate * _row_weight(row_weight, mask), mask)
    clipped = (ratio > 1 + eps_high) | (ratio < 1 - eps_low)
    metrics = _ratio_metrics(ratio, mask, is_cap)
    metrics.update(_is_weight_metrics(behaviour, mask, is_cap))
    metrics["clip_frac"] = float(masked_mean(clipped.float(), mask))
    metrics.update(_kl_metrics(logp, logp_b, logp_ref, logp_anchor, mask))
    return loss, metrics


def filtered_imitation_loss(
    logp: Tensor, logp_b: Tensor, rewards: Tensor, mask: Tensor, *, min_reward: float,
    eps_low: float, eps_high: float, is_cap: float, dual_clip_c: float = 3.0,
    logp_ref: Tensor | None = None, kl_coef: float = 0.0, row_weight: Tensor | None = None,
    logp_prox: Tensor | None = None, logp_anchor: Tensor | None = None,
    anchor_kl_coef: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """Filtered imitation of the logged rows rewarded above ``min_reward`` (positives only):
    the clipped surrogate of :func:`token_clip_loss` with A_i = 1 on those rows, token mean over
    their tokens alone. Without KL penalties its gradient is that of the importance-weighted
    token-mean NLL: d loss / d log pi_theta(y_t) = -w_t * rho_t / N, w_t = min(pi_prox / pi_b,
    C), rho_t = pi_theta / pi_prox, N the rewarded tokens; 0 once rho_t > 1 + eps_high (PPO's
    clip for a positive advantage). The KL penalties fold into A_t on the same tokens. Rows at
    or below the threshold get exactly zero gradient and leave the mean. No baseline: rewards
    (B,) as logged; logp, logp_b, mask (B, T). Metrics: ``imitated_rows``, ``imitation_nll``
    (token mean of -log pi_theta over the rewarded tokens) and token_clip's."""
    positive = rewards > min_reward
    keep = mask.bool() & positive.unsqueeze(1)
    loss, metrics = token_clip_loss(
        logp, logp_b, positive.to(logp.dtype), keep, eps_low=eps_low, eps_high=eps_high,
        is_cap=is_cap, dual_clip_c=dual_clip_c, logp_ref=logp_ref, kl_coef=kl_coef,
        row_weight=row_weight, logp_prox=logp_prox, logp_anchor=logp_anchor,
        anchor_kl_coef=anchor_kl_coef)
    metrics["imitated_rows"] = float(dist_sum((keep.any(1)).sum()))
    metrics["imitation_nll"] = float(masked_mean(-logp.detach(), keep))
    return loss, metrics


def asymmetric_loss(logp: Tensor, logp_b: Tensor, adv: Tensor, mask: Tensor, *,
                    negative_scale: float, **kwargs) -> tuple[Tensor, dict[str, float]]:
    """:func:`token_clip_loss` with A_i -> negative_scale * A_i where A_i < 0 (rows below their
    baseline), before the KL penalties fold in; ``kwargs`` as token_clip's. negative_scale = 1
    is token_clip. Metric ``negative_rows_frac``: the share of rows with A_i < 0."""
    loss, metrics = token_clip_loss(logp, logp_b, scale_negatives(adv, negative_scale), mask,
                                    **kwargs)
    rows = mask.bool().any(1)
    metrics["negative_rows_frac"] = float(masked_mean((adv < 0).float(), rows))
    return loss, metrics


def greedy_imitation_loss(
    logp: Tensor, logp_ref: Tensor, imitate: Tensor, mask: Tensor, *, eps_low: float,
    eps_high: float, kl_coef: float = 0.0, logp_anchor: Tensor | None = None,
    anchor_kl_coef: float = 0.0, row_weight: Tensor | None = None,
) -> Tensor:
    """Filtered imitation of rows served greedily (no behaviour probability exists for them):
    the clipped surrogate of :func:`token_clip_loss` with pi_ref (the champion) as behaviour and
    proximal policy, so the importance weight is 1 and rho_t = pi_theta / pi_ref, and A_i = 1 on
    rows to imitate, 0 elsewhere; the KL penalties fold in as in the policy-gradient term. A
    token stops pushing once pi_theta / pi_ref > 1 + eps_high (the trust region). Token mean over
    ``mask`` (B, T); ``imitate`` (B,) bool."""
    loss, _ = token_clip_loss(
        logp, logp_ref, imitate.float(), mask, eps_low=eps_low, eps_high=eps_high, is_cap=1.0,
        dual_clip_c=1.0 + eps_high, logp_ref=logp_ref, kl_coef=kl_coef, row_weight=row_weight,
        logp_prox=logp_ref, logp_anchor=logp_anchor, anchor_kl_coef=anchor_kl_coef)
    return loss


def retain_kl_loss(logp: Tensor, logp_ref: Tensor, mask: Tensor,
                   ) -> tuple[Tensor, dict[str, float]]:
    """The retain-set anchor on completions the policy sampled itself: the token mean over
    ``mask`` of k2 = 1/2 (log pi_theta - log pi_ref)^2, (B, T) inputs, ``logp_ref`` detached.
    Its gradient per token, (log pi_theta - log pi_ref) * grad log pi_theta, is the per-token
    score-function gradient of the reverse KL(pi_theta || pi_ref) on pi_theta's own samples
    (k1 as a loss would have gradient E[grad log pi_theta] = 0 there; k3 as a loss follows the
    forward KL). Metrics: ``retain_kl`` (token mean of k1 = log pi_theta - log pi_ref, unbiased
    for the reverse KL on on-policy samples), ``retain_kl_k3`` (r - 1 - log r, r = pi_ref /
    pi_theta), ``retain_tokens``. Every value is 0 when pi_theta = pi_ref."""
    log_ratio = logp - logp_ref.detach()
    loss = masked_mean(0.5 * log_ratio.square(), mask)
    with torch.no_grad():
        log_r = -log_ratio.detach().float()
        metrics = {"retain_kl": float(masked_mean(-log_r, mask)),
                   "retain_kl_k3": float(masked_mean(log_r.exp() - 1.0 - log_r, mask)),
                   "retain_tokens": float(mask.sum())}
    return loss, metrics


def nll_anchor_loss(logp: Tensor, mask: Tensor, rewarded: Tensor) -> Tensor:
    """The token mean of -log pi_theta over the response tokens of rewarded rows: an NLL anchor
    next to the policy-gradient term. logp, mask (B, T); rewarded (B,) bool."""
    return -global_mean(logp, mask.bool() & rewarded.unsqueeze(1))


def scale_negatives(adv: Tensor, scale: float) -> Tensor:
    """Asymmetric advantages: A where A >= 0, scale * A where A < 0."""
    return torch.where(adv < 0, adv * scale, adv)


def zero_variance_groups(group_ids: list[str], rewards: Tensor) -> Tensor:
    """(B,) bool: rows whose group has >= 2 rows and one reward for all of them (their
    advantage under a group baseline is 0)."""
    seen: dict[str, set[float]] = defaultdict(set)
    counts: dict[str, int] = defaultdict(int)
    for g, r in zip(group_ids, rewards.tolist()):
        seen[g].add(r)
        counts[g] += 1
    return torch.tensor([counts[g] >= 2 and len(seen[g]) == 1 for g in group_ids],
                        dtype=torch.bool)


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
                logp_anchor: Tensor | None, mask: Tensor) -> dict[str, float]:
    """kl_behaviour_k1 estimates KL(pi_b || pi_theta) (samples are pi_b's: >= 0 in
    expectation); the k3 metrics estimate KL(pi_theta || pi_ref) and KL(pi_theta || pi_anchor)."""
    out = {"kl_behaviour_k1": float(masked_mean((logp_b - logp).detach(), mask))}
    if logp_ref is not None:
        out["kl_theta_ref_k3"] = float(kl_k3_weighted(logp, logp_ref, logp_b, mask))
    if logp_anchor is not None:
        out["kl_theta_anchor_k3"] = float(kl_k3_weighted(logp, logp_anchor, logp_b, mask))
    return out


class RunningBaseline:
    """Per-task-kind running mean of rewards (EMA); the first batch of a kind seeds it. Under
    data parallelism the batch's per-kind sums and counts are summed over ranks first (every
    rank must pass the same ``all_kinds``)."""

    def __init__(self, momentum: float, all_kinds: list[str] | None = None):
        self.momentum = momentum
        self.mean: dict[str, float] = {}
        self.all_kinds = sorted(set(all_kinds)) if all_kinds else None

    def baseline(self, kinds: list[str], rewards: Tensor) -> Tensor:
        """b_i for each row (the value before this batch), then update with the batch."""
        batch_mean = self._batch_means(kinds, rewards)
        b = torch.tensor([self.mean.get(k, batch_mean[k]) for k in kinds], dtype=torch.float32)
        for k, m in batch_mean.items():
            old = self.mean.get(k, m)
            self.mean[k] = self.momentum * old + (1 - self.momentum) * m
        return b

    def _batch_means(self, kinds: list[str], rewards: Tensor) -> dict[str, float]:
        names = self.all_kinds or sorted(set(kinds))
        pos = {k: i for i, k in enumerate(names)}
        sums = torch.zeros(2, len(names), dtype=torch.float64)
        for k, r in zip(kinds, rewards.tolist()):
            sums[0, pos[k]] += r
            sums[1, pos[k]] += 1
        if self.all_kinds is not None:
            sums = dist_sum(sums)
        return {k: float(sums[0, i] / sums[1, i]) for k, i in pos.items() if sums[1, i] > 0}


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


def loo_baseline(group_ids: list[str], rewards: Tensor) -> tuple[Tensor, Tensor]:
    """(b, has_group): the leave-one-out mean of each row's group, (S_g - R_i) / (n_g - 1), where
    the group has >= 2 rows (0 elsewhere). Unbiased: b_i does not depend on R_i."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for g, r in zip(group_ids, rewards.tolist()):
        sums[g] += r
        counts[g] += 1
    b = [(sums[g] - r) / (counts[g] - 1) if counts[g] >= 2 else 0.0
         for g, r in zip(group_ids, rewards.tolist())]
    has = torch.tensor([counts[g] >= 2 for g in group_ids])
    return torch.tensor(b, dtype=torch.float32), has


def normalize_std(adv: Tensor, eps: float = 1e-6) -> Tensor:
    """Optional A / std(A) (GRPO); off by default (Dr. GRPO)."""
    return adv / (adv.std(unbiased=False) + eps)
