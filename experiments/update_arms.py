"""Which update makes the served answer better, with training runs as the unit.

Every arm trains from the preset's first champion on the same rows: 128 requests the champion
serves on the tuning draw's traffic (``tasks.pyfuncs.tuning_draw``, disjoint by function from
every pool that scores), sampled at the simulator's temperature with replies ending once their code
block is closed, each rewarded +1 when its answer passes its asserts and -1 otherwise. An arm is an
objective at a learning rate (:data:`ARMS`), everything else the preset's trainer. Each arm runs
``--seeds`` trainer seeds on the rows as they are (real) and as many on the rows with their rewards
shuffled (placebo, key ``placebo/<seed>``: the same tokens and update size, no information).

A run's outcome on a side of the tuning draw (``trained``: held-out functions of the trained
families; ``guard``; ``transfer``) is its change in family-averaged sampled pass (``k`` samples
per function at the serving temperature, common random numbers with the champion) against the
champion. The rule (:func:`choose`), fixed before any run: an arm is admissible when every real
seed beats every placebo seed on ``trained`` (4 against 4: exact permutation p = 1/70) and its
real seeds' mean changes on ``guard`` and ``transfer`` are both >= -0.02; the preset takes the
admissible arm with the largest mean ``trained`` gain, or stays as it is when none is admissible.
An arm is out as soon as one real seed's ``trained`` change is at or below one placebo seed's (no
later run can make it admissible): its remaining runs are skipped (:func:`out`), which saves
training time and cannot change the choice.

Every unit (the champion's scores; one run's scores) is a JSON file under ``--units`` (committed,
so a later checkout resumes where this one stopped), as are the rows; a run's weights live only
under ``--workdir`` until it is scored. ``--part K/N`` runs every N-th unit (two processes on two
cores, one thread each). ``--choose`` applies the rule to the units there and writes ``--out``.

    .venv/bin/python -m experiments.update_arms --part 0/2 &
    .venv/bin/python -m experiments.update_arms --part 1/2 &
    .venv/bin/python -m experiments.update_arms --choose

``--tiny`` is the dry run of the tests: a tiny random Mixtral, ``--limit`` tasks per side (its
figures mean nothing).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402
from bench._common import build_champion, choices, say, show_progress  # noqa: E402
from experiments.local_update import permutation_p  # noqa: E402

CONFIG = ROOT / "configs" / "smollm2-pyfuncs.json"
UNITS = ROOT / "bench" / "results" / "update_arms_units"
OUT = ROOT / "bench" / "results" / "update_arms.json"
SIDES = ("trained", "guard", "transfer")
ARMS: dict[str, dict] = {
    "token_clip lr 5e-5": {"objective": {"type": "token_clip"}, "lr": 5e-5},  # the preset before
    "token_clip lr 2.5e-5": {"objective": {"type": "token_clip"}, "lr": 2.5e-5},
    "filtered_imitation lr 5e-5": {"objective": {"type": "filtered_imitation"}, "lr": 5e-5},
    "filtered_imitation lr 2.5e-5": {"objective": {"type": "filtered_imitation"}, "lr": 2.5e-5},
    "asymmetric lr 5e-5": {"objective": {"type": "asymmetric", "negative_scale": 0.25},
                           "lr": 5e-5},
    "asymmetric lr 2.5e-5": {"objective": {"type": "asymmetric", "negative_scale": 0.25},
                             "lr": 2.5e-5},
}
REQUESTS = 128
ROWS_SEED = 1
SEEDS = 4
SAMPLES = 4
TEMPERATURE = 0.8
"""Samples per function and their temperature (the serving one), fixed here so that a change of
the preset's gate never mixes two sample counts in one table."""
FLOOR = -0.02
"""Lowest mean change on ``guard`` and on ``transfer`` an admissible arm's real seeds may show."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.update_arms",
                                description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=CONFIG)
    p.add_argument("--arms", type=choices(tuple(ARMS)), default=list(ARMS))
    p.add_argument("--seeds", type=int, default=SEEDS)
    p.add_argument("--part", default="0/1", help="K/N: every N-th unit")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--units", type=Path, default=UNITS)
    p.add_argument("--workdir", type=Path, default=ROOT / ".cache" / "update_arms")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--choose", action="store_true", help="apply the rule to the units; no run")
    p.add_argument("--tiny", action="store_true", help="dry run on a tiny random Mixtral")
    p.add_argument("--limit", type=int, default=0, help="first N tasks of each side (0 = all)")
    p.add_argument("--requests", type=int, default=REQUESTS, help="rows every arm trains on")
    args = p.parse_args(argv)
    k, _, n = args.part.partition("/")
    if not (k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
        p.error(f"--part wants K/N with 0 <= K < N, got {args.part!r}")
    args.part = (int(k), int(n))
    if args.seeds < 1:
        p.error("--seeds must be at least 1")
    return args


# -- the rule -------------------------------------------------------------------------------------
def family_average(tasks: list[dict], key: str = "sampled_pass") -> float:
    """Mean over families of each family's mean ``key`` (every family counts once)."""
    by: dict[str, list[float]] = {}
    for t in tasks:
        by.setdefault(t["family"], []).append(float(t[key]))
    return sum(sum(v) / len(v) for v in by.values()) / len(by)


