"""Does a real pretrained model get better through the loop? SmolLM2-135M, upcycled, on pyfuncs.

Per arm (``rl``, then the ``placebo`` arm unless ``--no-placebo``): an embedded broker and MLflow
server, the champion bootstrapped from the preset (``--config``, default
configs/smollm2-pyfuncs.json: SmolLM2-135M-Instruct upcycled to 4 experts top-2, no planted flaw,
cached after its first build), one replica, and the user simulator sending chat requests from the
train-traffic pool (tasks/data/pyfuncs_train.jsonl) and reacting through the signals API. Each
cycle: one round of traffic served by the live champion (signals in compressed event time), then
``ratchet.cycle.Cycle`` (ingest → train → gate → deploy). The placebo arm trains on the same kind
of rows with their rewards shuffled (seeded per cycle) and must not improve.

The champion is scored greedily, as chat turns, on the sealed set (tasks/data/pyfuncs_sealed.jsonl:
no independent function, family + constants, shared with the traffic pool or the gate pool, no
function name of the traffic pool, no prompt of the calibration draw; ``--sealed N`` takes its
first N) before the first cycle and after the last, and on ``--humaneval N`` HumanEval
problems (164 = all, chat; 0 skips it); beside the sealed set every scored version answers the
transfer pool (held-out families, ``--transfer-file``) and the guard pool (families the model
already solves, ``--guard-file``, first ``--guard N``), and the report ends with the carry-over
line: final vs first on sealed, transfer and guard, each pool's worst family and whether the
gate's family-wise test finds it surely worse. ``delta``, ``ci_low``/``ci_high``: the mean over
functions of final minus first and its 95% paired bootstrap,
resampling independent functions (tasks are grouped by their ``function``, family and
constants, or by prompt text when a task has none: two prompts asking for the same function count
once).

    .venv/bin/python -m bench.loop_real [--cycles 3] [--requests N] [--sealed 0]
        [--humaneval 164] [--no-placebo] [--out bench/results/loop_real_run.json]

Writes ``--out`` with ``cycles``, ``pass_first``, ``pass_final``, ``ci_low``, ``ci_high``,
``placebo_delta``, ``humaneval_first``, ``humaneval_final``, ``promotions``,
``placebo_promotions``, ``per_cycle`` (live signals per cycle), ``scores`` (every sealed task's
pass per scored version), ``rl_last_candidate`` / ``placebo_last_candidate`` (the arm's last
candidate on the sealed set when the gate did not promote it: what training did, apart from what
the gate let through) and ``complete`` (False while a run is under way or when it stopped early:
the file is rewritten after every cycle). ``--arm rl`` and ``--arm placebo`` run one arm each (two
processes side by side); ``--merge RL PLACEBO`` joins their files (a placebo run cut short counts
for the cycles it finished, when none of them promoted); ``--humaneval-after FILE --workdir DIR``
scores HumanEval on the first and final champions of a finished run. ``--threads N``: torch
threads of the run and of its replicas (default: the preset's ``torch_threads``; give each of two
arms side by side on 2 cores 1). A checkpoint's scores are kept under ``--score-cache`` (default
bench/results/loop_real_scores, in the repository), keyed by its weights, the tasks, the decoding
length and the decoding and grading code: greedy scoring gives the same answers, so a later run
whose first champion is the same weights (every seed and arm: the bootstrap is deterministic)
reuses them instead of decoding ~780 tasks again, on this machine or the next.
``--resume`` continues a run that was stopped or crashed, from ``--out`` and its ``--workdir``
(same seed, arm, cycles, config and pools, or it refuses with the difference): finished cycles
and scores are kept, a cycle stopped after its traffic resumes at its stage (``ratchet.cycle``
resumes it with the same spans), one stopped before it was ingested sends its round again, and
each cycle's traffic is drawn from (seed, cycle) alone, so a resumed run sends what an
uninterrupted one would. ``resumes`` in the file lists where each resumption began.
Left out: the canary rollout (one replica, the champion alias moves on promotion) and several seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench/ingest.py would shadow the ingest package

from bench import provenance  # noqa: E402
from ratchet.cycle import Cycle  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "loop_real_run.json"
CONFIG = ROOT / "configs" / "smollm2-pyfuncs.json"
SEALED = ROOT / "tasks" / "data" / "pyfuncs_sealed.jsonl"
TRANSFER = ROOT / "tasks" / "data" / "pyfuncs_transfer.jsonl"
GUARD = ROOT / "tasks" / "data" / "pyfuncs_guard.jsonl"
SCORE_CACHE = ROOT / "bench" / "results" / "loop_real_scores"
BOOTSTRAP = 2000


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- statistics (pure) ----------------------------------------------------------------------------
def by_cluster(keys: list[str], passed: list[bool]) -> dict[str, float]:
    """Pass rate per cluster (the independent unit: a task's function, ``cluster_key``)."""
    groups: dict[str, list[bool]] = {}
    for p, ok in zip(keys, passed, strict=True):
        groups.setdefault(p, []).append(ok)
    return {p: sum(v) / len(v) for p, v in groups.items()}


def clusters(tasks: list[dict]) -> list[str]:
    """Each task's cluster: its ``function`` (family + constants), or its prompt when it has
    none."""
    from tasks.jsonl_suite import cluster_key

    return [cluster_key(t) for t in tasks]


def prompt_ids(tasks: list[dict]) -> list[str]:
    """Each task's prompt for the per-family test of a family of one function
    (``gating.stats.max_drop_test``): its ``task_id``, or its place in the list."""
    return [t.get("task_id", str(i)) for i, t in enumerate(tasks)]


def paired_delta(first: dict[str, float], final: dict[str, float], *, seed: int = 0,
                 n_boot: int = BOOTSTRAP) -> tuple[float, float, float]:
    """(mean of final - first over clusters, 95% bootstrap low, high), clusters resampled."""
    keys = sorted(first)
    if sorted(final) != keys:
        raise ValueError("first and final were scored on different clusters")
    d = [final[k] - first[k] for k in keys]
    rng = random.Random(seed)
    means = sorted(statistics.fmean(d[rng.randrange(len(d))] for _ in d) for _ in range(n_boot))
    return statistics.fmean(d), means[int(0.025 * n_boot)], means[int(0.975 * n_boot) - 1]


# -- scoring --------------------------------------------------------------------------------------
def score_sealed(checkpoint: Path, tasks: list[dict], *, max_new_tokens: int, batch: int
                 ) -> list[bool]:
    """Greedy replies of ``checkpoint`` (through its chat template when the tokenizer has one, as
    a replica serves a one-message chat) graded by each task's hidden asserts."""
    from policy.config import HFPolicyConfig
    from policy.loader import load_policy
    from runtime.progress import Progress
    from tasks.humaneval import reply_complete
    from tasks.pyfuncs import grade

    policy = load_policy(HFPolicyConfig(path=checkpoint, chat_template=True))
    passed: list[bool] = []
    with Progress("scoring", total=len(tasks), unit="task") as progress:
        for i in range(0, len(tasks), batch):
            chunk = tasks[i:i + batch]
            gens = policy.generate([policy.encode_prompt(t["prompt"]) for t in chunk],
                                   max_new_tokens=max_new_tokens, temperature=0.0,
                                   stop_when=reply_complete)
            passed += [grade(t, g.text).passed for t, g in zip(chunk, gens, strict=True)]
            progress.update(len(chunk))
    return passed


def score_humaneval(checkpoint: Path, n: int) -> list[bool] | None:
    """Each of the first ``n`` HumanEval problems passed or not (greedy, through the chat template
    when the tokenizer has one), by the gate's suite runner; None when ``n`` is 0."""
    if n <= 0:
        return None
    from gating.config import SuiteConfig
    from gating.suite import build_suite, run_suite
    from policy.loader import load_policy

    policy = load_policy(checkpoint)
    config = SuiteConfig(kind="humaneval", size=n, max_new_tokens=160, batch_size=16)
    tasks, checker = build_suite(config)
    result = run_suite(policy, tasks, max_new_tokens=160, seed=0, checker=checker,
                       batch_size=16, chat=bool(getattr(policy, "has_chat_template", False)))
    return [bool(t.passed) for t in result.tasks]


def fingerprint(ckpt: Path, sealed: list[dict], args, *, humaneval: bool) -> str:
    """What a checkpoint's greedy scores depend on: its weight files, every scored task (sealed
    and carry-over pools), the decoding settings, and the code that decodes and grades (every
    module of ``policy/`` and ``tasks/``: a changed grader or decoder scores again)."""
    import hashlib

    weights = sorted(ckpt.glob("*.safetensors"))
    if not weights:  # a key without the weights would match any checkpoint's folder
        raise FileNotFoundError(f"{ckpt} holds no *.safetensors: not a checkpoint folder")
    h = hashlib.sha256()
    code = sorted(p for d in ("policy", "tasks") for p in (ROOT / d).rglob("*.py"))
    for f in weights + code:
        h.update(f.name.encode())
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 24):
                h.update(chunk)
    pools = [sealed] + [getattr(args, f"{pool}_tasks", None) or [] for pool in CARRY_POOLS]
    h.update(json.dumps([[[t["task_id"], t["prompt"], t["tests"]] for t in tasks]
                         for tasks in pools]).encode())
    h.update(json.dumps([args.max_new_tokens, args.humaneval if humaneval else 0]).encode())
    return h.hexdigest()[:20]


