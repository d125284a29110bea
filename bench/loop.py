"""Does the loop itself learn? Several cycles of the real loop from one champion, per seed.

Per seed and arm: an embedded broker and MLflow server, the first champion registered as
``champion`` (``--champion lazy``, the default: ``trainer.fixtures.lazy_champion_dir()``, the warm
start with the planted lazy-fix habit of ``trainer/habit.py``, which RL can correct; ``warm``: the
plain warm start ``champion_dir()``, which it barely can, see bench/headroom.py), a stable and a
canary replica group behind a router, and the user simulator on the router. Each cycle: one round
of simulated traffic served by whichever checkpoint is live (its delayed signals in compressed
event time), then ``ratchet.cycle.Cycle`` — ingest → train → gate → deploy, the deploy stage being
the canary rollout on the router (weight steps, statistical judge, rollback), with simulated
traffic running while the canary is judged. After each cycle the champion is scored greedily on the
sealed set (``tasks.toy.fresh_tasks()``: split ``fresh``, disjoint by prompt text from the train
split, the gate pool every gate draws its suite from, and every held-out task that chose a
hyper-parameter).

Live product metrics: per seed, the first cycle's traffic (served by the first champion) against
the last cycle's (served by whatever is live then); the change is compared with the seed-to-seed
band (the range of the first cycle's figure over seeds).

The placebo arm (``--placebo-seeds``) is the same loop with the reward column of the training rows
shuffled (``trainer.shuffle_rewards``): it must not improve.

    .venv/bin/python -m bench.loop [--seeds 0 1 2 --cycles 5 --requests 384 --placebo-seeds 0]

Writes bench/results/loop.json (``pass_first``/``pass_final`` on the fresh set, ``ci_low``/
``ci_high`` = 95% paired bootstrap over distinct prompts of final minus first
(``ci_rows_independent``: the same over rows, as if independent), ``placebo_delta``, per-cycle
rows, ``live`` = first vs last traffic per seed) and bench/results/loop.png. Left out: anything
not driven through ``ratchet.cycle``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # bench/ingest.py would shadow the ingest package

from ratchet.cycle import Cycle  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "loop.json"
TOKEN = "loop-bench-token"
CANARY_TRAFFIC = "canary-traffic"
"""Thread of the traffic kept on the router during a canary; its progress lines stay off the
terminal."""
BOOTSTRAP = 2000


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- the cycle, with progress, canary traffic and the placebo ------------------------------------
class BenchCycle(Cycle):
    """A ``Cycle`` that prints each stage and keeps simulated traffic on the router while its
    canary is judged (the judge needs requests and reward rows from both arms)."""

    traffic_seed = 0
    api_key = ""

    def _timed(self, result, stage, fn):
        say(f"  stage {stage} ...")  # the cycle itself logs when it is done
        return super()._timed(result, stage, fn)

    def _canary(self, state):
        from simulation.simulator import UserSimulator

        sim = UserSimulator(urls=[self.config.fleet.router_url], api_key=self.api_key,
                            speed=self.config.simulator.speed, seed=self.traffic_seed)
        stop = threading.Event()

        def traffic() -> None:
            while not stop.is_set():
                sim.run_round(8, concurrency=4)

        thread = threading.Thread(target=traffic, daemon=True, name=CANARY_TRAFFIC)
        thread.start()
        try:
            return super()._canary(state)
        finally:
            stop.set()
            thread.join()
            sim.close()


# -- scoring on the fresh set ---------------------------------------------------------------------
@dataclass
class Score:
    passed: list[bool]
    mean_tokens: float
    keys: list[str] | None = None
    """Each task's prompt text: the cluster of the paired statistics."""

    @property
    def pass_rate(self) -> float:
        return sum(self.passed) / len(self.passed)


def score(checkpoint: Path, tasks, max_new_tokens: int = 32) -> Score:
    """Greedy pass per task (``tasks.toy.check``) and mean completion tokens."""
    from policy.toy.checkpoint import load_checkpoint
    from policy.toy.generate import generate
    from tasks.toy import check

    model = load_checkpoint(checkpoint)
    passed, tokens = [], 0
    for start in range(0, len(tasks), 128):
        chunk = tasks[start:start + 128]
        gens = generate(model, [t.prompt for t in chunk], max_new_tokens=max_new_tokens,
                        temperature=0.0, seed=start)
        for task, g in zip(chunk, gens):
            passed.append(check(task, g.text).passed)
            tokens += len(g.token_ids)
    return Score(passed, tokens / len(tasks), [t.prompt for t in tasks])


