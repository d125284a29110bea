"""The proof, fixed before any unit ran: does the real model get better for the users it serves?

A unit is one run of the real preset (configs/smollm2-pyfuncs.json, as the update arms' rule left
it): :data:`CYCLES` cycles of ``bench.loop_real`` (an embedded broker and MLflow server, one
replica, the user simulator's chat traffic, ingest, train, the sampled gate on pools v2, deploy),
``rl`` or its shuffled-reward ``placebo``, at one seed. A pair is the two arms of one seed (the
same traffic draws and trainer seed); :data:`PAIRS` pairs, seeds 0..5. After its cycles, a unit's
first and final champions are scored as users are served, in pieces (:data:`PIECES`):

- ``sealed``: pools v2's sealed pool (164 functions of 41 families, never in traffic, tuning or a
  gate), greedy and :data:`SEALED_SAMPLES` samples at the serving temperature :data:`SERVING_T`;
- ``transfer`` (pools v2's held-out families) and ``guard`` (tasks/data/pyfuncs_guard.jsonl, the
  families the model already solves): greedy and :data:`CARRY_SAMPLES` samples;
- ``humaneval``: the 164 problems, greedy and :data:`CARRY_SAMPLES` samples, 160 tokens;
- the first champion only: the sealed pool at each temperature of :data:`GRID` (its best
  temperature, greedy included, is what the final champion at the serving one must beat).

Every sample is coupled per task (a task's draws are seeded by the task, so the first and the
final champion face the same random numbers). A piece is scored once per weights (the cache key
hashes the weights, the tasks, the decoding and the decoding and grading code), so a final
champion that is still the first one is not decoded again, and a piece cut short is scored again
on resumption; two processes side by side claim different pieces.

Primary outcome per run: final minus first champion in family-averaged sampled pass on the sealed
pool. Primary test: the exact one-sided sign-flip test over the pairs' (rl - placebo) primary
outcomes (6 pairs: smallest p 1/64). Secondary, each final minus first, family-clustered (the
bootstrap resamples families; HumanEval resamples problems): sampled and greedy on transfer and
guard with the family-wise maximum-drop test, HumanEval sampled, the final champion at the serving
temperature against the first at its best, per cycle live pass, edit persistence, dissatisfied
follow-ups, tokens and latency of the traffic each arm served. :data:`TARGETS` and
:func:`targets` say what counts as met.

    .venv/bin/python -m bench.loop_proof                  # every unit, one after the other
    .venv/bin/python -m bench.loop_proof --arms rl --threads 1   # or one process per arm, side
    .venv/bin/python -m bench.loop_proof --arms placebo --threads 1   # by side (memory allowing)
    .venv/bin/python -m bench.loop_proof --pool-only      # pool the complete units

Units run seed by seed, each resumed where it was cut short (``bench.loop_real --resume``) and
rerun whole when it cannot be; a unit pools only once its cycles and its scores are complete.
``--out`` (default bench/results/loop_real.json) holds the pooled figures; the unit files and the
scored pieces live under bench/results/ so they outlive the machine, the checkpoints under
``--workdir``: once a unit is scored, only its first and final champions' weights stay, each
content on disk once (:func:`prune_unit`).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402
from bench.loop_real import say  # noqa: E402

PAIRS = 6
CYCLES = 3
SERVING_T = 0.8
SEALED_SAMPLES = 8
CARRY_SAMPLES = 4
GRID = (0.3,)
"""Temperatures the first champion is scored at on the sealed pool beside the serving one and
greedy decoding (the grid of bench/results/pool_scores_v1.json); its best of these three is the
bar of ``vs_best_temperature``."""
POOLS = {
    "sealed": ROOT / "tasks" / "data" / "pools_v2" / "sealed.jsonl",
    "transfer": ROOT / "tasks" / "data" / "pools_v2" / "transfer.jsonl",
    "guard": ROOT / "tasks" / "data" / "pyfuncs_guard.jsonl",
}
HUMANEVAL = 164
TARGETS = {"pairs_above": 6, "pooled_rl_gain": 0.15, "carry_floor": -0.03,
         "humaneval_floor": -0.02, "vs_best_temperature": 0.05, "placebo_promotions_max": 1,
         "live_p": 0.05}
"""The targets: rl above placebo in every pair and the pooled rl gain in sampled sealed pass at
least +0.15; transfer and guard pooled lower bounds (sampled and greedy) at least -0.03 with no
family surely worse; HumanEval sampled lower bound at least -0.02; the final champion at the
serving temperature at least +0.05 above the first at its best, with a lower bound above 0; every
rl run promotes and all placebo runs together promote at most once; each live metric of the last
cycle better in rl than in placebo, sign-flip p over the pairs at most 0.05."""
BOOTSTRAP = 2000
RESULTS = ROOT / "bench" / "results"


# -- pieces ---------------------------------------------------------------------------------------
def pieces(pools: dict[str, Path], humaneval: int, *, first: bool) -> dict[str, dict]:
    """What a champion is scored on: name -> {kind, path, samples, temperature, max_new_tokens}."""
    out = {"sealed": _piece("jsonl", pools["sealed"], SEALED_SAMPLES, SERVING_T)}
    for name in ("transfer", "guard"):
        if pools.get(name):
            out[name] = _piece("jsonl", pools[name], CARRY_SAMPLES, SERVING_T)
    if humaneval:
        out["humaneval"] = {**_piece("humaneval", None, CARRY_SAMPLES, SERVING_T),
                            "size": humaneval, "max_new_tokens": 160, "batch_size": 16}
    if first:
        for t in GRID:
            out[f"sealed_t{t:g}"] = _piece("jsonl", pools["sealed"], SEALED_SAMPLES, t)
    return out


def _piece(kind: str, path: Path | None, samples: int, temperature: float) -> dict:
    return {"kind": kind, "path": None if path is None else str(path), "samples": samples,
            "temperature": temperature, "max_new_tokens": 64, "batch_size": 32, "size": 0}


def piece_key(ckpt: Path, piece: dict) -> str:
    """What a piece's scores depend on: the checkpoint's weight files, the piece's tasks and
    decoding, and the code that decodes and grades (``policy/``, ``tasks/``, ``gating/``)."""
    weights = sorted(Path(ckpt).glob("*.safetensors"))
    if not weights:
        raise FileNotFoundError(f"{ckpt} holds no *.safetensors: not a checkpoint folder")
    h = hashlib.sha256()
    code = sorted(p for d in ("policy", "tasks", "gating") for p in (ROOT / d).rglob("*.py"))
    files = weights + code + ([Path(piece["path"])] if piece["path"] else [])
    for f in files:
        h.update(f.name.encode())
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 24):
                h.update(chunk)
    h.update(json.dumps({k: v for k, v in piece.items() if k != "path"}, sort_keys=True).encode())
    return h.hexdigest()[:20]


def score_piece(ckpt: Path, piece: dict) -> list[dict]:
    """Each task of the piece: ``task_id``, ``family``, ``cluster``, greedy ``passed`` and the
    share of its samples that passed (``sampled``), every sample coupled per task."""
    from bench.real_gate import score_suite
    from gating.config import SuiteConfig
    from policy.config import HFPolicyConfig
    from policy.loader import load_policy

    policy = load_policy(HFPolicyConfig(path=ckpt, chat_template=True))
    chat = bool(getattr(policy, "has_chat_template", False))
    size = piece["size"] or sum(1 for line in Path(piece["path"]).read_text().splitlines()
                                if line.strip())
    suite = SuiteConfig(kind=piece["kind"], path=piece["path"], size=size, draw="fixed",
                        max_new_tokens=piece["max_new_tokens"], batch_size=piece["batch_size"],
                        samples=piece["samples"], temperature=piece["temperature"])
    result = score_suite(policy, suite, piece["temperature"], chat=chat, per_row=True)
    humaneval = piece["kind"] == "humaneval"  # every problem is its own family and cluster
    return [{"task_id": t.task_id, "family": t.task_id if humaneval else t.kind,
             "cluster": t.task_id if humaneval else (t.prompt_key or t.task_id),
             "passed": bool(t.passed), "sampled": float(t.sampled_pass)} for t in result.tasks]


@contextlib.contextmanager
def claimed(lock: Path, *, wait: bool):
    """Yield True while this process holds ``lock`` (``wait``: block until it does), else
    False (another process holds it)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def score_checkpoint(ckpt: Path, wanted: dict[str, dict], cache: Path, *, label: str,
                     scorer=score_piece) -> dict[str, str]:
    """Every piece of ``wanted`` scored on ``ckpt`` into ``cache`` (one file per key); returns
    piece name -> key. A piece another process is scoring is left for later and then waited
    for; a piece in the cache is not scored again."""
    keys = {name: piece_key(ckpt, p) for name, p in wanted.items()}
    todo = list(wanted)
    for wait in (False, True):
        later = []
        for name in todo:
            path = cache / f"{keys[name]}.json"
            with claimed(cache / ".locks" / f"{keys[name]}.lock", wait=wait) as mine:
                if path.is_file():
                    continue
                if not mine:
                    later.append(name)
                    continue
                t0 = time.perf_counter()
                say(f"{label}: scoring {name}")
                tasks = scorer(ckpt, wanted[name])
                _write_atomic(path, {"piece": name, **{k: v for k, v in wanted[name].items()},
                                     "date": provenance.now(), "commit": provenance.commit(),
                                     "load1": provenance.load1(),
                                     "seconds": round(time.perf_counter() - t0, 1),
                                     "tasks": tasks})
                say(f"{label}: {name} scored in {time.perf_counter() - t0:.0f} s: greedy "
                    f"{statistics.fmean(t['passed'] for t in tasks):.3f}, sampled "
                    f"{statistics.fmean(t['sampled'] for t in tasks):.3f}")
        todo = later
    return keys


