"""How much churn does a move that carries no information cause? The champion with seeded
Gaussian noise on the weights the preset's update trains (each trained tensor plus ``scale`` x
its standard deviation x N(0, 1)), saved as a checkpoint and scored as experiments/local_update.py
scores a candidate: greedy, one chat turn, graded by the asserts, compared with the champion
(change, 95% CI, discordant share, per-family test). Beside each, the trainer's own size of the
move: KL to the champion on the same traffic rows (``kl_theta_ref_k3_final``, k3 weighted to the
behaviour policy, as every candidate reports it). A candidate's discordance then reads against
that of noise at the same KL: what the pool's near-ties give to any move.

    .venv/bin/python -m experiments.churn_floor [--scales 0.001,0.003,0.01] [--seeds 1]
        [--pools guard_fresh,guard] [--rows-seed 2] [--threads 1]

The champion and the rows are experiments/local_update.py's (``--workdir``; ``--rows-seed``: which
cycle's traffic), built or sampled as it does when absent; the champion's verdicts come from its
cache. ``--tiny`` runs the same code on the tiny random Mixtral (the tests' dry run). Writes
``--out`` (default bench/results/churn_floor.json) after every move; a run on the same champion,
rows and pools keeps the moves already there (``--scales`` then adds to them).

``--against FILE...`` (no model runs) asks whether candidates flip the same tasks noise does: for
each candidate of those experiments/local_update.py result files and each pool a noise move of
``--out`` also scored, its flipped tasks, how many of them each noise move flips too, and the
count two independent sets of those sizes would share by chance; written to
bench/results/churn_floor_overlap.json.

``--stable FILE...`` (no model runs) judges those files' candidates on the noise-stable tasks
only: a pool's tasks whose champion verdict no noise move of ``--stable-scale`` and the seeds
``--define-seeds`` flips (chosen from noise alone, before any candidate is read). Per candidate
and pool, the comparison on those tasks (experiments/local_update.py ``compare``) and
``stays_local`` on them; beside them the moves of ``--check-seeds`` (noise not used to choose the
tasks) on the same tasks, which say how much churn the stable tasks still leave to a move of no
meaning; (``losses_only_stable``) the same criteria with churn counted as guard losses only, a
rule proposed beside them; and (``noise_whole``) each noise move judged by the criteria on the whole
pools, as a candidate is. Written to bench/results/churn_floor_stable.json.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import shutil
import time
from pathlib import Path

from bench._common import perturb, show_progress
from experiments import local_update as lu

OUT = lu.ROOT / "bench" / "results" / "churn_floor.json"
OVERLAP = lu.ROOT / "bench" / "results" / "churn_floor_overlap.json"
STABLE = lu.ROOT / "bench" / "results" / "churn_floor_stable.json"
NULL_PAIRS = lu.ROOT / "bench" / "results" / "churn_floor_null_pairs.json"


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.churn_floor",
                                description=__doc__.splitlines()[0])
    p.add_argument("--scales", type=lambda s: [float(x) for x in s.split(",")],
                   default=[0.001, 0.003, 0.01],
                   help="noise scales, each a share of every trained tensor's std")
    p.add_argument("--seeds", type=int, default=1, help="noise draws per scale")
    p.add_argument("--pools", default="guard_fresh,guard",
                   help="comma list of experiments/local_update.py pools")
    p.add_argument("--rows-seed", type=int, default=2)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--limit", type=int, default=0, help="first N tasks of each pool (0 = all)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--config", type=Path, default=lu.CONFIG)
    p.add_argument("--workdir", type=Path, default=lu.ROOT / ".cache" / "local_update")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--tiny", action="store_true", help="dry run on a tiny random Mixtral")
    p.add_argument("--against", type=Path, nargs="+", default=None,
                   help="experiments/local_update.py result files whose candidates' flipped "
                   "tasks to set beside the noise moves' of --out (no model runs)")
    p.add_argument("--overlap-out", type=Path, default=OVERLAP)
    p.add_argument("--stable", type=Path, nargs="+", default=None,
                   help="experiments/local_update.py result files whose candidates to judge on the "
                   "tasks the noise moves of --out leave unflipped (no model runs)")
    p.add_argument("--stable-scale", type=float, default=0.03)
    p.add_argument("--define-seeds", type=_ints, default=[0, 1, 2, 3],
                   help="noise seeds that choose the stable tasks")
    p.add_argument("--check-seeds", type=_ints, default=[4],
                   help="noise seeds scored on the stable tasks as a check")
    p.add_argument("--stable-out", type=Path, default=STABLE)
    p.add_argument("--null-pairs", type=Path, nargs="+", default=None,
                   help="noise result files (as --out writes) whose moves of --stable-scale to set "
                   "against each other, pair by pair (no model runs)")
    p.add_argument("--null-pairs-out", type=Path, default=NULL_PAIRS)
    a = p.parse_args(argv)
    a.pools = a.pools.split(",")
    if unknown := set(a.pools) - set(lu.POOLS):
        p.error(f"unknown pools {sorted(unknown)}")
    if a.seeds < 1 or any(s < 0 for s in a.scales):
        p.error("--seeds must be >= 1 and every scale >= 0")
    return a


def noise_config(trainer, *, tiny: bool):
    """The preset's trainer without its retain and replay sets (the recipe only measures here),
    under token_clip, whose rows are every traffic row (filtered imitation keeps only the
    rewarded ones), on the tiny model's one top layer when ``tiny``."""
    from trainer.config import TokenClip

    cfg = trainer.model_copy(update={
        "retain": trainer.retain.model_copy(update={"path": None}),
        "replay": trainer.replay.model_copy(update={"path": None}), "objective": TokenClip()})
    if tiny:
        cfg = cfg.model_copy(update={"trainable": cfg.trainable.model_copy(
            update={"top_layers": 1})})
    return cfg


