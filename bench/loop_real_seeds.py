"""The real loop on several seeds, pooled: does SmolLM2 get better through the loop on each seed?

Each unit (one seed's ``rl`` arm, one seed's ``placebo`` arm) is its own ``python -m
bench.loop_real --seed S --arm A`` process (``bench.loop_real.with_seed``: the traffic, the
trainer and the gate's draws change with the seed; the bootstrapped champion does not). A unit
writes ``--units DIR/seed{S}_{arm}.json`` and keeps its run folder ``--workdir BASE/seed{S}/{arm}``
(checkpoints and the MLflow store). A unit whose file is complete is kept when the command runs
again; one cut short (stopped, crashed) resumes where it stopped (``bench.loop_real --resume``:
its finished cycles kept, a cycle under way resumed at its stage, each cycle's traffic drawn from
the seed and the cycle alone), or, with ``--fresh`` or when its run folder is gone, is rerun from
its start; a unit is pooled only once complete, never merged as partial. So a run of many hours
can be stopped and resumed, across sessions.

When every unit is complete, ``--out`` (default bench/results/loop_real_seeds.json) holds the pooled
figures: first vs final champion of the rl arm on the sealed functions, on each transfer family
and on the guard pool per family, and on HumanEval, each paired and clustered by function (a
function's change is its mean over seeds; the bootstrap resamples functions; the family-wise
maximum-drop test flips each function's sign across all seeds at once), per seed and pooled; the
live signals of each seed's first and last cycle; the placebo's promotions and change; each seed's
first and final checkpoints with the command that scores them on any suite;
``last_candidates``, what training did before the gate (each arm's last trained candidate
against the first champion, and the rl arm's against the placebo's of the same seed, paired by
function: a gain the placebo matches is not the reward's doing); ``unit_commits``; and ``goals``,
each target with its figure and whether it was reached (the goals judge only what was promoted).

    .venv/bin/python -m bench.loop_real_seeds --seeds 0,1,2 --cycles 4 --units DIR --workdir BASE
    .venv/bin/python -m bench.loop_real_seeds --seeds 0,1,2 --units DIR --pool-only
    .venv/bin/python -m bench.loop_real_seeds --seeds 0 --run-arms placebo   # that unit only

Arguments after ``--`` go to every unit (e.g. ``-- --humaneval 164 --threads 2``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import loop_real as lr  # noqa: E402
from bench import provenance  # noqa: E402
from bench.loop_real import (  # noqa: E402
    CARRY_POOLS,
    _per_family,
    by_cluster,
    clusters,
    paired_delta,
    prompt_ids,
    say,
)

ARMS = ("rl", "placebo")
GOALS = {"sealed_gain": 0.10, "carry_floor": -0.03, "humaneval_floor": -0.02,
         "minutes": 120.0}
"""The targets a multi-seed run is judged by: pooled sealed gain >= 0.10 (CI above 0,
and above 0 in every seed); transfer and guard pooled lower bound >= -0.03 with no family surely
worse; HumanEval pooled lower bound >= -0.02; the whole run within 120 minutes."""


def unit_file(units: Path, seed: int, arm: str) -> Path:
    return units / f"seed{seed}_{arm}.json"


def complete(path: Path) -> bool:
    try:
        return bool(json.loads(path.read_text()).get("complete"))
    except (OSError, ValueError):
        return False


def suite_results(run_dir: Path, arm: str) -> Path:
    """Where the gate of a unit's arm keeps its suite results (``bench.loop_real`` runs the arm's
    cycles in ``run_dir/arm``)."""
    from gating.gate import SUITE_CACHE
    from ratchet.cycle import GATE_DIR

    return run_dir / arm / GATE_DIR / SUITE_CACHE


def gather_suite_results(workdir: Path) -> Path:
    """``workdir/suite-cache``, made to hold every suite result the units under ``workdir`` have
    computed so far (those cut short too: a result is whole or absent)."""
    from gating.gate import SUITE_CACHE

    shared = workdir / SUITE_CACHE
    for run_dir in sorted(workdir.glob("seed*/*")):  # a unit's run folder: seed{S}/{arm}
        share_suite_results(suite_results(run_dir, run_dir.name), shared)
    return shared


def share_suite_results(src: Path, dst: Path) -> int:
    """Copy into ``dst`` the suite results of ``src`` it lacks; how many. A result's file name is
    its key (suite config with its sampling seed, drawn tasks, checkpoint hash), so a copied file
    is the result the unit would compute: the first champion, decoded by the gate of a seed's rl
    unit, is not decoded again by the placebo unit of that seed, nor a guard suite by any unit."""
    if not src.is_dir():
        return 0
    dst.mkdir(parents=True, exist_ok=True)
    copied = 0
    for f in sorted(src.glob("*.json")):
        if not (dst / f.name).exists():
            tmp = dst / f".{f.name}.part"
            shutil.copyfile(f, tmp)
            tmp.replace(dst / f.name)  # whole or absent: a stopped copy leaves no torn result
            copied += 1
    return copied


def resumable(out: Path, run_dir: Path) -> bool:
    """Whether ``out`` is a unit cut short whose run folder is still there. Whether it was cut
    short with these settings is ``bench.loop_real --resume``'s to check: it refuses, with the
    reason, a unit of other settings (``--fresh`` reruns it from its start)."""
    try:
        prev = json.loads(out.read_text())
    except (OSError, ValueError):
        return False
    return not prev.get("complete") and run_dir.is_dir()


def run_unit(seed: int, arm: str, *, cycles: int, config: Path, units: Path, workdir: Path,
             extra: list[str], fresh: bool = False) -> None:
    """One ``bench.loop_real`` process for (seed, arm): resuming the unit cut short, else (or
    with ``fresh``) from its start; stopped by PID when this process is stopped. Suite results
    the units under ``workdir`` have computed are copied into its gate's before it starts
    (:func:`gather_suite_results`, :func:`share_suite_results`)."""
    out, run_dir = unit_file(units, seed, arm), workdir / f"seed{seed}" / arm
    shared = gather_suite_results(workdir)
    resume = not fresh and resumable(out, run_dir)
    if not resume:
        shutil.rmtree(run_dir, ignore_errors=True)  # from its start, whole
        out.unlink(missing_ok=True)
    if n := share_suite_results(shared, suite_results(run_dir, arm)):
        say(f"seed {seed} {arm}: {n} suite results already computed by other units")
    cmd = [sys.executable, "-m", "bench.loop_real", "--seed", str(seed), "--arm", arm,
           "--cycles", str(cycles), "--config", str(config), "--workdir", str(run_dir),
           "--out", str(out), *(["--resume"] if resume else []), *extra]
    say(f"seed {seed} {arm}: {' '.join(cmd[1:])}")
    proc = subprocess.Popen(cmd, cwd=ROOT)
    try:
        rc = proc.wait()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if rc != 0 or not complete(out):
        raise SystemExit(f"seed {seed} {arm}: bench.loop_real exited {rc} without a complete "
                         f"{out}; running this command again resumes that unit (--fresh: "
                         f"reruns it from its start)")


# -- pooling (pure) -------------------------------------------------------------------------------
def pooled_change(keys: list[str], pairs: list[tuple[list[bool], list[bool]]]
                  ) -> tuple[float, float, float]:
    """(mean change, 95% low, high) over clusters of final minus first, each cluster's change the
    mean over the seeds' ``(first, final)`` pairs; the bootstrap resamples clusters."""
    def mean_rates(which: int) -> dict[str, float]:
        per_seed = [by_cluster(keys, pair[which]) for pair in pairs]
        return {k: statistics.fmean(r[k] for r in per_seed) for k in per_seed[0]}

    return paired_delta(mean_rates(0), mean_rates(1))


