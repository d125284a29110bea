"""Paired statistics for comparing two models on the same tasks, and error control across gates.

Everything here is a pure function of numpy arrays or plain numbers:

- :func:`cluster_bootstrap`: percentile CI of a paired mean difference that resamples
  **clusters** (distinct prompts), not rows. Greedy answers to a repeated prompt are identical,
  so rows of one prompt are one observation repeated; resampling rows as if independent
  understates the variance by the design effect (about 2.3 on a 400-task toy suite with 280
  distinct prompts). With every cluster a single row it is the row bootstrap, draw for draw.
- :func:`mcnemar_exact`: exact one-sided McNemar test (a binomial sign test on the discordant
  pairs), on cluster-level signs.
- :func:`clopper_pearson_upper`: exact one-sided binomial upper bound (false-promotion rates).
- :class:`AlphaSpending`: the per-decision level ``alpha_k`` that spends a lifetime budget over a
  model's gate decisions: LORD++ (online FDR; under the global null it bounds the chance of any
  false promotion by ``alpha``) or ``6 alpha / (pi^2 k^2)`` (family-wise).
- :func:`normalised_load_entropy`: the worst layer's expert-load entropy over ``log(n_experts)``
  (the expert-collapse figure of a suite's routing).

Deliberately left out: which figures are compared (gating/gates.py) and where the spending state
is stored (runtime/registry.py, gating/gate.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

_CHUNK = 20_000
"""Bootstrap resamples drawn per chunk (bounds memory at chunk x clusters indices)."""


@dataclass(frozen=True)
class PairedCI:
    """Mean of the paired differences (rows weighted equally) and its percentile CI."""

    mean: float
    low: float
    high: float
    n_rows: int = 0
    n_clusters: int = 0


def cluster_ids(keys: Sequence[str]) -> np.ndarray:
    """Integer cluster ids ``(n,)`` in order of first appearance of each key (e.g. prompt text)."""
    seen: dict[str, int] = {}
    return np.asarray([seen.setdefault(k, len(seen)) for k in keys], dtype=np.int64)


def cluster_bootstrap(
    diff: np.ndarray,
    clusters: np.ndarray | None = None,
    *,
    n_resamples: int = 2000,
    low_q: float = 0.025,
    high_q: float = 0.975,
    seed: int = 0,
) -> PairedCI:
    """Percentile CI of ``mean(diff)`` resampling clusters with replacement.

    ``diff``: per-row paired differences ``(n,)`` (candidate minus champion, or a mean over seeds
    minus a baseline). ``clusters``: ``(n,)`` cluster ids (:func:`cluster_ids`); None means every
    row is its own cluster (the row bootstrap). Each resample draws ``C`` clusters and takes the
    row-weighted mean ``sum(cluster sums) / sum(cluster sizes)``, so the point estimate is the
    plain row mean and a suite without repeats gives exactly the row bootstrap.
    ``low_q``/``high_q``: the quantiles reported (one-sided level ``a``: ``low_q = a``).
    """
    d = np.asarray(diff, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError(f"cluster_bootstrap needs a non-empty 1-d array, got shape {d.shape}")
    if clusters is None:
        ids = np.arange(d.size)
    else:
        ids = np.asarray(clusters)
        if ids.shape != d.shape:
            raise ValueError(f"clusters {ids.shape} and diff {d.shape} differ in shape")
        _, ids = np.unique(ids, return_inverse=True)
    n_c = int(ids.max()) + 1
    sums = np.bincount(ids, weights=d, minlength=n_c)  # (C,)
    sizes = np.bincount(ids, minlength=n_c).astype(np.float64)  # (C,)
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, _CHUNK):
        b = min(_CHUNK, n_resamples - start)
        idx = rng.integers(0, n_c, size=(b, n_c))  # (b, C)
        means[start:start + b] = sums[idx].sum(axis=1) / sizes[idx].sum(axis=1)
    low, high = np.quantile(means, [low_q, high_q])
    return PairedCI(float(d.mean()), float(low), float(high), int(d.size), n_c)


def resamples_for(alpha: float, base: int, cap: int = 200_000) -> int:
    """Resamples enough to place a one-sided ``alpha`` quantile on >= 20 draws (at most ``cap``)."""
    return int(min(cap, max(base, math.ceil(20.0 / max(alpha, 1e-12)))))


def cluster_signs(diff: np.ndarray, clusters: np.ndarray | None = None) -> tuple[int, int]:
    """(clusters where the candidate is better, clusters where it is worse): the sign of each
    cluster's mean difference. Ties (0) are concordant and drop out."""
    d = np.asarray(diff, dtype=np.float64)
    ids = np.arange(d.size) if clusters is None else np.unique(clusters, return_inverse=True)[1]
    n_c = int(ids.max()) + 1 if d.size else 0
    means = np.bincount(ids, weights=d, minlength=n_c) / np.maximum(
        np.bincount(ids, minlength=n_c), 1)
    return int((means > 0).sum()), int((means < 0).sum())


