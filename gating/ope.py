"""Off-policy evaluation: the candidate's expected reward on logged champion traffic.

Self-normalised importance sampling (SNIPS) over whole responses. For logged row ``i`` with
prompt ``x_i``, response ``y_i``, reward ``r_i`` and the behaviour (champion) log-probabilities
the fleet recorded when it sampled ``y_i``:

    log_ratio_i = sum_t [log pi_cand(y_it | x_i, y_i<t) - log pi_b(y_it | x_i, y_i<t)]
    w_i         = min(exp(log_ratio_i), C)                 (clipped sequence ratio)
    V_snips     = sum_i w_i r_i / sum_i w_i
    ESS         = (sum_i w_i)^2 / sum_i w_i^2              (Kish effective sample size)

with a bootstrap percentile CI over rows. The candidate's log-probabilities are taken under the
same sampling temperature the row was served with (temperature 1 for greedy rows, matching how
policy/toy/generate.py logs them). Clipping trades variance for bias toward the behaviour policy's
value; the report shows ESS and the clipped fraction so a reader can tell how much the estimate
rests on.

Deliberately left out: top-p truncation (rows do not carry it; logged ratios assume top_p = 1),
doubly-robust estimators (no reward model here) and choosing which spans are held out (the
caller passes them in :class:`~gating.config.OpeConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gating.config import OpeConfig
from gating.records import GateResult

if TYPE_CHECKING:
    import pyarrow as pa

    from policy.base import Policy


@dataclass(frozen=True)
class OpeEstimate:
    """A SNIPS estimate with its bootstrap CI and the figures it rests on."""

    value: float
    ci_low: float
    ci_high: float
    ess: float
    n: int
    clipped_frac: float
    realised: float

    def figures(self) -> dict[str, float]:
        return {f"ope.{k}": float(v) for k, v in self.__dict__.items()}


def _snips(w: np.ndarray, r: np.ndarray) -> float:
    return float((w * r).sum() / w.sum()) if w.sum() > 0 else float("nan")


def snips(
    log_ratio: np.ndarray,
    rewards: np.ndarray,
    *,
    clip: float,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> OpeEstimate:
    """SNIPS estimate of the target policy's mean reward from ``(n,)`` log ratios and rewards."""
    if log_ratio.shape != rewards.shape or log_ratio.ndim != 1 or log_ratio.size == 0:
        raise ValueError(f"need equal non-empty 1-d arrays, got {log_ratio.shape}, {rewards.shape}")
    if not np.isfinite(rewards).all():
        raise ValueError("rewards must be finite")
    raw = np.exp(np.minimum(log_ratio, np.log(clip)))  # (n,) overflow-safe clip
    w = np.nan_to_num(raw, nan=0.0)  # a NaN log ratio (NaN model) carries no weight
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, w.size, size=(n_resamples, w.size))  # (B, n)
    ws, rs = w[idx], rewards[idx]  # (B, n)
    den = ws.sum(axis=1)
    boot = np.where(den > 0, (ws * rs).sum(axis=1) / np.where(den > 0, den, 1.0), np.nan)
    alpha = (1.0 - confidence) / 2.0
    low, high = (np.nanquantile(boot, [alpha, 1 - alpha]) if np.isfinite(boot).any()
                 else (float("nan"), float("nan")))
    ess = float(w.sum() ** 2 / (w**2).sum()) if (w > 0).any() else 0.0
    return OpeEstimate(
        value=_snips(w, rewards), ci_low=float(low), ci_high=float(high), ess=ess, n=int(w.size),
        clipped_frac=float((log_ratio >= np.log(clip)).mean()), realised=float(rewards.mean()),
    )