def run(args: argparse.Namespace) -> dict:
    import torch

    from ratchet.config import load_config
    from tasks.pyfuncs import read_jsonl
    from trainer.recipe import RLRecipe

    t0 = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    workdir = args.workdir / ("tiny" if args.tiny else "real")
    workdir.mkdir(parents=True, exist_ok=True)
    preset = load_config(args.config, check_paths=not args.tiny)
    champion = lu.build_champion(args, workdir)
    rows = lu.cycle_rows(champion, workdir, preset.simulator, draw=None,
                         requests=args.requests, seed=args.rows_seed)
    pools = {name: read_jsonl(lu.POOLS[name]) for name in args.pools}
    if args.limit:
        pools = {k: v[:args.limit] for k, v in pools.items()}
    base = lu.champion_scores(champion, pools, args, workdir)
    recipe = RLRecipe(champion, rows, noise_config(preset.trainer, tiny=args.tiny))
    recipe.setup()
    params = [p for p in recipe.policy.parameters() if p.requires_grad]
    saved = [p.detach().clone() for p in params]
    result = {
        "date": datetime.date.today().isoformat(), "commit": lu.commit(),
        "machine": f"{os.cpu_count()} CPU cores", "load": os.getloadavg()[0],
        "config": str(args.config), "tiny": args.tiny, "rows_seed": args.rows_seed,
        "rows": rows.num_rows, "trained_parameters": sum(p.numel() for p in params),
        "champion": {k: sum(v) / len(v) for k, v in base.items()}, "moves": [],
    }
    if args.out.is_file():  # the same champion, rows and pools: its moves are kept, not redone
        before = json.loads(args.out.read_text())
        if all(before.get(k) == result[k] for k in ("champion", "rows", "rows_seed", "tiny")):
            result["moves"] = before["moves"]
    done = {(m["scale"], m["seed"]) for m in result["moves"]}
    try:
        for scale in args.scales:
            for seed in range(args.seeds):
                if (scale, seed) in done:
                    lu.say(f"scale {scale:g} seed {seed}: in {args.out} already")
                    continue
                perturb(params, saved, scale=scale, seed=seed)
                kl = recipe.traffic_kl_now()
                out = workdir / "churn_floor" / f"scale{scale:g}-seed{seed}"
                recipe.save_checkpoint(out)
                scores = lu.score(out, pools, args)
                shutil.rmtree(out)
                entry = {"scale": scale, "seed": seed, "kl_traffic": kl,
                         "pools": {k: lu.compare(pools[k], base[k], scores[k]) for k in pools}}
                result["moves"].append(entry)
                result["moves"].sort(key=lambda m: (m["scale"], m["seed"]))
                lu.say(f"scale {scale:g} seed {seed}: KL traffic {kl:.4f}  " + "  ".join(
                    f"{k} {v['delta']:+.3f} disc {v['discordant_share']:.3f}"
                    for k, v in entry["pools"].items()))
                lu.write(result, args.out)
    finally:
        recipe.cleanup()
    result["seconds"] = time.perf_counter() - t0
    lu.write(result, args.out)
    return result


def flipped(verdicts: str) -> set[int]:
    """The tasks whose verdict a comparison's ``verdicts`` string marks as changed (+ or -)."""
    return {i for i, c in enumerate(verdicts) if c in "+-"}