def mcnemar_exact(better: int, worse: int) -> float:
    """One-sided exact McNemar p-value for "the candidate is better": ``P(X >= better)`` with
    ``X ~ Binomial(better + worse, 1/2)``. 1.0 when there is no discordant pair."""
    if better < 0 or worse < 0:
        raise ValueError(f"counts must be >= 0, got {better}, {worse}")
    n = better + worse
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(better, n + 1))
    return min(1.0, tail / 2.0**n)


def clopper_pearson_upper(successes: int, n: int, level: float = 0.95) -> float:
    """Exact one-sided upper confidence bound of a binomial proportion (Clopper-Pearson)."""
    if not 0 <= successes <= n or n == 0:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got {successes}, {n}")
    if successes == n:
        return 1.0
    a = 1.0 - level

    def cdf(p: float) -> float:  # P(X <= successes | p)
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(successes + 1))

    lo, hi = successes / n, 1.0
    for _ in range(200):  # bisection: cdf is decreasing in p
        mid = (lo + hi) / 2
        if cdf(mid) > a:
            lo = mid
        else:
            hi = mid
    return hi


def sign_test_interval(better: int, worse: int, clusters: int,
                       level: float) -> tuple[float, float]:
    """The interval of the net share of clusters the candidate answers better,
    ``(better - worse) / clusters``, that the exact McNemar test implies: the Clopper-Pearson
    bounds of the better share among the discordant clusters, each one-sided at ``level``, mapped
    to the net scale (given the discordant count). The lower bound is above 0 exactly when
    ``mcnemar_exact(better, worse) <= level`` (an exact test and its interval agree), so a
    decision that shows this interval never contradicts the test that made it; at the boundary
    the float bisection is pinned to that side. (0, 0) with no discordant cluster."""
    if better < 0 or worse < 0 or clusters < better + worse or clusters <= 0:
        raise ValueError(f"need 0 <= better + worse <= clusters, got {better}, {worse}, "
                         f"{clusters}")
    if not 0.0 < level < 0.5:
        raise ValueError(f"level must be in (0, 0.5), got {level}")
    n = better + worse
    if n == 0:
        return 0.0, 0.0
    share = n / clusters
    high = share * (2.0 * clopper_pearson_upper(better, n, 1.0 - level) - 1.0)
    low = share * (1.0 - 2.0 * clopper_pearson_upper(worse, n, 1.0 - level))
    low = max(low, 0.0) if mcnemar_exact(better, worse) <= level else min(low, 0.0)
    return low, high


def mcnemar_z(better: int, worse: int) -> float:
    """Normal statistic of the McNemar test, ``(better - worse) / sqrt(better + worse)`` (0 when
    no pair is discordant): the statistic the two-look boundaries are set on."""
    n = better + worse
    return 0.0 if n == 0 else (better - worse) / math.sqrt(n)


