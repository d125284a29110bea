"""Does an update stay local? One cycle's training rows through several trainer arms, scored on the
pools: gain on the trained families, change on transfer and guard families, churn.

The champion is the preset's policy (``--config``, default configs/smollm2-pyfuncs.json:
SmolLM2-135M-Instruct upcycled to 4 experts top-2), built once and saved under ``--workdir``.
The training rows are one cycle's reward rows: ``--rows FILE.parquet`` (REWARD_SCHEMA, e.g. a
span the loop wrote), or else ``--requests N`` completions the champion samples itself on the
train-traffic pool (the preset's simulator temperature and max_tokens), each graded by the task's
asserts (``tasks.pyfuncs.grade``), reward +1 / -1 (no length term, no delayed signals: a
simplification of the simulator's reward). Every arm trains from the same champion on the same
rows: objective (``--objectives``) x retain anchor on/off (``--retain``) x LoRA on/off
(``--lora``), each for ``--seeds`` seeds (the trainer seed: batch order, retain draws, adapter
init); everything else is the preset's trainer config.

Each candidate and the champion answer the pools greedily as one chat turn (``--pools``, each
cut to its first ``--limit`` tasks; 0 = all) and every answer is graded by its asserts. Per arm
and pool: pass rate, change vs the champion with a 95% paired bootstrap over independent
functions (``bench.loop_real.paired_delta``), the discordant share (tasks whose verdict
changed), per-family change; plus the trainer's own KLs to the champion (traffic and retain
set, after the update). Writes ``--out`` (default bench/results/local_update.json).

    .venv/bin/python -m experiments.local_update [--rows FILE | --requests 64] [--seeds 3]
        [--objectives token_clip,cispo] [--retain on,off] [--lora on,off] [--limit 0]

``--tiny`` runs the same code on a tiny random-init Mixtral (no download; answers fail, so the
figures mean nothing): the dry run of the tests.
``--settings A,B`` runs named SWEEP settings on the pools instead of the grid (with ``--tune``:
on the tuning draw); ``--first-seed``
with ``--seeds`` splits the seeds over processes, whose files ``--choose`` merges.
``--tune`` is how the defaults are chosen: the settings of :data:`SWEEP` (learning rate, steps,
LoRA and its rank, the retain-KL budget, the replay share), each trained on rows sampled from the
tuning draw's traffic (``tasks.pyfuncs.tuning_draw``: the train pool without a third of each
trained family's functions) and scored on that draw's held-out sides only (``trained``,
``guard``, ``transfer``, ``outside``), which share no function with any pool that scores.
``--part K/N``
runs every N-th setting (two processes on two cores); ``--choose FILE...`` merges the parts and
applies :func:`choose`, the rule fixed before any sweep ran.

    .venv/bin/python -m experiments.local_update --tune --seeds 1 --part 0/2 --out A.json
    .venv/bin/python -m experiments.local_update --choose A.json B.json

More seeds of every setting (``--tune --first-seed 1 --seeds 2 --part K/N``) merge the same way:
the rule takes each setting's mean over its seeds. A tuning candidate's weights (~1.4 GB for the
SmolLM2 preset) are deleted once its figures are written (``--keep-weights`` keeps them); pool
candidates are kept for ``ratchet gates compare``.

``--rows-seed N`` trains on another cycle's traffic: 64 (``--requests``) other tasks of the train
pool drawn and sampled with seed N, in their own rows file and candidate folders (``rowsN-seedK``).

``--rescore FILE... --sides outside`` scores the candidates of earlier result files (tuning or
pool runs) on tuning-draw sides they were not scored on, where their weights are still kept: a
tuning file gains the sides in each entry's ``pools`` (and its choice is made again), a pool
file in each entry's ``tuning_draw``.

``--retest FILE...`` runs each pool comparison of earlier pool result files again from its stored
verdicts with today's :func:`compare` (the per-family test has changed since some were written)
and writes, per candidate, the per-family test and :func:`stays_local` before and after to
``--out`` (default bench/results/local_update_retest.json). No model runs.

``--validity FILE...`` asks whether the tuning draw sees the churn the pools punish: for every
pool candidate also scored on the tuning draw, its discordance there beside the guard pool's, and
their rank correlation (:func:`validity`; bench/results/local_update_validity.json). No model runs.

``--rescore FILE... --humaneval N`` scores the kept pool candidates and the champion on the first N
HumanEval problems (the gate's suite runner, chat, greedy): a suite nobody here wrote, for what
the update did to code outside the pools.

``--pools sealed_fresh,transfer_fresh,guard_fresh`` scores on the fresh pools
(tasks.pyfuncs_fresh), which no run before 2026-12-01 scored; each candidate then gains
``stays_local_fresh`` (``_fresh2``, ``_fresh3``: their later rounds). ``--rescore FILE...
--add-pools A,B`` scores a pool file's kept candidates on pools they lack. ``--placebo`` trains
on the rows with their rewards shuffled.
``--versus REAL PLACEBO... --pools A,B`` compares each real candidate with its placebo, paired by
function, from the stored verdicts, and each setting's seeds with its placebo's seeds
(``by_seeds``: an exact permutation test over training runs).
``--choose-local FILE`` applies :func:`choose_local` (the rule that bounds traffic KL) to a tuning
result; ``--summary FILE... --pools A,B,C`` prints a markdown table of pool result files.

Left out: matching the objective arms at equal retain-set KL.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import itertools
import json
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path
from statistics import fmean

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import (  # noqa: E402
    CONFIG,
    DATA,
    POOLS,
    TRAIN_METRICS,
    build_champion,
    choices,
    commit,
    sample_traffic,
    say,
    score,
    show_progress,
    train_apart,
)

RESULTS = ROOT / "bench" / "results" / "local_update.json"
TUNING = ROOT / "bench" / "results" / "local_update_tuning.json"
RETEST = ROOT / "bench" / "results" / "local_update_retest.json"
VALIDITY = ROOT / "bench" / "results" / "local_update_validity.json"
VERSUS = ROOT / "bench" / "results" / "local_update_placebo_versus.json"
POOL_SUFFIXES = ("", "_fresh", "_fresh2", "_fresh3")
"""The pool sets :func:`stays_local` judges: sealed, transfer and guard with one suffix."""
CHOICE_LOCAL = ROOT / "bench" / "results" / "local_update_choice_local.json"
OBJECTIVES = ("token_clip", "cispo", "sequence_gspo", "filtered_imitation", "asymmetric")


SWEEP: tuple[tuple[str, dict], ...] = (
    ("full lr 2.5e-5", {"lr": 2.5e-5}),
    ("lora r8 lr 2.5e-4", {"scope": "lora", "lr": 2.5e-4}),
    ("lora r8 lr 5e-4", {"scope": "lora", "lr": 5e-4}),
    ("full preset", {}),
    ("full lr 1e-4", {"lr": 1e-4}),
    ("lora r8 lr 1e-3", {"scope": "lora", "lr": 1e-3}),
    ("lora r32 lr 5e-4", {"scope": "lora", "lr": 5e-4, "lora_rank": 32}),
    ("full 8 steps", {"steps": 8}),
    ("full retain budget 0.01", {"retain_kl_target": 0.01}),
    ("full replay 0.5", {"replay_share": 0.5}),
    ("full retain by family", {"retain_kl_target": 0.01, "retain_draw": "by_group"}),
    ("full retain by family 8 prompts", {"retain_kl_target": 0.01, "retain_draw": "by_group",
                                         "retain_prompts": 8}),
    ("full retain by kl", {"retain_kl_target": 0.01, "retain_draw": "by_kl"}),
    ("full retain by kl 8 prompts", {"retain_kl_target": 0.01, "retain_draw": "by_kl",
                                     "retain_prompts": 8}),
    ("full neg 0.25", {"retain_kl_target": 0.01, "neg_adv_scale": 0.25}),
    ("full neg 0", {"retain_kl_target": 0.01, "neg_adv_scale": 0.0}),
)
"""The tuning sweep: each setting changes the preset's trainer, on :data:`SWEEP_BASE`, only where it
says. When the sweep of bench/results/local_update_tuning.json ran the preset was top-8 layers,
token_clip, 16 steps, lr 5e-5, retain budget 0.02 nats/token, replay 25%; the sweep chose the
retain budget 0.01, which the preset has since. The order spreads LoRA settings over both
halves of ``--part k/2``. The last four (the chosen budget with the retain draw by family, then
by measured KL, ``trainer.retain.RetainDraw``) came after that sweep and run through ``--tune
--settings``; one rule judges all. So do the last two: the chosen budget with failed rows'
negative advantages scaled by 0.25 and by 0 (``TrainerConfig.neg_adv_scale``)."""
SWEEP_BASE = {"lr": 5e-5, "retain_kl_target": 0.02, "replay_share": 0.25,
              "objective": "token_clip"}
"""The preset's trainer when the sweep first ran, under every SWEEP setting: a setting means the
same training whenever it runs, though the preset has since taken the chosen budget (0.01) and
the objective the update arms chose (filtered_imitation)."""


def setting_overrides(overrides: dict) -> dict:
    """A SWEEP setting's changes on top of :data:`SWEEP_BASE`."""
    return {**SWEEP_BASE, **overrides}