def bootstrap_ci(diffs: list[list[float]], seed: int = 0,
                 keys: list[str] | None = None) -> tuple[float, float]:
    """95% CI of the mean over runs of the mean per-task difference, resampling distinct prompts
    (``keys``: each task's prompt; None resamples tasks). Paired: every run is resampled on the
    same prompts, so this is the bootstrap of the per-task mean over runs."""
    import numpy as np

    from gating.stats import cluster_bootstrap, cluster_ids

    d = np.mean(np.asarray(diffs, dtype=float), axis=0)
    ci = cluster_bootstrap(d, None if keys is None else cluster_ids(keys), n_resamples=BOOTSTRAP,
                           low_q=0.025, high_q=0.975, seed=seed)
    return ci.low, ci.high


def rate_ci(passed: list[bool], seed: int = 0, keys: list[str] | None = None
            ) -> tuple[float, float]:
    """95% bootstrap CI of one pass rate (over distinct prompts when ``keys`` are given)."""
    return bootstrap_ci([[float(p) for p in passed]], seed, keys)


# -- one loop ------------------------------------------------------------------------------------
def loop_config(args, *, name: str, seed: int, router_url: str):
    from ratchet.config import RatchetConfig
    from simulation.simulator import SIMULATED_SKEW_S

    return RatchetConfig.model_validate({
        "model_name": name,
        "experiment": f"loop-{name}",
        "ingest": {
            "group_id": f"loop-{uuid.uuid4().hex[:6]}",
            # compressed time: signals are stamped up to 10 event-minutes ahead of the clock;
            # no drain: a completion is final once its expected signals are in
            "parse": {"max_future_skew_s": SIMULATED_SKEW_S},
            "join": {"allowed_lateness_s": 1.0},
        },
        "trainer": {"seed": seed, "steps": args.train_steps},
        "gate": {"suite": {"size": args.gate_tasks},
                 "improvement": {"min_pass_rate_ci_low": args.gate_ci_margin}},
        "fleet": {"router_url": router_url, "admin_token": TOKEN,
                  "rollout_timeout_s": args.rollout_timeout_s},
        "rollout": {"steps": [0.5, 1.0], "window_s": args.window_s, "max_extensions": 6,
                    "judge": {"min_requests": args.min_requests,
                              "min_signals": args.min_signals}},
        "simulator": {"requests_per_round": args.requests, "seed": seed},
    })


def run_loop(args, *, seed: int, placebo: bool, fresh, workdir: Path, scores: dict,
             rows: list[dict], on_cycle) -> None:
    """``args.cycles`` cycles of one arm, appended to ``rows`` (``on_cycle()`` after each);
    ``scores`` caches fresh-set scores by checkpoint key."""
    from deploy.fleet.fleet import Fleet, RouterProcess
    from ratchet.runner import services
    from simulation.simulator import SIMULATED_SKEW_S, UserSimulator
    arm = "placebo" if placebo else "rl"
    name = f"loop-{arm}-s{seed}"
    with services(workdir, bootstrap=None, tracking_uri=None) as ep:
        uri = ep.tracking_uri
        v1 = _register_first(uri, name, first_champion(args.champion))
        common = dict(n_replicas=1, tracking_uri=uri, model_name=name, bootstrap=ep.bootstrap,
                      admin_token=TOKEN, api_keys_path=workdir / "api_keys.json",
                      signal_max_skew_s=SIMULATED_SKEW_S, version=v1, behind_router=True)
        say(f"[{arm} seed {seed}] starting the stable and canary replicas and the router")
        with (
            Fleet.start(**common, workdir=workdir / "stable", name="stable") as stable,
            Fleet.start(**common, workdir=workdir / "canary", name="canary") as canary,
            RouterProcess.start(stable_urls=stable.urls, canary_urls=canary.urls,
                                admin_token=TOKEN, workdir=workdir / "router") as router,
        ):
            config = loop_config(args, name=name, seed=seed, router_url=router.url)
            key = stable.create_api_key("loop-bench")
            if placebo:  # the same rows, rewards shuffled (seeded by the cycle)
                config = config.model_copy(update={"trainer": config.trainer.model_copy(
                    update={"shuffle_rewards": True})})
            cycle = BenchCycle(config, tracking_uri=uri, bootstrap=ep.bootstrap, workdir=workdir)
            cycle.api_key, cycle.traffic_seed = key, 1000 + seed
            sim = UserSimulator(urls=[router.url], api_key=key, speed=config.simulator.speed,
                                seed=seed)
            try:
                for i in range(args.cycles):
                    rows.append(_one_cycle(args, i, arm, seed, cycle, sim, uri, name, workdir,
                                           fresh, scores))
                    on_cycle()
            finally:
                sim.close()