def obrien_fleming_bounds(alpha: float, t1: float) -> tuple[float, float]:
    """One-sided two-look boundaries ``(c1, c2)`` on the z scale for level ``alpha``: the first
    look at information fraction ``t1`` spends ``2 - 2 Phi(z_{1-alpha/2} / sqrt(t1))`` (the
    Lan-DeMets O'Brien-Fleming spending function), the second look the rest, with
    ``corr(Z1, Z2) = sqrt(t1)``. At ``alpha = 0.025, t1 = 0.5``: (2.963, 1.969)."""
    from scipy.stats import multivariate_normal, norm

    if not 0.0 < t1 < 1.0:
        raise ValueError(f"the first look's information fraction must be in (0, 1), got {t1}")
    a1 = 2.0 - 2.0 * float(norm.cdf(norm.ppf(1.0 - alpha / 2.0) / math.sqrt(t1)))
    c1 = float(norm.ppf(1.0 - a1))
    rho = math.sqrt(t1)
    mvn = multivariate_normal(mean=[0.0, 0.0], cov=[[1.0, rho], [rho, 1.0]])

    def excess(c2: float) -> float:  # P(Z1 < c1, Z2 >= c2) - (alpha - a1), decreasing in c2
        return float(norm.cdf(c1)) - float(mvn.cdf([c1, c2])) - (alpha - a1)

    lo, hi = -1.0, c1 + 5.0
    for _ in range(80):
        mid = (lo + hi) / 2.0
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
    return c1, hi


# -- alpha spending across gate decisions -------------------------------------------------------

def lord_gamma(j: int) -> float:
    """LORD++ spending sequence ``gamma_j = 1 / (j (j + 1))`` (j >= 1): sums to 1 exactly, and
    gives half of the earned wealth to the first test after each promotion."""
    if j < 1:
        return 0.0
    return 1.0 / (j * (j + 1))