def pooled_families(tasks: list[dict], pairs: list[tuple[list[bool], list[bool]]]) -> dict:
    """Per family, passed tasks of the first and final champions summed over seeds, and the
    family-wise maximum-drop test on every seed's task-level changes (a function's sign flips in
    all seeds at once: its cluster is the function)."""
    import numpy as np

    from gating.stats import max_drop_test

    keys, fams = clusters(tasks), [t["family"] for t in tasks]
    diff = np.concatenate([np.asarray(b, float) - np.asarray(a, float) for a, b in pairs])
    drop = max_drop_test(diff, np.asarray(keys * len(pairs)), fams * len(pairs),
                         prompts=prompt_ids(tasks) * len(pairs),
                         candidate=np.concatenate([np.asarray(b, float) for _, b in pairs]))
    sizes = Counter(t["family"] for t in tasks)
    first = sum((_per_family(tasks, a) for a, _ in pairs), Counter())
    final = sum((_per_family(tasks, b) for _, b in pairs), Counter())
    per_family = {f: {"tasks": n * len(pairs), "first": first[f], "final": final[f]}
                  for f, n in sorted(sizes.items())}
    return {"per_family": per_family,
            "family_max_drop": {"family": drop.family, "drop": drop.drop, "p": drop.p_value,
                                "surely_worse": drop.p_value <= 0.05, "unit": drop.unit}}


