"""The gates: pure functions from suite results (and health figures) to pass/fail records.

Each gate returns a :class:`~gating.records.GateResult` with the measured value, the threshold
it was held to, the comparison, and — for the differences against the champion — a paired
bootstrap CI over distinct prompts. :func:`evaluate_gates` composes them; with no champion
(bootstrap of the registry) only the absolute gates run.

The rule (docs/STATISTICS.md section 3): promote iff the primary is superior and every
guardrail is shown non-inferior, the burden of proof on the candidate everywhere.

Gates:
- ``pass_rate`` (absolute): candidate pass rate >= ``min_pass_rate``.
- ``improvement_evidence`` (the primary): the exact McNemar test on the discordant independent
  clusters rejects at the primary's one-sided level (0.04 of the decision's 0.05), or the
  shorter-answers route (non-inferior pass rate and surely shorter, at 0.01) passes.
- ``tokens_non_inferior``, ``malformed_rate``, ``no_edit_rate`` (guardrails): the one-sided 95%
  bound of the change must stay below its margin (+10% tokens, +0.05 rates).
- ``guard.<name>``: on a regression-guard suite (``GateConfig.guards``), the one-sided 95% lower
  bound of the pass-rate change must lie above ``-max_drop`` (0.03).
- ``guard.families``: the per-family maximum-drop test (sign flips, family-wise 0.05) over the
  guard suites' families.
- ``pass_rate_change``, ``token_budget``, ``pass_rate_no_regression``: point and two-sided checks
  kept beside them.
- ``finite_weights``, ``expert_load_entropy``, ``kl_to_champion`` (health).

Every bound resamples independent clusters (``bootstrap.cluster``: the function a task asks for,
else its prompt), not rows. :func:`power_figures` says what a draw could detect.

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
    GuardrailConfig,
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
    max_drop_test,
    mcnemar_exact,
    mde_at_power,
    resamples_for,
    sign_test_interval,
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


def route_levels(alpha: float, rule: str, share: float) -> tuple[float, float]:
    """(primary, shorter) one-sided levels of the two routes to a win at the decision's level
    ``alpha``: ``per_decision`` gives the shorter-answers route ``share`` of it, the older rules
    (lord, pi2, fixed) half each. The union of the routes is a level-``alpha`` test."""
    if rule == "per_decision":
        return alpha * (1.0 - share), alpha * share
    return alpha / 2.0, alpha / 2.0


@dataclass(frozen=True)
class Evidence:
    """What the improvement test needs: one-sided bounds at each route's level, McNemar counts."""

    alpha: float
    """The decision's level alpha_k (split over the two routes: ``primary`` + ``shorter``)."""
    passed_ci: PairedCI
    """Pass-rate change, bounds at quantiles ``primary`` and ``1 - primary``."""
    tokens_ci: PairedCI
    """Mean-token change, bounds at quantiles ``shorter`` and ``1 - shorter``."""
    better: int
    """Distinct clusters (functions) the candidate passes and the champion fails."""
    worse: int
    """Distinct clusters the champion passes and the candidate fails."""
    champion_tokens: float
    primary: float = 0.0
    """One-sided level of the primary (pass-rate) route; 0: ``alpha / 2``."""
    shorter: float = 0.0
    """One-sided level of the shorter-answers route; 0: ``alpha / 2``; no route when < 0."""
    passed_ci_shorter: PairedCI | None = None
    """Pass-rate change bounds at the shorter route's level (its non-inferiority part)."""
    clusters: int = 0
    """Independent clusters of the draw (the McNemar test's unit); 0: ``better + worse``."""

    @property
    def levels(self) -> tuple[float, float]:
        return (self.primary or self.alpha / 2.0, self.shorter or self.alpha / 2.0)