@dataclass
class AlphaSpending:
    """Per-decision level for a model's k-th gate decision (k = 1, 2, ...).

    ``rule='lord'`` (LORD++, Ramdas et al. 2017):
    ``alpha_k = gamma_k W0 + (alpha - W0) gamma_{k - tau_1} + alpha sum_{j>=2} gamma_{k - tau_j}``
    with ``tau_j`` the decisions that promoted. It controls the (modified) false discovery rate at
    ``alpha``; when no candidate is better (the global null) that is the chance of any false
    promotion over the model's life. ``rule='pi2'``: ``alpha_k = 6 alpha / (pi^2 k^2)``,
    family-wise over all decisions, promotions or not. ``rule='fixed'``: ``alpha`` every time
    (no control across cycles). ``wealth`` is what LORD++ has left to spend.
    """

    alpha: float = 0.05
    rule: str = "lord"
    w0: float | None = None
    k: int = 0
    """Decisions taken so far (the next one is ``k + 1``)."""
    promotions: list[int] = field(default_factory=list)
    """Indices (1-based) of the decisions that promoted."""
    spent: float = 0.0
    """Sum of the levels used so far."""

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.rule not in ("per_decision", "lord", "pi2", "fixed"):
            raise ValueError(
                f"rule must be 'per_decision', 'lord', 'pi2' or 'fixed', got {self.rule!r}")
        if self.w0 is None:
            self.w0 = self.alpha / 2.0
        if not 0.0 < self.w0 <= self.alpha:
            raise ValueError(f"w0 must be in (0, alpha], got {self.w0}")

    def level(self, k: int | None = None) -> float:
        """``alpha_k`` for decision ``k`` (default: the next one) given the promotions so far."""
        k = self.k + 1 if k is None else k
        if self.rule in ("fixed", "per_decision"):
            return self.alpha
        if self.rule == "pi2":
            return 6.0 * self.alpha / (math.pi**2 * k * k)
        taus = [t for t in self.promotions if t < k]
        a = lord_gamma(k) * self.w0
        for i, tau in enumerate(taus):
            a += (self.alpha - self.w0 if i == 0 else self.alpha) * lord_gamma(k - tau)
        return a

    @property
    def wealth(self) -> float:
        """LORD++ wealth: ``W0 - spent + (alpha - W0) [promoted] + alpha (promotions - 1)``."""
        earned = 0.0
        if self.promotions:
            earned = (self.alpha - self.w0) + self.alpha * (len(self.promotions) - 1)
        return self.w0 - self.spent + earned

    def record(self, promoted: bool) -> float:
        """Take decision ``k + 1``: returns the level it used and updates the state."""
        a = self.level()
        self.k += 1
        self.spent += a
        if promoted:
            self.promotions.append(self.k)
        return a

    def to_tags(self) -> dict[str, str]:
        return {
            "ratchet.alpha.rule": self.rule, "ratchet.alpha.total": repr(self.alpha),
            "ratchet.alpha.w0": repr(self.w0), "ratchet.alpha.k": str(self.k),
            "ratchet.alpha.promotions": ",".join(map(str, self.promotions)),
            "ratchet.alpha.spent": repr(self.spent), "ratchet.alpha.wealth": repr(self.wealth),
        }

    @classmethod
    def from_tags(cls, tags: dict[str, str], *, alpha: float, rule: str,
                  w0: float | None = None) -> AlphaSpending:
        """The state stored in ``tags`` (a fresh one when absent). A stored state with another
        rule or budget is an error: the guarantee holds only if one schedule runs throughout."""
        if "ratchet.alpha.k" not in tags:
            return cls(alpha=alpha, rule=rule, w0=w0)
        stored = (tags.get("ratchet.alpha.rule"), float(tags["ratchet.alpha.total"]))
        if stored != (rule, alpha):
            raise ValueError(
                f"the registered model spends alpha with rule={stored[0]!r}, alpha={stored[1]}; "
                f"the config asks rule={rule!r}, alpha={alpha}: a schedule cannot change midway"
            )
        proms = tags.get("ratchet.alpha.promotions", "")
        return cls(
            alpha=alpha, rule=rule, w0=float(tags["ratchet.alpha.w0"]),
            k=int(tags["ratchet.alpha.k"]),
            promotions=[int(x) for x in proms.split(",") if x],
            spent=float(tags.get("ratchet.alpha.spent", "0")),
        )


def normalised_load_entropy(load: list[list[int]]) -> float:
    """Lowest per-layer entropy of the expert-load distribution, divided by log(n_experts).

    ``load`` is ``(layers, n_experts)`` token counts. 1.0 means every expert got the same share;
    0.0 means one expert took every token (collapse). A layer with no tokens counts as 0.
    """
    worst = 1.0
    for counts in load:
        c = np.asarray(counts, dtype=np.float64)
        if c.size < 2:
            raise ValueError(f"expert load needs >= 2 experts per layer, got {c.size}")
        total = c.sum()
        if total <= 0:
            return 0.0
        p = c[c > 0] / total
        worst = min(worst, float(-(p * np.log(p)).sum() / math.log(c.size)))
    return worst


# -- power and per-family guardrails ------------------------------------------------------------

def mde_at_power(n_clusters: int, discordant_share: float, alpha: float,
                 power: float = 0.8) -> float:
    """Smallest pass-rate gain a one-sided level-``alpha`` paired test detects with ``power``:
    ``(z_{1-alpha} + z_power) sqrt(q / C)`` for ``C`` independent clusters of which a share ``q``
    is discordant (the variance of a per-cluster difference in {-1, 0, 1} is about ``q`` near no
    change). ``inf`` without clusters; with no discordant cluster observed, one in ``C`` stands in
    (a draw without disagreement says little about the next one's churn)."""
    from scipy.stats import norm

    if n_clusters <= 0:
        return math.inf
    q = max(discordant_share, 1.0 / n_clusters)
    return float((norm.ppf(1.0 - alpha) + norm.ppf(power)) * math.sqrt(q / n_clusters))