COLLATERAL_FLOOR = -0.02
""":func:`choose`'s floor on the change of each collateral side of the tuning draw."""
TUNING_SIDES = ("trained", "guard", "transfer", "outside")
"""The tuning draw's scored sides (``tasks.pyfuncs.tuning_draw``); all but ``trained`` are
collateral."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.local_update",
                                description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=CONFIG, help="ratchet preset (policy, trainer)")
    p.add_argument("--rows", type=Path, default=None, help="one cycle's reward rows (parquet)")
    p.add_argument("--requests", type=int, default=64,
                   help="without --rows: completions the champion samples on the train pool")
    p.add_argument("--rows-seed", type=int, default=0,
                   help="without --rows: 0 samples the first --requests tasks of the traffic "
                   "pool with sampling seed 0; N > 0 draws --requests tasks with seed N and "
                   "samples them with seed N (another cycle's traffic)")
    p.add_argument("--objectives", type=choices(OBJECTIVES), default=["token_clip", "cispo"])
    p.add_argument("--retain", type=choices(("on", "off")), default=["on", "off"])
    p.add_argument("--lora", type=choices(("on", "off")), default=["off", "on"])
    p.add_argument("--lora-lr", type=float, default=None,
                   help="learning rate of the LoRA arms (default: the preset's lr x 10)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=None, help="override the preset's steps")
    p.add_argument("--pools", type=choices(tuple(POOLS)), default=["sealed", "transfer", "guard"])
    p.add_argument("--limit", type=int, default=0, help="first N tasks of each pool (0 = all)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workdir", type=Path, default=ROOT / ".cache" / "local_update")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--tiny", action="store_true", help="dry run on a tiny random Mixtral")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's; 1 when two runs share 2 cores)")
    p.add_argument("--tune", action="store_true",
                   help="run the SWEEP settings on the tuning draw (not the pools)")
    p.add_argument("--part", type=_part, default=(0, 1), help="K/N: every N-th SWEEP setting")
    p.add_argument("--keep-weights", action="store_true",
                   help="with --tune, keep each candidate's weights once it is scored (by "
                   "default a tuning candidate keeps only its train metrics: ~1.4 GB each)")
    p.add_argument("--settings", type=choices(tuple(n for n, _ in SWEEP)), default=None,
                   help="comma list of SWEEP settings to run on the pools (instead of the grid) "
                   "or, with --tune, on the tuning draw (instead of --part)")
    p.add_argument("--first-seed", type=int, default=0,
                   help="trainer seeds --first-seed .. --first-seed + --seeds - 1")
    p.add_argument("--placebo", action="store_true",
                   help="the control: train on the rows with their rewards shuffled (seeded by "
                   "--rows-seed); arm names gain ' placebo'")
    p.add_argument("--summary", type=Path, nargs="+", default=None,
                   help="print a markdown table of pool result files (each candidate's change, "
                   "95%% CI, family surely worse, discordance, traffic KL, stays_local)")
    p.add_argument("--choose-local", type=Path, default=None,
                   help="apply choose_local (the rule that reads churn) to a tuning result "
                   "file; writes bench/results/local_update_choice_local.json")
    p.add_argument("--choose", type=Path, nargs="+", default=None,
                   help="merge the files of parts of one run and write --out (default for "
                   "tuning parts: bench/results/local_update_tuning.json, with the choice)")
    p.add_argument("--rescore", type=Path, nargs="+", default=None,
                   help="result files whose kept candidates to score on the tuning draw's "
                   "--sides they lack (written back in place)")
    p.add_argument("--retest", type=Path, nargs="+", default=None,
                   help="pool result files whose comparisons to run again from their stored "
                   "verdicts with today's per-family test (written to --out, default "
                   "bench/results/local_update_retest.json)")
    p.add_argument("--validity", type=Path, nargs="+", default=None,
                   help="pool result files whose candidates were also scored on the tuning "
                   "draw: does its discordance rank them as the guard pool's does (written to "
                   "--out, default bench/results/local_update_validity.json)")
    p.add_argument("--versus", type=Path, nargs="+", default=None, metavar="FILE",
                   help="pool result files, the real candidates' then one or more of their "
                   "placebos': each real candidate against its placebo on --pools (written to "
                   "--out, default bench/results/local_update_placebo_versus.json; no model "
                   "runs)")
    p.add_argument("--sides", type=choices(TUNING_SIDES), default=None,
                   help="with --rescore: the tuning-draw sides to add (default: outside, or "
                   "none with --humaneval)")
    p.add_argument("--add-pools", type=choices(tuple(POOLS)), default=[],
                   help="with --rescore: pools of --pools' names to score each kept pool "
                   "candidate on where it lacks them (each entry's pools)")
    p.add_argument("--humaneval", type=int, default=0,
                   help="with --rescore: score each kept pool candidate and the champion on the "
                   "first N HumanEval problems (chat, greedy, 160 new tokens): each entry's "
                   "humaneval")
    a = p.parse_args(argv)
    if a.rows_seed < 0:
        p.error("--rows-seed must be >= 0")
    if a.versus is not None and len(a.versus) < 2:
        p.error("--versus needs the real candidates' file and at least one placebo file")
    if a.seeds < 1 or a.requests < 1 or a.limit < 0 or (a.steps is not None and a.steps < 1):
        p.error("--seeds, --requests, --steps must be >= 1 and --limit >= 0")
    if a.humaneval < 0:
        p.error("--humaneval must be >= 0")
    if a.sides is None:
        a.sides = [] if a.humaneval or a.add_pools else ["outside"]
    if a.rows is not None and not a.rows.is_file():
        p.error(f"--rows {a.rows}: no such file")
    return a


def _part(text: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected K/N, got {text!r}") from None
    if not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"expected 0 <= K < N, got {text!r}")
    return k, n


def arms(args: argparse.Namespace) -> list[dict]:
    """Every (objective, retain, lora) of the grid, in a fixed order; the named SWEEP settings of
    ``--settings``; with ``--tune`` and no names, the SWEEP settings of ``--part``."""
    if args.settings:
        tail = " placebo" if args.placebo else ""
        return [{"name": name + tail, "overrides": dict(SWEEP)[name]} for name in args.settings]
    if args.tune:
        k, n = args.part
        return [{"name": name, "overrides": ov} for i, (name, ov) in enumerate(SWEEP)
                if i % n == k]
    return [{"name": f"{o}/retain-{r}/lora-{lo}", "objective": o, "retain": r == "on",
             "lora": lo == "on"}
            for o, r, lo in itertools.product(args.objectives, args.retain, args.lora)]


def trainer_config(base, arm: dict, *, seed: int, steps: int | None, lora_lr: float | None):
    """The preset's trainer config with the arm's objective, retain set and scope."""
    from trainer.config import TrainerConfig

    cfg = base.model_dump(mode="json")
    cfg["seed"] = seed
    if steps is not None:
        cfg["steps"] = steps
    cfg["objective"] = {"type": arm["objective"]}
    if arm["retain"] and cfg["retain"]["path"] is None:
        cfg["retain"]["path"] = str(DATA / "pyfuncs_retain.jsonl")
    if not arm["retain"]:  # measured (per step and after the update), not trained on
        cfg["retain"]["kl_coef"] = 0.0
    if arm["lora"]:
        cfg["trainable"]["scope"] = "lora"
        cfg["lr"] = lora_lr if lora_lr is not None else cfg["lr"] * 10
    return TrainerConfig.model_validate(cfg)


def sweep_config(base, overrides: dict, *, seed: int, steps: int | None = None):
    """The preset's trainer config with one SWEEP setting (``lr``, ``steps``, ``scope``,
    ``lora_rank``, ``retain_kl_target``, ``replay_share``, ``retain_draw``, ``retain_prompts``,
    ``neg_adv_scale``, ``objective``)."""
    from trainer.config import TrainerConfig

    known = {"lr", "steps", "scope", "lora_rank", "retain_kl_target", "replay_share",
             "retain_draw", "retain_prompts", "neg_adv_scale", "objective"}
    if set(overrides) - known:
        raise ValueError(f"unknown sweep settings {sorted(set(overrides) - known)}")
    cfg = base.model_dump(mode="json")
    cfg["seed"] = seed
    if steps is not None:
        cfg["steps"] = steps
    for key in ("lr", "steps", "neg_adv_scale"):
        if key in overrides:
            cfg[key] = overrides[key]
    if "objective" in overrides:
        cfg["objective"] = {"type": overrides["objective"]}
    if "scope" in overrides:
        cfg["trainable"]["scope"] = overrides["scope"]
    if "lora_rank" in overrides:
        cfg["trainable"]["lora_rank"] = overrides["lora_rank"]
    if "retain_kl_target" in overrides:
        cfg["retain"]["kl_target"] = overrides["retain_kl_target"]
    if "replay_share" in overrides:
        cfg["replay"]["share"] = overrides["replay_share"]
    if "retain_draw" in overrides:
        cfg["retain"]["draw"] = overrides["retain_draw"]
    if "retain_prompts" in overrides:
        cfg["retain"]["prompts"] = overrides["retain_prompts"]
    return TrainerConfig.model_validate(cfg)


TRANSFER_FLOOR = -0.03
"""Lowest lower bound of the transfer pool's change an update that stays local may have."""
GUARD_CHURN_BAR = 0.0635
"""Highest discordant share on the guard pool an update that stays local may have: half of the
0.127 of the real loop's 2026-11-26 v2."""