def score_checkpoint(ckpt: Path, sealed: list[dict], args, *, humaneval: bool = True,
                     label: str = "") -> dict:
    """A checkpoint's verdicts on the sealed set, the carry-over pools and (``humaneval``)
    HumanEval, from ``args.score_cache`` when the same weights were scored on the same tasks
    before (:func:`fingerprint`), else decoded and written there."""
    cache = getattr(args, "score_cache", None)
    path = cache / f"{fingerprint(ckpt, sealed, args, humaneval=humaneval)}.json" if cache else None
    if path is not None and path.is_file():
        say(f"{label}: the same weights were scored on the same tasks before; figures from "
            f"{path}")
        return json.loads(path.read_text())
    say(f"scoring {label} on {len(sealed)} sealed tasks")
    entry = {"passed": score_sealed(ckpt, sealed, max_new_tokens=args.max_new_tokens,
                                    batch=args.batch)}
    for pool in CARRY_POOLS:
        tasks = getattr(args, f"{pool}_tasks", None)
        entry[pool] = score_sealed(ckpt, tasks, max_new_tokens=args.max_new_tokens,
                                   batch=args.batch) if tasks else None
    entry["humaneval_passed"] = score_humaneval(ckpt, args.humaneval) if humaneval else None
    entry["humaneval"] = rate(entry["humaneval_passed"])
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(entry) + "\n")
        tmp.replace(path)
    return entry