@dataclass(frozen=True)
class FamilyDrop:
    """The per-family maximum-drop test: which family lost most, by how much, and its p-value."""

    family: str
    """The family with the largest drop (its pass-rate loss, candidate vs champion)."""
    drop: float
    """That family's drop in pass rate over its clusters (champion minus candidate)."""
    z: float
    """The test statistic: that family's summed drop over its sign-flip sd (the largest)."""
    champion_passed: int
    """Units of that family the champion passes (a unit's mean > 0.5 counts as a pass)."""
    candidate_passed: int
    n_clusters: int
    """Units of that family: its clusters (functions), or its prompts when it has one cluster."""
    p_value: float
    """Sign-flip permutation p-value of the maximum over families (family-wise)."""
    n_families: int
    unit: str = "functions"
    """What that family's units are: ``functions`` (its clusters) or ``prompts`` (a family of
    one function, tested over its prompts)."""


def max_drop_test(diff: np.ndarray, clusters: np.ndarray, families: Sequence[str], *,
                  prompts: Sequence[str] | None = None, candidate: np.ndarray | None = None,
                  n_permutations: int = 10_000, seed: int = 0) -> FamilyDrop:
    """Family-wise test that no family got worse: ``T = max_f sum_{c in f}(-d_c) / sqrt(sum_{c in
    f} d_c^2)`` (each family's drop over its sign-flip sd, the max-T of Westfall and Young, so a
    family of 7 functions and one of 40 weigh alike) over families ``f`` of the cluster-level
    paired differences ``d_c`` (candidate minus champion), against its sign-flip null (each
    cluster's difference multiplied by an independent +-1, exact when candidate and champion are
    exchangeable within a cluster). ``p = (1 + #{T* >= T}) / (1 + B)``; a small ``p`` says some
    family dropped beyond chance, controlling the family-wise error over all families at once.

    A family whose rows all fall in one cluster (one function asked several ways) is tested over
    its prompts instead: clustered by function it is a single unit, whose studentised drop is at
    most 1, so no loss there, not even every prompt of it, could ever be called. Over its prompts
    it asks whether the candidate is worse on that function's prompts (the only replication the
    family has), where a family of several functions asks whether it is worse on the family's
    functions.

    ``diff``, ``clusters``, ``families``: per row ``(n,)``; a cluster belongs to the family of its
    first row. ``prompts``: per row, the prompt a row answers (rows of one prompt in several
    seeds share it); default: every row its own prompt. ``candidate``: per-row candidate outcomes
    (only for the pass counts reported).
    """
    d = np.asarray(diff, dtype=np.float64)
    if d.ndim != 1 or d.size == 0 or len(families) != d.size:
        raise ValueError(f"max_drop_test needs equal non-empty 1-d inputs, got {d.shape} and "
                         f"{len(families)} families")
    if prompts is not None and len(prompts) != d.size:
        raise ValueError(f"max_drop_test needs a prompt per row, got {len(prompts)} for {d.size}")
    keys = [str(c) for c in np.asarray(clusters).tolist()]
    members: dict[str, set[str]] = {}
    for f, c in zip(families, keys, strict=True):
        members.setdefault(f, set()).add(c)
    lone = {f for f, cs in members.items() if len(cs) == 1}
    prompt = [str(p) for p in prompts] if prompts is not None else [str(i) for i in range(d.size)]
    units = [f"{c}\x00{p}" if f in lone else c for f, c, p in zip(families, keys, prompt)]
    _, ids = np.unique(np.asarray(units), return_inverse=True)
    n_c = int(ids.max()) + 1
    sizes = np.bincount(ids, minlength=n_c).astype(np.float64)
    dc = np.bincount(ids, weights=d, minlength=n_c) / sizes  # (C,) cluster mean difference
    first_row = np.full(n_c, -1)
    for row in range(d.size - 1, -1, -1):
        first_row[ids[row]] = row
    fam_names = sorted({families[r] for r in first_row})
    fam_index = {f: i for i, f in enumerate(fam_names)}
    fam = np.asarray([fam_index[families[r]] for r in first_row])  # (C,)
    n_f = len(fam_names)
    per_fam = np.bincount(fam, minlength=n_f).astype(np.float64)  # (F,) clusters per family

    # sign-flip sd of each family's summed drop (0 where no cluster of it is discordant)
    sd = np.sqrt(np.bincount(fam, weights=dc * dc, minlength=n_f))  # (F,)
    scale = np.where(sd > 0, 1.0 / np.where(sd > 0, sd, 1.0), 0.0)  # (F,)
    onehot = (fam[:, None] == np.arange(n_f)[None, :]).astype(np.float64)  # (C, F)

    def stat(x: np.ndarray) -> np.ndarray:  # x (B, C) -> (B,): the largest studentised drop
        return ((-x @ onehot) * scale).max(axis=1)

    t = float(stat(dc[None, :])[0])
    observed = -np.bincount(fam, weights=dc, minlength=n_f) * scale  # (F,)
    rng = np.random.default_rng(seed)
    exceed = 0
    for start in range(0, n_permutations, _CHUNK):
        b = min(_CHUNK, n_permutations - start)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(b, n_c))
        exceed += int((stat(signs * dc) >= t - 1e-12).sum())
    worst = int(observed.argmax())
    in_worst = fam == worst
    if candidate is None:
        cand_c = np.zeros(n_c)
    else:
        cand_c = np.bincount(ids, weights=np.asarray(candidate, dtype=np.float64),
                             minlength=n_c) / sizes
    champ_c = cand_c - dc
    return FamilyDrop(
        family=fam_names[worst], drop=float(-dc[in_worst].sum() / per_fam[worst]), z=t,
        champion_passed=int((champ_c[in_worst] > 0.5).sum()),
        candidate_passed=int((cand_c[in_worst] > 0.5).sum()),
        n_clusters=int(in_worst.sum()), p_value=(1 + exceed) / (1 + n_permutations),
        n_families=n_f, unit="prompts" if fam_names[worst] in lone else "functions",
    )