def _pool_entry(keys: list[str], pairs: list[tuple[list[bool], list[bool]]]) -> dict:
    d, lo, hi = pooled_change(keys, pairs)
    first = statistics.fmean(statistics.fmean(a) for a, _ in pairs)
    final = statistics.fmean(statistics.fmean(b) for _, b in pairs)
    return {"first": first, "final": final, "delta": d, "ci": [lo, hi]}


def _live(rows: list[dict], arm: str) -> dict | None:
    """An arm's first and last cycle's live signals and their change."""
    mine = sorted((r for r in rows if r["arm"] == arm), key=lambda r: r["cycle"])
    if not mine:
        return None
    out = {}
    for key in ("live_pass_rate", "edit_persistence", "dissatisfied_rate"):
        a, b = mine[0][key], mine[-1][key]
        out[key] = {"first_cycle": a, "last_cycle": b, "change": b - a}
    return out


def pool(summaries: dict[tuple[int, str], dict], pools: dict[str, list[dict]]) -> dict:
    """The pooled result of complete unit summaries keyed (seed, arm); ``pools``: the task lists
    of ``sealed`` and of the carry-over pools the units scored."""
    seeds = sorted({s for s, _ in summaries})
    rl = {s: summaries[(s, "rl")] for s in seeds if (s, "rl") in summaries}
    placebo = {s: summaries[(s, "placebo")] for s in seeds if (s, "placebo") in summaries}
    out: dict = {"seeds": seeds, "per_seed": {}, "pooled": {}}
    for s, u in rl.items():
        first, final = u["scores"]["first"], u["scores"]["rl-final"]
        run = Path(u["workdir"]) / "rl"
        out["per_seed"][str(s)] = {
            "sealed": {"first": u["pass_first"], "final": u["pass_final"], "delta": u["delta"],
                       "ci": [u["ci_low"], u["ci_high"]]},
            **{pool_name: (u.get(pool_name) or {}).get("rl-final") for pool_name in CARRY_POOLS},
            "humaneval_first": first.get("humaneval"), "humaneval_final": final.get("humaneval"),
            "promotions": u["promotions"], "live": _live(u["per_cycle"], "rl"),
            "placebo": None if s not in placebo else {
                "promotions": placebo[s]["placebo_promotions"],
                "delta": placebo[s]["placebo_delta"], "ci": placebo[s]["placebo_ci"],
                "live": _live(placebo[s]["per_cycle"], "placebo")},
            "checkpoints": {
                "first": {"version": first["version"],
                          "path": str(run / "scored" / f"v{first['version']}")},
                "final": {"version": final["version"],
                          "path": str(run / "scored" / f"v{final['version']}")},
                "compare": f".venv/bin/ratchet gates compare {first['version']} "
                           f"{final['version']} --suite FILE.jsonl --config {u['config']} "
                           f"--workdir {run}"},
        }
    if not rl:
        return out
    sealed_keys = clusters(pools["sealed"])
    pairs = [(u["scores"]["first"]["passed"], u["scores"]["rl-final"]["passed"])
             for u in rl.values()]
    out["pooled"]["sealed"] = _pool_entry(sealed_keys, pairs)
    for name in CARRY_POOLS:
        if not pools.get(name) or any(not u["scores"]["first"].get(name) for u in rl.values()):
            continue
        pairs = [(u["scores"]["first"][name], u["scores"]["rl-final"][name]) for u in rl.values()]
        out["pooled"][name] = {**_pool_entry(clusters(pools[name]), pairs),
                               **pooled_families(pools[name], pairs)}
    he = [(u["scores"]["first"].get("humaneval_passed"),
           u["scores"]["rl-final"].get("humaneval_passed")) for u in rl.values()]
    if all(a is not None and b is not None for a, b in he):
        out["pooled"]["humaneval"] = _pool_entry([f"HumanEval/{i}" for i in range(len(he[0][0]))],
                                                 he)
    if placebo:
        pl_pairs = [(u["scores"]["first"]["passed"], u["scores"]["placebo-final"]["passed"])
                    for u in placebo.values()]
        out["pooled"]["placebo"] = {
            "promotions": sum(u["placebo_promotions"] for u in placebo.values()),
            "complete": all(u.get("complete") for u in placebo.values()),
            **(_pool_entry(sealed_keys, pl_pairs) if pl_pairs else {})}
    out["last_candidates"] = last_candidates(rl, placebo, pools)
    out["goals"] = goals(out, rl, placebo)
    return out