def rate(passed: list[bool] | None) -> float | None:
    return None if passed is None else sum(passed) / len(passed)


def with_seed(config, seed: int):
    """The preset run at ``seed``: the simulator's task draws and user behaviour, the trainer's
    batch order and torch, and the gate's draws (decision k of the run draws ``1000 seed + k``).
    The bootstrapped champion is the same for every seed."""
    sim = config.simulator.model_copy(update={"seed": seed})
    trainer = config.trainer.model_copy(update={"seed": seed})
    gate = config.gate.model_copy(update={"suite": config.gate.suite.model_copy(
        update={"seed": 1000 * seed})})
    return config.model_copy(update={"simulator": sim, "trainer": trainer, "gate": gate})


# -- one arm --------------------------------------------------------------------------------------
@dataclass
class Record:
    """What the results file keeps of a run under way: enough to resume it."""

    rows: list[dict] = field(default_factory=list)
    scores: dict = field(default_factory=dict)
    pending: dict | None = None
    """The cycle under way once its traffic was sent: ``arm``, ``cycle``, ``served_version``,
    ``stats`` (the round's ``RoundStats``), ``traffic_s``."""
    seconds_before: float = 0.0
    """Time spent by the processes this one resumes."""
    resumes: list[dict] = field(default_factory=list)
    commit: str | None = None
    """The commit the run started at (:func:`bench.provenance.commit`); each resumption records
    its own in ``resumes``."""


RESUMED_KEYS = ("seed", "arm", "cycles", "config", "requests_per_cycle", "workdir", "pool_files",
                "humaneval_problems", "max_new_tokens")
"""What a resumed run must share with the run it resumes (a key the file lacks is not checked)."""


def resume_record(args) -> Record:
    """The run recorded in ``args.out``, to go on with; SystemExit when it cannot be."""
    try:
        prev = json.loads(args.out.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"--resume: cannot read {args.out}: {e}") from e
    if prev.get("complete"):
        raise SystemExit(f"--resume: {args.out} is complete; nothing to resume")
    now = run_keys(args)
    differs = {k: (prev[k], now[k]) for k in RESUMED_KEYS if k in prev and prev[k] != now[k]}
    if differs:
        raise SystemExit(f"--resume: {args.out} was another run: {differs} (recorded, now)")
    if not Path(args.workdir).is_dir():
        raise SystemExit(f"--resume: the run folder {args.workdir} is gone")
    return Record(rows=prev.get("per_cycle", []), scores=prev.get("scores", {}),
                  pending=prev.get("pending"), seconds_before=float(prev.get("seconds", 0.0)),
                  resumes=prev.get("resumes", []), commit=prev.get("commit"))


def run_keys(args) -> dict:
    """The settings a results file records and a resumed run must share."""
    return {
        "cycles": args.cycles, "requests_per_cycle": args.requests, "config": str(args.config),
        "seed": getattr(args, "seed", 0), "arm": getattr(args, "arm", "both"),
        "workdir": str(getattr(args, "workdir", None) or "") or None,
        "pool_files": {name: str(getattr(args, f"{name}_file", "")) or None
                       for name in ("sealed", *CARRY_POOLS)},
        "humaneval_problems": args.humaneval,
        "max_new_tokens": getattr(args, "max_new_tokens", None),
    }