def stays_local(pools: dict[str, dict], *, suffix: str = "", losses_only: bool = False
                ) -> dict[str, bool]:
    """The criteria of an update that stays local, on one candidate's pool comparisons
    (:func:`compare`): a gain on the sealed pool (its CI above 0, no trained family surely
    worse), transfer non-inferior (lower bound >= :data:`TRANSFER_FLOOR`, no family surely
    worse), no guard family surely worse, guard discordance <= :data:`GUARD_CHURN_BAR`; and
    ``all``. ``suffix="_fresh"`` judges the fresh pools (``sealed_fresh``, ...) instead, and
    ``"_fresh2"`` / ``"_fresh3"`` their later rounds. ``losses_only`` counts as churn only the
    guard tasks the champion passes and the candidate fails (a rule proposed beside the
    criteria, not one of them)."""
    sealed, transfer, guard = (pools[f"{name}{suffix}"] for name in ("sealed", "transfer",
                                                                     "guard"))
    churn = (guard["verdicts"].count("-") / len(guard["verdicts"]) if losses_only
             else guard["discordant_share"])
    out = {"sealed": sealed["ci_low"] > 0 and not sealed["family_max_drop"]["surely_worse"],
           "transfer": (transfer["ci_low"] >= TRANSFER_FLOOR
                        and not transfer["family_max_drop"]["surely_worse"]),
           "guard": not guard["family_max_drop"]["surely_worse"],
           "churn": churn <= GUARD_CHURN_BAR}
    return {**out, "all": all(out.values())}


def retest(paths: list[Path]) -> dict:
    """Each pool comparison of the result files ``paths`` done again from its stored verdicts
    with today's :func:`compare`: per candidate and pool the per-family test before and after,
    and :func:`stays_local` before and after."""
    from tasks.pyfuncs import read_jsonl

    pools = {name: read_jsonl(POOLS[name]) for name in ("sealed", "transfer", "guard")}
    out = []
    for path in paths:
        result = json.loads(path.read_text())
        for entry in result["arms"]:
            if not all("verdicts" in entry["pools"].get(name, {}) for name in pools):
                continue  # written before verdicts were kept, or not scored on every pool
            before, after = {}, {}
            for name, tasks in pools.items():
                was = entry["pools"][name]
                if len(was["verdicts"]) != len(tasks):
                    raise ValueError(f"{path.name}: {entry['name']} seed {entry['seed']} has "
                                     f"{len(was['verdicts'])} verdicts on {name}, the pool "
                                     f"{len(tasks)}")
                before[name], after[name] = was, compare_again(tasks, was["verdicts"])
            out.append({"file": path.name, "name": entry["name"], "seed": entry["seed"],
                        "rows_seed": result.get("rows_seed", 0),
                        "family_max_drop": {
                            name: {"before": before[name]["family_max_drop"],
                                   "after": after[name]["family_max_drop"]} for name in pools},
                        "stays_local": {"before": stays_local(before),
                                        "after": stays_local(after)}})
    return {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "commit": commit(), "files": [p.name for p in paths], "candidates": out}


