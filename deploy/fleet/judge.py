"""Canary vs stable, judged statistically on one step's window: pure functions over samples.

Four checks, each one-sided (is the canary *worse*?), at ``alpha / 4`` (Bonferroni), each with an
explicit margin — the harm that matters:

- error rate, dissatisfied follow-up rate (guardrails): harm = canary rate - stable rate;
- latency (guardrail): harm = mean log latency, canary - stable (a relative slowdown; the margin is
  ``log(1 + latency_p95_margin)``; the p95s are shown);
- edit persistence at 600 s (the success metric): harm = stable mean - canary mean.

``method='always_valid'`` (default): each harm gets an always-valid confidence sequence (the
normal-mixture mSPRT of Johari et al. 2017, as Optimizely and Netflix run it; mixing variance =
margin^2): the controller may look after every extension and the chance that an unchanged canary
is ever judged worse stays below the level. A check *fails* iff the sequence's lower bound of the
harm is above the margin (the canary is shown worse than the margin allows); ``non_inferior`` says
whether its upper bound is already below the margin. ``p_value`` is the always-valid p-value of
"no harm". ``method='fixed_horizon'``: the earlier fixed-sample tests (two-proportion z,
Mann-Whitney on latency and persistence; fail iff significant and the point estimate beyond the
margin), valid for one look only.

A check is *insufficient* while either arm has fewer than its minimum sample size, which makes the
controller extend the step instead of deciding. Overall: any fail -> ``fail``; else any
insufficient -> ``extend``; else ``pass``.

``mode`` says where the burden of proof lies (always-valid method only). ``harm`` (the default
above): a canary passes unless harm is shown, so a neutral candidate is promoted by default.
``show``: the canary must show its case. A check passes only once its sequence's upper bound of
the harm is below the margin (each guardrail shown within its margin, the success metric shown
non-inferior); it fails once the lower bound is above the margin, as in ``harm``; in between it
is *unshown*, which extends the step like too few samples, and a step still unshown at its
limit is rolled back with the reason "not shown", never promoted. ``superior`` on the success
metric says the canary is shown better (its harm's upper bound below 0).

Deliberately left out: where samples come from (deploy/fleet/rollout.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Decision = Literal["pass", "fail", "insufficient", "unshown"]


class JudgeConfig(BaseModel):
    """Thresholds of the canary judge."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["always_valid", "fixed_horizon"] = Field(
        default="always_valid",
        description=(
            "always_valid: confidence sequences (mSPRT), safe under the controller's repeated "
            "looks; fixed_horizon: one-look tests (z / Mann-Whitney), whose error grows with "
            "every extension."
        ),
    )
    mode: Literal["harm", "show"] = Field(
        default="harm",
        description=(
            "Where the burden of proof lies (always_valid only). harm: the canary passes unless "
            "a check shows it worse than its margin (a neutral canary is promoted). show: the "
            "canary must show each guardrail's harm below its margin and edit persistence "
            "non-inferior; a step still unshown after max_extensions is rolled back (\"not "
            "shown\"). Showing needs more traffic: a zero-error canary shows the 1% error margin "
            "after roughly 500 requests per arm."
        ),
    )
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

    @model_validator(mode="after")
    def _show_needs_sequences(self) -> JudgeConfig:
        if self.mode == "show" and self.method != "always_valid":
            raise ValueError("judge.mode 'show' needs method 'always_valid' (its upper bounds "
                             "are what the canary must show)")
        return self


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
    harm_low: float | None = None
    """Always-valid lower bound of the harm (canary worse by), in the check's own unit."""
    harm_high: float | None = None
    margin: float | None = None
    """The harm that matters, in the same unit."""

    @property
    def non_inferior(self) -> bool | None:
        """Whether the sequence already shows the harm below the margin (None: not computed)."""
        if self.harm_high is None or self.margin is None:
            return None
        return self.harm_high < self.margin

    @property
    def superior(self) -> bool | None:
        """Whether the sequence shows the canary better (the harm's upper bound below 0)."""
        if self.harm_high is None:
            return None
        return self.harm_high < 0.0


@dataclass(frozen=True)
class Verdict:
    decision: Literal["pass", "fail", "extend"]
    metrics: list[MetricVerdict]

    @property
    def unshown(self) -> list[str]:
        """Checks the canary has enough samples for but has not shown yet (mode ``show``), each
        with its harm's upper bound against the margin."""
        return [f"{m.name} (harm up to {m.harm_high:+.3g}, margin {m.margin:.3g})"
                for m in self.metrics
                if m.decision == "unshown" and m.harm_high is not None and m.margin is not None]

    @property
    def superior(self) -> list[str]:
        """Checks on which the canary is shown better than stable."""
        return [m.name for m in self.metrics if m.decision == "pass" and m.superior]

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


# -- always-valid confidence sequences ----------------------------------------------------------