def run_arm(args, config, *, placebo: bool, sealed: list[dict], workdir: Path, record: Record,
            on_cycle) -> None:
    """One arm's cycles, from the first one ``record`` has no row of; ``on_cycle()`` writes the
    results file (after the first scoring, after each round of traffic and after each cycle)."""
    from deploy.fleet.fleet import Fleet
    from ratchet.bootstrap import ensure_champion
    from ratchet.demo import demo_config, outcome_of
    from ratchet.runner import services
    from runtime import registry
    from simulation.simulator import SIMULATED_SKEW_S, RoundStats, UserSimulator

    arm = "placebo" if placebo else "rl"
    rows, scores = record.rows, record.scores
    if placebo:  # the rl arm keeps the preset's names: `ratchet gates show --config` finds it
        config = config.model_copy(update={"model_name": f"{config.model_name}-placebo",
                                           "experiment": f"{config.experiment}-placebo"})
    config = demo_config(config)
    with services(workdir, bootstrap=None, tracking_uri=None) as ep:
        uri = ep.tracking_uri
        first = ensure_champion(config, tracking_uri=uri, workdir=workdir)
        _score(args, uri, config.model_name, first, "first", sealed, workdir, scores)
        on_cycle()
        say(f"[{arm}] starting one replica")
        fleet = Fleet.start(n_replicas=config.fleet.replicas, tracking_uri=uri,
                            model_name=config.model_name, bootstrap=ep.bootstrap,
                            workdir=workdir / "fleet", admin_token=config.fleet.admin_token,
                            signal_max_skew_s=SIMULATED_SKEW_S)
        try:
            sim = UserSimulator(urls=fleet.urls, api_key=fleet.create_api_key("loop-real"),
                                speed=config.simulator.speed, seed=config.simulator.seed,
                                max_tokens=config.simulator.max_tokens,
                                temperature=config.simulator.temperature,
                                request_timeout_s=config.simulator.request_timeout_s,
                                tasks=config.simulator.load_tasks(),
                                policy=config.simulator.signal_policy())
            if placebo:  # the span's rows, rewards shuffled (seeded by the cycle)
                config = config.model_copy(update={"trainer": config.trainer.model_copy(
                    update={"shuffle_rewards": True})})
            cycle = Cycle(config, tracking_uri=uri, bootstrap=ep.bootstrap, workdir=workdir,
                          fleet=fleet)
            done = sum(r["arm"] == arm for r in rows)
            finished = sum(s.finished for s in cycle.store.all())
            if finished != done:
                raise SystemExit(f"[{arm}] the run folder has {finished} finished cycles, the "
                                 f"results file {done}: run it again without --resume")
            for i in range(done, args.cycles):
                c0 = time.perf_counter()
                pending = record.pending
                open_ = cycle.store.unfinished()
                if (pending and (pending["arm"], pending["cycle"]) == (arm, i)
                        and open_ is not None and open_.stage != "started"):
                    served, traffic_s = pending["served_version"], pending["traffic_s"]
                    stats = RoundStats(**pending["stats"])
                    say(f"[{arm}] cycle {i + 1}/{args.cycles}: resumed at its {open_.stage} "
                        f"stage; its {stats.requests} requests were served by v{served}")
                else:  # a round never ingested is sent again: the broker keeps nothing
                    served = registry.resolve_alias(uri, config.model_name, registry.CHAMPION)
                    say(f"[{arm}] cycle {i + 1}/{args.cycles}: {args.requests} chat requests "
                        f"served by v{served}")
                    sim.start_round(i)
                    stats = sim.run_round(args.requests,
                                          concurrency=config.simulator.concurrency)
                    sim.drain()
                    traffic_s = time.perf_counter() - c0
                    record.pending = {"arm": arm, "cycle": i, "served_version": served,
                                      "stats": asdict(stats), "traffic_s": traffic_s}
                    on_cycle()
                result = cycle.run(i)
                rows.append({
                    "arm": arm, "cycle": i, "served_version": served,
                    "live_pass_rate": stats.pass_rate, "edit_persistence": stats.edit_persistence,
                    "dissatisfied_rate": stats.dissatisfied_rate,
                    "mean_latency_ms": stats.mean_latency_ms,
                    "completion_tokens": stats.mean_completion_tokens,
                    "requests": stats.requests, "errors": stats.errors,
                    "rows": result.span_rows, "train_rows": result.train_rows,
                    "outcome": outcome_of(result), "promoted": result.promoted,
                    "candidate_version": result.candidate_version,
                    "gate_candidate": result.candidate_pass_rate,
                    "gate_champion": result.champion_pass_rate,
                    "gate_ci_low": result.gate_ci_low, "gate_ci_high": result.gate_ci_high,
                    "gate_tasks": result.gate_tasks, "gate_failed": result.gate_failed,
                    "gate_guards": result.gate_guards, "gate_decision": result.gate_decision,
                    "seconds": {"traffic": round(traffic_s, 1), **result.seconds},
                    "resumed_from": result.resumed_from,
                })
                record.pending = None
                say(f"[{arm}] cycle {i + 1}: {rows[-1]['outcome']}; live pass "
                    f"{stats.pass_rate:.3f}, edit {stats.edit_persistence:.3f}, dissat "
                    f"{stats.dissatisfied_rate:.3f} ({time.perf_counter() - c0:.0f} s)")
                if result.gate_decision:  # which rule decided, with its figures
                    say(f"[{arm}] cycle {i + 1}: {result.gate_decision}")
                on_cycle()
            sim.close()
        finally:
            fleet.stop()
        final = registry.resolve_alias(uri, config.model_name, registry.CHAMPION)
        _score(args, uri, config.model_name, final, f"{arm}-final", sealed, workdir, scores)
        # What the training did, apart from what the gate let through: the arm's last candidate
        # (rejected or not) on the same sealed set.
        last = next((r["candidate_version"] for r in reversed(rows)
                     if r["arm"] == arm and r["candidate_version"] is not None), None)
        if last is not None and last != final:
            _score(args, uri, config.model_name, last, f"{arm}-last-candidate", sealed, workdir,
                   scores, humaneval=False)