def choose(entries: list[dict]) -> dict:
    """The rule, fixed before the sweep ran: a setting is admissible when the change on each
    collateral side of the tuning draw (``guard`` and ``transfer``; ``outside`` too since
    2026-11-28 21:22 UTC, before any candidate was scored there) is at least
    :data:`COLLATERAL_FLOOR` (mean over seeds); the chosen one has the largest mean change on the
    ``trained`` side (ties: the lower KL to the champion on traffic). With none admissible, the
    one whose worst collateral change is highest. Every entry must be scored on the same sides.
    Returns the per-setting means, the admissible names and the choice."""
    sides = [s for s in TUNING_SIDES if s in entries[0]["pools"]]
    if any([s for s in TUNING_SIDES if s in e["pools"]] != sides for e in entries):
        raise ValueError("tuning entries scored on different sides: rescore them first "
                         "(--rescore)")
    collateral = [s for s in sides if s != "trained"]
    by: dict[str, list[dict]] = {}
    for e in entries:
        by.setdefault(e["name"], []).append(e)

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    table = {}
    for name, es in by.items():
        row = {side: mean([e["pools"][side]["delta"] for e in es]) for side in sides}
        row["kl_traffic"] = mean([e["train"].get("kl_theta_ref_k3_final", 0.0) for e in es])
        row["seeds"] = len(es)
        table[name] = row
    def worst(name: str) -> float:
        return min(table[name][s] for s in collateral)

    admissible = [n for n in table if worst(n) >= COLLATERAL_FLOOR]
    if admissible:
        chosen = _largest_trained_gain(table, admissible)
    else:
        chosen = max(table, key=worst)
    return {"settings": table, "admissible": admissible, "chosen": chosen,
            "overrides": dict(SWEEP).get(chosen), "collateral": collateral,
            "rule": f"admissible: mean change on the tuning {' and '.join(collateral)} sides "
                    f"each >= {COLLATERAL_FLOOR}; chosen: the admissible setting with the largest "
                    f"mean change on the tuning trained side (ties: lower traffic KL); none "
                    f"admissible: the highest worst-collateral change"}


def _largest_trained_gain(table: dict[str, dict], names: list[str]) -> str:
    """The setting of ``names`` with the largest mean change on the tuning ``trained`` side (ties:
    the lower traffic KL)."""
    return max(names, key=lambda n: (round(table[n]["trained"], 9), -table[n]["kl_traffic"]))


KL_SHARE = 0.5
"""The churn bound of :func:`choose_local`: a setting's KL to the champion on traffic at most this
share of :data:`KL_REFERENCE`'s on the same tuning rows, as the done-when bounds the guard churn
at half of the 2026-11-26 update's."""
KL_REFERENCE = "full preset"
"""The setting of the 2026-11-26 update whose churn the bound halves (lr 5e-5, 16 steps, top-8
layers, retain budget 0.02)."""


def choose_local(entries: list[dict]) -> dict:
    """The rule that reads churn (fixed 2026-12-01, before any fresh pool was scored): admissible
    as in :func:`choose` (each collateral side's mean change >= :data:`COLLATERAL_FLOOR`) and with
    a mean KL to the champion on the tuning traffic at most :data:`KL_SHARE` of
    :data:`KL_REFERENCE`'s; chosen: the admissible setting with the largest mean change on the
    ``trained`` side (ties: lower traffic KL). None admissible: the lowest traffic KL of those
    above the floor (or of all). The KL is the trainer's own measure, which ranked the pool
    candidates' guard churn (Spearman +0.63 over 20, bench/results/local_update_validity.json),
    where the tuning sides' mean changes did not."""
    base = choose(entries)
    table = base["settings"]
    if KL_REFERENCE not in table:
        raise ValueError(f"the tuning entries lack the reference setting {KL_REFERENCE!r}")
    bound = KL_SHARE * table[KL_REFERENCE]["kl_traffic"]
    floor_ok = base["admissible"]
    admissible = [n for n in floor_ok if table[n]["kl_traffic"] <= bound]
    if admissible:
        chosen = _largest_trained_gain(table, admissible)
    else:
        chosen = min(floor_ok or table, key=lambda n: table[n]["kl_traffic"])
    return {"settings": table, "kl_bound": bound, "admissible": admissible, "chosen": chosen,
            "overrides": dict(SWEEP).get(chosen), "previous_rule_chosen": base["chosen"],
            "rule": f"admissible: mean change on the tuning {' and '.join(base['collateral'])} "
                    f"sides each >= {COLLATERAL_FLOOR} and mean traffic KL <= {KL_SHARE} x "
                    f"{KL_REFERENCE!r}'s ({bound:.4f}); chosen: "
                    f"the admissible setting with the largest mean change on the tuning trained "
                    f"side (ties: lower traffic KL)"}


def merge(paths: list[Path], out: Path) -> dict:
    """Parts of one run (tuning parts, or seeds run side by side) into one result, a tuning run
    with :func:`choose`'s verdict; every part must be complete and share the rows, the kind and
    the champion (its pass rate on every side two parts both scored: a part written before a
    side was added by ``--rescore`` lacks it in ``champion``)."""
    parts = [json.loads(Path(p).read_text()) for p in paths]
    if not all(p.get("complete") for p in parts) or len({bool(p.get("tune"))
                                                         for p in parts}) != 1:
        raise SystemExit("every part must be complete, and all tuning runs or none")
    keys = ("rows", "rows_reward_mean", "config")
    if any(p[k] != parts[0][k] for p in parts for k in keys):
        raise SystemExit(f"parts differ in {keys}: not one sweep")
    first = parts[0]["champion"]
    for p in parts[1:]:
        shared = first.keys() & p["champion"].keys()
        if not shared or any(p["champion"][k] != first[k] for k in shared):
            raise SystemExit("parts differ in the champion's pass rates: not one sweep")
    result = {**parts[0], "parts": [str(p) for p in paths],
              "arms": [a for p in parts for a in p["arms"]],
              "seconds": sum(p.get("seconds", 0.0) for p in parts),
              "load": [p["load"] for p in parts], "commit": [p["commit"] for p in parts]}
    if result.get("tune"):
        result["choice"] = choose(result["arms"])
    write(result, out)
    return result