def first_champion(kind: str) -> Path:
    """The checkpoint the loop starts from: ``lazy`` or ``warm`` (see the module docstring)."""
    from trainer.fixtures import champion_dir, lazy_champion_dir

    return lazy_champion_dir() if kind == "lazy" else champion_dir()


def _register_first(uri: str, name: str, checkpoint: Path) -> int:
    """``checkpoint`` as version 1 of ``name``, alias ``champion``."""
    import mlflow

    from policy.toy.checkpoint import load_metadata
    from runtime import registry

    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(f"loop-{name}")
    with mlflow.start_run(run_name="first-champion"):
        origin = load_metadata(checkpoint).get("origin", "warm_start")
        return registry.log_checkpoint(checkpoint, model_name=name, alias=registry.CHAMPION,
                                       tags={"ratchet.origin": origin}).version


def _one_cycle(args, i, arm, seed, cycle, sim, uri, name, workdir, fresh, scores) -> dict:
    from runtime import registry

    c0 = time.perf_counter()
    served = registry.resolve_alias(uri, name, registry.CHAMPION)
    say(f"[{arm} seed {seed}] cycle {i + 1}/{args.cycles}: traffic, {args.requests} requests "
        f"served by v{served}")
    stats = sim.run_round(args.requests, concurrency=4)
    sim.drain()
    traffic_s = time.perf_counter() - c0
    result = cycle.run(i)
    champion = registry.resolve_alias(uri, name, registry.CHAMPION)
    key = f"{arm}-{seed}-v{champion}" if champion != 1 else "first"
    if key not in scores:
        say(f"  fresh set: scoring champion v{champion} on {len(fresh)} tasks")
        ckpt = registry.download_checkpoint(uri, name, champion, workdir / "fresh" / f"v{champion}")
        scores[key] = score(ckpt, fresh)
    s = scores[key]
    low, high = rate_ci(s.passed, keys=s.keys)
    outcome = ("skipped" if result.skipped else "rolled back" if result.rolled_back
               else "promoted" if result.promoted else "rejected")
    row = {
        "arm": arm, "seed": seed, "cycle": i, "served_version": served,
        "live_pass_rate": stats.pass_rate, "edit_persistence": stats.edit_persistence,
        "dissatisfied_rate": stats.dissatisfied_rate, "mean_latency_ms": stats.mean_latency_ms,
        "completion_tokens": stats.mean_completion_tokens, "requests": stats.requests,
        "errors": stats.errors, "rows": result.span_rows, "train_rows": result.train_rows,
        "outcome": outcome,
        "skipped": result.skipped, "rollout": result.rollout, "promoted": result.promoted,
        "rolled_back": result.rolled_back, "candidate_version": result.candidate_version,
        "gate_candidate": result.candidate_pass_rate, "gate_champion": result.champion_pass_rate,
        "gate_candidate_tokens": result.candidate_tokens, "gate_passed": result.gate_passed,
        "gate_ci_low": result.gate_ci_low, "gate_ci_high": result.gate_ci_high,
        "gate_tasks": result.gate_tasks, "champion_after": champion,
        "fresh_pass": s.pass_rate, "fresh_ci_low": low, "fresh_ci_high": high,
        "fresh_tokens": s.mean_tokens, "seconds": {"traffic": round(traffic_s, 1),
                                                   **result.seconds},
        "score_key": key,
    }
    say(f"[{arm} seed {seed}] cycle {i + 1}: {outcome}; live pass {stats.pass_rate:.3f}, edit "
        f"{stats.edit_persistence:.3f}, dissat {stats.dissatisfied_rate:.3f}, rows "
        f"{result.span_rows} (trained on {result.train_rows}); fresh pass v{champion} "
        f"{s.pass_rate:.3f} [{low:.3f}, {high:.3f}] ({time.perf_counter() - c0:.0f} s)")
    return row