def _score(args, uri, name, version, key, sealed, workdir, scores, *, humaneval: bool = True
           ) -> None:
    from runtime import registry

    if key in scores:
        return
    # Greedy scoring is deterministic: a version scored under another key (a final champion that
    # is still the first one) is not scored twice.
    same = next((s for s in scores.values() if s["version"] == version), None)
    if getattr(args, "no_scores", False):  # kept for a scorer run later (bench.loop_proof)
        if same is None:
            path = registry.download_checkpoint(uri, name, version,
                                                workdir / "scored" / f"v{version}")
            same = {"version": version, "path": str(path)}
        scores[key] = {**same}
        say(f"v{version} ({key}) kept unscored at {same['path']}")
        return
    needs_humaneval = humaneval and args.humaneval > 0
    if same is not None and (same["humaneval"] is not None or not needs_humaneval):
        scores[key] = {**same} if humaneval else {**same, "humaneval": None,
                                                   "humaneval_passed": None}
        say(f"v{version} ({key}) was scored already as the same weights; figures reused")
        return
    ckpt = registry.download_checkpoint(uri, name, version, workdir / "scored" / f"v{version}")
    scores[key] = entry = {"version": version, **score_checkpoint(
        ckpt, sealed, args, humaneval=humaneval, label=f"v{version} ({key})")}

    def shown(xs):
        return "-" if not xs else f"{rate(xs):.3f}"

    say(f"  {key}: sealed pass {shown(entry['passed'])}, transfer {shown(entry['transfer'])}, "
        f"guard {shown(entry['guard'])}, humaneval {shown(entry['humaneval_passed'])}")


# -- summary --------------------------------------------------------------------------------------
_now = provenance.now


def summarise(args, rows: list[dict], scores: dict, sealed: list[dict], seconds: float) -> dict:
    keys = clusters(sealed)
    first = scores.get("first")
    out: dict = {
        **run_keys(args),
        "date": _now(), "machine": provenance.machine(), "load1": provenance.load1(),
        "seconds": round(seconds, 1), "sealed_tasks": len(sealed),
        "sealed_prompts": len({t["prompt"] for t in sealed}),
        "sealed_functions": len(set(keys)), "complete": False,
        "pass_first": None, "pass_final": None, "delta": None, "ci_low": None, "ci_high": None,
        "placebo_delta": None, "placebo_ci": None, "humaneval_first": None,
        "humaneval_final": None, "humaneval_problems": args.humaneval,
        "promotions": sum(r["promoted"] for r in rows if r["arm"] == "rl"),
        "placebo_promotions": sum(r["promoted"] for r in rows if r["arm"] == "placebo"),
        "per_cycle": rows,
        "scores": scores,
    }
    if first is None or "passed" not in first:  # not scored yet, or kept for a later scorer
        return out
    base = by_cluster(keys, first["passed"])
    out["pass_first"] = statistics.fmean(first["passed"])
    out["humaneval_first"] = first["humaneval"]
    if "rl-final" in scores:
        final = scores["rl-final"]
        out["pass_final"] = statistics.fmean(final["passed"])
        out["delta"], out["ci_low"], out["ci_high"] = paired_delta(
            base, by_cluster(keys, final["passed"]))
        out["humaneval_final"] = final["humaneval"]
    for arm in ("rl", "placebo"):
        if f"{arm}-last-candidate" in scores:
            d, lo, hi = paired_delta(base, by_cluster(keys,
                                                  scores[f"{arm}-last-candidate"]["passed"]))
            out[f"{arm}_last_candidate"] = {"version": scores[f"{arm}-last-candidate"]["version"],
                                            "delta": d, "ci": [lo, hi]}
    if "placebo-final" in scores:
        pl = scores["placebo-final"]
        out["placebo_delta"], lo, hi = paired_delta(base, by_cluster(keys, pl["passed"]))
        out["placebo_ci"] = [lo, hi]
    for pool in CARRY_POOLS:
        if first.get(pool) and getattr(args, f"{pool}_tasks", None):
            out[pool] = pool_summary(getattr(args, f"{pool}_tasks"), scores, pool)
    return out