def judge(name: str, real: list[dict], placebo: list[dict], seeds: int) -> dict:
    """One arm's row of the table: its runs' outcomes, the permutation p and admissibility."""
    def side(runs: list[dict], s: str) -> list[float]:
        return [r["change"][s] for r in runs]

    mean = lambda xs: round(sum(xs) / len(xs), 4) if xs else None  # noqa: E731
    trained_r, trained_p = side(real, "trained"), side(placebo, "trained")
    complete = len(real) == len(placebo) == seeds
    guard, transfer = mean(side(real, "guard")), mean(side(real, "transfer"))
    every = bool(trained_r and trained_p) and min(trained_r) > max(trained_p)
    return {"name": name, "real_seeds": real, "placebo_seeds": placebo, "complete": complete,
            "trained_change": mean(trained_r), "placebo_trained_change": mean(trained_p),
            "permutation_p": (round(permutation_p(trained_r, trained_p), 4)
                              if trained_r and trained_p else None),
            "every_real_beats_every_placebo": every,
            "guard_change": guard, "transfer_change": transfer,
            "out_early": not complete and out(trained_r, trained_p),
            "admissible": bool(complete and every and guard >= FLOOR and transfer >= FLOOR)}


def out(real: list[float], placebo: list[float]) -> bool:
    """True once a real seed's ``trained`` change is at or below a placebo seed's: the arm can
    no longer be admissible, whatever its remaining runs show."""
    return bool(real and placebo) and min(real) <= max(placebo)


def choose(table: list[dict]) -> str | None:
    """The admissible arm with the largest mean ``trained`` gain, or None (the preset stays)."""
    ok = [a for a in table if a["admissible"]]
    return max(ok, key=lambda a: a["trained_change"])["name"] if ok else None


# -- units ----------------------------------------------------------------------------------------
def slug(name: str) -> str:
    return name.replace(" ", "_")


def unit_path(units: Path, arm: str, kind: str, seed: int) -> Path:
    return units / slug(arm) / f"{kind}-seed{seed}.json"


def plan(args) -> list[tuple[str, str, int]]:
    """Every (arm, real|placebo, seed), seed-major so each arm's first pair comes early."""
    every = [(arm, kind, seed) for seed in range(args.seeds) for arm in args.arms
             for kind in ("real", "placebo")]
    k, n = args.part
    return every[k::n]


@contextmanager
def exclusive(workdir: Path, what: str):
    """One process at a time for what both parts need once (the champion, its scores, the rows);
    the lock files stay in the workdir, out of the committed units."""
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / f"{what}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def write_atomic(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(".part")
    part.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(part, path)


def sides(args, draw: dict[str, list[dict]]) -> dict[str, Path]:
    """The tuning draw's scoring sides as JSONL files under the workdir (``--limit`` each)."""
    out = {}
    for name in SIDES:
        tasks = draw[name][: args.limit] if args.limit else draw[name]
        path = args.workdir / "sides" / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
        out[name] = path
    return out