SCORED = {"sealed": "passed", **{name: name for name in CARRY_POOLS}}
"""Each pool's key in a scored version's entry."""


def _last_trained(unit: dict, arm: str) -> dict:
    """The arm's last candidate as scored: the rejected last one, else (the last cycle promoted
    it) the final champion."""
    return unit["scores"].get(f"{arm}-last-candidate") or unit["scores"][f"{arm}-final"]


def last_candidates(rl: dict, placebo: dict, pools: dict[str, list[dict]]) -> dict:
    """What training did, before the gate: each arm's last trained candidate against the first
    champion, pooled over seeds like the champions, and the rl arm's last candidate against the
    placebo's of the same seeds (a function's change being its mean over those seeds; the
    bootstrap resamples functions). A gain the placebo matches is not the reward's doing. A
    diagnostic beside the goals, which judge only what the gate promoted."""
    out: dict = {}
    for name, key in SCORED.items():
        tasks = pools.get(name)
        if not tasks:
            continue
        keys, entry = clusters(tasks), {}
        for arm, units in (("rl", rl), ("placebo", placebo)):
            pairs = [(u["scores"]["first"][key], _last_trained(u, arm)[key])
                     for u in units.values()]
            if pairs and all(a and b for a, b in pairs):
                entry[arm] = {**_pool_entry(keys, pairs), "seeds": sorted(units),
                              **pooled_families(tasks, pairs)}
        both = sorted(set(rl) & set(placebo))
        pairs = [(_last_trained(placebo[s], "placebo")[key], _last_trained(rl[s], "rl")[key])
                 for s in both]
        if pairs and all(a and b for a, b in pairs):
            d, lo, hi = pooled_change(keys, pairs)
            entry["rl_minus_placebo"] = {"delta": d, "ci": [lo, hi], "seeds": both}
        if entry:
            out[name] = entry
    return out


def goals(out: dict, rl: dict, placebo: dict) -> dict:
    """Each target of :data:`GOALS`: its figure and whether it meets it (None: no figure)."""
    p, seeds = out["pooled"], out["per_seed"]
    sealed = p["sealed"]
    g: dict = {"sealed": {
        "pooled": sealed["delta"], "ci": sealed["ci"],
        "reached": sealed["delta"] >= GOALS["sealed_gain"] and sealed["ci"][0] > 0
        and all(s["sealed"]["ci"][0] > 0 for s in seeds.values())}}
    for name in CARRY_POOLS:
        if name in p:
            g[name] = {"low": p[name]["ci"][0],
                       "family_surely_worse": p[name]["family_max_drop"]["surely_worse"],
                       "reached": p[name]["ci"][0] >= GOALS["carry_floor"]
                       and not p[name]["family_max_drop"]["surely_worse"]}
    g["humaneval"] = None if "humaneval" not in p else {
        "low": p["humaneval"]["ci"][0],
        "reached": p["humaneval"]["ci"][0] >= GOALS["humaneval_floor"]}
    # Live signals: the rl arm's change from its first to its last cycle must be beyond the
    # placebo arms' changes in every seed (the seed band), in the right direction.
    live = {}
    for key, sign in (("live_pass_rate", 1), ("edit_persistence", 1), ("dissatisfied_rate", -1)):
        rl_changes = [sign * s["live"][key]["change"] for s in seeds.values() if s["live"]]
        band = [sign * s["placebo"]["live"][key]["change"] for s in seeds.values()
                if s["placebo"] and s["placebo"]["live"]]
        live[key] = {"rl_changes": [sign * c for c in rl_changes],
                     "placebo_changes": [sign * c for c in band],
                     "reached": None if not rl_changes or not band
                     else min(rl_changes) > max(band)}
    g["live"] = live
    pl = p.get("placebo")
    g["placebo"] = None if pl is None else {
        "promotions": pl["promotions"], "ci": pl.get("ci"),
        "reached": pl["promotions"] == 0 and pl["complete"]
        and (pl.get("ci") is None or pl["ci"][0] <= 0 <= pl["ci"][1])}
    minutes = sum(u["seconds"] for u in (*rl.values(), *placebo.values())) / 60
    g["minutes"] = {"whole_run": minutes, "reached": minutes <= GOALS["minutes"]}
    return g