def overlap(moves: list[dict], results: list[dict]) -> list[dict]:
    """Per candidate of ``results`` (experiments/local_update.py files) and pool that a noise move
    also scored: its flips, the flips it shares with each move, and the chance count of that share
    (|candidate| x |move| / tasks)."""
    rows = []
    for result in results:
        for arm in result["arms"]:
            for pool, cmp in arm["pools"].items():
                noise = [m for m in moves if pool in m["pools"]]
                if not noise:
                    continue
                n = len(cmp["verdicts"])
                if any(len(m["pools"][pool]["verdicts"]) != n for m in noise):
                    raise ValueError(f"{pool}: the noise moves scored another task list")
                mine = flipped(cmp["verdicts"])
                rows.append({"name": arm["name"], "seed": arm["seed"], "pool": pool,
                             "tasks": n, "flips": len(mine), "against": [
                                 {"scale": m["scale"], "seed": m["seed"],
                                  "kl_traffic": m["kl_traffic"], "flips": len(theirs),
                                  "shared": len(mine & theirs),
                                  "chance": len(mine) * len(theirs) / n}
                                 for m in noise
                                 for theirs in [flipped(m["pools"][pool]["verdicts"])]]})
    return rows


def null_pairs(moves: list[dict], *, scale: float) -> list[dict]:
    """Every ordered pair of the noise moves of ``scale`` set against each other on every pool
    both scored, as ``experiments.local_update.versus`` sets a candidate against its placebo (paired
    change by function, 95% CI): how often two moves that learned nothing look different."""
    chosen = sorted((m for m in moves if m["scale"] == scale), key=lambda m: m["seed"])
    return [{"pool": pool, "seed": a["seed"], "against": b["seed"],
             **{k: v for k, v in lu.versus_verdicts(pool, a["pools"][pool]["verdicts"],
                                                     b["pools"][pool]["verdicts"]).items()
                if k in ("delta", "ci_low", "ci_high")}}
            for a, b in itertools.permutations(chosen, 2)
            for pool in sorted(set(a["pools"]) & set(b["pools"]))]


def stable_tasks(moves: list[dict], pool: str, *, scale: float, seeds: list[int]) -> list[int]:
    """The tasks of ``pool`` whose verdict no move of ``scale`` and ``seeds`` flips (raises if
    one of those moves is missing or did not score the pool)."""
    chosen = {m["seed"]: m for m in moves if m["scale"] == scale and pool in m["pools"]}
    if missing := sorted(set(seeds) - set(chosen)):
        raise ValueError(f"{pool}: no noise move of scale {scale:g} seeds {missing}")
    verdicts = [chosen[s]["pools"][pool]["verdicts"] for s in seeds]
    if len({len(v) for v in verdicts}) != 1:
        raise ValueError(f"{pool}: the noise moves scored different task lists")
    flips = set().union(*(flipped(v) for v in verdicts))
    return [i for i in range(len(verdicts[0])) if i not in flips]


def judge_stable(noise: dict, results: list[dict], *, scale: float, define: list[int],
                 check: list[int]) -> dict:
    """Each candidate of ``results`` judged on the stable tasks (:func:`stable_tasks` of the
    moves of ``noise``) of every pool both scored; the moves of ``check`` on the same tasks; and
    (``noise_whole``) every move of ``scale`` judged by ``stays_local`` on the whole pools, as a
    candidate is: what the criteria say of a move that learned nothing."""
    from tasks.pyfuncs import read_jsonl

    moves = noise["moves"]
    pools = sorted({p for m in moves if m["scale"] == scale for p in m["pools"]})
    keep, tasks, total, whole = {}, {}, {}, {}
    for pool in pools:
        keep[pool] = stable_tasks(moves, pool, scale=scale, seeds=define)
        every = whole[pool] = read_jsonl(lu.POOLS[pool])
        total[pool] = len(every)
        scored = next(m for m in moves if pool in m["pools"])["pools"][pool]["verdicts"]
        if len(every) != len(scored):
            raise ValueError(f"{pool}: the noise moves scored another task list")
        tasks[pool] = [every[i] for i in keep[pool]]

    def on_stable(pool: str, verdicts: str) -> dict:
        return lu.compare_again(tasks[pool], "".join(verdicts[i] for i in keep[pool]))

    checks = [{"scale": m["scale"], "seed": m["seed"], "kl_traffic": m["kl_traffic"],
               "pools": {p: on_stable(p, m["pools"][p]["verdicts"]) for p in pools
                         if p in m["pools"]}}
              for m in moves if m["scale"] == scale and m["seed"] in check]
    noise_whole = [{"scale": m["scale"], "seed": m["seed"], "kl_traffic": m["kl_traffic"],
                    "stays_local": judged}
                   for m in moves if m["scale"] == scale
                   for judged in [_judged_whole({p: lu.compare_again(whole[p], v["verdicts"])
                                                 for p, v in m["pools"].items() if p in whole})]
                   if judged]
    candidates = []
    for result in results:
        for arm in result["arms"]:
            mine = {p: on_stable(p, arm["pools"][p]["verdicts"]) for p in pools
                    if p in arm["pools"]}
            if not mine:
                continue
            entry = {"name": arm["name"], "seed": arm["seed"],
                     "kl_traffic": arm.get("train", {}).get("kl_theta_ref_k3_final"),
                     "pools": mine, "whole": {
                         p: {k: v for k, v in arm["pools"][p].items() if k != "verdicts"}
                         for p in mine}}
            suffixes = lu.judged_suffixes(mine)
            for key, where in (("stays_local_stable", mine), ("stays_local_whole", arm["pools"])):
                entry[key] = {x or "first": lu.stays_local(where, suffix=x) for x in suffixes}
            entry["losses_only_stable"] = {x or "first": lu.stays_local(mine, suffix=x,
                                                                         losses_only=True)
                                           for x in suffixes}
            candidates.append(entry)
    return {"scale": scale, "define_seeds": define, "check_seeds": check,
            "stable": {p: {"tasks": len(keep[p]), "of": total[p], "indices": keep[p]}
                       for p in pools},
            "checks": checks, "noise_whole": noise_whole, "candidates": candidates}