# -- the champion and the rows ---------------------------------------------------------------------
def rows_cache(workdir: Path, *, tune: bool, requests: int, seed: int) -> Path:
    """Where the sampled rows of a run are kept; seed 0 keeps the name of the first runs."""
    tail = "" if seed == 0 else f"_seed{seed}"
    return workdir / f"rows_{'tune' if tune else 'train'}_{requests}{tail}.parquet"


def cycle_rows(champion: Path, workdir: Path, sim, *, draw: dict | None, requests: int,
               seed: int):
    """One cycle's reward rows, kept in :func:`rows_cache`: ``requests`` completions the champion
    samples (the simulator's temperature and max_tokens) on the tuning draw's traffic when
    ``draw`` is given, else on the train pool; read back when already sampled."""
    import pyarrow.parquet as pq

    from tasks.pyfuncs import read_jsonl

    cached = rows_cache(workdir, tune=draw is not None, requests=requests, seed=seed)
    if cached.is_file():
        return pq.read_table(cached)
    source = "the tuning draw's traffic" if draw is not None else "the train pool"
    say(f"sampling {requests} training rows from the champion on {source}")
    traffic = draw["traffic"] if draw is not None else read_jsonl(DATA / "pyfuncs_train.jsonl")
    rows = sample_traffic(champion, traffic, n=requests, temperature=sim.temperature,
                          max_new_tokens=sim.max_tokens, seed=seed)
    pq.write_table(rows, cached)
    return rows


def judged_suffixes(pools: dict) -> list[str]:
    """The suffixes of :data:`POOL_SUFFIXES` whose sealed, transfer and guard pools are all
    keys of ``pools``: the pool sets :func:`stays_local` can judge there."""
    return [x for x in POOL_SUFFIXES
            if all(f"{n}{x}" in pools for n in ("sealed", "transfer", "guard"))]


def judge_every_set(entry: dict) -> None:
    """``entry`` (one candidate of a pool result file) gains ``stays_local{suffix}`` for each
    pool set of :data:`POOL_SUFFIXES` it was scored on whole."""
    for suffix in judged_suffixes(entry["pools"]):
        entry[f"stays_local{suffix}"] = stays_local(entry["pools"], suffix=suffix)


def pool_suffix(pools: tuple[str, ...]) -> str:
    """The suffix of :data:`POOL_SUFFIXES` that every name of ``pools`` ends with ("" if none
    other does)."""
    return next((x for x in sorted(POOL_SUFFIXES, key=len, reverse=True)
                 if x and all(p.endswith(x) for p in pools)), "")