def flat_keys(summaries: dict[tuple[int, str], dict], result: dict) -> dict:
    """The one-run file's top-level keys (``bench.loop_real``), filled from the pooled figures,
    so a reader of either finds ``pass_first``, ``ci_low``, ``placebo_delta``, ``promotions``,
    ``per_cycle`` (each row with its ``seed``) and the rest in the same place."""
    p, last = result["pooled"], result.get("last_candidates", {}).get("sealed", {})
    units = [summaries[k] for k in sorted(summaries)]
    sealed, placebo, he = p.get("sealed", {}), p.get("placebo", {}), p.get("humaneval", {})

    def entry(arm: str) -> dict | None:
        e = last.get(arm)
        return None if e is None else {"delta": e["delta"], "ci": e["ci"], "seeds": e["seeds"]}

    return {
        "pass_first": sealed.get("first"), "pass_final": sealed.get("final"),
        "delta": sealed.get("delta"), "ci_low": (sealed.get("ci") or [None])[0],
        "ci_high": (sealed.get("ci") or [None, None])[1],
        "placebo_delta": placebo.get("delta"), "placebo_ci": placebo.get("ci"),
        "promotions": sum(u["promotions"] for (_, a), u in summaries.items() if a == "rl"),
        "placebo_promotions": sum(u["placebo_promotions"] for (_, a), u in summaries.items()
                                  if a == "placebo"),
        "humaneval_first": he.get("first"), "humaneval_final": he.get("final"),
        "humaneval_problems": units[0].get("humaneval_problems") if units else None,
        "sealed_tasks": units[0].get("sealed_tasks") if units else None,
        "sealed_prompts": units[0].get("sealed_prompts") if units else None,
        "seconds": sum(u["seconds"] for u in units), "arms_side_by_side": False,  # one at a time
        "load1_range": [min(u["load1"] for u in units), max(u["load1"] for u in units)]
        if units else None,
        **{name: p[name] for name in CARRY_POOLS if name in p},
        "rl_last_candidate": entry("rl"), "placebo_last_candidate": entry("placebo"),
        "per_cycle": [{**row, "seed": s} for (s, _), u in sorted(summaries.items())
                      for row in u["per_cycle"]],
        "scores": {f"seed{s}_{a}": u["scores"] for (s, a), u in sorted(summaries.items())},
    }