def improvement_gate(e: Evidence, rule: ImprovementEvidence) -> GateResult:
    """Evidence of a win at level ``e.alpha``: primary (the exact McNemar test on the discordant
    clusters rejects at the primary level, and the pass-rate lower bound at that level is above
    ``min_pass_rate_ci_low`` when that margin is positive) or secondary (non-inferior pass rate and
    surely shorter, both at the shorter route's level: an intersection-union test). A negative
    margin accepts on the bound alone (tests that need a tie to pass).

    The interval the result carries and its reason quotes is the one of the test that decides:
    with a margin of 0 (the default) the exact test's interval of the net share of clusters
    answered better (:func:`gating.stats.sign_test_interval`), whose lower bound is above 0 iff
    the test rejects; with a margin the clustered bootstrap bounds of the pass-rate change."""
    a_primary, a_shorter = e.levels
    p = mcnemar_exact(e.better, e.worse)
    margin = rule.min_pass_rate_ci_low
    if margin < 0.0:
        primary = e.passed_ci.low > margin
    else:
        primary = p <= a_primary and (margin == 0.0 or e.passed_ci.low > margin)
    saving = max(rule.min_token_saving, rule.min_token_saving_rel * e.champion_tokens)
    ni_ci = e.passed_ci_shorter or e.passed_ci
    non_inferior = ni_ci.low > -rule.non_inferiority_margin
    shorter = e.tokens_ci.high < -saving
    secondary = a_shorter > 0.0 and non_inferior and shorter
    why = ("pass-rate win" if primary else "shorter and non-inferior" if secondary
           else "no evidence of improvement (a tie is noise)")
    n = max(e.clusters, e.better + e.worse, 1)
    exact = margin == 0.0
    if exact:
        value = (e.better - e.worse) / n
        low, high = sign_test_interval(e.better, e.worse, n, a_primary)
        figures = (f"{value:+.3f} [{low:+.3f}, {high:+.3f}] net share of {n} clusters better, "
                   f"superiority p = {p:.2g} {'<=' if p <= a_primary else '>'} {a_primary:.2g} "
                   f"({e.better} better / {e.worse} worse); pass-rate change over tasks "
                   f"{e.passed_ci.mean:+.3f}")
    else:
        value, low, high = e.passed_ci.low, e.passed_ci.low, e.passed_ci.high
        figures = (f"{e.passed_ci.mean:+.3f} [{low:+.3f}, {high:+.3f}], superiority p = "
                   f"{p:.2g} {'<=' if p <= a_primary else '>'} {a_primary:.2g} ({e.better} "
                   f"better / {e.worse} worse), pass-rate bound {low:+.3f} vs margin "
                   f"{margin:+.3f}")
    if primary:
        reason = figures
    elif secondary:
        reason = (f"shorter by {-e.tokens_ci.mean:.2f} tokens (upper bound {e.tokens_ci.high:+.2f}"
                  f" < {-saving:+.2f}) and not worse (pass {ni_ci.mean:+.3f}, lower bound "
                  f"{ni_ci.low:+.3f} > {-rule.non_inferiority_margin:+.3f})")
    else:
        reason = f"no evidence of a win: {figures}"
    return GateResult(
        name="improvement_evidence", value=value, threshold=0.0 if exact else margin,
        passed=primary or secondary, ci_low=low, ci_high=high,
        comparator="ci_low >", reason=reason,
        detail=(f"{why}; alpha_k {e.alpha:.3g} (primary at {a_primary:.3g}, shorter at "
                f"{a_shorter:.3g}); McNemar {e.better} better / {e.worse} worse of {n} clusters, "
                f"p = {p:.3g}; "
                + (f"exact interval of the net share better [{low:+.4f}, {high:+.4f}], each "
                   f"bound one-sided at {a_primary:.3g}; " if exact else "")
                + f"pass bounds [{e.passed_ci.low:+.4f}, {e.passed_ci.high:+.4f}] at "
                f"{a_primary:.3g} (non-inferior if {ni_ci.low:+.4f} > "
                f"{-rule.non_inferiority_margin:+.3f}); tokens bounds [{e.tokens_ci.low:+.2f}, "
                f"{e.tokens_ci.high:+.2f}] (shorter if < {-saving:+.2f})"),
    )