# -- summary and plot -----------------------------------------------------------------------------
def summarise(args, rows: list[dict], scores: dict, fresh_n: int) -> dict:
    from tasks.toy import FRESH_SEED

    first = scores["first"]

    def finals(arm: str) -> dict[int, Score]:
        last = {}
        for r in rows:
            if r["arm"] == arm:
                last[r["seed"]] = scores[r["score_key"]]
        return last

    rl = finals("rl") or {-1: first}
    diffs = [[float(a) - float(b) for a, b in zip(s.passed, first.passed)] for s in rl.values()]
    ci_low, ci_high = bootstrap_ci(diffs, keys=first.keys)
    rows_low, rows_high = bootstrap_ci(diffs)
    placebo = finals("placebo")
    placebo_delta = (statistics.mean(s.pass_rate - first.pass_rate for s in placebo.values())
                     if placebo else None)
    placebo_ci = bootstrap_ci([[float(a) - float(b) for a, b in zip(s.passed, first.passed)]
                               for s in placebo.values()], keys=first.keys) if placebo else None
    return {
        "cycles": args.cycles, "seeds": args.seeds, "champion": args.champion,
        "pass_first": first.pass_rate,
        "pass_final": statistics.mean(s.pass_rate for s in rl.values()),
        "pass_final_per_seed": {str(k): s.pass_rate for k, s in rl.items()},
        "ci_low": ci_low, "ci_high": ci_high, "placebo_delta": placebo_delta,
        "ci": "95% paired bootstrap over distinct prompts of the sealed set",
        "ci_rows_independent": [rows_low, rows_high],
        "placebo_ci": placebo_ci,
        "placebo_final_per_seed": {str(k): s.pass_rate for k, s in placebo.items()},
        "tokens_first": first.mean_tokens,
        "tokens_final": statistics.mean(s.mean_tokens for s in rl.values()),
        "promotions": sum(r["promoted"] for r in rows if r["arm"] == "rl"),
        "rollbacks": sum(r["rolled_back"] for r in rows if r["arm"] == "rl"),
        "live": live_change(rows, "rl"), "live_placebo": live_change(rows, "placebo"),
        "fresh_set": {"split": "fresh", "seed": FRESH_SEED, "tasks": fresh_n,
                      "prompts": len(set(first.keys or [])),
                      "note": "tasks.toy.fresh_tasks(): the sealed set, never gated, tuned or "
                              "trained on"},
        "placebo_seeds": args.placebo_seeds,
        "sizes": {k: getattr(args, k) for k in ("requests", "train_steps", "gate_tasks",
                                                "window_s", "min_requests", "min_signals",
                                                "gate_ci_margin", "fresh_tasks")},
        "per_cycle": rows,
    }


LIVE = ("edit_persistence", "dissatisfied_rate", "live_pass_rate", "mean_latency_ms",
        "completion_tokens")


def live_change(rows: list[dict], arm: str) -> dict:
    """Per live metric: each seed's last-cycle traffic minus its first (the first cycle is
    served by the first champion), their mean, and the seed-to-seed band (range over seeds of
    the first cycle's figure) that a change must exceed to count."""
    by_seed: dict[int, list[dict]] = {}
    for r in rows:
        if r["arm"] == arm:
            by_seed.setdefault(r["seed"], []).append(r)
    full = {seed: mine for seed, mine in by_seed.items() if len(mine) > 1}
    if not full:
        return {}
    out = {}
    for key in LIVE:
        firsts = [mine[0][key] for mine in full.values()]
        changes = [mine[-1][key] - mine[0][key] for mine in full.values()]
        band = max(firsts) - min(firsts)
        mean = statistics.mean(changes)
        out[key] = {"first": statistics.mean(firsts),
                    "last": statistics.mean(mine[-1][key] for mine in full.values()),
                    "change_per_seed": dict(zip(map(str, full), changes)), "change": mean,
                    "seed_band": band, "beyond_band": abs(mean) > band and len(full) > 1}
    return out