CARRY_POOLS = ("transfer", "guard")
"""Pools scored beside the sealed set on every scored version: the held-out families
(``transfer``: never in traffic, gate or sealed pools) and the families the model already solves
(``guard``: never in traffic)."""


def pool_summary(tasks: list[dict], scores: dict, pool: str = "transfer") -> dict:
    """One carry-over pool (``transfer`` or ``guard``) on the first champion and every later
    scored checkpoint: pass rates, the function-clustered change, per-family counts (tasks,
    independent functions, passed) and the gate's per-family maximum-drop test
    (``gating.stats.max_drop_test``: is some family surely worse, family-wise 0.05)."""
    import numpy as np

    from gating.stats import max_drop_test

    keys = clusters(tasks)
    first = scores["first"][pool]
    base = by_cluster(keys, first)
    families = sorted({t["family"] for t in tasks})
    sizes, first_passed = _per_family(tasks, [True] * len(tasks)), _per_family(tasks, first)
    functions = Counter(t["family"] for t in {c: t for c, t in zip(keys, tasks)}.values())
    out: dict = {"tasks": len(tasks), "functions": len(set(keys)), "families": families,
                 "pass_first": statistics.fmean(first),
                 "first_version": scores["first"]["version"]}
    for key, entry in scores.items():
        if key == "first" or not entry.get(pool):
            continue
        d, lo, hi = paired_delta(base, by_cluster(keys, entry[pool]))
        then = _per_family(tasks, entry[pool])
        diff = np.asarray(entry[pool], dtype=np.float64) - np.asarray(first, dtype=np.float64)
        drop = max_drop_test(diff, np.asarray(keys), [t["family"] for t in tasks],
                             prompts=prompt_ids(tasks),
                             candidate=np.asarray(entry[pool], dtype=np.float64))
        out[key] = {"version": entry["version"], "pass": statistics.fmean(entry[pool]),
                    "delta": d, "ci": [lo, hi],
                    "family_max_drop": {"family": drop.family, "drop": drop.drop,
                                        "p": drop.p_value, "surely_worse": drop.p_value <= 0.05,
                                        "unit": drop.unit},
                    "per_family": {f: {"tasks": sizes[f], "functions": functions[f],
                                       "first": first_passed[f], "then": then[f]}
                                   for f in families}}
    return out