def mcnemar_power(n_clusters: int, better_share: float, worse_share: float,
                  alpha: float) -> float:
    """Exact probability that the one-sided exact McNemar test (:func:`mcnemar_exact`) rejects at
    ``alpha`` on ``n_clusters`` independent clusters when each is, independently, better with
    probability ``better_share`` and worse with ``worse_share`` (so the true gain is their
    difference and the churn their sum): a sum over the discordant count ``D ~ Bin(C, b + w)``
    of ``P(better >= crit(D))`` with ``better | D ~ Bin(D, b / (b + w))``."""
    from scipy.stats import binom

    churn = better_share + worse_share
    if n_clusters <= 0 or churn <= 0.0:
        return 0.0
    if not 0.0 <= better_share <= 1.0 or not 0.0 <= worse_share or churn > 1.0:
        raise ValueError(f"need shares in [0, 1] summing to <= 1, got {better_share}, "
                         f"{worse_share}")
    p_better = better_share / churn
    n = np.arange(n_clusters + 1)
    p_n = binom.pmf(n, n_clusters, churn)  # (C + 1,)
    # crit(n): the smallest count of better clusters whose exact p-value is <= alpha
    # (P(X >= k | n, 1/2) <= alpha  <=>  binom.sf(k - 1, n, 1/2) <= alpha)
    crit = binom.isf(alpha, n, 0.5) + 1  # (C + 1,): smallest k with sf(k - 1) <= alpha
    crit = np.where(binom.sf(crit - 2, n, 0.5) <= alpha, crit - 1, crit)
    reject = binom.sf(crit - 1, n, p_better)  # P(better >= crit)
    reject = np.where(crit > n, 0.0, reject)
    return float((p_n * reject).sum())