_PANELS = [("fresh_pass", "fresh-set pass rate (champion after the cycle)"),
           ("edit_persistence", "live edit persistence (600 s)"),
           ("dissatisfied_rate", "live dissatisfied follow-ups"),
           ("mean_latency_ms", "live mean latency (ms)"),
           ("completion_tokens", "live completion tokens")]


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(_PANELS), figsize=(4.0 * len(_PANELS), 3.4))
    for ax, (key, title) in zip(axes, _PANELS):
        for (arm, seed) in sorted({(r["arm"], r["seed"]) for r in rows}):
            mine = [r for r in rows if r["arm"] == arm and r["seed"] == seed]
            x = [r["cycle"] + 1 for r in mine]
            style = "-" if arm == "rl" else ":"
            if key == "fresh_pass":
                y = [r[key] for r in mine]
                err = [[v - r["fresh_ci_low"] for v, r in zip(y, mine)],
                       [r["fresh_ci_high"] - v for v, r in zip(y, mine)]]
                ax.errorbar(x, y, yerr=err, fmt="o" + style, capsize=3, label=f"{arm} s{seed}")
            else:
                ax.plot(x, [r[key] for r in mine], "o" + style, label=f"{arm} s{seed}")
            for r in mine:
                if r["promoted"]:
                    ax.axvline(r["cycle"] + 1, color="green", alpha=0.12)
                if r["rolled_back"]:
                    ax.axvline(r["cycle"] + 1, color="red", alpha=0.12)
        ax.set_xticks(sorted({r["cycle"] + 1 for r in rows}))
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("cycle", fontsize=8)
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--champion", choices=("lazy", "warm"), default="lazy",
                        help="First champion: the warm start with the planted lazy-fix habit, "
                        "or the plain warm start.")
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--placebo-seeds", type=int, nargs="*", default=[0],
                        help="Seeds of the shuffled-reward arm (none: no placebo).")
    parser.add_argument("--requests", type=int, default=384,
                        help="Requests per traffic round (the simulator's default).")
    parser.add_argument("--train-steps", type=int, default=20)
    parser.add_argument("--gate-tasks", type=int, default=400)
    parser.add_argument("--gate-ci-margin", type=float, default=0.0,
                        help="Gate: the pass-rate change CI lower bound must exceed this (the "
                        "project default 0.0; -1 lets ties through, for smoke runs only).")
    parser.add_argument("--fresh-tasks", type=int, default=2000)
    parser.add_argument("--window-s", type=float, default=8.0)
    parser.add_argument("--min-requests", type=int, default=15)
    parser.add_argument("--min-signals", type=int, default=10)
    parser.add_argument("--rollout-timeout-s", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    from runtime.services import unwind_on_sigterm

    unwind_on_sigterm()  # SIGTERM stops what this run started, by PID

    import torch

    from ratchet import console
    from tasks.toy import fresh_tasks

    log_file = Path(tempfile.gettempdir()) / f"ratchet-loop-{time.strftime('%Y%m%d-%H%M%S')}.log"
    console.setup(log_file)  # ratchet's own lines here, library chatter to the log file
    for handler in logging.getLogger().handlers[:1]:  # the terminal's
        handler.addFilter(lambda r: r.threadName != CANARY_TRAFFIC or r.levelno >= logging.WARNING)
    say(f"full log: {log_file}")
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    fresh = fresh_tasks(args.fresh_tasks)
    say(f"fresh set: scoring the first champion on {len(fresh)} fresh tasks")
    scores = {"first": score(first_champion(args.champion), fresh)}
    say(f"first champion: fresh pass {scores['first'].pass_rate:.3f}")
    rows: list[dict] = []

    def write(complete: bool) -> dict:
        """Written after every cycle (``complete`` false until the end): a run cut short still
        leaves its figures."""
        out = summarise(args, rows, scores, len(fresh))
        out["complete"], out["total_seconds"] = complete, round(time.perf_counter() - t0, 1)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2, default=lambda o: asdict(o)))
        plot(rows, args.out.with_suffix(".png"))
        return out

    runs = [(False, s) for s in args.seeds] + [(True, s) for s in args.placebo_seeds]
    for placebo, seed in runs:
        workdir = Path(tempfile.mkdtemp(prefix="ratchet-loop-"))
        try:
            run_loop(args, seed=seed, placebo=placebo, fresh=fresh, workdir=workdir,
                     scores=scores, rows=rows, on_cycle=lambda: write(False))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    out = write(True)
    say(f"pass first {out['pass_first']:.3f} -> final {out['pass_final']:.3f}, final - first "
        f"CI [{out['ci_low']:+.3f}, {out['ci_high']:+.3f}], placebo delta "
        f"{out['placebo_delta']}, {out['promotions']} promotion(s); {out['total_seconds']:.0f} s")
    say(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