def _per_family(tasks: list[dict], passed: list[bool]) -> Counter:
    """Passed tasks per family."""
    return Counter(t["family"] for t, p in zip(tasks, passed, strict=True) if p)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=CONFIG)
    p.add_argument("--cycles", type=int, default=3)
    p.add_argument("--requests", type=int, default=None,
                   help="chat requests per cycle (default: the preset's "
                   "simulator.requests_per_round)")
    p.add_argument("--sealed", type=int, default=0, help="first N sealed tasks (0 = all)")
    p.add_argument("--sealed-file", type=Path, default=SEALED)
    p.add_argument("--transfer-file", type=Path, default=TRANSFER,
                   help="held-out families scored beside the sealed set")
    p.add_argument("--no-transfer", action="store_true")
    p.add_argument("--guard-file", type=Path, default=GUARD,
                   help="families the model already solves, scored beside the sealed set")
    p.add_argument("--guard", type=int, default=0, help="first N guard tasks (0 = all)")
    p.add_argument("--no-guard", action="store_true")
    p.add_argument("--humaneval", type=int, default=164)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--no-placebo", action="store_true")
    p.add_argument("--arm", choices=["both", "rl", "placebo"], default="both",
                   help="run one arm only (two processes can run the arms side by side; "
                   "--merge joins their files)")
    p.add_argument("--humaneval-after", type=Path, metavar="JSON",
                   help="score HumanEval (--humaneval problems) on the first and final champions "
                   "of a finished run whose --workdir is given, fill them into JSON and exit")
    p.add_argument("--merge", type=Path, nargs=2, metavar=("RL_JSON", "PLACEBO_JSON"),
                   help="write --out from the files of an rl and a placebo run and exit")
    p.add_argument("--sequential", action="store_true",
                   help="with --merge: the two arms ran one after the other, not side by side")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads of this process and of its replicas (default: the "
                   "preset's torch_threads; 1 when two arms run side by side on 2 cores)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the traffic, the trainer and the gate's draws (with_seed)")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--resume", action="store_true",
                   help="go on with the run recorded in --out and its --workdir (same settings)")
    p.add_argument("--score-cache", type=Path, default=SCORE_CACHE,
                   help="folder of checkpoint scores keyed by weights and tasks (reused by later "
                   "runs: the first champion of every seed)")
    p.add_argument("--no-score-cache", dest="score_cache", action="store_const", const=None)
    p.add_argument("--no-scores", action="store_true",
                   help="decode nothing: keep the first, final and last-candidate checkpoints "
                   "under --workdir and record their paths (a later scorer scores them)")
    args = p.parse_args(argv)
    from runtime.services import unwind_on_sigterm

    unwind_on_sigterm()  # SIGTERM stops what this run started, by PID
    import torch

    from ratchet.config import load_config
    from tasks.pyfuncs import read_jsonl

    args.transfer_tasks = [] if args.no_transfer else read_jsonl(args.transfer_file)
    args.guard_tasks = [] if args.no_guard else read_jsonl(args.guard_file)
    args.guard_tasks = args.guard_tasks[:args.guard] if args.guard else args.guard_tasks
    if args.merge:
        _merge(args)
        return
    if args.humaneval_after:
        _humaneval_after(args)
        return
    config = with_seed(load_config(args.config), args.seed)
    args.requests = args.requests or config.simulator.requests_per_round
    threads = args.threads or config.torch_threads
    torch.set_num_threads(threads)
    os.environ["RATCHET_TORCH_THREADS"] = str(threads)  # the replicas this run starts
    sealed = read_jsonl(args.sealed_file)
    sealed = sealed[:args.sealed] if args.sealed else sealed
    workdir = args.workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ratchet-loop-real-"))
    from ratchet.console import setup as route_logs

    route_logs(workdir / "loop_real.log")  # library chatter to the log file, not the terminal
    print(f"loop_real: run folder {workdir} (checkpoints, spans, MLflow store; full log "
          f"{workdir / 'loop_real.log'})", flush=True)
    record = resume_record(args) if args.resume else Record(commit=provenance.commit())
    if args.resume:
        at = next(((r["arm"], r["cycle"] + 1) for r in reversed(record.rows)), None)
        record.resumes.append({"date": _now(), "commit": provenance.commit(), "after": at,
                               "pending": record.pending is not None})
        say(f"resuming {args.out}: {len(record.rows)} cycles done, "
            f"{len(record.scores)} versions scored")
    t0 = time.perf_counter()

    def summary() -> dict:
        out = summarise(args, record.rows, record.scores, sealed,
                        record.seconds_before + time.perf_counter() - t0)
        return {**out, "commit": record.commit, "pending": record.pending,
                "resumes": record.resumes}

    def write() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary(), indent=2) + "\n")

    arms = {"both": [False] if args.no_placebo else [False, True], "rl": [False],
            "placebo": [True]}[args.arm]
    for placebo in arms:
        run_arm(args, config, placebo=placebo, sealed=sealed,
                workdir=workdir / ("placebo" if placebo else "rl"), record=record,
                on_cycle=write)
        write()
    result = summary()
    result["complete"] = True
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    report(result, args.out)
    if False in arms:  # the rl arm ran: its store is the one named by the preset
        print(f"each gate decision: .venv/bin/ratchet gates show VERSION --config {args.config} "
              f"--workdir {workdir / 'rl'}")
    size = sum(f.stat().st_size for f in workdir.rglob("*") if f.is_file())
    print(f"run folder {workdir}: {size / 1e9:.1f} GB (checkpoints and the MLflow store); "
          f"remove it when done with them")


def _merge(args) -> None:
    """One summary from an rl-only and a placebo-only file of the same preset and sealed set: the
    scores and per-cycle rows of both; the two arms' first scores must agree (same bootstrap
    champion, greedy)."""
    from tasks.pyfuncs import read_jsonl

    rl, pl = (json.loads(Path(f).read_text()) for f in args.merge)
    if not rl.get("complete"):
        raise SystemExit("the rl run must be complete")
    if rl["scores"]["first"]["passed"] != pl["scores"]["first"]["passed"]:
        raise SystemExit("the arms scored their first champion differently")
    scores = {**pl["scores"], **rl["scores"]}
    placebo_note = None
    if not pl.get("complete"):
        # A placebo arm cut short (killed) counts for the cycles it finished. If none of them
        # promoted, its champion was still the first one: its sealed score is the first's.
        done = [r for r in pl["per_cycle"] if r["arm"] == "placebo"]
        if not done or any(r["promoted"] for r in done):
            raise SystemExit("the placebo run stopped early after a promotion (or before any "
                             "cycle): its final champion was never scored")
        scores["placebo-final"] = {**scores["first"], "humaneval": None, "humaneval_passed": None}
        placebo_note = (f"the placebo run stopped after {len(done)} of {rl['cycles']} cycles "
                        "without a promotion: its final champion is the first one")
    sealed = read_jsonl(args.sealed_file)
    sealed = sealed[:args.sealed] if args.sealed else sealed
    args.cycles, args.requests, args.humaneval = rl["cycles"], rl["requests_per_cycle"], rl[
        "humaneval_problems"]
    rows = rl["per_cycle"] + pl["per_cycle"]
    summary = summarise(args, rows, scores, sealed, max(rl["seconds"], pl["seconds"]))
    summary.update(complete=True, arms_side_by_side=not args.sequential,
                   load1=max(rl["load1"], pl["load1"]), commit=rl.get("commit"),
                   date=rl["date"], placebo_complete=bool(pl.get("complete")),
                   placebo_note=placebo_note)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    report(summary, args.out)