def summary(paths: list[Path], pools: tuple[str, ...]) -> str:
    """A markdown table of the candidates of pool result files ``paths``: per pool of ``pools``
    the change [95% CI] and the family surely worse (if any), then the guard discordance, the
    traffic KL and :func:`stays_local` (fresh pools when they are the ones listed)."""
    suffix = pool_suffix(pools)
    head = ["setting", "seed", *pools, f"disc. guard{suffix}", "KL traffic", "every criterion"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for path in paths:
        for e in json.loads(Path(path).read_text())["arms"]:
            cells = [f"`{e['name']}`", str(e["seed"])]
            for name in pools:
                c = e["pools"][name]
                drop = c["family_max_drop"]
                worse = (f"; `{drop['family']}` {c['per_family_change'].get(drop['family'], 0):+d}"
                         f" (p = {drop['p']:.3f})" if drop["surely_worse"] else "")
                cells.append(f"{c['delta']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]{worse}")
            crit = stays_local(e["pools"], suffix=suffix)
            failed = [k for k, v in crit.items() if k != "all" and not v]
            cells += [f"{e['pools']['guard' + suffix]['discordant_share']:.3f}",
                      f"{e['train'].get('kl_theta_ref_k3_final', float('nan')):.3f}",
                      "yes" if crit["all"] else "no: " + ", ".join(failed)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def versus(real: dict, placebo: dict, pools: list[str]) -> list[dict]:
    """Each candidate of the pool result ``real`` against the placebo of its setting and seed in
    ``placebo`` (the arm named as it is plus " placebo"), on every pool of ``pools`` both were
    scored on: the pass rates and the paired change real - placebo over functions with its 95%
    bootstrap CI, from their stored verdicts. No model runs."""
    placebos = {(a["name"], a["seed"]): a for a in placebo["arms"]}
    out = []
    for arm in real["arms"]:
        twin = placebos.get((f"{arm['name']} placebo", arm["seed"]))
        for pool in pools if twin else []:
            if pool not in arm["pools"] or pool not in twin["pools"]:
                continue
            out.append({"name": arm["name"], "seed": arm["seed"], "pool": pool,
                        **versus_verdicts(pool, arm["pools"][pool]["verdicts"],
                                          twin["pools"][pool]["verdicts"])})
    return out


@functools.cache
def _pool_clusters(pool: str) -> tuple[str, ...]:
    """Each task's function of the pool ``pool``, read once per process."""
    from bench.loop_real import clusters
    from tasks.pyfuncs import read_jsonl

    return tuple(clusters(read_jsonl(POOLS[pool])))


def versus_verdicts(pool: str, mine: str, theirs: str) -> dict:
    """Two candidates' stored verdicts on ``pool`` (their ``verdicts`` strings against the
    champion) set against each other: pass rates and the paired change mine - theirs over
    functions with its 95% bootstrap CI."""
    from bench.loop_real import by_cluster, paired_delta

    keys = list(_pool_clusters(pool))
    a, b = ([v in "=+" for v in x] for x in (mine, theirs))
    delta, lo, hi = paired_delta(by_cluster(keys, b), by_cluster(keys, a))
    return {"pass_real": sum(a) / len(a), "pass_placebo": sum(b) / len(b),
            "delta": delta, "ci_low": lo, "ci_high": hi}


def versus_by_seeds(real: dict, placebo: dict, pools: list[str]) -> list[dict]:
    """Per setting of ``real`` with placebo seeds in ``placebo`` and per pool of ``pools``: each
    seed's change over the champion, real and placebo, and the exact one-sided permutation p of
    the difference of their means (the share of the ways to split the pooled seeds into groups
    of those sizes whose difference is at least the observed one). The training run is the unit
    here, so a move's own flips count as its noise, not as evidence."""
    out = []
    for name in dict.fromkeys(a["name"] for a in real["arms"]):
        for pool in pools:
            mine = [a["pools"][pool]["delta"] for a in real["arms"]
                    if a["name"] == name and pool in a["pools"]]
            theirs = [a["pools"][pool]["delta"] for a in placebo["arms"]
                      if a["name"] == f"{name} placebo" and pool in a["pools"]]
            if mine and theirs:
                out.append({"name": name, "pool": pool, "real": mine, "placebo": theirs,
                            "difference": fmean(mine) - fmean(theirs),
                            "p": permutation_p(mine, theirs)})
    return out


def permutation_p(mine: list[float], theirs: list[float]) -> float:
    """The exact one-sided permutation p that ``mine`` has the larger mean: the share of the
    splits of the pooled values into groups of ``len(mine)`` and ``len(theirs)`` whose mean
    difference is at least the observed one (3 against 3: at least 1/20). With the total fixed,
    that difference grows with the first group's sum, so the sums are compared."""
    pooled = mine + theirs
    splits = [sum(c) for c in itertools.combinations(pooled, len(mine))]
    return sum(x >= sum(mine) - 1e-12 for x in splits) / len(splits)


def shuffled_rewards(rows, *, seed: int):
    """The rows with their ``reward`` column permuted (seeded): the placebo, whose update has the
    same size and the same tokens but no information in its rewards."""
    import pyarrow as pa

    rewards = rows.column("reward").to_pylist()
    random.Random(f"placebo/{seed}").shuffle(rewards)
    i = rows.schema.get_field_index("reward")
    return rows.set_column(i, "reward", pa.array(rewards, type=rows.schema.field(i).type))


# -- scoring ---------------------------------------------------------------------------------------
def _stays_local_now(pools: dict[str, dict], tasks: dict[str, list[dict]]) -> bool | None:
    """:func:`stays_local` of one candidate from its stored verdicts with today's
    :func:`compare` (as :func:`retest`); None where a pool or its verdicts are missing."""
    if not all(len(pools.get(name, {}).get("verdicts", "")) == len(ts)
               for name, ts in tasks.items()):
        return None
    return stays_local({name: compare_again(ts, pools[name]["verdicts"])
                        for name, ts in tasks.items()})["all"]


def validity(paths: list[Path]) -> dict:
    """Does the tuning draw see the churn the pools punish? Each distinct pool candidate of the
    result files ``paths`` that was also scored on the tuning draw (an entry's ``tuning_draw``,
    :func:`rescore`): its discordant share on each tuning side beside its guard-pool discordance
    and :func:`stays_local`, and over the candidates the Spearman rank correlation of each tuning
    side's discordance (and of the trainer's traffic KL) with the guard pool's. A candidate
    listed in two files (the same final traffic KL and guard figures) counts once."""
    from scipy.stats import spearmanr

    from tasks.pyfuncs import read_jsonl

    tasks = {name: read_jsonl(POOLS[name]) for name in ("sealed", "transfer", "guard")}
    seen, rows = set(), []
    for path in paths:
        for entry in json.loads(path.read_text())["arms"]:
            pools, tuning = entry["pools"], entry.get("tuning_draw", {})
            if not tuning or "guard" not in pools:
                continue
            key = (entry["train"].get("kl_theta_ref_k3_final"),  # one training run's own
                   pools["guard"]["discordant_share"], pools["guard"]["delta"])
            if key in seen:
                continue
            seen.add(key)
            rows.append({"file": path.name, "name": entry["name"], "seed": entry["seed"],
                         "guard_discordance": pools["guard"]["discordant_share"],
                         "kl_traffic": entry["train"].get("kl_theta_ref_k3_final"),
                         "stays_local": _stays_local_now(pools, tasks),
                         "tuning_discordance": {side: v["discordant_share"]
                                                for side, v in sorted(tuning.items())}})
    guard = [r["guard_discordance"] for r in rows]
    predictors = {f"tuning {side}": [r["tuning_discordance"].get(side) for r in rows]
                  for side in sorted({s for r in rows for s in r["tuning_discordance"]})}
    predictors["kl_traffic"] = [r["kl_traffic"] for r in rows]
    corr = {}
    for name, xs in predictors.items():
        pairs = [(x, y) for x, y in zip(xs, guard) if x is not None]
        if len(pairs) >= 3:
            rho, p = spearmanr([x for x, _ in pairs], [y for _, y in pairs])
            corr[name] = {"candidates": len(pairs), "spearman": float(rho), "p": float(p)}
    return {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "commit": commit(), "files": [p.name for p in paths], "candidates": rows,
            "spearman_with_guard_discordance": corr}


def compare(tasks: list[dict], before: list[bool], after: list[bool]) -> dict:
    """Pass rates, the paired change by function, discordant share, per-family change, the
    gate's per-family maximum-drop test (``gating.stats.max_drop_test``: is some family surely
    worse, family-wise), and every task's verdicts (``verdicts``: one character a task, ``=``
    both pass, ``.`` both fail, ``+`` only the candidate passes, ``-`` only the champion), so a
    later test can be run on the same answers."""
    import numpy as np

    from bench.loop_real import by_cluster, clusters, paired_delta, prompt_ids
    from gating.stats import max_drop_test

    keys = clusters(tasks)
    delta, lo, hi = paired_delta(by_cluster(keys, before), by_cluster(keys, after))
    fam: Counter = Counter()
    for t, b, a in zip(tasks, before, after, strict=True):
        fam[t.get("family") or "?"] += int(a) - int(b)
    n = len(tasks)
    diff = np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)
    drop = max_drop_test(diff, np.asarray(keys), [t.get("family") or "?" for t in tasks],
                         prompts=prompt_ids(tasks),
                         candidate=np.asarray(after, dtype=np.float64))
    return {"tasks": n, "functions": len(set(keys)), "pass_champion": sum(before) / n,
            "pass_candidate": sum(after) / n, "delta": delta, "ci_low": lo, "ci_high": hi,
            "discordant_share": sum(a != b for a, b in zip(before, after)) / n,
            "per_family_change": dict(sorted(fam.items())),
            "family_max_drop": {"family": drop.family, "drop": drop.drop, "z": drop.z,
                                "p": drop.p_value, "surely_worse": drop.p_value <= 0.05,
                                "unit": drop.unit},
            "verdicts": "".join("=" if b and a else "." if not (a or b) else "+" if a else "-"
                                for b, a in zip(before, after))}


def compare_again(tasks: list[dict], verdicts: str) -> dict:
    """:func:`compare` run again on the verdicts one stored (its ``verdicts`` string)."""
    return compare(tasks, [v in "=-" for v in verdicts], [v in "=+" for v in verdicts])


@contextlib.contextmanager
def _exclusive(workdir: Path):
    """One process at a time under ``workdir`` (runs that share it: the parts of a sweep): a LoRA
    update of the real preset holds ~14 GB here, two at once do not fit in 24 GB."""
    import fcntl

    with open(workdir / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def champion_scores(champion: Path, pools: dict[str, list[dict]], args, workdir: Path
                    ) -> dict[str, list[bool]]:
    """The champion's verdicts on ``pools``, cached under ``workdir`` by task ids and decoding
    length (greedy, so the same for every run of this champion)."""
    import hashlib

    key = hashlib.sha1(json.dumps([[t["task_id"] for t in v] for v in pools.values()]
                                  + [list(pools), args.max_new_tokens]).encode()).hexdigest()[:12]
    return _cached(workdir / f"champion_scores_{key}.json",
                   f"{sum(map(len, pools.values()))} pool tasks",
                   lambda: score(champion, pools, args))


def _cached(cache: Path, what: str, compute):
    """The champion's verdicts in ``cache``, computed once (``what``: said while scoring) under
    the workdir's lock, so that parts of a sweep started together score the champion once. A
    cache already written is read without the lock (which a training run may hold for minutes);
    it is written whole, by a rename."""
    if cache.is_file():
        return json.loads(cache.read_text())
    with _exclusive(cache.parent):
        if cache.is_file():
            return json.loads(cache.read_text())
        say(f"scoring the champion on {what}")
        verdicts = compute()
        part = cache.with_suffix(".part")
        part.write_text(json.dumps(verdicts) + "\n")
        os.replace(part, cache)
    return verdicts


def humaneval_tasks(n: int) -> list[dict]:
    """The first ``n`` HumanEval problems as :func:`compare` counts them: one family, each
    problem its own cluster."""
    return [{"prompt": f"HumanEval/{i}", "family": "humaneval"} for i in range(n)]


def champion_humaneval(champion: Path, n: int, workdir: Path) -> list[bool]:
    """The champion's verdicts on the first ``n`` HumanEval problems, cached under ``workdir``
    (greedy, so the same for every run of this champion)."""
    return _cached(workdir / f"champion_humaneval_{n}.json", f"{n} HumanEval problems",
                   lambda: score_humaneval(champion, n))


def score_humaneval(checkpoint: Path, n: int) -> list[bool]:
    from bench.loop_real import score_humaneval as run

    return run(checkpoint, n)


def run(args: argparse.Namespace) -> dict:
    import pyarrow.parquet as pq

    from ratchet.config import load_config
    from tasks.pyfuncs import read_jsonl, tuning_draw

    t0 = time.perf_counter()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    workdir = args.workdir / ("tiny" if args.tiny else "real")
    workdir.mkdir(parents=True, exist_ok=True)
    preset = load_config(args.config, check_paths=not args.tiny)
    champion = build_champion(args, workdir)
    sim = preset.simulator
    draw = tuning_draw() if args.tune else None
    rows = pq.read_table(args.rows) if args.rows is not None else cycle_rows(
        champion, workdir, sim, draw=draw, requests=args.requests, seed=args.rows_seed)
    if args.placebo:
        rows = shuffled_rewards(rows, seed=args.rows_seed)
    if args.tune:
        pools = {side: draw[side] for side in TUNING_SIDES}
    else:
        pools = {name: read_jsonl(POOLS[name]) for name in args.pools}
    if args.limit:
        pools = {k: v[:args.limit] for k, v in pools.items()}
    base_scores = champion_scores(champion, pools, args, workdir)
    result: dict = {
        "date": datetime.date.today().isoformat(), "commit": commit(),
        "machine": f"{os.cpu_count()} CPU cores", "load": os.getloadavg()[0],
        "config": str(args.config), "tiny": args.tiny, "tune": args.tune,
        "rows": rows.num_rows, "rows_seed": None if args.rows is not None else args.rows_seed,
        "placebo": args.placebo,
        "rows_reward_mean": sum(rows.column("reward").to_pylist())
        / max(rows.num_rows, 1),
        "champion": {k: sum(v) / len(v) for k, v in base_scores.items()}, "arms": [],
        "complete": False,
    }
    done: set[tuple[str, int]] = set()
    if args.out.is_file():  # a run of the same champion, rows and pools that stopped: resumed
        before = json.loads(args.out.read_text())
        if not before.get("complete") and bool(before.get("placebo")) == args.placebo and all(
                before.get(k) == result[k] for k in ("champion", "rows", "rows_reward_mean",
                                                     "rows_seed", "tune", "tiny")):
            result["arms"] = before["arms"]
            done = {(a["name"], a["seed"]) for a in before["arms"]}
    for arm in arms(args):
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            if "overrides" in arm:
                cfg = sweep_config(preset.trainer, setting_overrides(arm["overrides"]),
                                   seed=seed, steps=args.steps)
            else:
                cfg = trainer_config(preset.trainer, arm, seed=seed, steps=args.steps,
                                     lora_lr=args.lora_lr)
            if args.tiny:  # the tiny model has 2 layers
                cfg = cfg.model_copy(update={"trainable": cfg.trainable.model_copy(
                    update={"top_layers": 1})})
            if (arm["name"], seed) in done:
                say(f"arm {arm['name']} seed {seed}: in {args.out} already")
                continue
            out = candidate_dir(workdir, arm["name"], seed, tune=args.tune,
                                rows_seed=result["rows_seed"])
            metrics_file = out / TRAIN_METRICS
            if metrics_file.is_file() and any(out.glob("*.safetensors")):
                # trained before (a run that stopped): scored, not retrained
                say(f"arm {arm['name']} seed {seed}: trained already, scoring {out}")
                metrics = json.loads(metrics_file.read_text())
            else:
                with _exclusive(workdir):
                    say(f"arm {arm['name']} seed {seed}: training")
                    metrics = train_apart(champion, rows, cfg, out, threads=args.threads)
            scores = score(out, pools, args)
            result["arms"].append({
                **arm, "seed": seed, "lr": cfg.lr, "steps": cfg.steps,
                "scope": cfg.trainable.scope,
                "train": {k: metrics[k] for k in ("steps_done", "kl_theta_ref_k3_final",
                                                  "retain_kl_final", "retain_kl_k3_final",
                                                  "train_seconds") if k in metrics},
                "pools": {k: compare(pools[k], base_scores[k], scores[k]) for k in pools}})
            judge_every_set(result["arms"][-1])
            write(result, args.out)
            if args.tune and not args.keep_weights:
                drop_weights(out)
    result["complete"] = True
    result["seconds"] = time.perf_counter() - t0
    write(result, args.out)
    return result


def candidate_dir(workdir: Path, name: str, seed: int, *, tune: bool,
                  rows_seed: int | None = 0) -> Path:
    """Where a run saves the candidate of setting or arm ``name`` and trainer ``seed`` trained on
    the rows of ``rows_seed`` (0, or None for rows given as a file, keeps the first runs' place)."""
    slug = name.replace("/", "_").replace(" ", "-")
    leaf = f"seed{seed}" if not rows_seed else f"rows{rows_seed}-seed{seed}"
    return workdir / ("tuning" if tune else "candidates") / slug / leaf


def rescore(args: argparse.Namespace) -> dict[str, list[str]]:
    """Each candidate of the result files ``args.rescore`` scored on the tuning draw's
    ``args.sides`` it lacks, and a pool candidate on ``args.humaneval`` HumanEval problems when
    its entry has no ``humaneval``, where its weights are still kept; every file is written back
    after each candidate (a tuning file's entries gain the sides in ``pools`` and its choice is
    made again once every entry has them; a pool file's in ``tuning_draw``), and a pool file's
    candidate on the pools ``args.add_pools`` it lacks (in ``pools``, the champion's pass rate
    in ``champion``, :func:`judge_every_set` again). Returns, per file, the entries left without
    them (weights gone)."""
    from tasks.pyfuncs import read_jsonl, tuning_draw

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    workdir = args.workdir / ("tiny" if args.tiny else "real")
    draw = tuning_draw()
    sides = {side: draw[side][:args.limit or None] for side in args.sides}
    base = champion_scores(workdir / "champion", sides, args, workdir) if sides else {}
    base_humaneval = (champion_humaneval(workdir / "champion", args.humaneval, workdir)
                      if args.humaneval else None)
    added = {name: read_jsonl(POOLS[name])[:args.limit or None] for name in args.add_pools}
    base_added = champion_scores(workdir / "champion", added, args, workdir) if added else {}
    left: dict[str, list[str]] = {}
    for path in args.rescore:
        result = json.loads(path.read_text())
        tune = bool(result.get("tune"))
        for entry in result["arms"]:
            missing = [side for side in sides
                       if side not in (entry["pools"] if tune else entry.get("tuning_draw", {}))]
            humaneval = base_humaneval is not None and not tune and "humaneval" not in entry
            pools = [] if tune else [name for name in added if name not in entry["pools"]]
            if not missing and not humaneval and not pools:
                continue
            out = candidate_dir(workdir, entry["name"], entry["seed"], tune=tune,
                                rows_seed=result.get("rows_seed"))
            if not any(out.glob("*.safetensors")):
                left.setdefault(str(path), []).append(f"{entry['name']} seed {entry['seed']}")
                continue
            say(f"{path.name}: {entry['name']} seed {entry['seed']} on "
                f"{', '.join(missing + pools + (['HumanEval'] if humaneval else []))}")
            if pools:
                scores = score(out, {name: added[name] for name in pools}, args)
                entry["pools"].update({name: compare(added[name], base_added[name], scores[name])
                                       for name in pools})
                result["champion"].update({name: sum(base_added[name]) / len(base_added[name])
                                           for name in pools})
                judge_every_set(entry)
            if humaneval:
                entry["humaneval"] = compare(humaneval_tasks(args.humaneval), base_humaneval,
                                             score_humaneval(out, args.humaneval))
            if missing:
                scores = score(out, {side: sides[side] for side in missing}, args)
                held = entry["pools"] if tune else entry.setdefault("tuning_draw", {})
                held.update({side: compare(sides[side], base[side], scores[side])
                             for side in missing})
            if tune and all(set(sides) <= set(e["pools"]) for e in result["arms"]):
                result["choice"] = choose(result["arms"])
            write(result, path)
    return left


def drop_weights(candidate: Path) -> None:
    """A scored tuning candidate's weight files go (its figures are in the result file, a rerun
    skips it); its train metrics and configs stay."""
    for f in candidate.glob("*.safetensors"):
        f.unlink()


def write(result: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> None:
    from ratchet.console import quiet_accelerator_guess

    quiet_accelerator_guess()
    args = parse_args(argv)
    if args.retest:
        out = RETEST if args.out == RESULTS else args.out
        result = retest(args.retest)
        for c in result["candidates"]:
            was, now = c["stays_local"]["before"], c["stays_local"]["after"]
            drop = c["family_max_drop"]["guard"]["after"]
            say(f"{c['file']}: {c['name']} seed {c['seed']}: guard max-drop {drop['family']} "
                f"p = {drop['p']:.3f} ({drop['unit']}); stays local {was['all']} -> {now['all']}")
        write(result, out)
        say(f"wrote {out}")
        return
    if args.versus:
        out = VERSUS if args.out == RESULTS else args.out
        real, *placebos = (json.loads(p.read_text()) for p in args.versus)
        placebo = {"arms": [a for f in placebos for a in f["arms"]]}
        rows = versus(real, placebo, args.pools)
        seeds = versus_by_seeds(real, placebo, args.pools)
        for r in rows:
            say(f"{r['name']} seed {r['seed']} {r['pool']}: real {r['pass_real']:.3f} placebo "
                f"{r['pass_placebo']:.3f}: {r['delta']:+.3f} [{r['ci_low']:+.3f}, "
                f"{r['ci_high']:+.3f}]")
        for r in seeds:
            say(f"{r['name']} {r['pool']} by seeds: real {len(r['real'])}, placebo "
                f"{len(r['placebo'])}: {r['difference']:+.3f} (permutation p = {r['p']:.3f})")
        before = json.loads(out.read_text()) if out.is_file() else {}
        files = [p.name for p in args.versus]

        def kept(key: str) -> list[dict]:
            return [r for r in before.get(key, []) if r.get("files") != files]

        write({"date": datetime.date.today().isoformat(), "commit": commit(),
               "comparisons": kept("comparisons") + [{**r, "files": files} for r in rows],
               "by_seeds": kept("by_seeds") + [{**r, "files": files} for r in seeds]}, out)
        say(f"wrote {out}")
        return
    if args.validity:
        out = VALIDITY if args.out == RESULTS else args.out
        result = validity(args.validity)
        for name, c in result["spearman_with_guard_discordance"].items():
            say(f"{name}: Spearman {c['spearman']:+.2f} (p = {c['p']:.2f}) with the guard pool's "
                f"discordance over {c['candidates']} candidates")
        write(result, out)
        say(f"wrote {out}")
        return
    if args.rescore:
        for path, names in rescore(args).items():
            say(f"{path}: weights gone, not rescored: {'; '.join(names)}")
        say(f"rescored {', '.join(str(p) for p in args.rescore)}")
        return
    if args.summary:
        names = tuple(args.pools)
        print(summary(args.summary, names))
        return
    if args.choose_local:
        out = CHOICE_LOCAL if args.out == RESULTS else args.out
        tuning = json.loads(args.choose_local.read_text())
        choice = choose_local(tuning["arms"])
        for name, r in choice["settings"].items():
            say(f"{name:<34} trained {r['trained']:+.3f}  KL {r['kl_traffic']:.3f}  "
                f"{'admissible' if name in choice['admissible'] else ''}")
        say(f"KL bound {choice['kl_bound']:.4f}; chosen: {choice['chosen']}")
        write({"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
               "commit": commit(), "tuning_file": args.choose_local.name, **choice}, out)
        say(f"wrote {out}")
        return
    if args.choose:
        tune = json.loads(args.choose[0].read_text()).get("tune")
        out = TUNING if tune and args.out == RESULTS else args.out
        result = merge(args.choose, out)
        if not tune:
            say(f"merged {len(result['arms'])} candidates; wrote {out}")
            return
        for name, r in result["choice"]["settings"].items():
            say(f"{name:<24} trained {r['trained']:+.3f}  guard {r['guard']:+.3f}  "
                f"transfer {r['transfer']:+.3f}  KL {r['kl_traffic']:.3f}")
        say(f"admissible: {result['choice']['admissible']}; chosen: "
            f"{result['choice']['chosen']}; wrote {out}")
        return
    result = run(args)
    for a in result["arms"]:
        pools = "  ".join(f"{k} {v['delta']:+.3f} [{v['ci_low']:+.3f}, {v['ci_high']:+.3f}] "
                          f"disc {v['discordant_share']:.2f}" for k, v in a["pools"].items())
        say(f"{a['name']} s{a['seed']}: {pools}")
    say(f"wrote {args.out}")


if __name__ == "__main__":
    from runtime.services import unwind_on_sigterm

    unwind_on_sigterm()  # SIGTERM stops the training child too (train_apart), by PID
    show_progress()
    main()