def msprt_half_width(variance: float, alpha: float, tau: float) -> float:
    """Half-width of the normal-mixture confidence sequence for a mean difference whose estimate
    has variance ``variance`` (Johari et al. 2017): with mixing N(0, tau^2), the mSPRT rejects
    theta iff ``(estimate - theta)^2 >= 2 V (V + tau^2) / tau^2 * (log(1/alpha) +
    log((V + tau^2) / V) / 2)``; the set it does not reject covers the truth at every sample size
    at once with probability >= 1 - alpha."""
    if variance <= 0.0:
        return 0.0
    v, t2 = variance, tau * tau
    boundary = math.log(1.0 / alpha) + 0.5 * math.log((v + t2) / v)
    return math.sqrt(2.0 * v * (v + t2) / t2 * boundary)


def msprt_p_value(estimate: float, variance: float, tau: float, theta: float = 0.0) -> float:
    """Always-valid p-value of ``harm <= theta`` (one look of the running minimum of 1/Lambda)."""
    if variance <= 0.0:
        return 0.0 if estimate > theta else 1.0
    if estimate <= theta:
        return 1.0
    v, t2 = variance, tau * tau
    log_lambda = 0.5 * math.log(v / (v + t2)) + t2 * (estimate - theta) ** 2 / (2 * v * (v + t2))
    return float(min(1.0, math.exp(-log_lambda)))


def _mean_var(xs: list[float]) -> tuple[float, float]:
    n = len(xs)
    m = sum(xs) / n
    var = sum((x - m) ** 2 for x in xs) / (n - 1) if n > 1 else 0.0
    return m, var


def _av_check(name: str, stable_xs: list[float], canary_xs: list[float], *, minimum: int,
              margin: float, alpha: float, worse_is_higher: bool, shown: tuple | None = None,
              show: bool = False) -> MetricVerdict:
    """One always-valid check: harm = (canary - stable) if higher is worse, else the reverse.
    ``show``: the check passes only once the harm's upper bound is below the margin."""
    ns, nc = len(stable_xs), len(canary_xs)
    if ns < minimum or nc < minimum:
        return MetricVerdict(name, None, None, ns, nc, "msprt", None, None, "insufficient",
                             margin=margin)
    ms, vs = _mean_var(stable_xs)
    mc, vc = _mean_var(canary_xs)
    harm = (mc - ms) if worse_is_higher else (ms - mc)
    # a floor on the per-sample variance (that of a rate with one event in n + 2): an arm that
    # never erred in a window is not certain never to
    var = max(vs, 1.0 / (ns + 2)) / ns + max(vc, 1.0 / (nc + 2)) / nc
    tau = max(margin, 1e-6)
    h = msprt_half_width(var, alpha, tau)
    low, high = harm - h, harm + h
    p = msprt_p_value(harm, var, tau)
    stable_shown, canary_shown = shown if shown is not None else (ms, mc)
    decision: Decision = "fail" if low > margin else "pass"
    if show and decision == "pass" and not high < margin:
        decision = "unshown"
    return MetricVerdict(name, stable_shown, canary_shown, ns, nc, "msprt", harm, p, decision,
                         harm_low=low, harm_high=high, margin=margin)


def _always_valid(stable: ArmSamples, canary: ArmSamples, config: JudgeConfig,
                  alpha: float) -> list[MetricVerdict]:
    def flags(n: int, k: int) -> list[float]:
        return [1.0] * k + [0.0] * (n - k)

    lat_s = [math.log(max(x, 1e-3)) for x in stable.latencies_ms]
    lat_c = [math.log(max(x, 1e-3)) for x in canary.latencies_ms]
    shown_lat = ((p95(stable.latencies_ms), p95(canary.latencies_ms))
                 if stable.latencies_ms and canary.latencies_ms else None)
    show = config.mode == "show"
    return [
        _av_check("error_rate", flags(stable.requests, stable.errors),
                  flags(canary.requests, canary.errors), minimum=config.min_requests,
                  margin=config.error_rate_margin, alpha=alpha, worse_is_higher=True, show=show),
        _av_check("p95_latency_ms", lat_s, lat_c, minimum=config.min_requests,
                  margin=math.log1p(config.latency_p95_margin), alpha=alpha,
                  worse_is_higher=True, shown=shown_lat, show=show),
        _av_check("edit_persistence_600", stable.edit_persistence, canary.edit_persistence,
                  minimum=config.min_signals, margin=config.edit_persistence_margin,
                  alpha=alpha, worse_is_higher=False, show=show),
        _av_check("dissatisfied_rate", [float(x) for x in stable.dissatisfied],
                  [float(x) for x in canary.dissatisfied], minimum=config.min_signals,
                  margin=config.dissatisfied_margin, alpha=alpha, worse_is_higher=True,
                  show=show),
    ]


def judge(stable: ArmSamples, canary: ArmSamples, config: JudgeConfig) -> Verdict:
    """Compare one window's arms; see the module docstring for the rule."""
    alpha = config.alpha / 4
    if config.method == "always_valid":
        return _overall(_always_valid(stable, canary, config, alpha))
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
    return _overall(metrics)


def _overall(metrics: list[MetricVerdict]) -> Verdict:
    decisions = {m.decision for m in metrics}
    if "fail" in decisions:
        return Verdict("fail", metrics)
    return Verdict("extend" if decisions & {"insufficient", "unshown"} else "pass", metrics)