def score_sides(policy, gate, paths: dict[str, Path], *, chat: bool) -> dict[str, list[dict]]:
    """Each side decoded as the gate decodes (chat turn, stop at the closed code block, the
    suite's max tokens): greedy and :data:`SAMPLES` samples at :data:`TEMPERATURE`."""
    from bench.real_gate import score_suite

    out = {}
    for name, path in paths.items():
        n = sum(1 for line in path.read_text().splitlines() if line.strip())
        suite = gate.suite.model_copy(update={"path": path, "size": n, "samples": SAMPLES,
                                              "temperature": TEMPERATURE})
        result = score_suite(policy, suite, TEMPERATURE, chat=chat)
        out[name] = [{"task_id": t.task_id, "family": t.kind, "passed": t.passed,
                      "sampled_pass": t.sampled_pass} for t in result.tasks]
    return out


def changes(mine: dict[str, list[dict]], champion: dict[str, list[dict]]) -> dict[str, float]:
    return {s: round(family_average(mine[s]) - family_average(champion[s]), 4) for s in SIDES}


def trainer_config(preset, arm: str, seed: int, *, tiny: bool):
    from trainer.config import TrainerConfig

    cfg = preset.trainer.model_dump(mode="json")
    cfg.update(ARMS[arm], seed=seed)
    if tiny:  # the tiny model has 2 layers
        cfg["trainable"]["top_layers"] = 1
    return TrainerConfig.model_validate(cfg)


def rows_for(args, preset, champion: Path, draw: dict[str, list[dict]]):
    """The rows every arm trains on, kept beside the units (sampled once) and drawn from
    ``draw``'s traffic."""
    import pyarrow.parquet as pq

    from bench._common import sample_traffic

    path = args.units / "rows.parquet"
    with exclusive(args.workdir, "rows"):
        if not path.is_file():
            sim = preset.simulator
            say(f"the champion serves {args.requests} requests on the tuning draw's traffic")
            rows = sample_traffic(champion, draw["traffic"], n=args.requests,
                                  temperature=sim.temperature,
                                  max_new_tokens=sim.max_tokens, seed=ROWS_SEED,
                                  stop_after_code_block=sim.stop_after_code_block)
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(rows, path)
        return pq.read_table(path)


def champion_scores(args, gate, champion: Path, paths) -> dict[str, list[dict]]:
    from policy.config import HFPolicyConfig
    from policy.loader import load_policy

    path = args.units / "champion.json"
    with exclusive(args.workdir, "champion-scores"):
        if not path.is_file():
            say("scoring the champion on the tuning draw's sides")
            policy = load_policy(HFPolicyConfig(path=champion, chat_template=not args.tiny))
            write_atomic(path, {"date": provenance.now(), "commit": provenance.commit(),
                                "load1_end": provenance.load1(),
                                "sides": score_sides(policy, gate, paths, chat=not args.tiny)})
        return json.loads(path.read_text())["sides"]


def run_unit(args, preset, champion: Path, rows, champ: dict, paths, arm: str, kind: str,
             seed: int) -> dict:
    from bench._common import train_apart
    from policy.config import HFPolicyConfig
    from policy.loader import load_policy
    from trainer.online import shuffle_rewards

    t0 = time.perf_counter()
    out = args.workdir / "runs" / slug(arm) / f"{kind}-seed{seed}"
    train_rows = shuffle_rewards(rows, f"placebo/{seed}") if kind == "placebo" else rows
    metrics = train_apart(champion, train_rows, trainer_config(preset, arm, seed, tiny=args.tiny),
                          out, threads=args.threads)
    policy = load_policy(HFPolicyConfig(path=out, chat_template=not args.tiny))
    scores = score_sides(policy, preset.gate, paths, chat=not args.tiny)
    del policy
    shutil.rmtree(out)
    return {"arm": arm, "kind": kind, "seed": seed, "change": changes(scores, champ),
            "greedy_change": {s: round(family_average(scores[s], "passed")
                                       - family_average(champ[s], "passed"), 4) for s in SIDES},
            "train": {k: v for k, v in metrics.items() if "kl" in k or k == "loss"},
            "seconds": round(time.perf_counter() - t0), "date": provenance.now(),
            "commit": provenance.commit(), "machine": provenance.machine(),
            "load1_end": provenance.load1(), "sides": scores}


