"""A/A and power benchmark of the gate and the canary judge: how often does a candidate that is
not better get promoted, how often is a real gain promoted, and how often does an unchanged model
get rolled back?

    python -m bench.aa_gate [--part nulls|all|gate|twins|canary] [--null-decisions 1000]

**Nulls and power** (``--part nulls``, the default; no model is run): the shipped rule
(``GateConfig()``) on the target suite's gates, fed sign-flip nulls resampled from recorded
per-prompt verdicts of real candidate/champion pairs (:func:`recorded_pairs`), sign-symmetric
nulls at 16/25/34% churn, boundary nulls of the shorter-answers route, and planted gains
(+0.05 on the toy preset's 724 clusters, +0.10 on the real suites' 162/191/244) at fixed churn
and at the churn real candidates were measured to have (:func:`measured_churn`). Keys:
``false_promotion_rate``, ``upper95``, ``decisions``, ``power_at``.

**Model nulls** (``--part gate``, written under ``model_nulls``): null candidates of the
committed toy champion (``trainer.fixtures.champion_dir()``), none of which learned anything:

- weight-noise re-saves: the champion with Gaussian noise of ``--noise`` times each tensor's
  standard deviation added (a different model, not a better one);
- shuffled-reward candidates: ``--placebo-steps`` RL steps on the champion's recorded rows with
  the rewards permuted (``trainer.online.shuffle_rewards``: the reward carries no signal).

They are gated in ``--lifetimes`` model lifetimes of ``--decisions`` decisions each, like the loop's
cycles: decision k of a lifetime draws its suite afresh (``gating.suite.build_suite(config, k)``,
the gate pool, 400 tasks) and is tested at LORD++'s ``alpha_k`` (``gating.stats.AlphaSpending``,
the shipped ``GateConfig()`` defaults), exactly as ``gating.gates.evaluate_gates`` decides in a
gate run (no health figures: the candidates are healthy by construction). A promotion is a
decision where every gate passed. For comparison every decision is also evaluated at one
decision's level (``rule='fixed'``, alpha 0.05: each route to a win at 2.5%), with prompts
clustered and with rows as independent.

**Seed twins and placebo** (``--part twins``, written under ``twin_nulls``): per decision, two
RL candidates trained on the same recorded rows with different seeds gated against each other,
and a shuffled-reward candidate gated against the champion, under the shipped per-decision rule
on a fresh draw (:func:`run_twins_part`).

**Canary** (``--part canary``): A/A windows, the same model version on both arms. Each window's
two arms are drawn independently from the per-request figures of the recorded traffic fixture
(``tests/fixtures/events.jsonl``: latency, edit persistence at the longest window, dissatisfied
follow-up), so both arms share one distribution; the window is judged by
``deploy.fleet.judge.judge`` at each look (the rollout controller's extensions: the sample grows
by ``--window`` requests per look, up to ``--looks`` looks). A false rollback is a window judged
``fail`` at any look.

Writes ``bench/results/aa_gate.json``: ``decisions``, ``false_promotions``, ``upper95`` (exact
one-sided Clopper-Pearson 95% bound on the false-promotion rate per decision),
``canary_windows``, ``false_rollbacks``, plus the per-decision records and the comparison rules.
A part run alone keeps the other part's figures already in the file.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "bench" / "results" / "aa_gate.json"


# -- null candidates -----------------------------------------------------------------------------
def noise_resave(champion: Path, out: Path, *, rel: float, seed: int) -> Path:
    """The champion with N(0, (rel * std(tensor))^2) added to every floating tensor."""
    import torch

    from policy.toy.checkpoint import load_checkpoint, save_checkpoint

    model = load_checkpoint(champion)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.numel() > 1:
                p.add_(torch.randn(p.shape, generator=gen) * (rel * float(p.std())))
    save_checkpoint(model, out)
    return out


def placebo_candidate(champion: Path, out: Path, *, steps: int, seed: int) -> Path:
    """``steps`` RL steps on the champion's recorded rows with the rewards shuffled."""
    from bench.learning import train_arm
    from trainer.fixtures import recorded_rows

    train_arm("placebo", seed, champion, recorded_rows(champion), {"mismatch_every": 0}, steps,
              out)
    return out