def _humaneval_after(args) -> None:
    """HumanEval on the checkpoints a finished run scored on the sealed set (kept under
    ``--workdir``/rl/scored/v<N>), outside the run's own clock."""
    if args.workdir is None:
        raise SystemExit("--humaneval-after needs the run's --workdir")
    summary = json.loads(args.humaneval_after.read_text())
    for key, name in (("first", "humaneval_first"), ("rl-final", "humaneval_final")):
        if summary["scores"][key].get("humaneval") is not None:
            summary[name] = summary["scores"][key]["humaneval"]
            continue  # scored already
        version = summary["scores"][key]["version"]
        ckpt = next((args.workdir / "rl" / "scored" / f"v{version}").rglob("config.json")).parent
        say(f"HumanEval ({args.humaneval} problems, chat, greedy) on v{version} ({key})")
        t0 = time.perf_counter()
        passed = score_humaneval(ckpt, args.humaneval)
        summary["scores"][key]["humaneval_passed"] = passed
        summary[field] = summary["scores"][key]["humaneval"] = rate(passed)
        say(f"  {key}: {summary[field]:.3f} in {time.perf_counter() - t0:.0f} s")
    summary["humaneval_problems"] = args.humaneval
    summary["humaneval_scored"] = {
        "date": _now(), "commit": provenance.commit(), "load1": provenance.load1()}
    args.humaneval_after.write_text(json.dumps(summary, indent=2) + "\n")


def report(summary: dict, out: Path) -> None:
    rows = summary["per_cycle"]
    print(f"{'cycle':>5} {'arm':>7} {'outcome':>11} {'live pass':>9} {'edit':>6} {'dissat':>6} "
          f"{'gate cand':>9} {'gate champ':>10}")
    for r in rows:
        gc, gh = r["gate_candidate"], r["gate_champion"]
        print(f"{r['cycle'] + 1:>5} {r['arm']:>7} {r['outcome']:>11} "
              f"{r['live_pass_rate']:>9.3f} {r['edit_persistence']:>6.3f} "
              f"{r['dissatisfied_rate']:>6.3f} {'-' if gc is None else f'{gc:.3f}':>9} "
              f"{'-' if gh is None else f'{gh:.3f}':>10}")
    if summary["pass_final"] is not None:
        print(f"sealed set ({summary['sealed_tasks']} tasks): {summary['pass_first']:.3f} -> "
              f"{summary['pass_final']:.3f}, final - first 95% CI [{summary['ci_low']:+.3f}, "
              f"{summary['ci_high']:+.3f}]; placebo delta {summary['placebo_delta']}; "
              f"{summary['promotions']} promotion(s)")
        for key in CARRY_LABELS:
            line = carry_over_line(summary, key)
            if line:
                print(line)
    print(f"wrote {out}")


CARRY_LABELS = {"rl-final": "carry-over, final vs first champion (by function): ",
                "rl-last-candidate": "carry-over, the last candidate (not promoted) vs the first "
                                     "champion (by function): "}


def carry_over_line(summary: dict, key: str = "rl-final") -> str | None:
    """``key`` (the final champion, or the last candidate the gate did not promote) vs the first
    champion on the sealed set and each pool beside it, paired by function, with each pool's worst
    family and whether it is surely worse; None when ``key`` was not scored or is the first."""
    scores = summary.get("scores", {})
    if key not in scores or scores[key].get("version") == scores.get("first", {}).get("version"):
        return None
    parts = []
    if key == "rl-final" and summary.get("pass_final") is not None:
        parts.append(f"sealed {summary['delta']:+.3f} [{summary['ci_low']:+.3f}, "
                     f"{summary['ci_high']:+.3f}]")
    elif key == "rl-last-candidate" and summary.get("rl_last_candidate"):
        last = summary["rl_last_candidate"]
        parts.append(f"sealed {last['delta']:+.3f} [{last['ci'][0]:+.3f}, {last['ci'][1]:+.3f}]")
    for pool in CARRY_POOLS:
        entry = (summary.get(pool) or {}).get(key)
        if not entry:
            continue
        drop = entry["family_max_drop"]
        worst = (f", worst family {drop['family']} {-drop['drop']:+.2f}"
                 f"{' (surely worse)' if drop['surely_worse'] else ''}" if drop["drop"] > 0
                 else ", no family worse")
        parts.append(f"{pool} {entry['delta']:+.3f} [{entry['ci'][0]:+.3f}, "
                     f"{entry['ci'][1]:+.3f}]{worst}")
    return CARRY_LABELS[key] + "; ".join(parts) if parts else None


if __name__ == "__main__":
    main()