def finished(args, arm: str) -> dict[str, list[dict]]:
    """The arm's finished runs under ``--units``, real and placebo, in seed order."""
    return {kind: [json.loads(p.read_text()) for seed in range(args.seeds)
                   if (p := unit_path(args.units, arm, kind, seed)).is_file()]
            for kind in ("real", "placebo")}


def table(args) -> dict:
    """The rule applied to every unit under ``--units`` (the arms of ``--arms``)."""
    rows = []
    for arm in args.arms:
        runs = finished(args, arm)
        slim = {k: [{x: r[x] for x in ("seed", "change", "greedy_change", "train", "date",
                                       "commit", "load1_end")} for r in v]
                for k, v in runs.items()}
        rows.append(judge(arm, slim["real"], slim["placebo"], args.seeds))
    complete = all(a["complete"] or a["out_early"] for a in rows)
    return {"date": provenance.now(), "commit": provenance.commit(),
            "machine": provenance.machine(), "config": str(args.config.relative_to(ROOT))
            if args.config.is_relative_to(ROOT) else str(args.config),
            "rows": f"{args.requests} requests on the tuning draw's traffic, rows seed {ROWS_SEED}",
            "outcome": f"change in family-averaged sampled pass ({SAMPLES} samples at "
            f"{TEMPERATURE:g}) against the first champion",
            "rule": f"admissible: complete, every real seed above every placebo seed on trained, "
            f"mean guard and transfer changes >= {FLOOR}; chosen: the admissible arm with the "
            "largest mean trained change, else null (the preset stays); an arm is out early, "
            "its remaining runs skipped, once a real seed is at or below a placebo seed",
            "complete": complete, "arms": rows, "chosen": choose(rows) if complete else None}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    from ratchet.config import load_config

    if args.choose:
        result = table(args)
        write_atomic(args.out, result)
        for a in result["arms"]:
            say(f"{a['name']:<30} real {len(a['real_seeds'])} placebo {len(a['placebo_seeds'])}"
                f" trained {a['trained_change']} vs {a['placebo_trained_change']} "
                f"p {a['permutation_p']} admissible {a['admissible']}")
        say(f"chosen: {result['chosen']} (complete: {result['complete']}); wrote {args.out}")
        return
    torch.set_num_threads(args.threads)
    preset = load_config(args.config, check_paths=not args.tiny)
    args.workdir.mkdir(parents=True, exist_ok=True)
    with exclusive(args.workdir, "champion"):
        champion = build_champion(argparse.Namespace(config=args.config, tiny=args.tiny),
                                  args.workdir)
    from tasks.pyfuncs import tuning_draw

    draw = tuning_draw()
    rows = rows_for(args, preset, champion, draw)
    paths = sides(args, draw)
    champ = champion_scores(args, preset.gate, champion, paths)
    todo = plan(args)
    for i, (arm, kind, seed) in enumerate(todo):
        path = unit_path(args.units, arm, kind, seed)
        if path.is_file():
            continue
        trained = {k: [r["change"]["trained"] for r in v] for k, v in finished(args, arm).items()}
        if out(trained["real"], trained["placebo"]):
            say(f"[{i + 1}/{len(todo)}] {arm}, {kind} seed {seed}: skipped, the arm is out (a "
                "real seed at or below a placebo seed)")
            continue
        say(f"[{i + 1}/{len(todo)}] {arm}, {kind} seed {seed}: training")
        unit = run_unit(args, preset, champion, rows, champ, paths, arm, kind, seed)
        write_atomic(path, unit)
        c = unit["change"]
        say(f"[{i + 1}/{len(todo)}] {arm}, {kind} seed {seed}: trained {c['trained']:+.3f}, "
            f"guard {c['guard']:+.3f}, transfer {c['transfer']:+.3f} ({unit['seconds']} s)")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    show_progress()
    main()