def _write_atomic(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(".part")
    part.write_text(json.dumps(doc) + "\n")
    os.replace(part, path)


# -- statistics (pure) ----------------------------------------------------------------------------
def family_means(tasks: list[dict], key: str) -> dict[str, float]:
    """Each family's mean ``key`` (``passed`` or ``sampled``)."""
    by: dict[str, list[float]] = {}
    for t in tasks:
        by.setdefault(t["family"], []).append(float(t[key]))
    return {f: sum(v) / len(v) for f, v in by.items()}


def family_average(tasks: list[dict], key: str = "sampled") -> float:
    """Mean over families of each family's mean (every family counts once)."""
    return statistics.fmean(family_means(tasks, key).values())


def family_changes(pairs: list[tuple[list[dict], list[dict]]], key: str) -> dict[str, float]:
    """Per family, final minus first, averaged over the runs' ``(first, final)`` pairs."""
    per_run = []
    for first, final in pairs:
        a, b = family_means(first, key), family_means(final, key)
        if sorted(a) != sorted(b):
            raise ValueError("first and final were scored on different families")
        per_run.append({f: b[f] - a[f] for f in a})
    return {f: statistics.fmean(r[f] for r in per_run) for f in per_run[0]}


def clustered_ci(changes: dict[str, float], *, seed: int = 0, n_boot: int = BOOTSTRAP
                 ) -> tuple[float, float, float]:
    """(mean over clusters, 95% bootstrap low, high), clusters resampled."""
    d = [changes[k] for k in sorted(changes)]
    rng = random.Random(seed)
    means = sorted(statistics.fmean(d[rng.randrange(len(d))] for _ in d) for _ in range(n_boot))
    return statistics.fmean(d), means[int(0.025 * n_boot)], means[int(0.975 * n_boot) - 1]


def sign_flip_p(diffs: list[float]) -> float:
    """Exact one-sided p of the mean of ``diffs`` under random signs: the share of the 2^n sign
    assignments whose mean is at least the observed one (the observed one included)."""
    seen = statistics.fmean(diffs)
    hits = sum(statistics.fmean(s * d for s, d in zip(signs, diffs)) >= seen - 1e-12
               for signs in itertools.product((1, -1), repeat=len(diffs)))
    return hits / 2 ** len(diffs)


def max_drop(pairs: list[tuple[list[dict], list[dict]]], key: str) -> dict:
    """The gate's family-wise maximum-drop test on every run's task-level change (a function's
    sign flips in all runs at once)."""
    import numpy as np

    from gating.stats import max_drop_test

    diff = np.concatenate([np.asarray([b[key] for b in fin], float)
                           - np.asarray([a[key] for a in fst], float) for fst, fin in pairs])
    tasks = [t for _, fin in pairs for t in fin]
    drop = max_drop_test(diff, np.asarray([t["cluster"] for t in tasks]),
                         [t["family"] for t in tasks], prompts=[t["task_id"] for t in tasks],
                         candidate=np.asarray([t[key] for t in tasks], float))
    return {"family": drop.family, "drop": drop.drop, "p": drop.p_value,
            "surely_worse": drop.p_value <= 0.05}


def best_temperature(first_by_t: dict[str, list[dict]]) -> tuple[str, float]:
    """The first champion's best sealed decoding: (``greedy`` or a temperature, its
    family-averaged pass)."""
    rates = {"greedy": family_average(first_by_t[str(SERVING_T)], "passed")}
    rates.update({t: family_average(tasks) for t, tasks in first_by_t.items()})
    best = max(rates, key=lambda t: (rates[t], t))
    return best, rates[best]


# -- pooling --------------------------------------------------------------------------------------
def load_scores(cache: Path, keys: dict[str, str]) -> dict[str, list[dict]]:
    return {name: json.loads((cache / f"{k}.json").read_text())["tasks"]
            for name, k in keys.items()}


def pool(units: dict[tuple[int, str], dict], scores: dict[tuple[int, str], dict]) -> dict:
    """The protocol's figures from complete units keyed (seed, arm): ``units`` their
    ``bench.loop_real`` files, ``scores`` {"first": {piece: tasks}, "final": {...}}."""
    seeds = sorted({s for s, _ in units})
    both = [s for s in seeds if (s, "rl") in units and (s, "placebo") in units]

    def primary(s: int, arm: str) -> float:
        sc = scores[(s, arm)]
        return family_average(sc["final"]["sealed"]) - family_average(sc["first"]["sealed"])

    pairs = [{"seed": s, "rl_primary": round(primary(s, "rl"), 4),
              "placebo_primary": round(primary(s, "placebo"), 4),
              "rl_promotions": units[(s, "rl")]["promotions"],
              "placebo_promotions": units[(s, "placebo")]["placebo_promotions"]} for s in both]
    out: dict = {"pairs": pairs, "primary_p": None, "pooled_rl_gain": None}
    if not pairs:
        return out
    out["primary_p"] = round(sign_flip_p([p["rl_primary"] - p["placebo_primary"]
                                          for p in pairs]), 4)
    out["pooled_rl_gain"] = round(statistics.fmean(p["rl_primary"] for p in pairs), 4)
    out["pooled_placebo_gain"] = round(statistics.fmean(p["placebo_primary"] for p in pairs), 4)
    rl = [scores[(s, "rl")] for s in both]
    secondary: dict = {}
    for arm in ("rl", "placebo"):
        runs = [scores[(s, arm)] for s in both]
        secondary[arm] = {}
        for name in ("sealed", "transfer", "guard", "humaneval"):
            if not all(name in r["first"] and name in r["final"] for r in runs):
                continue
            run_pairs = [(r["first"][name], r["final"][name]) for r in runs]
            entry = {}
            for key in ("sampled", "passed"):
                per_seed = [family_average(b, key) - family_average(a, key) for a, b in run_pairs]
                d, lo, hi = clustered_ci(family_changes(run_pairs, key))
                entry["greedy" if key == "passed" else key] = {
                    "per_seed": [round(x, 4) for x in per_seed], "delta": round(d, 4),
                    "ci": [round(lo, 4), round(hi, 4)],
                    **({"family_max_drop": max_drop(run_pairs, key)}
                       if name in ("transfer", "guard") else {})}
            secondary[arm][name] = entry
    out["secondary"] = secondary
    r = secondary["rl"]
    for name in ("transfer", "guard"):
        if name in r:
            out[f"{name}_ci_low"] = {k: r[name][k]["ci"][0] for k in ("sampled", "greedy")}
    if "humaneval" in r:
        out["humaneval_ci_low"] = r["humaneval"]["sampled"]["ci"][0]
    first_by_t = {f"{t:g}": rl[0]["first"][f"sealed_t{t:g}"] for t in GRID
                  if f"sealed_t{t:g}" in rl[0]["first"]}
    first_by_t[f"{SERVING_T:g}"] = rl[0]["first"]["sealed"]
    best, rate = best_temperature(first_by_t)
    bar = first_by_t[f"{SERVING_T:g}" if best == "greedy" else best]
    per_run = []
    for run in rl:
        a = family_means(bar, "passed" if best == "greedy" else "sampled")
        b = family_means(run["final"]["sealed"], "sampled")
        per_run.append({f: b[f] - a[f] for f in a})
    d, lo, hi = clustered_ci({f: statistics.fmean(x[f] for x in per_run) for f in per_run[0]})
    out["vs_best_temperature"] = {"first_best": best, "first_best_pass": round(rate, 4),
                                  "delta": round(d, 4), "ci_low": round(lo, 4),
                                  "ci_high": round(hi, 4)}
    out["live"] = live(units, both)
    out["targets"] = targets(out)
    return out


LIVE = {"live_pass_rate": 1, "edit_persistence": 1, "dissatisfied_rate": -1,
        "completion_tokens": 0, "mean_latency_ms": 0}
"""Per-cycle live metrics of the served traffic, and which way is better (0: reported only)."""


def live(units: dict[tuple[int, str], dict], seeds: list[int]) -> dict:
    """Per metric: each arm's value per cycle and seed, and the last cycle's rl - placebo per
    pair with its one-sided sign-flip p (in the better direction)."""
    out = {}
    for metric, sign in LIVE.items():
        per_arm = {arm: {str(s): [r[metric] for r in sorted(units[(s, arm)]["per_cycle"],
                                                             key=lambda r: r["cycle"])]
                         for s in seeds} for arm in ("rl", "placebo")}
        last = [per_arm["rl"][str(s)][-1] - per_arm["placebo"][str(s)][-1] for s in seeds]
        entry = {"per_cycle": per_arm, "last_cycle_rl_minus_placebo": [round(x, 4) for x in last]}
        if sign:
            entry["p"] = round(sign_flip_p([sign * x for x in last]), 4)
        out[metric] = entry
    return out


def targets(out: dict) -> dict:
    """Each target of :data:`TARGETS`: its figure and whether it is met (``reached``)."""
    pairs = out["pairs"]
    above = sum(p["rl_primary"] > p["placebo_primary"] for p in pairs)
    g = {"rl_above_placebo": {"pairs": above, "of": len(pairs), "p": out["primary_p"],
                              "reached": above >= TARGETS["pairs_above"]},
         "pooled_rl_gain": {"value": out["pooled_rl_gain"],
                            "reached": out["pooled_rl_gain"] >= TARGETS["pooled_rl_gain"]},
         "promotions": {"rl": [p["rl_promotions"] for p in pairs],
                        "placebo_total": sum(p["placebo_promotions"] for p in pairs),
                        "reached": all(p["rl_promotions"] >= 1 for p in pairs)
                        and sum(p["placebo_promotions"] for p in pairs)
                        <= TARGETS["placebo_promotions_max"]}}
    r = out["secondary"]["rl"]
    for name in ("transfer", "guard"):
        if name in r:
            g[name] = {"ci_low": out[f"{name}_ci_low"],
                       "surely_worse": [r[name][k]["family_max_drop"]["family"]
                                        for k in ("sampled", "greedy")
                                        if r[name][k]["family_max_drop"]["surely_worse"]],
                       "reached": min(out[f"{name}_ci_low"].values()) >= TARGETS["carry_floor"]
                       and not any(r[name][k]["family_max_drop"]["surely_worse"]
                                   for k in ("sampled", "greedy"))}
    if "humaneval_ci_low" in out:
        g["humaneval"] = {"ci_low": out["humaneval_ci_low"],
                          "reached": out["humaneval_ci_low"] >= TARGETS["humaneval_floor"]}
    v = out["vs_best_temperature"]
    g["vs_best_temperature"] = {**v, "reached": v["delta"] >= TARGETS["vs_best_temperature"]
                                and v["ci_low"] > 0}
    g["live"] = {m: {"p": e["p"], "reached": e["p"] <= TARGETS["live_p"]}
                 for m, e in out["live"].items() if "p" in e}
    return g


# -- running --------------------------------------------------------------------------------------
def unit_scores_file(units: Path, seed: int, arm: str) -> Path:
    return units / f"seed{seed}_{arm}.scores.json"


def score_unit(units: Path, seed: int, arm: str, cache: Path, pools: dict[str, Path],
               humaneval: int, *, scorer=score_piece) -> None:
    """Score a unit's first and final champions (the pieces of each) and record their keys."""
    from bench.loop_real_seeds import unit_file

    out = unit_scores_file(units, seed, arm)
    if out.is_file():
        return
    unit = json.loads(unit_file(units, seed, arm).read_text())
    sc = unit["scores"]
    keys = {}
    for which, key in (("first", "first"), ("final", f"{arm}-final")):
        ckpt = Path(sc[key]["path"])
        keys[which] = score_checkpoint(ckpt, pieces(pools, humaneval, first=which == "first"),
                                       cache, label=f"seed {seed} {arm} {which} "
                                       f"(v{sc[key]['version']})", scorer=scorer)
    _write_atomic(out, {"seed": seed, "arm": arm, "date": provenance.now(),
                        "commit": provenance.commit(), "load1": provenance.load1(),
                        "versions": {"first": sc["first"]["version"],
                                     "final": sc[f"{arm}-final"]["version"]},
                        "checkpoints": {"first": sc["first"]["path"],
                                        "final": sc[f"{arm}-final"]["path"]},
                        "keys": keys})


def lost_champions(units: Path, seed: int, arm: str) -> list[str]:
    """The champions of a complete, unscored unit whose weights are no longer on disk: its run
    folder went with the machine it ran on (only ``bench/results`` outlives one), so the unit
    cannot be scored and must run again."""
    from bench.loop_real_seeds import complete, unit_file

    out = unit_file(units, seed, arm)
    if not complete(out) or unit_scores_file(units, seed, arm).is_file():
        return []
    sc = json.loads(out.read_text())["scores"]
    return [which for which, key in (("first", "first"), ("final", f"{arm}-final"))
            if not any(Path(sc[key]["path"]).glob("*.safetensors"))]


def lineage_file(units: Path, seed: int, arm: str) -> Path:
    return units / f"seed{seed}_{arm}.lineage.json"


def sha256_of(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def weight_digests(ckpt: Path) -> dict[str, str]:
    """File name -> sha256 of each weights file of a checkpoint folder (its metadata, which names
    folders of the machine it was written on, is left out)."""
    return {f.name: sha256_of(f) for f in sorted(Path(ckpt).glob("*.safetensors"))}


def keep_lineage(units: Path, seed: int, arm: str) -> Path | None:
    """Keep beside a complete unit's record (under bench/results, which outlives the machine)
    what trains its champions again (:func:`rebuild_champions`): the first champion's weight
    digests and, for each champion promoted on the way to the final one, its version, parent
    version, trainer config, the rows it was trained on (``trainer.recipe.TRAIN_ROWS``, copied
    as ``seed{S}_{arm}.v{N}.parquet``) and its weight digests. None where a champion lacks its
    rows (trained before checkpoints kept them): that unit's weights cannot be rebuilt."""
    import shutil

    from bench.loop_real_seeds import unit_file
    from policy.toy.checkpoint import load_metadata
    from trainer.recipe import TRAIN_ROWS

    out = lineage_file(units, seed, arm)
    if out.is_file():
        return out
    sc = json.loads(unit_file(units, seed, arm).read_text())["scores"]
    first, final = sc["first"], sc[f"{arm}-final"]
    if not weight_digests(Path(first["path"])):
        return None
    chain, ckpt, version = [], Path(final["path"]), final["version"]
    while version != first["version"]:
        meta = load_metadata(ckpt)
        if not (ckpt / TRAIN_ROWS).is_file():
            return None
        rows = f"{out.name.removesuffix('.lineage.json')}.v{version}.parquet"
        shutil.copyfile(ckpt / TRAIN_ROWS, units / rows)
        chain.insert(0, {"version": version, "parent_version": meta["parent_version"],
                         "trainer_config": meta["trainer_config"], "rows": rows,
                         "weights": weight_digests(ckpt)})
        ckpt, version = Path(meta["parent"]), meta["parent_version"]
    _write_atomic(out, {"seed": seed, "arm": arm, "first": {
        "version": first["version"], "weights": weight_digests(Path(first["path"]))},
        "final": {"version": final["version"], "path": final["path"]}, "chain": chain})
    return out


def rebuild_champions(units: Path, seed: int, arm: str, config: Path, workdir: Path) -> bool:
    """Put a unit's first and final champions back where its record says they are, from its
    lineage: the first champion built from the preset, each later one trained again from its
    parent on the rows it was trained on; True when every weights file has the digest it had
    (else the unit cannot be scored as it ran, and must run again)."""
    import shutil

    import pyarrow.parquet as pq

    from bench.loop_real_seeds import unit_file
    from ratchet.bootstrap import hf_first_champion
    from ratchet.config import load_config
    from trainer.config import TrainerConfig
    from trainer.recipe import run_training

    path = lineage_file(units, seed, arm)
    if not path.is_file():
        return False
    lineage = json.loads(path.read_text())
    sc = json.loads(unit_file(units, seed, arm).read_text())["scores"]
    first = Path(sc["first"]["path"])
    if weight_digests(first) != lineage["first"]["weights"]:
        built, _ = hf_first_champion(load_config(config, check_paths=False), workdir=workdir)
        shutil.rmtree(first, ignore_errors=True)
        shutil.copytree(built, first)
        if weight_digests(first) != lineage["first"]["weights"]:
            say(f"seed {seed} {arm}: the first champion built here differs from the unit's")
            return False
    parent = first
    for step in lineage["chain"]:
        final = step["version"] == lineage["final"]["version"]
        out = Path(sc[f"{arm}-final"]["path"]) if final else \
            workdir / "rebuilt" / f"seed{seed}" / arm / f"v{step['version']}"
        if weight_digests(out) != step["weights"]:
            t0 = time.perf_counter()
            say(f"seed {seed} {arm}: training v{step['version']} again from "
                f"v{step['parent_version']} on its {step['rows']}")
            shutil.rmtree(out, ignore_errors=True)
            run_training(parent, pq.read_table(units / step["rows"]),
                         TrainerConfig.model_validate(step["trainer_config"]), out,
                         current_version=step["parent_version"])
            same = weight_digests(out) == step["weights"]
            say(f"seed {seed} {arm}: v{step['version']} trained again in "
                f"{time.perf_counter() - t0:.0f} s: "
                f"{'the same weights' if same else 'other weights than the unit had'}")
            if not same:
                return False
        parent = out
    shutil.rmtree(workdir / "rebuilt" / f"seed{seed}" / arm, ignore_errors=True)  # way stations
    return True


def set_aside(units: Path, seed: int, arm: str) -> Path:
    """Move a unit's record out of the way of its rerun, kept beside the units as
    ``seed{S}_{arm}.lost{n}.json``, its lineage files renamed alike (its figures stay on record;
    only the rerun pools)."""
    from bench.loop_real_seeds import unit_file

    out, n = unit_file(units, seed, arm), 1
    while (kept := out.with_name(f"{out.stem}.lost{n}.json")).exists():
        n += 1
    for f in units.glob(f"{out.stem}.*"):  # its lineage and rows go with it
        if not f.name.startswith(f"{out.stem}.lost") and f != out:
            f.replace(units / f"{out.stem}.lost{n}.{f.name.removeprefix(out.stem + '.')}")
    out.replace(kept)
    return kept


def prune_unit(units: Path, seed: int, arm: str, workdir: Path) -> int:
    """Bytes freed in a scored unit's run folder: every weights file but its first and final
    champions' goes (the registry's copies, the replicas' and the gate's, the last candidate; the
    MLflow store with each gate verdict stays), and the kept ones become hard links into
    ``workdir/weights/`` by content, so the first champion, the same in every unit, is on disk
    once. A unit runs at about 16 GB: twelve would not fit beside each other unpruned."""
    scores = unit_scores_file(units, seed, arm)
    if not scores.is_file():
        return 0
    keep = [Path(p).resolve() for p in json.loads(scores.read_text())["checkpoints"].values()]
    store, freed = workdir / "weights", 0
    for f in sorted((workdir / f"seed{seed}" / arm).rglob("*.safetensors")):
        if f.is_symlink() or not f.is_file():
            continue
        if not any(f.resolve().is_relative_to(k) for k in keep):
            freed += f.stat().st_size
            f.unlink()
            continue
        stored = store / f"{sha256_of(f)}.safetensors"
        store.mkdir(parents=True, exist_ok=True)
        if not stored.exists():
            os.link(f, stored)
        elif not os.path.samefile(f, stored):
            freed += f.stat().st_size
            tmp = f.with_name(f".{f.name}.link")
            tmp.unlink(missing_ok=True)
            os.link(stored, tmp)
            tmp.replace(f)  # the name is never missing: a stopped prune leaves a whole file
    return freed


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(prog="python -m bench.loop_proof",
                                description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=PAIRS)
    p.add_argument("--cycles", type=int, default=CYCLES)
    p.add_argument("--arms", default="rl,placebo", help="comma list: the arms this call runs")
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "smollm2-pyfuncs.json")
    p.add_argument("--units", type=Path, default=RESULTS / "loop_proof_units")
    p.add_argument("--cache", type=Path, default=RESULTS / "loop_proof_scores")
    p.add_argument("--workdir", type=Path, default=ROOT / ".cache" / "loop_proof")
    p.add_argument("--suites", type=Path, default=RESULTS / "loop_proof_suite_results",
                   help="the gates' suite results, kept beside the units")
    p.add_argument("--out", type=Path, default=RESULTS / "loop_real.json")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads of each unit (default: the preset's torch_threads; 1 for "
                   "each of two processes side by side)")
    p.add_argument("--humaneval", type=int, default=HUMANEVAL, help="problems (0 skips)")
    for name, path in POOLS.items():
        p.add_argument(f"--{name}-file", type=Path, default=path)
    p.add_argument("--pool-only", action="store_true", help="pool the complete units; run none")
    args = p.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not arms or any(a not in ("rl", "placebo") for a in arms):
        p.error("--arms: a comma list of rl, placebo")
    from ratchet.config import load_config
    from ratchet.console import setup as route_logs
    from runtime.services import unwind_on_sigterm

    unwind_on_sigterm()  # SIGTERM stops the running unit, by PID
    route_logs(args.workdir / "loop_proof.log")  # scoring's progress lines reach the terminal
    pools = {name: getattr(args, f"{name}_file") for name in POOLS}
    preset = load_config(args.config, check_paths=False)
    requests = preset.simulator.requests_per_round
    args.threads = args.threads or preset.torch_threads
    args.units.mkdir(parents=True, exist_ok=True)
    if not args.pool_only:
        torch_threads(args.threads)
        for seed in range(args.pairs):
            for arm in arms:
                proof_unit(args, seed, arm, pools, extra=[
                    "--no-scores", "--requests", str(requests), "--humaneval", "0",
                    "--threads", str(args.threads), *extra])
    write_pooled(args, pools)


def proof_unit(args, seed: int, arm: str, pools: dict[str, Path], *, extra: list[str]) -> None:
    """One unit: its weights trained again from its lineage when they are gone (else its record
    set aside), run or resumed while not complete, its lineage kept, scored and pruned. The
    gates' suite results live in ``args.suites`` too (under bench/results, so a unit on another
    machine does not decode again the first champion that its pair's gate or a guard decoded)."""
    from bench.loop_real_seeds import (
        complete,
        gather_suite_results,
        run_unit,
        share_suite_results,
        unit_file,
    )
    from gating.gate import SUITE_CACHE

    if (lost := lost_champions(args.units, seed, arm)) and not rebuild_champions(
            args.units, seed, arm, args.config, args.workdir):
        kept = set_aside(args.units, seed, arm)
        say(f"seed {seed} {arm}: the weights of its {' and '.join(lost)} champion are gone with "
            f"the machine it ran on; its record is kept as {kept.name} and the unit runs again "
            f"from its start")
    if not complete(unit_file(args.units, seed, arm)):
        share_suite_results(args.suites, args.workdir / SUITE_CACHE)
        try:
            run_unit(seed, arm, cycles=args.cycles, config=args.config, units=args.units,
                     workdir=args.workdir, extra=extra)
        finally:
            share_suite_results(gather_suite_results(args.workdir), args.suites)
    if not unit_scores_file(args.units, seed, arm).is_file() and \
            not keep_lineage(args.units, seed, arm):
        say(f"seed {seed} {arm}: a champion without the rows it was trained on; its weights "
            f"cannot be rebuilt if they are lost before it is scored")
    score_unit(args.units, seed, arm, args.cache, pools, args.humaneval)
    if freed := prune_unit(args.units, seed, arm, args.workdir):
        say(f"seed {seed} {arm}: {freed / 1e9:.1f} GB of weights no score needs freed")


def torch_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


def write_pooled(args, pools: dict[str, Path]) -> None:
    from bench.loop_real_seeds import complete, unit_file

    units, scores, missing = {}, {}, []
    for seed in range(args.pairs):
        for arm in ("rl", "placebo"):
            f, sf = unit_file(args.units, seed, arm), unit_scores_file(args.units, seed, arm)
            if not (complete(f) and sf.is_file()):
                missing.append(f"seed{seed}_{arm}")
                continue
            units[(seed, arm)] = json.loads(f.read_text())
            keys = json.loads(sf.read_text())["keys"]
            scores[(seed, arm)] = {w: load_scores(args.cache, k) for w, k in keys.items()}
    result = {**provenance.stamp(), "protocol": {
        "pairs": args.pairs, "cycles": args.cycles, "config": str(args.config),
        "serving_temperature": SERVING_T, "sealed_samples": SEALED_SAMPLES,
        "carry_samples": CARRY_SAMPLES, "grid": list(GRID), "humaneval": args.humaneval,
        "pools": {k: str(v) for k, v in pools.items()}, "targets": TARGETS},
        "complete": not missing, "missing_units": missing,
        "units": {f"seed{s}_{a}": {
            "date": u.get("date"), "commit": u.get("commit"), "load1": u.get("load1"),
            "seconds": u.get("seconds"), "promotions": u["promotions"] if a == "rl"
            else u["placebo_promotions"],
            "checkpoints": json.loads(unit_scores_file(args.units, s, a).read_text())[
                "checkpoints"],
            "per_cycle": u["per_cycle"]} for (s, a), u in sorted(units.items())},
        **pool(units, scores)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(args.out, result)
    report(result)
    say(f"wrote {args.out}{'' if not missing else f' (missing units: {missing})'}")


def report(result: dict) -> None:
    for p in result["pairs"]:
        print(f"seed {p['seed']}: rl {p['rl_primary']:+.3f} ({p['rl_promotions']} promotions), "
              f"placebo {p['placebo_primary']:+.3f} ({p['placebo_promotions']})")
    if result.get("pooled_rl_gain") is not None:
        print(f"pooled rl gain {result['pooled_rl_gain']:+.3f}, placebo "
              f"{result['pooled_placebo_gain']:+.3f}, sign-flip p {result['primary_p']}")
    partial = "" if result["complete"] else " (so far)"
    for name, g in (result.get("targets") or {}).items():
        if "reached" in g:
            print(f"target {name}: {'met' if g['reached'] else 'not met'}{partial}")


if __name__ == "__main__":
    main()
