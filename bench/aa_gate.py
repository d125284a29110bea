"""A/A benchmark of the gate and the canary judge: how often does a candidate that is not better
get promoted, and how often does an unchanged model get rolled back?

    python -m bench.aa_gate [--part all|gate|canary] [--lifetimes 4] [--decisions 13]

**Gate** (``--part gate``): null candidates of the committed toy champion
(``trainer.fixtures.champion_dir()``), none of which learned anything:

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
    p.add_argument("--part", choices=("all", "gate", "canary"), default="all")
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
    machine = result.setdefault("machine", {})
    for part, run in (("gate", lambda: _gate_in_tmp(args)), ("canary", lambda: run_canary_part(
            args))):
        if args.part not in ("all", part):
            continue
        load = os.getloadavg()[0]
        result.update(run())
        machine[part] = {"cpus": os.cpu_count(), "load_at_start": load,
                         "load_at_end": os.getloadavg()[0], "nice": os.nice(0)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    keys = ("decisions", "false_promotions", "upper95", "canary_windows", "false_rollbacks")
    print(json.dumps({k: result.get(k) for k in keys}))


if __name__ == "__main__":
    main()
