"""The gates: pure functions from suite results (and health figures) to pass/fail records.

Each gate returns a :class:`~gating.records.GateResult` with the measured value, the threshold
it was held to, the comparison, and — for the differences against the champion — a paired
bootstrap CI over distinct prompts. :func:`evaluate_gates` composes them; with no champion
(bootstrap of the registry) only the absolute gates run.

Gates:
- ``pass_rate`` (absolute): candidate pass rate >= ``min_pass_rate``.
- ``pass_rate_change``: signed pass-rate delta vs champion >= min abs / min rel change.
- ``token_budget``: mean completion tokens may rise at most the budget.
- ``pass_rate_no_regression`` / ``tokens_no_regression``: the paired bootstrap CI must not show a
  significant regression (CI entirely below -drop / entirely above +rise).
- ``improvement_evidence``: at the decision's level alpha_k (gating/stats.py), a pass-rate win
  (one-sided lower bound above a margin and an exact McNemar test on the discordant prompts) or a
  non-inferior pass rate with surely shorter answers (a tie does not pass: noise is not promoted).

Every CI resamples distinct prompts (``bootstrap.cluster``), not rows: greedy answers to a
repeated prompt are identical, so its rows are one observation.
- ``guard.<name>``: on a regression-guard suite (``GateConfig.guards``), the paired CI of the
  pass-rate change must not lie entirely below ``-max_drop``.
- ``no_edit_rate`` / ``malformed_rate`` (hack monitors): may rise at most a set amount.
- ``finite_weights``, ``expert_load_entropy``, ``kl_to_champion`` (health).

Deliberately left out: producing the inputs (gating/suite.py, gating/health.py) and recording
the verdict (gating/gate.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gating.config import (
    BootstrapConfig,
    ChangeThreshold,
    GateConfig,
    GuardSuite,
    ImprovementEvidence,
    TokenBudget,
)
from gating.records import GateResult, SuiteResult
from gating.stats import (
    PairedCI,
    cluster_bootstrap,
    cluster_ids,
    cluster_signs,
    mcnemar_exact,
    resamples_for,
)


@dataclass(frozen=True)
class HealthFigures:
    """Health measurements of the candidate that are not suite aggregates."""

    nonfinite_params: int
    kl_to_champion: float | None = None


BootstrapCI = PairedCI
"""Mean of the paired differences and its percentile CI (gating.stats.PairedCI)."""


def paired_bootstrap(
    candidate: np.ndarray,
    champion: np.ndarray,
    *,
    n_resamples: int,
    confidence: float,
    seed: int,
    clusters: np.ndarray | None = None,
) -> BootstrapCI:
    """Percentile CI of ``mean(candidate - champion)``, resampling clusters (distinct prompts)
    with replacement; ``clusters=None`` resamples rows.

    ``candidate`` and ``champion`` are per-task values ``(n_tasks,)`` on the same tasks in the
    same order; pairing removes the between-task variance from the difference.
    """
    if candidate.shape != champion.shape or candidate.ndim != 1 or candidate.size == 0:
        raise ValueError(
            f"paired_bootstrap needs two equal 1-d arrays, got {candidate.shape} and "
            f"{champion.shape}"
        )
    d = candidate.astype(np.float64) - champion.astype(np.float64)  # (n,)
    alpha = (1.0 - confidence) / 2.0
    return cluster_bootstrap(d, clusters, n_resamples=n_resamples, low_q=alpha,
                             high_q=1.0 - alpha, seed=seed)


def absolute_gate(name: str, value: float, threshold: float, *, at_least: bool) -> GateResult:
    passed = value >= threshold if at_least else value <= threshold
    return GateResult(
        name=name, value=value, threshold=threshold, passed=passed,
        comparator=">=" if at_least else "<=",
    )


def change_gate(
    name: str, candidate: float, champion: float, rule: ChangeThreshold, ci: BootstrapCI | None
) -> GateResult:
    """Signed change (positive = better) must reach ``rule.min_abs`` and ``rule.min_rel``."""
    sign = 1.0 if rule.direction == "increase" else -1.0
    delta = sign * (candidate - champion)
    rel = delta / abs(champion) if champion != 0 else (0.0 if delta == 0 else math.copysign(
        math.inf, delta))
    passed = delta >= rule.min_abs and rel >= rule.min_rel
    low, high = (None, None) if ci is None else sorted((sign * ci.low, sign * ci.high))
    return GateResult(
        name=name, value=delta, threshold=rule.min_abs, passed=passed, ci_low=low, ci_high=high,
        comparator=">=", detail=f"relative change {rel:+.3f} (min {rule.min_rel:+.3f})",
    )


def token_budget_gate(
    candidate_tokens: float, champion_tokens: float, budget: TokenBudget, ci: BootstrapCI | None
) -> GateResult:
    """Mean completion tokens may rise by at most max(abs, rel * champion)."""
    allowed = max(budget.max_abs_increase, budget.max_rel_increase * champion_tokens)
    rise = candidate_tokens - champion_tokens
    return GateResult(
        name="token_budget", value=rise, threshold=allowed, passed=rise <= allowed,
        ci_low=None if ci is None else ci.low, ci_high=None if ci is None else ci.high,
        comparator="<=",
        detail=f"candidate {candidate_tokens:.2f} vs champion {champion_tokens:.2f} tokens",
    )


def no_regression_gate(
    name: str, ci: BootstrapCI, *, worse_is_lower: bool, tolerance: float
) -> GateResult:
    """Fails only if the CI lies entirely on the worse side of ``-/+tolerance``."""
    if worse_is_lower:
        passed, threshold, comparator = ci.high >= -tolerance, -tolerance, "ci_high >="
    else:
        passed, threshold, comparator = ci.low <= tolerance, tolerance, "ci_low <="
    return GateResult(
        name=name, value=ci.mean, threshold=threshold, passed=passed, ci_low=ci.low,
        ci_high=ci.high, comparator=comparator,
    )


@dataclass(frozen=True)
class Evidence:
    """What the improvement test needs: one-sided bounds at ``alpha_k / 2`` and McNemar counts."""

    alpha: float
    """The decision's level alpha_k (each route to a win is tested at alpha / 2)."""
    passed_ci: PairedCI
    """Pass-rate change, bounds at quantiles alpha/2 and 1 - alpha/2."""
    tokens_ci: PairedCI
    """Mean-token change, bounds at quantiles alpha/2 and 1 - alpha/2."""
    better: int
    """Distinct prompts the candidate passes and the champion fails."""
    worse: int
    """Distinct prompts the champion passes and the candidate fails."""
    champion_tokens: float