def _judged_whole(pools: dict[str, dict]) -> dict[str, dict]:
    """``stays_local`` of every pool set of ``pools`` scored whole, by suffix ("first" for the
    first pools)."""
    return {x or "first": lu.stays_local(pools, suffix=x) for x in lu.judged_suffixes(pools)}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.null_pairs:
        files = []
        for path in args.null_pairs:
            rows = null_pairs(json.loads(path.read_text())["moves"], scale=args.stable_scale)
            for pool in dict.fromkeys(r["pool"] for r in rows):
                mine = [r for r in rows if r["pool"] == pool]
                lu.say(f"{path.name} {pool}: {sum(r['ci_low'] > 0 for r in mine)} of "
                       f"{len(mine)} ordered pairs of noise moves with the CI above 0; largest "
                       f"change {max(r['delta'] for r in mine):+.3f}")
            files.append({"file": path.name, "pairs": rows})
        lu.write({"date": datetime.date.today().isoformat(), "commit": lu.commit(),
                  "scale": args.stable_scale, "files": files}, args.null_pairs_out)
        return
    if args.stable:
        noise = json.loads(args.out.read_text())
        out = judge_stable(noise, [json.loads(p.read_text()) for p in args.stable],
                           scale=args.stable_scale, define=args.define_seeds,
                           check=args.check_seeds)
        for p, st in out["stable"].items():
            lu.say(f"{p}: {st['tasks']} of {st['of']} tasks stable under noise "
                   f"{args.stable_scale:g} seeds {args.define_seeds}")
        for c in out["checks"]:
            lu.say(f"noise {c['scale']:g} seed {c['seed']} (a check): " + "  ".join(
                f"{p} disc {v['discordant_share']:.3f}" for p, v in c["pools"].items()))
        for m in out["noise_whole"]:
            lu.say(f"noise {m['scale']:g} seed {m['seed']} on the whole pools: " + "  ".join(
                f"{x} {'meets every criterion' if v['all'] else 'fails'}"
                for x, v in m["stays_local"].items()))
        for c in out["candidates"]:
            lu.say(f"{c['name']} seed {c['seed']}: " + "  ".join(
                f"{p} {v['delta']:+.3f} disc {v['discordant_share']:.3f}"
                for p, v in c["pools"].items()) + f"  stays local {c['stays_local_stable']}")
        lu.write({"date": datetime.date.today().isoformat(), "commit": lu.commit(),
                  "noise": args.out.name, "files": [p.name for p in args.stable], **out},
                 args.stable_out)
        return
    if args.against is None:
        run(args)
        return
    moves = json.loads(args.out.read_text())["moves"]
    rows = overlap(moves, [json.loads(p.read_text()) for p in args.against])
    for r in rows:
        lu.say(f"{r['name']} seed {r['seed']} {r['pool']}: {r['flips']} flips; shared " + ", ".join(
            f"{a['shared']} with noise {a['scale']:g} ({a['flips']}, chance {a['chance']:.1f})"
            for a in r["against"]))
    lu.write({"date": datetime.date.today().isoformat(), "commit": lu.commit(),
              "noise": str(args.out.name), "files": [p.name for p in args.against],
              "candidates": rows}, args.overlap_out)


if __name__ == "__main__":
    show_progress()
    main()