def load_rows(paths: list[str], *, model_version: int | None, max_rows: int) -> pa.Table:
    """Reward rows from Parquet files/directories, logged by ``model_version`` (None: any)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from ingest.schema import REWARD_SCHEMA

    if not paths:
        raise ValueError("OpeConfig.spans is empty: no logged traffic to evaluate on")
    files = [str(f) for p in map(Path, paths)
             for f in (sorted(p.rglob("*.parquet")) if p.is_dir() else [p])]
    if not files:
        raise ValueError(f"no Parquet files under {paths}")
    table = ds.dataset(files, format="parquet", schema=REWARD_SCHEMA).to_table()
    if model_version is not None:
        table = table.filter(pc.equal(table["model_version"], model_version))
    return table.slice(0, max_rows)


def sequence_log_ratios(model: Policy, rows: pa.Table, *, batch_size: int = 32) -> np.ndarray:
    """``(n,)`` sum over response tokens of ``log pi_model - logged log pi_b``; rows too long
    for the model's context get NaN (and so no weight). The prompt is fed as the logged
    ``prompt_token_ids`` when the rows carry them (what was served), else re-encoded by the
    policy's tokenizer. ``model``: a policy (a bare toy ``MoETransformer`` is wrapped)."""
    import torch

    from policy.loader import as_policy

    policy = as_policy(model)
    prompts = rows["prompt"].to_pylist()
    served = (rows["prompt_token_ids"].to_pylist() if "prompt_token_ids" in rows.column_names
              else [None] * len(prompts))
    responses = rows["response_token_ids"].to_pylist()
    logged = rows["response_logprobs"].to_pylist()
    temps = rows["temperature"].to_pylist()
    out = np.full(len(prompts), np.nan)
    for i in range(0, len(prompts), batch_size):
        seqs = [(list(ids) if ids else policy.encode_prompt(p), list(y))
                for p, ids, y in zip(prompts[i:i + batch_size], served[i:i + batch_size],
                                     responses[i:i + batch_size])]
        with torch.no_grad():
            lps = _response_logprobs(policy, seqs, temps[i:i + batch_size])
        for j, lp in enumerate(lps):
            if lp is not None:
                out[i + j] = float(lp.sum()) - float(np.sum(logged[i + j]))
    return out


def _response_logprobs(policy: Policy, seqs: list[tuple[list[int], list[int]]],
                       temps: list[float]) -> list:
    """Per-token log-probs ``(len(y),)`` of each response under ``policy`` at its temperature
    (the policy's chunked fp32 log-softmax)."""
    import torch

    fit = [len(x) + len(y) <= policy.max_seq_len and len(y) > 0 for x, y in seqs]
    kept = [(x, y, t) for (x, y), ok, t in zip(seqs, fit, temps) if ok]
    if not kept:
        return [None] * len(seqs)
    width = max(len(x) + len(y) for x, y, _ in kept)
    pad = policy.tokenizer_info.pad_id
    tokens = torch.full((len(kept), width), pad, dtype=torch.long)
    targets = torch.full((len(kept), width), pad, dtype=torch.long)
    mask = torch.zeros(len(kept), width, dtype=torch.bool)
    for k, (x, y, _) in enumerate(kept):
        seq = torch.tensor(x + y)
        tokens[k, : len(seq)] = seq
        targets[k, : len(seq) - 1] = seq[1:]
        mask[k, : len(seq)] = True
    temp = torch.tensor([t if t > 0 else 1.0 for _, _, t in kept], dtype=torch.float32)
    logp = policy.token_logprobs(tokens, targets, mask, temp).logprobs  # (B, T)
    out, k = [], 0
    for (x, y), ok in zip(seqs, fit):
        if not ok:
            out.append(None)
            continue
        out.append(logp[k, len(x) - 1 : len(x) - 1 + len(y)].float().numpy())  # predicting y
        k += 1
    return out


def ope_gate(
    candidate: Policy, config: OpeConfig, champion_version: int, *,
    confidence: float = 0.95, seed: int = 0,
) -> tuple[GateResult, dict[str, float]]:
    """The ``ope_reward`` gate and its supporting figures (ESS, clipped fraction, n)."""
    rows = load_rows(config.spans, model_version=champion_version, max_rows=config.max_rows)
    if rows.num_rows == 0:
        return GateResult(name="ope_reward", value=None, threshold=None, passed=False,
                          detail=f"no logged rows from champion v{champion_version}"), {}
    est = snips(sequence_log_ratios(candidate, rows),
                rows["reward"].to_numpy().astype(np.float64), clip=config.ratio_clip,
                confidence=confidence, seed=seed)
    return ope_result(est, config), est.figures()


def ope_result(est: OpeEstimate, config: OpeConfig) -> GateResult:
    threshold = est.realised - config.max_reward_drop
    enough = est.ess >= config.min_ess
    passed = enough and np.isfinite(est.ci_high) and est.ci_high >= threshold
    detail = (f"SNIPS on {est.n} logged rows, ESS {est.ess:.1f} (min {config.min_ess}), "
              f"clipped {est.clipped_frac:.1%}, champion realised {est.realised:.3f}")
    return GateResult(name="ope_reward", value=est.value, threshold=threshold, passed=bool(passed),
                      ci_low=est.ci_low, ci_high=est.ci_high, comparator="ci_high >=",
                      detail=detail)