def improvement_gate(e: Evidence, rule: ImprovementEvidence) -> GateResult:
    """Evidence of a win at level ``e.alpha``: primary (pass-rate lower bound > margin and the exact
    McNemar test rejects, at alpha/2) or secondary (non-inferior pass rate and surely shorter:
    both bounds at alpha/2, an intersection-union test)."""
    half = e.alpha / 2.0
    p = mcnemar_exact(e.better, e.worse)
    primary = e.passed_ci.low > rule.min_pass_rate_ci_low and (
        p <= half or rule.min_pass_rate_ci_low < 0.0)
    saving = max(rule.min_token_saving, rule.min_token_saving_rel * e.champion_tokens)
    non_inferior = e.passed_ci.low > -rule.non_inferiority_margin
    shorter = e.tokens_ci.high < -saving
    secondary = non_inferior and shorter
    why = ("pass-rate win" if primary else "shorter and non-inferior" if secondary
           else "no evidence of improvement (a tie is noise)")
    return GateResult(
        name="improvement_evidence", value=e.passed_ci.low, threshold=rule.min_pass_rate_ci_low,
        passed=primary or secondary, ci_low=e.passed_ci.low, ci_high=e.passed_ci.high,
        comparator="ci_low >",
        detail=(f"{why}; alpha_k {e.alpha:.3g} (each route at {half:.3g}); McNemar "
                f"{e.better} better / {e.worse} worse prompts, p = {p:.3g}; pass CI low "
                f"{e.passed_ci.low:+.4f} (non-inferior if > {-rule.non_inferiority_margin:+.3f}); "
                f"tokens CI [{e.tokens_ci.low:+.2f}, {e.tokens_ci.high:+.2f}] "
                f"(shorter if ci_high < {-saving:+.2f})"),
    )


def rate_jump_gate(name: str, candidate: float, champion: float, max_increase: float) -> GateResult:
    rise = candidate - champion
    return GateResult(
        name=name, value=rise, threshold=max_increase, passed=rise <= max_increase,
        comparator="<=", detail=f"candidate {candidate:.3f} vs champion {champion:.3f}",
    )


def _check_paired(candidate: SuiteResult, champion: SuiteResult) -> None:
    a = [t.task_id for t in candidate.tasks]
    b = [t.task_id for t in champion.tasks]
    if a != b:
        raise ValueError("candidate and champion suite results are not on the same tasks")


def _health_gates(
    candidate: SuiteResult, health: HealthFigures | None, config: GateConfig
) -> list[GateResult]:
    gates = []
    if health is not None:
        gates.append(GateResult(
            name="finite_weights", value=float(health.nonfinite_params), threshold=0.0,
            passed=health.nonfinite_params == 0, comparator="<=",
            detail="parameters that are NaN or inf",
        ))
    entropy = candidate.load_entropy
    if entropy is not None:
        gates.append(absolute_gate(
            "expert_load_entropy", entropy, config.health.min_load_entropy, at_least=True
        ))
    if health is not None and health.kl_to_champion is not None:
        kl = health.kl_to_champion
        gates.append(GateResult(
            name="kl_to_champion", value=kl, threshold=config.health.max_kl_to_champion,
            passed=math.isfinite(kl) and kl <= config.health.max_kl_to_champion, comparator="<=",
        ))
    return gates


def _clusters(candidate: SuiteResult, b: BootstrapConfig) -> np.ndarray | None:
    return cluster_ids(candidate.clusters) if b.cluster == "prompt" else None