# -- the gate part -------------------------------------------------------------------------------
def _suite(ckpt: Path, config, decision: int):
    from gating.suite import build_suite, run_suite
    from policy.toy.checkpoint import load_checkpoint

    tasks, checker = build_suite(config.suite, decision)
    s = config.suite
    return run_suite(load_checkpoint(ckpt), tasks, max_new_tokens=s.max_new_tokens, seed=s.seed,
                     checker=checker, token_penalty=s.token_penalty, batch_size=s.batch_size)


def _promoted(gates) -> bool:
    return all(g.passed for g in gates)


def _evidence(gates):
    return next(g for g in gates if g.name == "improvement_evidence")


def run_gate_part(args, work: Path) -> dict:
    import torch

    from gating.config import BootstrapConfig, ErrorControlConfig, GateConfig
    from gating.gates import evaluate_gates
    from gating.stats import AlphaSpending, clopper_pearson_upper
    from trainer.fixtures import champion_dir

    torch.set_num_threads(args.threads)
    config = GateConfig.model_validate({"suite": {"size": args.size}})
    fixed = config.model_copy(update={"error_control": ErrorControlConfig(rule="fixed",
                                                                          alpha=0.05)})
    fixed_rows = fixed.model_copy(update={"bootstrap": BootstrapConfig(cluster="row")})
    champion = champion_dir()
    champ_suites: dict[int, object] = {}
    records = []
    t0 = time.perf_counter()
    n_placebo = args.placebo_per_lifetime
    for life in range(args.lifetimes):
        spending = AlphaSpending(alpha=config.error_control.alpha, rule=config.error_control.rule)
        for k in range(1, args.decisions + 1):
            idx = life * args.decisions + (k - 1)
            every = max(1, args.decisions // max(1, n_placebo))
            kind = "placebo" if (k - 1) % every == 0 and (k - 1) // every < n_placebo else "noise"
            ckpt = work / f"cand-{idx}"
            t1 = time.perf_counter()
            if kind == "noise":
                noise_resave(champion, ckpt, rel=args.noise, seed=1000 + idx)
            else:
                placebo_candidate(champion, ckpt, steps=args.placebo_steps, seed=idx)
            made_s = time.perf_counter() - t1
            if k not in champ_suites:
                champ_suites[k] = _suite(champion, config, k)
            champ = champ_suites[k]
            cand = _suite(ckpt, config, k)
            alpha_k = spending.level()
            gates = evaluate_gates(cand, champ, config, alpha=alpha_k)
            promoted = _promoted(gates)
            spending.record(_evidence(gates).passed)
            g_fixed = evaluate_gates(cand, champ, fixed)
            g_rows = evaluate_gates(cand, champ, fixed_rows)
            discordant = sum(a.passed != b.passed for a, b in zip(cand.tasks, champ.tasks))
            rec = {
                "lifetime": life, "decision": k, "kind": kind, "alpha_k": alpha_k,
                "promoted": promoted, "evidence": _evidence(gates).passed,
                "failed": [g.name for g in gates if not g.passed],
                "promoted_fixed_level": _promoted(g_fixed),
                "promoted_fixed_level_rows": _promoted(g_rows),
                "pass_candidate": cand.pass_rate, "pass_champion": champ.pass_rate,
                "delta": cand.pass_rate - champ.pass_rate,
                "tokens_delta": cand.mean_completion_tokens - champ.mean_completion_tokens,
                "discordant_rows": discordant,
                "distinct_prompts": len(set(cand.clusters)),
                "ci_low": _evidence(gates).ci_low,
                "detail": _evidence(gates).detail, "make_seconds": round(made_s, 1),
            }
            records.append(rec)
            print(f"[{len(records)}] life {life} k {k} {kind}: delta {rec['delta']:+.4f}, "
                  f"alpha_k {alpha_k:.2e}, promoted {promoted} (fixed {rec['promoted_fixed_level']}"
                  f", rows {rec['promoted_fixed_level_rows']}), {time.perf_counter() - t0:.0f} s",
                  flush=True)
    n = len(records)
    fp = sum(r["promoted"] for r in records)
    fp_fixed = sum(r["promoted_fixed_level"] for r in records)
    fp_rows = sum(r["promoted_fixed_level_rows"] for r in records)
    return {
        "decisions": n, "false_promotions": fp, "upper95": clopper_pearson_upper(fp, n),
        "lifetimes": args.lifetimes, "decisions_per_lifetime": args.decisions,
        "lifetimes_with_a_false_promotion": len({r["lifetime"] for r in records
                                                 if r["promoted"]}),
        "comparison": {
            "fixed_level_prompt_clustered": {
                "false_promotions": fp_fixed, "upper95": clopper_pearson_upper(fp_fixed, n),
                "rule": "one decision's level: alpha 0.05, each route to a win at 0.025"},
            "fixed_level_rows_independent": {
                "false_promotions": fp_rows, "upper95": clopper_pearson_upper(fp_rows, n),
                "rule": "as above, bootstrap and McNemar over rows, not prompts"},
        },
        "candidates": {"noise_rel_std": args.noise, "placebo_steps": args.placebo_steps,
                       "noise": sum(r["kind"] == "noise" for r in records),
                       "placebo": sum(r["kind"] == "placebo" for r in records)},
        "gate_config": config.model_dump(mode="json"),
        "per_decision": records,
        "gate_seconds": round(time.perf_counter() - t0, 1),
    }


def run_twins_part(args, work: Path) -> dict:
    """Seed twins and shuffled-reward candidates under the shipped per-decision rule.

    Decision i draws the gate suite afresh (``build_suite(config.suite, i)``) and makes two null
    decisions: twin A against twin B, two RL candidates trained from the committed toy champion
    on the same recorded rows for ``--placebo-steps`` steps with trainer seeds 2i and 2i + 1 (A
    is the candidate, B the champion: neither is better by construction, only the seed differs);
    and a shuffled-reward candidate (seed i) against the champion itself. Decisions are grouped
    into lifetimes of ``--decisions`` (a loop's cycles) to count lifetimes with a false
    promotion."""
    import torch

    from bench.learning import train_arm
    from gating.config import GateConfig
    from gating.gates import evaluate_gates
    from gating.stats import clopper_pearson_upper
    from trainer.fixtures import champion_dir, recorded_rows

    torch.set_num_threads(args.threads)
    config = GateConfig.model_validate({"suite": {"size": args.size}})
    champion = champion_dir()
    rows = recorded_rows(champion)
    records = []
    t0 = time.perf_counter()
    for i in range(args.twins):
        made = {}
        for name, arm, seed in (("twin_a", "rl", 2 * i), ("twin_b", "rl", 2 * i + 1),
                                ("placebo", "placebo", i)):
            made[name] = work / f"{name}-{i}"
            train_arm(arm, seed, champion, rows, {"mismatch_every": 0}, args.placebo_steps,
                      made[name])
        suites = {name: _suite(path, config, i) for name, path in made.items()}
        suites["champion"] = _suite(champion, config, i)
        for kind, cand, champ in (("seed_twins", "twin_a", "twin_b"),
                                  ("placebo", "placebo", "champion")):
            c, b = suites[cand], suites[champ]
            gates = evaluate_gates(c, b, config)
            records.append({
                "decision": i, "kind": kind, "promoted": _promoted(gates),
                "failed": [g.name for g in gates if not g.passed],
                "delta": c.pass_rate - b.pass_rate,
                "churn": sum(x.passed != y.passed for x, y in zip(c.tasks, b.tasks))
                / len(c.tasks),
                "clusters": len(set(c.clusters)), "detail": _evidence(gates).detail})
        print(f"[{i + 1}/{args.twins}] " + "; ".join(
            f"{r['kind']}: delta {r['delta']:+.4f}, churn {r['churn']:.3f}, promoted "
            f"{r['promoted']}" for r in records[-2:]) + f" ({time.perf_counter() - t0:.0f} s)",
            flush=True)

    def figures(kind: str) -> dict:
        rs = [r for r in records if r["kind"] == kind]
        fp = sum(r["promoted"] for r in rs)
        lives = [rs[j:j + args.decisions] for j in range(0, len(rs), args.decisions)]
        churn = [r["churn"] for r in rs]
        return {"decisions": len(rs), "false_promotions": fp,
                "upper95": clopper_pearson_upper(fp, len(rs)),
                "lifetimes": len(lives), "decisions_per_lifetime": args.decisions,
                "lifetimes_with_a_false_promotion": sum(any(r["promoted"] for r in life)
                                                        for life in lives),
                "churn": {"min": min(churn), "mean": sum(churn) / len(churn),
                          "max": max(churn)}}

    return {"rule": "GateConfig() defaults (per decision)", "suite_size": args.size,
            "train_steps": args.placebo_steps, "seed_twins": figures("seed_twins"),
            "placebo": figures("placebo"), "per_decision": records,
            "seconds": round(time.perf_counter() - t0, 1)}


def _twins_in_tmp(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="ratchet-aa-twins-") as tmp:
        return run_twins_part(args, Path(tmp))


# -- sign-flip, boundary and planted-effect decisions (no model cost) --------------------------
TOY_CLUSTERS = 724
"""Independent clusters of the toy preset's gate draw (2,000 tasks of the gate pool)."""
REAL_CLUSTERS = (162, 191, 244)
"""Independent functions of the real preset's whole-pool suites: the gate pool (162), the guard
pool (191 functions, 291 tasks) and the transfer pool (244)."""


MEASURED_REAL = ("local_update_arms.json", "local_update_chosen.json", "local_update_bykl.json",
                 "local_update_family8.json")
"""Results of real SmolLM2 candidates scored on the 162-function sealed pool (the trained
families' held functions: the gate pool's shape), one entry per distinct candidate."""


def measured_churn(pairs: list[dict]) -> dict[str, list[float]]:
    """The churn real candidates show, for power at the shape they have: ``real``, the
    discordant share of each SmolLM2 candidate of :data:`MEASURED_REAL` on the sealed pool;
    ``toy``, the churn of the recorded toy pairs that are not placebos (:func:`recorded_pairs`)."""
    real = []
    for name in MEASURED_REAL:
        for arm in json.loads((ROOT / "bench/results" / name).read_text())["arms"]:
            real.append(float(arm["pools"]["sealed"]["discordant_share"]))
    toy = [p["churn"] for p in pairs if p["name"].startswith("toy") and "placebo" not in p["name"]]
    return {"real": real, "toy": toy}


def recorded_pairs() -> list[dict]:
    """Real candidate/champion pairs with per-prompt greedy verdicts: the toy learning runs
    (bench/results/learning_lazy_runs.jsonl, learning_runs.jsonl: every arm and seed against the
    champion it started from, 2,000 fresh tasks clustered by prompt text) and the SmolLM2 run of
    2026-11-26 on its whole guard pool (v2 and v4 against v1). Each pair becomes cluster-level
    (champion, candidate) verdicts."""
    import numpy as np

    from bench.learning import legacy_fresh_tasks
    from gating.stats import cluster_ids

    pairs = []
    keys = None
    for name in ("learning_lazy_runs.jsonl", "learning_runs.jsonl"):
        rows = [json.loads(x) for x in (ROOT / "bench/results" / name).read_text().splitlines()
                if x.strip()]
        befores = {(r["key"], r["start"]): r["result"]["passed"] for r in rows
                   if r["arm"] == "before"}
        before_by_start: dict[str, list] = {}
        for (_, start), passed in befores.items():
            before_by_start.setdefault(start, passed)
        for r in rows:
            if r["arm"] == "before" or r["start"] not in before_by_start:
                continue
            champ, cand = before_by_start[r["start"]], r["result"]["passed"]
            if keys is None:
                keys = cluster_ids([t.prompt for t in legacy_fresh_tasks(len(champ))])
            pairs.append(_clusterise(f"toy {name.split('_runs')[0]} {r['arm']} seed "
                                     f"{r['seed']}", champ, cand, keys))
    guard = json.loads((ROOT / "bench/results/loop_real_guard_pool.json").read_text())
    ids = np.arange(len(guard["passed"]["v1"]))
    for v in ("v2", "v4"):
        pairs.append(_clusterise(f"smollm2 guard pool {v} vs v1", guard["passed"]["v1"],
                                 guard["passed"][v], ids))
    return pairs


def _clusterise(name: str, champ, cand, ids) -> dict:
    import numpy as np

    champ = np.asarray(champ, dtype=float)
    cand = np.asarray(cand, dtype=float)
    sizes = np.bincount(ids).astype(float)
    h = np.bincount(ids, weights=champ) / sizes > 0.5
    c = np.bincount(ids, weights=cand) / sizes > 0.5
    return {"name": name, "champion": h, "candidate": c, "clusters": int(sizes.size),
            "churn": float((h != c).mean()), "delta": float(c.mean() - h.mean())}


def _suites(champ, cand, champ_tokens, cand_tokens):
    from gating.records import SuiteResult, TaskOutcome

    def one(passed, tokens):
        return SuiteResult(tasks=[
            TaskOutcome(task_id=f"t{i}", kind="k", prompt_key=f"c{i}", passed=bool(p),
                        malformed=False, no_edit=False, completion_tokens=int(n),
                        score=float(p)) for i, (p, n) in enumerate(zip(passed, tokens))])
    return one(cand, cand_tokens), one(champ, champ_tokens)


def _decide(config, champ, cand, rng, *, token_saving: float = 0.0) -> bool:
    """The whole rule on the target suite (every champion gate, the default config): a
    promotion is every gate passing. Tokens: the champion's ~ 20 +- 4, the candidate's the same
    draw, exchangeable (or ``token_saving`` of it shorter, the boundary nulls)."""
    import numpy as np

    from gating.gates import evaluate_gates

    base = rng.integers(16, 25, size=champ.size)
    jitter = rng.integers(-1, 2, size=champ.size)
    champ_tokens = base
    cand_tokens = np.maximum(1, np.round((base + jitter) * (1.0 - token_saving))).astype(int)
    gates = evaluate_gates(*_suites(champ, cand, champ_tokens, cand_tokens), config)
    return all(g.passed for g in gates)


def signflip_null(pair: dict, n_clusters: int, rng):
    """A null decision from a recorded pair: ``n_clusters`` of its clusters drawn with
    replacement, each pair's two verdicts swapped with probability 1/2 (candidate and champion
    exchangeable: no true change), keeping the pair's churn."""
    idx = rng.integers(0, pair["clusters"], size=n_clusters)
    h, c = pair["champion"][idx], pair["candidate"][idx]
    swap = rng.random(n_clusters) < 0.5
    import numpy as np

    return np.where(swap, c, h), np.where(swap, h, c)


def planted(n_clusters: int, churn: float, gain: float, rng, base: float = 0.5):
    """A champion passing ``base`` of ``n_clusters`` and a candidate that flips a known share:
    ``(churn + gain) / 2`` of the clusters to pass, ``(churn - gain) / 2`` to fail (the true
    gain ``gain``, the share of changed verdicts ``churn``). ``gain = -margin`` with shorter
    answers is the secondary route's boundary null."""
    import numpy as np

    champ = rng.random(n_clusters) < base
    u = rng.random(n_clusters)
    better = u < (churn + gain) / 2.0
    worse = (u >= (churn + gain) / 2.0) & (u < churn)
    champ = np.where(better, False, np.where(worse, True, champ))
    cand = np.where(better, True, np.where(worse, False, champ))
    return champ, cand


def _power(config, clusters: int, gain: float, churns: list[float], rng, level: float) -> dict:
    """Planted gains of ``gain``, one decision per entry of ``churns``: the share promoted, and
    the exact McNemar power at ``level`` averaged over the same churns."""
    import numpy as np

    from gating.stats import mcnemar_power

    hits = sum(_decide(config, *planted(clusters, c, gain, rng), rng) for c in churns)
    return {"decisions": len(churns), "promoted": hits, "power": hits / len(churns),
            "exact_mcnemar_power": float(np.mean([
                mcnemar_power(clusters, (c + gain) / 2, (c - gain) / 2, level) for c in churns]))}


def _rate(decisions: list[dict]) -> dict:
    from gating.stats import clopper_pearson_upper

    n, fp = len(decisions), sum(x["promoted"] for x in decisions)
    return {"decisions": n, "false_promotions": fp,
            "upper95": clopper_pearson_upper(fp, n) if n else None}


def run_nulls_part(args) -> dict:
    """Sign-flip nulls from recorded pairs, boundary nulls of the shorter route, and planted
    effects, through the shipped rule (``GateConfig()``: per-decision, one-sided 0.05)."""
    import numpy as np

    from gating.config import GateConfig
    from gating.stats import clopper_pearson_upper

    config = GateConfig.model_validate({"bootstrap": {"n_resamples": args.resamples}})
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    pairs = recorded_pairs()
    nulls = []
    for i in range(args.null_decisions):
        if i % 2 == 0:  # a recorded pair, its own churn
            pair = pairs[(i // 2) % len(pairs)]
            size = TOY_CLUSTERS if pair["name"].startswith("toy") else REAL_CLUSTERS[i % 3]
            champ, cand = signflip_null(pair, size, rng)
            source = pair["name"]
        else:  # the churn the toy's candidates show at the gate: 16, 25, 34% of clusters
            churn = (0.16, 0.25, 0.34)[(i // 2) % 3]
            size = (TOY_CLUSTERS, *REAL_CLUSTERS)[(i // 6) % 4]
            champ, cand = planted(size, churn, 0.0, rng)
            source = f"sign-symmetric churn {churn:.2f}"
        nulls.append({"source": source, "clusters": size,
                      "churn": float((champ != cand).mean()),
                      "promoted": _decide(config, champ, cand, rng)})
        if (i + 1) % 100 == 0:
            print(f"null {i + 1}: {sum(n['promoted'] for n in nulls)} promoted, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    boundary = []
    margin = config.improvement.non_inferiority_margin
    for i in range(args.boundary_decisions):
        churn = (0.16, 0.25, 0.34)[i % 3]
        champ, cand = planted(TOY_CLUSTERS, churn, -margin, rng)
        boundary.append({"churn": churn, "promoted": _decide(config, champ, cand, rng,
                                                             token_saving=0.2)})
    power = {}
    a_primary = config.error_control.alpha * (1.0 - config.improvement.shorter_route_share)
    for label, clusters, gain in (("+0.05 toy", TOY_CLUSTERS, 0.05),
                                  *((f"+0.10 real ({c} clusters)", c, 0.10)
                                    for c in REAL_CLUSTERS)):
        for churn in (0.16, 0.25, 0.34):
            power[f"{label}, churn {churn:.2f}"] = {
                "gain": gain, "clusters": clusters, "churn": churn,
                **_power(config, clusters, gain, [churn] * args.power_decisions, rng, a_primary)}
        print(f"power {label}: {[round(v['power'], 2) for k, v in power.items() if label in k]}"
              f", {time.perf_counter() - t0:.0f} s", flush=True)
    measured = measured_churn(pairs)
    for label, clusters, gain, churns in (
            ("+0.05 toy", TOY_CLUSTERS, 0.05, measured["toy"]),
            (f"+0.10 real ({REAL_CLUSTERS[0]} clusters)", REAL_CLUSTERS[0], 0.10,
             measured["real"])):
        # each decision at the churn of one measured candidate (at least the gain: a candidate
        # that gains g changes at least g of the verdicts)
        draws = [max(gain, churns[i % len(churns)]) for i in range(3 * args.power_decisions)]
        point = _power(config, clusters, gain, draws, rng, a_primary)
        power[f"{label}, measured churn"] = {
            "gain": gain, "clusters": clusters, "churn": churns,
            "churn_mean": float(np.mean(churns)), **point}
        print(f"power {label}, measured churn (mean {np.mean(churns):.3f}): "
              f"{point['power']:.2f}, {time.perf_counter() - t0:.0f} s", flush=True)
    n = len(nulls)
    fp = sum(x["promoted"] for x in nulls)
    nb = len(boundary)
    fb = sum(x["promoted"] for x in boundary)
    churns = [x["churn"] for x in nulls]
    return {
        "rule": "per decision: superiority of the pass rate at one-sided 0.04 (exact McNemar over "
                "independent clusters) or shorter and non-inferior at 0.01, and every guardrail "
                "of the target suite non-inferior at one-sided 0.05 (GateConfig() defaults)",
        "decisions": n, "false_promotions": fp, "false_promotion_rate": fp / n,
        "upper95": clopper_pearson_upper(fp, n),
        "null_churn": {"min": min(churns), "mean": float(np.mean(churns)), "max": max(churns)},
        "by_source": {
            "recorded_pairs_signflip": _rate([x for x in nulls if "churn " not in x["source"]]),
            "churn_16_34": _rate([x for x in nulls if "churn " in x["source"]]),
            "churn_16_34_toy_draw": _rate([x for x in nulls if "churn " in x["source"]
                                           and x["clusters"] == TOY_CLUSTERS])},
        "recorded_pairs": [{k: p[k] for k in ("name", "clusters", "churn", "delta")}
                           for p in pairs],
        "boundary": {"decisions": nb, "false_promotions": fb,
                     "upper95": clopper_pearson_upper(fb, nb),
                     "null": f"pass rate {-margin:+.2f} (the secondary route's margin) with "
                             "answers 20% shorter, 724 clusters, churn 16/25/34%"},
        "power_at": {"+0.05 toy": power["+0.05 toy, churn 0.25"]["power"],
                     "+0.10 real": power[f"+0.10 real ({REAL_CLUSTERS[0]} clusters), churn "
                                         "0.25"]["power"],
                     "+0.05 toy, measured churn": power["+0.05 toy, measured churn"]["power"],
                     "+0.10 real, measured churn": power[
                         f"+0.10 real ({REAL_CLUSTERS[0]} clusters), measured churn"]["power"],
                     "detail": power},
        "bootstrap_resamples": args.resamples,
        "seconds": round(time.perf_counter() - t0, 1),
    }


# -- the canary part -----------------------------------------------------------------------------
def recorded_units(path: Path) -> list[dict]:
    """Per completion of the recorded traffic: latency, edit persistence (longest window seen),
    dissatisfied follow-up. Malformed lines (the fixture has some on purpose) are skipped."""
    comps: dict[str, dict] = {}
    persist: dict[str, tuple[int, float]] = {}
    dissat: dict[str, bool] = {}
    for line in path.read_text().split("\n"):
        if not line.strip():
            continue
        try:
            v = json.loads(json.loads(line)["value"])
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
        kind, rid = v.get("kind"), v.get("response_id")
        if kind == "completion" and isinstance(v.get("latency_ms"), int | float):
            comps[rid] = {"latency_ms": float(v["latency_ms"])}
        elif kind == "edit_persistence" and isinstance(v.get("score"), int | float):
            w = int(v.get("window_s") or 0)
            if w >= persist.get(rid, (-1, 0.0))[0]:
                persist[rid] = (w, float(v["score"]))
        elif kind == "followup" and v.get("dissatisfied"):
            dissat[rid] = True
    return [{**c, "persistence": persist.get(rid, (0, None))[1],
             "dissatisfied": dissat.get(rid, False)} for rid, c in comps.items()]


def _arm(units: list[dict], n: int, rng: random.Random):
    from deploy.fleet.judge import ArmSamples

    draw = [rng.choice(units) for _ in range(n)]
    return ArmSamples(
        requests=n, errors=0, latencies_ms=[u["latency_ms"] for u in draw],
        edit_persistence=[u["persistence"] for u in draw if u["persistence"] is not None],
        dissatisfied=[u["dissatisfied"] for u in draw],
    )


def _grow(a, b):
    from deploy.fleet.judge import ArmSamples

    return ArmSamples(a.requests + b.requests, a.errors + b.errors,
                      a.latencies_ms + b.latencies_ms, a.edit_persistence + b.edit_persistence,
                      a.dissatisfied + b.dissatisfied)


def run_canary_part(args) -> dict:
    from deploy.fleet.judge import JudgeConfig, judge

    units = recorded_units(ROOT / "tests" / "fixtures" / "events.jsonl")
    config = JudgeConfig()
    rng = random.Random(args.seed)
    windows = []
    for w in range(args.windows):
        stable, canary = _arm(units, args.window, rng), _arm(units, args.window, rng)
        decisions = []
        for look in range(args.looks):
            if look:
                stable = _grow(stable, _arm(units, args.window, rng))
                canary = _grow(canary, _arm(units, args.window, rng))
            v = judge(stable, canary, config)
            decisions.append(v.decision)
            if v.decision == "fail":
                break
        windows.append({"window": w, "looks": decisions, "fail": "fail" in decisions,
                        "reasons": v.reasons})
    fails = sum(x["fail"] for x in windows)
    return {"canary_windows": len(windows), "false_rollbacks": fails,
            "canary": {"units": len(units), "requests_per_look": args.window,
                       "looks": args.looks, "judge_config": config.model_dump(mode="json"),
                       "per_window": windows}}


def _gate_in_tmp(args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        return run_gate_part(args, Path(tmp))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=("all", "nulls", "gate", "twins", "canary"),
                   default="nulls")
    p.add_argument("--twins", type=int, default=30, help="twins part: decisions (each one twin "
                   "pair and one shuffled-reward candidate)")
    p.add_argument("--null-decisions", type=int, default=1200)
    p.add_argument("--boundary-decisions", type=int, default=300)
    p.add_argument("--power-decisions", type=int, default=100,
                   help="decisions per planted effect and churn")
    p.add_argument("--resamples", type=int, default=2000,
                   help="nulls part: bootstrap.n_resamples (one-sided bounds still get >= 20 "
                   "draws in their tail: gating.stats.resamples_for)")
    p.add_argument("--lifetimes", type=int, default=4)
    p.add_argument("--decisions", type=int, default=13, help="gate decisions per lifetime")
    p.add_argument("--placebo-per-lifetime", type=int, default=3)
    p.add_argument("--placebo-steps", type=int, default=20)
    p.add_argument("--noise", type=float, default=0.05, help="noise std / tensor std")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--size", type=int, default=400, help="gate suite tasks (the default suite)")
    p.add_argument("--windows", type=int, default=40, help="A/A canary windows")
    p.add_argument("--window", type=int, default=100, help="requests per arm per look")
    p.add_argument("--looks", type=int, default=4, help="looks per window (1 + extensions)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    import os

    result["date"] = datetime.now(UTC).strftime("%Y-%m-%d")
    import subprocess

    result["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                      capture_output=True, text=True).stdout.strip() or None
    machine = result.setdefault("machine", {})
    for part, run in (("nulls", lambda: run_nulls_part(args)),
                      ("gate", lambda: _gate_in_tmp(args)),
                      ("twins", lambda: _twins_in_tmp(args)),
                      ("canary", lambda: run_canary_part(args))):
        if args.part not in ("all", part):
            continue
        load = os.getloadavg()[0]
        figures = run()
        if part == "gate":  # the model-built nulls
            result["model_nulls"] = figures
        elif part == "twins":
            result["twin_nulls"] = figures
            result.pop("not_run", None)
        elif part == "canary":
            result["canary"] = {"canary_windows": figures["canary_windows"],
                                "false_rollbacks": figures["false_rollbacks"],
                                **figures["canary"]}
        else:
            result.update(figures)
        machine[part] = {"cpus": os.cpu_count(), "load_at_start": load,
                         "load_at_end": os.getloadavg()[0], "nice": os.nice(0)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    keys = ("decisions", "false_promotions", "false_promotion_rate", "upper95")
    print(json.dumps({k: result.get(k) for k in keys}))
    print(json.dumps({k: v for k, v in result.get("power_at", {}).items() if k != "detail"}))


if __name__ == "__main__":
    main()