def report(result: dict) -> None:
    for s, r in result["per_seed"].items():
        carry = "; ".join(f"{n} {r[n]['delta']:+.3f} [{r[n]['ci'][0]:+.3f}, {r[n]['ci'][1]:+.3f}]"
                          for n in CARRY_POOLS if r.get(n))
        print(f"seed {s}: sealed {r['sealed']['delta']:+.3f} [{r['sealed']['ci'][0]:+.3f}, "
              f"{r['sealed']['ci'][1]:+.3f}]; {carry}; {r['promotions']} promotion(s)")
    for name, e in result["pooled"].items():
        if "delta" in e:
            worst = e.get("family_max_drop")
            tail = "" if not worst else (f", worst family {worst['family']} p {worst['p']:.3f}"
                                         f"{' (surely worse)' if worst['surely_worse'] else ''}")
            print(f"pooled {name}: {e['first']:.3f} -> {e['final']:.3f}, change {e['delta']:+.3f} "
                  f"[{e['ci'][0]:+.3f}, {e['ci'][1]:+.3f}]{tail}")
    for name, e in (result.get("last_candidates") or {}).items():
        parts = [f"{arm} {e[arm]['delta']:+.3f} [{e[arm]['ci'][0]:+.3f}, {e[arm]['ci'][1]:+.3f}]"
                 for arm in ("rl", "placebo", "rl_minus_placebo") if arm in e]
        print(f"last candidates, {name}: {'; '.join(parts)}")
    partial = f" (so far: {', '.join(result['missing_units'])} missing)" \
        if result.get("missing_units") else ""
    for name, g in (result.get("goals") or {}).items():
        if isinstance(g, dict) and "reached" in g:
            print(f"target {name}: {'reached' if g['reached'] else 'not reached'}{partial}")


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(prog="python -m bench.loop_real_seeds",
                                description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2", help="comma list of seeds")
    p.add_argument("--cycles", type=int, default=4)
    p.add_argument("--config", type=Path, default=lr.CONFIG)
    p.add_argument("--no-placebo", action="store_true")
    p.add_argument("--run-arms", default=None,
                   help="comma list of the arms whose missing units this call runs (the other "
                   "arm's complete units still pool; default: every arm pooled)")
    p.add_argument("--units", type=Path, default=ROOT / "bench" / "results" / "loop_real_units",
                   help="one file per unit (default: in the repository, so complete units outlive "
                   "the machine their run folders were on)")
    p.add_argument("--workdir", type=Path, default=ROOT / ".cache" / "loop_real_seeds" / "runs")
    p.add_argument("--fresh", action="store_true",
                   help="rerun a unit cut short from its start instead of resuming it")
    p.add_argument("--pool-only", action="store_true",
                   help="pool the complete unit files, run nothing")
    p.add_argument("--out", type=Path,
                   default=ROOT / "bench" / "results" / "loop_real_seeds.json")
    args = p.parse_args(argv)
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    arms = ARMS[:1] if args.no_placebo else ARMS
    run_arms = (list(arms) if args.run_arms is None
                else [a.strip() for a in args.run_arms.split(",") if a.strip()])
    if not run_arms or any(a not in arms for a in run_arms):
        p.error(f"--run-arms: a comma list of {list(arms)}")
    from runtime.services import unwind_on_sigterm
    from tasks.pyfuncs import read_jsonl

    unwind_on_sigterm()  # SIGTERM stops the running unit, by PID
    args.units.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for seed in seeds:
        for arm in arms:
            path = unit_file(args.units, seed, arm)
            if complete(path):
                say(f"seed {seed} {arm}: complete, kept ({path})")
            elif not args.pool_only and arm in run_arms:
                run_unit(seed, arm, cycles=args.cycles, config=args.config, units=args.units,
                         workdir=args.workdir, extra=extra, fresh=args.fresh)
    summaries = {(s, a): json.loads(unit_file(args.units, s, a).read_text())
                 for s in seeds for a in arms if complete(unit_file(args.units, s, a))}
    missing = [f"seed{s}_{a}" for s in seeds for a in arms if (s, a) not in summaries]
    first = next(iter(summaries.values()), None)
    if first is None:
        raise SystemExit(f"no complete unit under {args.units}")
    files = first.get("pool_files") or {}
    pools = {"sealed": read_jsonl(files.get("sealed") or lr.SEALED)[:first["sealed_tasks"]]}
    for name, default in (("transfer", lr.TRANSFER), ("guard", lr.GUARD)):
        n = (first.get(name) or {}).get("tasks", 0)
        pools[name] = read_jsonl(files.get(name) or default)[:n] if n else []
    result = {**provenance.stamp(),
              "unit_commits": {f"seed{s}_{a}": u.get("commit") for (s, a), u in summaries.items()},
              "cycles": first["cycles"], "requests_per_cycle": first["requests_per_cycle"],
              "config": first["config"], "units": str(args.units), "missing_units": missing,
              "complete": not missing, "placebo_complete": not args.no_placebo and all(
                  (s, "placebo") in summaries for s in seeds),
              "seconds_this_call": round(time.perf_counter() - t0, 1),
              **pool(summaries, pools)}
    result.update(flat_keys(summaries, result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    report(result)
    say(f"wrote {args.out}{'' if not missing else f' (missing units: {missing})'}")


if __name__ == "__main__":
    main()
