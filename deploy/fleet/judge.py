"""Canary vs stable, judged statistically on one step's window: pure functions over samples.

Four checks, each one-sided (is the canary *worse*?), at ``alpha / 4`` (Bonferroni):

- error rate, dissatisfied follow-up rate: two-proportion z-test (pooled), H1 p_canary > p_stable;
- p95 latency, edit persistence at 600 s: Mann-Whitney U, H1 canary latencies stochastically
  greater / canary persistence stochastically smaller.

A check *fails* only if the difference is significant **and** larger than a practical margin (so a
huge sample cannot fail a canary for a negligible change); it is *insufficient* while either arm has
fewer than its minimum sample size, which makes the controller extend the step instead of
deciding. Overall: any fail → ``fail``; else any insufficient → ``extend``; else ``pass``.

Deliberately left out: where samples come from (deploy/fleet/rollout.py) and sequential-testing
corrections for peeking across extensions (each extension re-tests the grown window).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Decision = Literal["pass", "fail", "insufficient"]


class JudgeConfig(BaseModel):
    """Thresholds of the canary judge."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alpha: float = Field(
        default=0.05, gt=0.0, lt=0.5, description="Family-wise significance level (Bonferroni)."
    )
    min_requests: int = Field(
        default=50, ge=1, description="Fewest requests per arm for error rate and latency."
    )
    min_signals: int = Field(
        default=30, ge=1, description="Fewest finalised completions per arm for product metrics."
    )
    error_rate_margin: float = Field(
        default=0.01, ge=0.0, le=1.0, description="Error-rate increase that matters (absolute)."
    )
    latency_p95_margin: float = Field(
        default=0.2, ge=0.0, description="Relative p95 latency increase that matters."
    )
    edit_persistence_margin: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
        description="Drop of mean edit persistence at 600 s that matters (absolute).",
    )
    dissatisfied_margin: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
        description="Increase of the dissatisfied follow-up rate that matters (absolute).",
    )


@dataclass(frozen=True)
class ArmSamples:
    """One arm's data for one window."""

    requests: int = 0
    errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    edit_persistence: list[float] = field(default_factory=list)
    """Edit-persistence score at 600 s of each finalised completion that has one."""
    dissatisfied: list[bool] = field(default_factory=list)
    """Per finalised completion: did a dissatisfied follow-up arrive (missing = no)."""


@dataclass(frozen=True)
class MetricVerdict:
    name: str
    stable: float | None
    canary: float | None
    n_stable: int
    n_canary: int
    test: str
    statistic: float | None
    p_value: float | None
    decision: Decision


@dataclass(frozen=True)
class Verdict:
    decision: Literal["pass", "fail", "extend"]
    metrics: list[MetricVerdict]

    @property
    def reasons(self) -> list[str]:
        return [
            f"{m.name}: canary {m.canary:.4g} vs stable {m.stable:.4g} (p={m.p_value:.3g})"
            for m in self.metrics
            if m.decision == "fail"
        ]


def two_proportion_z(
    x_stable: int, n_stable: int, x_canary: int, n_canary: int
) -> tuple[float, float]:
    """Pooled z statistic and one-sided p-value of H1: p_canary > p_stable."""
    from scipy.stats import norm

    p_pool = (x_stable + x_canary) / (n_stable + n_canary)
    se = math.sqrt(p_pool * (1 - p_pool) * (1 / n_stable + 1 / n_canary))
    diff = x_canary / n_canary - x_stable / n_stable
    if se == 0.0:
        return 0.0, 1.0 if diff <= 0 else 0.0
    z = diff / se
    return z, float(norm.sf(z))


def mann_whitney(
    stable: list[float], canary: list[float], worse: Literal["greater", "less"]
) -> tuple[float, float]:
    """U statistic of the canary sample and one-sided p-value (canary ``worse`` than stable)."""
    from scipy.stats import mannwhitneyu

    res = mannwhitneyu(canary, stable, alternative=worse, method="asymptotic")
    return float(res.statistic), float(res.pvalue)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def _rate_check(
    name: str, xs: int, ns: int, xc: int, nc: int, minimum: int, margin: float, alpha: float
) -> MetricVerdict:
    if ns < minimum or nc < minimum:
        return MetricVerdict(
            name,
            xs / ns if ns else None,
            xc / nc if nc else None,
            ns,
            nc,
            "two_proportion_z",
            None,
            None,
            "insufficient",
        )
    z, p = two_proportion_z(xs, ns, xc, nc)
    worse = p < alpha and (xc / nc - xs / ns) > margin
    return MetricVerdict(
        name, xs / ns, xc / nc, ns, nc, "two_proportion_z", z, p, "fail" if worse else "pass"
    )


def _latency_check(s: ArmSamples, c: ArmSamples, cfg: JudgeConfig, alpha: float) -> MetricVerdict:
    ns, nc = len(s.latencies_ms), len(c.latencies_ms)
    if ns < cfg.min_requests or nc < cfg.min_requests:
        return MetricVerdict(
            "p95_latency_ms", None, None, ns, nc, "mann_whitney", None, None, "insufficient"
        )
    u, p = mann_whitney(s.latencies_ms, c.latencies_ms, "greater")
    ps, pc = p95(s.latencies_ms), p95(c.latencies_ms)
    worse = p < alpha and pc > ps * (1 + cfg.latency_p95_margin)
    return MetricVerdict(
        "p95_latency_ms", ps, pc, ns, nc, "mann_whitney", u, p, "fail" if worse else "pass"
    )


def _persistence_check(
    s: ArmSamples, c: ArmSamples, cfg: JudgeConfig, alpha: float
) -> MetricVerdict:
    ns, nc = len(s.edit_persistence), len(c.edit_persistence)
    if ns < cfg.min_signals or nc < cfg.min_signals:
        return MetricVerdict(
            "edit_persistence_600", None, None, ns, nc, "mann_whitney", None, None, "insufficient"
        )
    u, p = mann_whitney(s.edit_persistence, c.edit_persistence, "less")
    ms, mc = sum(s.edit_persistence) / ns, sum(c.edit_persistence) / nc
    worse = p < alpha and (ms - mc) > cfg.edit_persistence_margin
    return MetricVerdict(
        "edit_persistence_600", ms, mc, ns, nc, "mann_whitney", u, p, "fail" if worse else "pass"
    )


def judge(stable: ArmSamples, canary: ArmSamples, config: JudgeConfig) -> Verdict:
    """Compare one window's arms; see the module docstring for the rule."""
    alpha = config.alpha / 4
    metrics = [
        _rate_check(
            "error_rate",
            stable.errors,
            stable.requests,
            canary.errors,
            canary.requests,
            config.min_requests,
            config.error_rate_margin,
            alpha,
        ),
        _latency_check(stable, canary, config, alpha),
        _persistence_check(stable, canary, config, alpha),
        _rate_check(
            "dissatisfied_rate",
            sum(stable.dissatisfied),
            len(stable.dissatisfied),
            sum(canary.dissatisfied),
            len(canary.dissatisfied),
            config.min_signals,
            config.dissatisfied_margin,
            alpha,
        ),
    ]
    decisions = {m.decision for m in metrics}
    if "fail" in decisions:
        return Verdict("fail", metrics)
    return Verdict("extend" if "insufficient" in decisions else "pass", metrics)