def non_inferiority_gate(name: str, ci: PairedCI, *, margin: float, worse_is_lower: bool,
                         alpha: float, unit: str = "") -> GateResult:
    """Burden of proof on the candidate: passes iff the one-sided level-``alpha`` bound of the
    change (``ci``'s low for a metric where lower is worse, its high otherwise) is on the good
    side of the margin. A CI that straddles the margin fails."""
    if worse_is_lower:
        passed, bound, threshold, cmp = ci.low > -margin, ci.low, -margin, "ci_low >"
    else:
        passed, bound, threshold, cmp = ci.high < margin, ci.high, margin, "ci_high <"
    shown = "shown non-inferior" if passed else "not shown non-inferior"
    return GateResult(
        name=name, value=ci.mean, threshold=threshold, passed=passed, ci_low=ci.low,
        ci_high=ci.high, comparator=cmp,
        reason=(f"{name} {shown}: {ci.mean:+.3g}{unit}, one-sided {1 - alpha:.0%} bound "
                f"{bound:+.3g} {'>' if worse_is_lower else '<'}{'' if passed else ' needed'} "
                f"{threshold:+.3g}"),
        detail=f"one-sided level {alpha:.3g}; margin {margin:.3g}{unit}",
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
    """Cluster ids of the independent unit (``bootstrap.cluster``); None: rows."""
    return None if b.cluster == "row" else cluster_ids(candidate.cluster_keys(b.cluster))


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


def _evidence(candidate: SuiteResult, champion: SuiteResult, config: GateConfig,
              clusters: np.ndarray | None, alpha: float) -> Evidence:
    b = config.bootstrap
    share = 0.0 if config.improvement is None else config.improvement.shorter_route_share
    a_primary, a_shorter = route_levels(alpha, config.error_control.rule, share)
    cp = candidate.primary_values(config.primary_metric)
    hp = champion.primary_values(config.primary_metric)
    d = np.asarray(cp, dtype=np.float64) - np.asarray(hp, dtype=np.float64)
    better, worse = cluster_signs(d, clusters)
    tail_shorter = a_shorter if a_shorter > 0.0 else a_primary
    passed_ci = _paired_ci(cp, hp, b, clusters, tail=a_primary)
    return Evidence(
        alpha=alpha, primary=a_primary, shorter=a_shorter if a_shorter > 0.0 else -1.0,
        passed_ci=passed_ci,
        passed_ci_shorter=(passed_ci if tail_shorter == a_primary
                           else _paired_ci(cp, hp, b, clusters, tail=tail_shorter)),
        tokens_ci=_paired_ci([t.completion_tokens for t in candidate.tasks],
                             [t.completion_tokens for t in champion.tasks], b, clusters,
                             tail=tail_shorter),
        better=better, worse=worse, champion_tokens=champion.mean_completion_tokens,
        clusters=d.size if clusters is None else int(np.unique(clusters).size),
    )


def _rate_gate(name: str, candidate: list, champion: list, margin: float, config: GateConfig,
               clusters: np.ndarray | None) -> GateResult:
    """A rate that must not rise (malformed, empty answers): non-inferior at ``margin``."""
    g = config.guardrails
    ci = _paired_ci([float(x) for x in candidate], [float(x) for x in champion],
                    config.bootstrap, clusters, tail=g.alpha)
    gate = non_inferiority_gate(name, ci, margin=margin, worse_is_lower=False, alpha=g.alpha)
    rate_c, rate_h = float(np.mean(candidate)), float(np.mean(champion))
    return gate.model_copy(update={"detail": (
        f"candidate {rate_c:.3f} vs champion {rate_h:.3f}; {gate.detail}")})


def _champion_gates(
    candidate: SuiteResult, champion: SuiteResult, config: GateConfig, alpha: float
) -> list[GateResult]:
    _check_paired(candidate, champion)
    b, g = config.bootstrap, config.guardrails
    clusters = _clusters(candidate, b)
    cand_tokens = [t.completion_tokens for t in candidate.tasks]
    champ_tokens = [t.completion_tokens for t in champion.tasks]
    metric = config.primary_metric
    passed_ci = _paired_ci(candidate.primary_values(metric), champion.primary_values(metric),
                           b, clusters)
    tokens_ci = _paired_ci(cand_tokens, champ_tokens, b, clusters)
    evidence = ([] if config.improvement is None else [improvement_gate(
        _evidence(candidate, champion, config, clusters, alpha), config.improvement)])
    token_margin = max(b.max_token_rise, g.token_rise_rel * champion.mean_completion_tokens)
    tokens = non_inferiority_gate(
        "tokens_non_inferior", _paired_ci(cand_tokens, champ_tokens, b, clusters, tail=g.alpha),
        margin=token_margin, worse_is_lower=False, alpha=g.alpha, unit=" tokens")
    greedy = []
    if metric != "greedy":  # the greedy answer stays a guardrail: never surely worse
        greedy = [no_regression_gate(
            "greedy_pass_rate_no_regression",
            _paired_ci([t.passed for t in candidate.tasks], [t.passed for t in champion.tasks],
                       b, clusters), worse_is_lower=True, tolerance=b.max_pass_rate_drop)]
    return evidence + [
        change_gate("pass_rate_change", _primary_rate(candidate, metric),
                    _primary_rate(champion, metric), config.pass_rate_change, passed_ci),
        token_budget_gate(candidate.mean_completion_tokens, champion.mean_completion_tokens,
                          config.token_budget, tokens_ci),
        no_regression_gate("pass_rate_no_regression", passed_ci, worse_is_lower=True,
                           tolerance=b.max_pass_rate_drop),
        tokens.model_copy(update={"detail": (
            f"candidate {candidate.mean_completion_tokens:.2f} vs champion "
            f"{champion.mean_completion_tokens:.2f} tokens; {tokens.detail}")}),
        _rate_gate("no_edit_rate", [t.no_edit for t in candidate.tasks],
                   [t.no_edit for t in champion.tasks], config.hack.max_no_edit_increase,
                   config, clusters),
        _rate_gate("malformed_rate", [t.malformed for t in candidate.tasks],
                   [t.malformed for t in champion.tasks], config.hack.max_malformed_increase,
                   config, clusters),
    ] + greedy


def _primary_rate(result: SuiteResult, metric: str) -> float:
    values = result.primary_values(metric)
    return float(np.mean(values)) if values else 0.0


def guard_gate(guard: GuardSuite, candidate: SuiteResult, champion: SuiteResult,
               b: BootstrapConfig, g: GuardrailConfig | None = None) -> GateResult:
    """``guard.<name>``: the candidate must be shown non-inferior on the guard suite (the
    one-sided ``g.alpha`` lower bound of the function-clustered pass-rate change above
    ``-guard.max_drop``); ``guard.test = "surely_worse"``: fails only iff the whole two-sided CI
    lies below ``-guard.max_drop``."""
    g = g or GuardrailConfig()
    _check_paired(candidate, champion)
    cp, hp = [t.passed for t in candidate.tasks], [t.passed for t in champion.tasks]
    clusters = _clusters(candidate, b)
    name = f"guard.{guard.name}"
    if guard.test == "surely_worse":
        gate = no_regression_gate(name, _paired_ci(cp, hp, b, clusters), worse_is_lower=True,
                                  tolerance=guard.max_drop)
        gate = gate.model_copy(update={"reason": (
            f"guard `{guard.name}` {'' if gate.passed else 'surely '}"
            f"{'held' if gate.passed else 'worse'}: {gate.value:+.3f} "
            f"[{gate.ci_low:+.3f}, {gate.ci_high:+.3f}]")})
    else:
        gate = non_inferiority_gate(name, _paired_ci(cp, hp, b, clusters, tail=g.alpha),
                                    margin=guard.max_drop, worse_is_lower=True, alpha=g.alpha)
        gate = gate.model_copy(update={"reason": gate.reason.replace(
            f"{name} ", f"guard `{guard.name}` ", 1)})
    return gate.model_copy(update={"detail": (
        f"candidate {candidate.pass_rate:.3f} vs champion {champion.pass_rate:.3f} on "
        f"{len(candidate.tasks)} guard tasks; {gate.detail}")})


def families_gate(pairs: list[tuple[GuardSuite, SuiteResult, SuiteResult]], b: BootstrapConfig,
                  g: GuardrailConfig) -> GateResult | None:
    """``guard.families``: the per-family maximum-drop test over the families of the guard
    suites (``GuardSuite.families``), family-wise at ``g.family_alpha``; fails iff some family
    dropped beyond what sign flips of its functions explain. None when no suite takes part."""
    diff: list[float] = []
    cand: list[float] = []
    keys: list[str] = []
    prompts: list[str] = []
    fams: list[str] = []
    for guard, c, h in pairs:
        if not guard.families:
            continue
        _check_paired(c, h)
        for tc, th, key in zip(c.tasks, h.tasks, c.clusters, strict=True):
            diff.append(float(tc.passed) - float(th.passed))
            cand.append(float(tc.passed))
            prompts.append(f"{guard.name}/{tc.task_id}")
            keys.append(f"{guard.name}/{key}" if b.cluster == "prompt" else prompts[-1])
            fams.append(f"{guard.name}/{tc.kind}" if len(pairs) > 1 else tc.kind)
    if not diff:
        return None
    r = max_drop_test(np.asarray(diff), np.asarray(keys), fams, prompts=prompts,
                      candidate=np.asarray(cand), n_permutations=g.family_permutations,
                      seed=b.seed)
    passed = r.p_value > g.family_alpha
    lost = r.champion_passed - r.candidate_passed
    reason = (f"guard `{r.family}` dropped {lost} of {r.champion_passed}, p = {r.p_value:.2g}"
              f" {'>' if passed else '<='} {g.family_alpha:.2g} (largest of {r.n_families} "
              f"families)")
    return GateResult(
        name="guard.families", value=r.p_value, threshold=g.family_alpha, passed=passed,
        comparator="p >", reason=reason,
        detail=(f"max-drop family {r.family}: champion {r.champion_passed} -> candidate "
                f"{r.candidate_passed} of {r.n_clusters} {r.unit}, studentised drop "
                f"{r.z:.2f}; sign-flip p over {r.n_families} families "
                f"({g.family_permutations} flips)"),
    )


def power_figures(candidate: SuiteResult, champion: SuiteResult, config: GateConfig,
                  alpha: float) -> dict[str, float]:
    """What the draw could have detected: independent clusters, the share of them whose
    verdict changed, and the minimum detectable gain at ``guardrails.power`` for the primary
    route's level (docs/STATISTICS.md)."""
    b = config.bootstrap
    clusters = _clusters(candidate, b)
    d = (np.asarray(candidate.primary_values(config.primary_metric), dtype=np.float64)
         - np.asarray(champion.primary_values(config.primary_metric), dtype=np.float64))
    better, worse = cluster_signs(d, clusters)
    n_c = int(np.unique(clusters).size) if clusters is not None else len(candidate.tasks)
    share = 0.0 if config.improvement is None else config.improvement.shorter_route_share
    a_primary, _ = route_levels(alpha, config.error_control.rule, share)
    q = (better + worse) / n_c if n_c else 0.0
    return {"power.clusters": float(n_c), "power.discordant_share": q,
            "power.level": a_primary, "power.target": config.guardrails.power,
            "power.mde": mde_at_power(n_c, q, a_primary, config.guardrails.power)}


def sampled_figures(candidate: SuiteResult, champion: SuiteResult | None,
                    b: BootstrapConfig) -> dict[str, float]:
    """Pass rates at the suite's sampling temperature (``suite.samples``), and with a champion
    the change's paired CI over independent clusters at ``b.confidence``. Recorded beside the
    gates, never gating: empty when the suite sampled nothing."""
    cand = candidate.sampled_pass_rate
    if cand is None:
        return {}
    out = {"sampled.candidate_pass_rate": cand}
    champ = None if champion is None else champion.sampled_pass_rate
    if champ is None:
        return out
    _check_paired(candidate, champion)
    ci = _paired_ci([t.sampled_pass for t in candidate.tasks],
                    [t.sampled_pass for t in champion.tasks], b, _clusters(candidate, b))
    return {**out, "sampled.champion_pass_rate": champ, "sampled.change": ci.mean,
            "sampled.change.ci_low": ci.low, "sampled.change.ci_high": ci.high}


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
    None tests one decision at ``error_control.alpha``.
    """
    if alpha is None:
        alpha = config.error_control.alpha
    gates = [absolute_gate("pass_rate", _primary_rate(candidate, config.primary_metric),
                           config.min_pass_rate, at_least=True)]
    if champion is not None:
        gates += _champion_gates(candidate, champion, config, alpha)
    gates += _health_gates(candidate, health, config)
    return gates