def _paired_ci(candidate: list, champion: list, b: BootstrapConfig,
               clusters: np.ndarray | None, *, tail: float | None = None) -> BootstrapCI:
    """Clustered CI at the config's confidence, or with ``tail`` the one-sided quantiles
    (``tail``, ``1 - tail``) with enough resamples to place them."""
    d = np.asarray(candidate, dtype=np.float64) - np.asarray(champion, dtype=np.float64)
    if tail is None:
        return paired_bootstrap(
            np.asarray(candidate, dtype=np.float64), np.asarray(champion, dtype=np.float64),
            n_resamples=b.n_resamples, confidence=b.confidence, seed=b.seed, clusters=clusters,
        )
    return cluster_bootstrap(d, clusters, n_resamples=resamples_for(tail, b.n_resamples),
                             low_q=tail, high_q=1.0 - tail, seed=b.seed)


def _evidence(candidate: SuiteResult, champion: SuiteResult, b: BootstrapConfig,
              clusters: np.ndarray | None, alpha: float) -> Evidence:
    cp = [t.passed for t in candidate.tasks]
    hp = [t.passed for t in champion.tasks]
    d = np.asarray(cp, dtype=np.float64) - np.asarray(hp, dtype=np.float64)
    better, worse = cluster_signs(d, clusters)
    return Evidence(
        alpha=alpha,
        passed_ci=_paired_ci(cp, hp, b, clusters, tail=alpha / 2.0),
        tokens_ci=_paired_ci([t.completion_tokens for t in candidate.tasks],
                             [t.completion_tokens for t in champion.tasks], b, clusters,
                             tail=alpha / 2.0),
        better=better, worse=worse, champion_tokens=champion.mean_completion_tokens,
    )


def _champion_gates(
    candidate: SuiteResult, champion: SuiteResult, config: GateConfig, alpha: float
) -> list[GateResult]:
    _check_paired(candidate, champion)
    b = config.bootstrap
    clusters = _clusters(candidate, b)
    passed_ci = _paired_ci([t.passed for t in candidate.tasks],
                           [t.passed for t in champion.tasks], b, clusters)
    tokens_ci = _paired_ci([t.completion_tokens for t in candidate.tasks],
                           [t.completion_tokens for t in champion.tasks], b, clusters)
    evidence = ([] if config.improvement is None else [improvement_gate(
        _evidence(candidate, champion, b, clusters, alpha), config.improvement)])
    return evidence + [
        change_gate("pass_rate_change", candidate.pass_rate, champion.pass_rate,
                    config.pass_rate_change, passed_ci),
        token_budget_gate(candidate.mean_completion_tokens, champion.mean_completion_tokens,
                          config.token_budget, tokens_ci),
        no_regression_gate("pass_rate_no_regression", passed_ci, worse_is_lower=True,
                           tolerance=b.max_pass_rate_drop),
        no_regression_gate("tokens_no_regression", tokens_ci, worse_is_lower=False,
                           tolerance=b.max_token_rise),
        rate_jump_gate("no_edit_rate", candidate.no_edit_rate, champion.no_edit_rate,
                       config.hack.max_no_edit_increase),
        rate_jump_gate("malformed_rate", candidate.malformed_rate, champion.malformed_rate,
                       config.hack.max_malformed_increase),
    ]


def guard_gate(guard: GuardSuite, candidate: SuiteResult, champion: SuiteResult,
               b: BootstrapConfig) -> GateResult:
    """``guard.<name>``: fails iff the candidate is surely worse than the champion on the guard
    suite (the whole prompt-clustered CI of the pass-rate change below ``-guard.max_drop``)."""
    _check_paired(candidate, champion)
    ci = _paired_ci([t.passed for t in candidate.tasks], [t.passed for t in champion.tasks], b,
                    _clusters(candidate, b))
    gate = no_regression_gate(f"guard.{guard.name}", ci, worse_is_lower=True,
                              tolerance=guard.max_drop)
    return gate.model_copy(update={"detail": (
        f"candidate {candidate.pass_rate:.3f} vs champion {champion.pass_rate:.3f} on "
        f"{len(candidate.tasks)} guard tasks")})


def evaluate_gates(
    candidate: SuiteResult,
    champion: SuiteResult | None,
    config: GateConfig,
    *,
    health: HealthFigures | None = None,
    alpha: float | None = None,
) -> list[GateResult]:
    """All gates for ``candidate``; relative gates only when a champion result is given.

    ``alpha``: the decision's level alpha_k for the improvement test (gating.stats.AlphaSpending);
    None tests a single decision at ``(1 - bootstrap.confidence) / 2`` one-sided.
    """
    if alpha is None:
        alpha = (1.0 - config.bootstrap.confidence) / 2.0
    gates = [absolute_gate("pass_rate", candidate.pass_rate, config.min_pass_rate, at_least=True)]
    if champion is not None:
        gates += _champion_gates(candidate, champion, config, alpha)
    gates += _health_gates(candidate, health, config)
    return gates
