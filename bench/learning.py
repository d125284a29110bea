"""Does RL on the recorded fixture improve the warm-started champion? A controlled experiment.

Every arm starts from a checkpoint, trains on logged rows of the recorded fixture
(tests/fixtures/rl_rows.parquet: 2,000 train-split prompts x 4 samples at T = 1 from the cached
champion, trainer/fixtures.py) for the same number of steps and rows per step, once per seed, and
is scored greedy on the **fresh** set (``tasks.toy.fresh_tasks()``: 2,000 held-out-bucket tasks,
split ``"fresh"``, disjoint from the train split and from every held-out task that chose a
setting). Arms:

- ``rl``: ``run_training`` with the trainer's defaults (plus ``--config``);
- ``placebo``: the same, rewards shuffled across rows (seeded): must stay within noise of 0;
- ``filtered_sft``: cross-entropy on the same rows whose reward is > 0
  (``trainer.filtered_sft``, same steps, rows per step and lr); RL should match or beat it;
- ``one_sample``: one logged row per prompt (2,000 rows, seeded pick), the production regime:
  no natural groups, so the baseline is the value head;
- ``stale_on`` / ``stale_off``: the policy being trained is the champion two versions later
  (``trainer.fixtures.descendant_dir(2)``: two continuations of the warm start, 100 SFT steps
  each), the rows are the fixture's, logged by version 1: two versions old. The off-policy
  correction (truncated pi_prox / pi_b weights, the GSPO band) on vs off. Their "before" is
  the descendant's own pass rate;
- ``online``: not the fixture: ``trainer.online.run_online`` from the champion, R rounds
  (``--online`` settings); each samples P fresh train-split prompts x G answers from the
  *current* policy (same reward rule as the fixture), trains steps / R steps on them, and the
  next round starts from the result (the regime the production loop approximates);
- ``online_placebo``: the same with rewards shuffled inside each round.

``--champion lazy`` starts every arm but the stale ones from the champion with the planted
lazy-fix habit (``trainer/habit.py``) and trains on the same recording made from it; it writes
``learning_lazy.json`` and its own sidecar.

Per arm: the pass-rate change on the fresh set with a paired-bootstrap 95% CI (tasks resampled,
per-task change averaged over seeds first), mean completion tokens before/after, per-seed detail.

Which set tuned what: the trainer's defaults (token_clip, ``lr`` 1e-4, 120 steps; see
bench/results/learning_tuning.md for every run) were chosen on the held-out split's
``generate_tasks(300, seed=7, "heldout")`` draw and the logged train-split prompts; no setting was
tuned on the fresh set, and its tasks exclude that draw (up to 1,000 tasks of it:
``tasks.toy.FRESH_EXCLUDES``). The fresh set's seed and size are fixed (``FRESH_SEED``,
``FRESH_SIZE``). The fixture must be the champion's own samples: ``fixture_rows()`` re-records it
when the champion changes (a stale fixture is what stopped RL from learning after the champion
was rebuilt). Run as a module (``bench/ingest.py`` would shadow the ``ingest`` package):

    .venv/bin/python -m bench.learning [--steps 120 --seeds 0 1 2 3 4 --fresh 2000 --workers 2]

Writes bench/results/learning.json (rewritten after every run; ``complete`` says whether all ran)
and appends every finished run (arm, seed, start, per-task ``passed``, metrics) as one line to
bench/results/learning_runs.jsonl, keyed by the trainer config, steps, eval set, fixture and
start-checkpoint fingerprints (and the online settings for the online arms); ``--resume`` takes
the runs found there for the same key instead of running them again, so a cut run is completed
and seeds or arms can be added. ``--eval heldout --fresh 1000`` scores on the tuning draw instead
(``generate_tasks(1000, 7, "heldout")``): the only set to choose settings with.
Cost: arms run on ``--workers`` processes of ``--threads`` torch threads (1 each); each worker
computes the reference logprobs of the 8,000 fixture rows once per start checkpoint and reuses
them for every arm and seed (``run_training(ref_cache=...)``); the "before" of each start is
scored once; the per-step no-replay mismatch forward is off. A run is then ~1 CPU-s per step
plus ~30 CPU-s for a greedy pass over 2,000 tasks (about 160 CPU-s at 120 steps), so the 30 runs
of the default take ~85 CPU-min. Measured with 3 workers on the shared 2-core machine: 8-10 min
a run at load ~8 (4 seeds of the 6 arms in 73 min), 4 min a run once the load fell; so the
40-minute target holds only on a quiet machine at 120 steps (the setting tuned; ``--steps``
cuts all arms alike). The 5-seed run of 2026-11-23 (2 workers, load 5-7: the loop bench beside
it): ~3.3 min a pair of runs while quiet, 7-8 min at load 6; seed 4 ran in a second invocation
with its own sidecar, merged by concatenation (``--resume`` / ``--report-only`` read the union).
An ``online`` run costs ~1.7 fixture runs (4 rounds of sampling 1,920 rows, their reference
forward and 30 steps).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "learning.json"
RUNS = Path(__file__).parent / "results" / "learning_runs.jsonl"
ARM_OPTIONS: dict[str, tuple[dict, float]] = {
    "rl_big_batch": ({"batch_size": 256}, 0.25),
    "rl_zero_var": ({"drop_zero_variance_groups": True}, 1.0),
    "rl_asym": ({"neg_adv_scale": 0.5}, 1.0),
    "rl_nll": ({"nll_coef": 0.1}, 1.0),
    "cispo": ({"objective": {"type": "cispo"}}, 1.0),
    "rl_wide": ({"objective": {"type": "token_clip", "clip_eps_high": 1.0}, "lr": 2e-4}, 1.0),
    "one_sample_xfit": ({"value_head": {"folds": 2}}, 1.0),
}
"""The objective's options, one arm each: TrainerConfig fields over the bench's ``--config`` and
a factor on ``--steps``. rl_big_batch: 4x the rows per step for a quarter of the steps (the same
rows seen); rl_zero_var: zero-variance groups out of the token mean; rl_asym: negative advantages
halved; rl_nll: an NLL anchor (0.1) on rewarded rows; cispo: the CISPO objective; rl_wide: a
wider trust region (clip_eps_high 1.0) at lr 2e-4, to reach the filtered-SFT arm's KL;
one_sample_xfit: the one_sample rows with a value head cross-fitted over 2 prompt folds."""
ARMS = ("rl", "placebo", "filtered_sft", "one_sample", "stale_on", "stale_off", "online",
        "online_placebo", *ARM_OPTIONS)
BOOTSTRAP = 4000
EVAL_SETS = ("fresh", "heldout")
"""fresh: ``tasks.toy.fresh_tasks(n)``, the scored set; heldout: ``generate_tasks(n, 7,
"heldout")``, n <= 1,000 (inside ``FRESH_EXCLUDES``): the tuning set."""


def paired_bootstrap(before: list[bool], afters: list[list[bool]], *, n_boot: int = BOOTSTRAP,
                     seed: int = 0, keys: list[str] | None = None) -> tuple[float, float, float]:
    """Mean pass-rate change and its 95% percentile CI: per task the change is (mean over seeds of
    after) - before, so seeds share the task draw (paired). ``keys`` (each task's prompt text):
    resample distinct prompts, not rows (greedy answers to a repeated prompt are identical, so its
    rows are one observation); None resamples rows."""
    import numpy as np

    from gating.stats import cluster_bootstrap, cluster_ids

    b = np.asarray(before, dtype=float)
    d = np.mean(np.asarray(afters, dtype=float), axis=0) - b
    ci = cluster_bootstrap(d, None if keys is None else cluster_ids(keys), n_resamples=n_boot,
                           low_q=0.025, high_q=0.975, seed=seed)
    return ci.mean, ci.low, ci.high


def legacy_fresh_tasks(n: int, seed: int = 0):
    """The fresh set as drawn before the sealed split: held-out bucket, tuning draw left out."""
    from tasks.toy import _KINDS, KINDS, _tuning_task_ids, is_heldout

    rng = random.Random(f"ratchet.tasks/{seed}/fresh")
    excluded = _tuning_task_ids()
    out = []
    while len(out) < n:
        task = _KINDS[KINDS[len(out) % len(KINDS)]](rng)
        if is_heldout(task) and task.task_id not in excluded:
            out.append(task)
    return out


def arm_rows(arm: str, rows, seed: int):
    """The rows an arm trains on (pyarrow Table)."""
    from trainer.online import shuffle_rewards

    if arm == "placebo":
        return shuffle_rewards(rows, f"placebo/{seed}")
    if arm in ("one_sample", "one_sample_xfit"):
        by_prompt: dict[str, list[int]] = {}
        for i, p in enumerate(rows.column("prompt").to_pylist()):
            by_prompt.setdefault(p, []).append(i)
        rng = random.Random(f"one_sample/{seed}")
        return rows.take(sorted(rng.choice(ix) for ix in by_prompt.values()))
    return rows


_REF_CACHE: dict = {}
"""Per process: the reference logprobs of the fixture's rows under each start checkpoint, shared
by every arm and seed that process trains from it (``run_training(ref_cache=...)``)."""


def train_arm(arm: str, seed: int, start: Path, rows, config: dict, steps: int,
              out: Path, online: dict | None = None) -> dict:
    """Train one arm for one seed into ``out``; returns the trainer's summary metrics."""
    from trainer.config import TrainerConfig
    from trainer.filtered_sft import filtered_sft
    from trainer.recipe import run_training

    cfg = TrainerConfig.model_validate({**config, "seed": seed, "steps": steps})
    if arm in ARM_OPTIONS:
        fields, step_factor = ARM_OPTIONS[arm]
        cfg = TrainerConfig.model_validate({**config, **fields, "seed": seed,
                                            "steps": max(1, round(steps * step_factor))})
    if arm == "filtered_sft":
        kept = filtered_sft(start, rows, out, steps=steps, batch_size=cfg.batch_size, lr=cfg.lr,
                            seed=seed)
        return {"rows_kept": kept}
    if arm.startswith("stale"):
        cfg = cfg.model_copy(update={"off_policy_correction": arm == "stale_on"})
        return run_training(start, rows, cfg, out, current_version=3, ref_cache=_REF_CACHE)
    if arm.startswith("online"):
        from trainer.online import run_online

        settings = online_settings(online, arm)
        per_round = TrainerConfig.model_validate(
            {**config, **(online or {}).get("trainer", {}), "seed": seed,
             "steps": max(1, steps // settings.rounds)})
        return run_online(start, per_round, settings, out)
    return run_training(start, arm_rows(arm, rows, seed), cfg, out, ref_cache=_REF_CACHE)


def online_settings(online: dict | None, arm: str):
    """The ``trainer.online.OnlineRounds`` of an online arm (``--online`` fields but
    ``trainer``, which holds TrainerConfig overrides of the online arms; the placebo shuffles
    rewards inside each round). ``steps`` of the bench are split over the rounds."""
    from trainer.online import OnlineRounds

    fields = {k: v for k, v in (online or {}).items() if k != "trainer"}
    return OnlineRounds.model_validate({**fields, "shuffle_rewards": arm == "online_placebo"})


def _progress(done: int, total: int, t0: float, what: str) -> None:
    elapsed = time.perf_counter() - t0
    left = elapsed / done * (total - done) if done else float("nan")
    print(f"[{done}/{total}] {what} | {elapsed / 60:.1f} min elapsed, ~{left / 60:.1f} min left",
          flush=True)


def _summary(arm: str, before, per_seed: list[dict], keys: list[str] | None = None) -> dict:
    per_seed = sorted(per_seed, key=lambda s: s["seed"])
    afters = [s["passed"] for s in per_seed]
    delta, lo, hi = paired_bootstrap(before["passed"], afters, keys=keys)
    _, lo_rows, hi_rows = paired_bootstrap(before["passed"], afters)
    return {
        "ci": "95% paired bootstrap over distinct prompts" if keys else "95% over rows",
        "ci_rows_independent": [lo_rows, hi_rows],
        "pass_before": before["pass"], "tokens_before": before["tokens"],
        "pass_after": statistics.mean(s["pass_after"] for s in per_seed),
        "tokens_after": statistics.mean(s["tokens_after"] for s in per_seed),
        "delta": delta, "ci_low": lo, "ci_high": hi,
        "delta_sd_over_seeds": statistics.pstdev(s["pass_after"] - before["pass"]
                                                 for s in per_seed),
        "kl_to_start": (statistics.mean(s["kl_to_start"] for s in per_seed)
                        if all("kl_to_start" in s for s in per_seed) else None),
        "seeds_run": [s["seed"] for s in per_seed],
        "per_seed": [{k: v for k, v in s.items() if k != "passed"} for s in per_seed],
    }


CHAMPIONS = ("warm", "lazy")
"""The champion every arm but the stale ones starts from: ``warm``, the committed warm start
(``trainer.fixtures.champion_dir()``) with the recorded fixture; ``lazy``, the same with the
lazy-fix habit of ``trainer/habit.py`` planted (``lazy_champion_dir()``), with the same recording
made from it (``recorded_rows()``). The stale arms need the warm one."""


def champion_of(kind: str) -> Path:
    from trainer.fixtures import champion_dir, lazy_champion_dir

    return lazy_champion_dir() if kind == "lazy" else champion_dir()


def _start_of(arm: str) -> str:
    return "descendant" if arm.startswith("stale") else "champion"


# -- the sidecar of finished runs (resume) ----------------------------------------------------
def job_key(common: dict, arm: str, online: dict | None) -> str:
    """What a run's result depends on: the bench's common settings (trainer config, steps, eval
    set, fixture and start fingerprints) plus, for online arms, their round settings."""
    import hashlib

    what = {**common, "online": None}
    if arm in ARM_OPTIONS:
        what["arm_options"] = ARM_OPTIONS[arm]
    if arm.startswith("online"):
        what["online"] = {**online_settings(online, arm).model_dump(),
                          "trainer": (online or {}).get("trainer", {})}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def load_runs(path: Path) -> dict[tuple[str, str, int, str], dict]:
    """Finished runs in the sidecar, by (key, arm, seed, start); a line cut short by an
    interrupted write is skipped, a later line for the same run replaces an earlier one."""
    runs: dict[tuple[str, str, int, str], dict] = {}
    if not path.exists():
        return runs
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
            runs[(r["key"], r["arm"], int(r["seed"]), r["start"])] = r["result"]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
    return runs


def append_run(path: Path, key: str, arm: str, seed: int, start: str, result: dict) -> None:
    """One finished run (with its per-task ``passed``) as one JSON line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"key": key, "arm": arm, "seed": seed, "start": start, "result": result})
    with path.open("a") as f:
        f.write(line + "\n")


def split_jobs(jobs: list[tuple[str, int, str]], keys: dict[str, str],
               done: dict[tuple[str, str, int, str], dict]):
    """(finished: [(arm, seed, start, result)], pending: [(arm, seed, start)]) for ``jobs``,
    ``keys`` giving each arm's (and "before"'s) job key."""
    finished, pending = [], []
    for arm, seed, start in jobs:
        r = done.get((keys[arm], arm, seed, start))
        (finished.append((arm, seed, start, r)) if r is not None
         else pending.append((arm, seed, start)))
    return finished, pending


def _fingerprints(starts: dict[str, Path]) -> dict:
    import hashlib

    from trainer.fixtures import champion_fingerprint, recorded_rows_path

    rows = recorded_rows_path(starts["champion"])
    return {"fixture": hashlib.sha256(rows.read_bytes()).hexdigest()[:16],
            "starts": {k: champion_fingerprint(v) for k, v in starts.items()}}


def run(steps: int, seeds: list[int], n_fresh: int, arms: list[str], threads: int,
        config: dict, out: Path, workers: int = 1, *, eval_set: str = "fresh",
        online: dict | None = None, runs_path: Path | None = None,
        resume: bool = False, report_only: bool = False, champion: str = "warm") -> dict:
    """Seeds outer, arms inner (so a cut-short run has every arm on its first seeds), on
    ``workers`` processes of ``threads`` torch threads each; the "before" of each start
    checkpoint is scored once. Every finished run is appended to ``runs_path`` (the sidecar,
    default: next to ``out``); ``resume`` takes the runs already there for the same settings
    instead of running them again; ``report_only`` runs nothing new (the results of what the
    sidecar holds; ``missing`` lists the rest). The results file is rewritten after every run
    (``complete`` says whether all ran). ``champion``: one of ``CHAMPIONS``."""
    from trainer.fixtures import descendant_dir, recorded_rows

    if champion != "warm" and any(a.startswith("stale") for a in arms):
        raise ValueError("the stale-rows arms start from descendants of the warm champion only")
    config = {"mismatch_every": 0, **config}  # a diagnostic forward the bench does not read
    runs_path = runs_path or out.with_name(out.stem + "_runs.jsonl")
    t0 = time.perf_counter()
    champ = champion_of(champion)
    rows = recorded_rows(champ)  # (re-)recorded here once if missing or stale
    makers = {"champion": lambda: champ, "descendant": lambda: descendant_dir(2)}
    starts = {k: makers[k]() for k in dict.fromkeys(_start_of(a) for a in arms)}
    # every start's fingerprint, whichever arms run: the keys of a run with some arms match
    # those of a later run with all of them
    common = {"config": config, "steps": steps, "eval": [eval_set, n_fresh],
              **_fingerprints({k: starts.get(k) or m() for k, m in makers.items()})}
    keys = {a: job_key(common, a, online) for a in ("before", *arms)}
    prompts = [t.prompt for t in eval_tasks(eval_set, n_fresh)]
    distinct = len(set(prompts))
    jobs = [("before", 0, k) for k in starts] + [(a, s, _start_of(a)) for s in seeds
                                                  for a in arms]
    finished, pending = split_jobs(jobs, keys, load_runs(runs_path)
                                   if resume or report_only else {})
    missing, pending = (pending, []) if report_only else ([], pending)
    print(f"{len(finished)} of {len(jobs)} runs already in {runs_path}", flush=True)
    befores: dict[str, dict] = {}
    per_arm: dict[str, list[dict]] = {arm: [] for arm in arms}
    result: dict = {}
    starts_all = {"champion": champ, **starts}
    fresh_runs = _execute(pending, starts_all, config, steps, n_fresh, threads, workers, eval_set,
                          online)
    for done, (arm, seed, start, r) in enumerate(_chain(finished, fresh_runs, runs_path, keys),
                                                 1):
        if arm == "before":
            befores[start] = r
            _progress(done, len(jobs), t0, f"before: {start} pass {r['pass']:.3f}")
        else:
            per_arm[arm].append(r)
            _progress(done, len(jobs), t0, f"{arm} seed {seed} -> {r['pass_after']:.3f}, tokens "
                      f"{r['tokens_after']:.2f}, train {r['train_seconds']:.0f} s")
        if len(befores) == len(starts):
            result = _result(per_arm, befores, seeds, steps, n_fresh, rows, config, t0, prompts)
            result.update(complete=done == len(jobs), workers=workers, threads=threads,
                          eval_set=eval_set, runs_file=runs_path.name, run_keys=keys,
                          runs_resumed=len(finished), missing=missing,
                          online=online_settings(online, "online").model_dump()
                          if any(a.startswith("online") for a in arms) else None)
            result["sizes"]["fresh_distinct"] = distinct
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(result, indent=2))
    return result


def _chain(finished, fresh_runs, runs_path: Path, keys: dict[str, str]):
    """The runs found in the sidecar, then each new run as it finishes (appended there)."""
    yield from finished
    for arm, seed, start, r in fresh_runs:
        append_run(runs_path, keys[arm], arm, seed, start, r)
        yield arm, seed, start, r


def _execute(jobs, starts, config, steps, n_fresh, threads, workers, eval_set="fresh",
             online=None):
    """Yields (arm, seed, start, result) as jobs finish: in this process, or on a pool of
    ``workers`` spawned processes (each keeps its own reference-logprob cache)."""
    args = (config, steps, n_fresh, eval_set, online, starts["champion"])
    if workers <= 1 or len(jobs) <= 1:
        _init_worker(threads)
        for arm, seed, start in jobs:
            yield arm, seed, start, _job(arm, seed, starts[start], *args)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from bench import learning  # pickled by module name, not as __main__

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=learning._init_worker,
                             initargs=(threads,)) as pool:
        futures = {pool.submit(learning._job, arm, seed, starts[start], *args):
                   (arm, seed, start) for arm, seed, start in jobs}
        for f in as_completed(futures):
            yield (*futures[f], f.result())


def _init_worker(threads: int) -> None:
    import os

    import torch

    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)


def eval_tasks(eval_set: str, n: int) -> list:
    """The tasks a bench run is scored on (``EVAL_SETS``)."""
    from tasks.toy import FRESH_EXCLUDES, fresh_tasks, generate_tasks

    if eval_set == "fresh":
        return fresh_tasks(n)
    if eval_set == "heldout" and n <= dict(FRESH_EXCLUDES)[7]:
        return generate_tasks(n, 7, "heldout")
    raise ValueError(f"eval_set must be 'fresh' or 'heldout' (n <= 1000), got {eval_set!r}, {n}")


def _job(arm: str, seed: int, start: Path, config: dict, steps: int, n_fresh: int,
         eval_set: str = "fresh", online: dict | None = None,
         champion: Path | None = None) -> dict:
    """One unit of work: score a start checkpoint ("before"), or train an arm on the rows
    recorded from ``champion`` (default: the committed one) and score it."""
    from policy.toy.checkpoint import load_checkpoint
    from trainer.evaluate import evaluate
    from trainer.fixtures import champion_dir, recorded_rows

    tasks = eval_tasks(eval_set, n_fresh)
    if arm == "before":
        r = evaluate(load_checkpoint(start), tasks)
        return {"pass": r.pass_rate, "tokens": r.mean_tokens, "by_kind": r.by_kind,
                "passed": r.passed}
    with tempfile.TemporaryDirectory() as tmp:
        t1 = time.perf_counter()
        metrics = train_arm(arm, seed, start, recorded_rows(champion or champion_dir()), config,
                            steps, Path(tmp) / "cand", online)
        seconds = time.perf_counter() - t1
        after = evaluate(load_checkpoint(Path(tmp) / "cand"), tasks)
        kl = kl_to_start(Path(tmp) / "cand", start, recorded_rows(champion or champion_dir()))
    return {"seed": seed, "kl_to_start": kl, "pass_after": after.pass_rate,
            "tokens_after": after.mean_tokens,
            "by_kind_after": after.by_kind, "train_seconds": seconds, "passed": after.passed,
            **{k: metrics[k] for k in ("kl_theta_ref_k3", "rows_used", "rows_kept",
                                       "is_weight_mean", "reward_mean", "rows_reference_cached",
                                       "rows_sampled", "reward_mean_rounds")
               if k in metrics}}


KL_ROWS = 512
"""Fixture rows (the first, in file order) that :func:`kl_to_start` averages over."""


def kl_to_start(after: Path, start: Path, rows) -> float:
    """KL(pi_after || pi_start) per response token: the k3 estimate of trainer/rl.py
    (``kl_k3_weighted``), importance-weighted from the logged behaviour logprobs of the first
    ``KL_ROWS`` fixture rows (sampled at T = 1), every arm measured the same way; no routing
    replay on either side."""
    import torch

    from policy.loader import load_policy
    from trainer import rl
    from trainer.data import collate, rows_to_samples

    a, s = load_policy(after), load_policy(start)
    samples, _ = rows_to_samples(rows.slice(0, KL_ROWS), vocab_size=a.tokenizer_info.vocab_size,
                                 max_seq_len=a.max_seq_len, encode_prompt=a.encode_prompt)
    spec = a.moe_spec
    b = collate(samples, n_layers=spec.n_moe_layers, top_k=spec.top_k,
                pad_id=a.tokenizer_info.pad_id)
    lp = []
    for policy in (a, s):
        policy.module.eval()
        with torch.no_grad():
            lp.append(policy.token_logprobs(b.tokens, b.targets, b.pad_mask,
                                            b.temperature).logprobs)
    return float(rl.kl_k3_weighted(lp[0], lp[1], b.logp_b, b.resp_mask))


def _result(per_arm: dict, befores: dict, seeds, steps, n_fresh, rows, config, t0,
            keys: list[str] | None = None) -> dict:
    arms = {arm: {"start": _start_of(arm), **_summary(arm, befores[_start_of(arm)], runs, keys)}
            for arm, runs in per_arm.items() if runs}
    rl = arms.get("rl", {})
    champ = befores.get("champion") or next(iter(befores.values()))
    return {
        "pass_before": champ["pass"], "tokens_before": champ["tokens"],
        "pass_after": rl.get("pass_after"), "tokens_after": rl.get("tokens_after"),
        "delta": rl.get("delta"), "ci_low": rl.get("ci_low"), "ci_high": rl.get("ci_high"),
        "placebo_delta": arms.get("placebo", {}).get("delta"),
        "sft_delta": arms.get("filtered_sft", {}).get("delta"),
        "online_delta": arms.get("online", {}).get("delta"),
        "online_placebo_delta": arms.get("online_placebo", {}).get("delta"),
        "best_arm": best_arm(arms),
        "by_kind_before": champ["by_kind"],
        "arms": arms, "seeds": seeds,
        "sizes": {"fresh_tasks": n_fresh, "steps": steps,
                  "batch_size": config.get("batch_size", 64),
                  "fixture_rows": rows.num_rows, "bootstrap": BOOTSTRAP},
        "befores": {k: {n: v[n] for n in ("pass", "tokens", "by_kind")}
                    for k, v in befores.items()},
        "trainer_config": {**config, "steps": steps},
        "total_seconds": time.perf_counter() - t0,
    }


def best_arm(arms: dict) -> str | None:
    """The learning arm (not a placebo, not a stale-rows ablation) with the highest CI lower
    bound, or None if none ran."""
    cands = {a: r["ci_low"] for a, r in arms.items() if a in ("rl", "filtered_sft",
                                                              "one_sample", "online",
                                                              *ARM_OPTIONS)}
    return max(cands, key=cands.get) if cands else None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--fresh", type=int, default=2000, help="tasks in the eval set")
    p.add_argument("--eval", choices=EVAL_SETS, default="fresh",
                   help="heldout: the tuning set (never choose a setting with fresh)")
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    p.add_argument("--champion", choices=CHAMPIONS, default="warm",
                   help="lazy: start from the champion with the planted lazy-fix habit (its "
                   "own recording; the stale arms need warm)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    p.add_argument("--workers", type=int, default=2, help="processes running arms in parallel")
    p.add_argument("--config", type=json.loads, default={},
                   help="TrainerConfig fields as JSON, e.g. '{\"lr\": 1e-4}'")
    p.add_argument("--online", type=json.loads, default={},
                   help="trainer.online.OnlineRounds fields as JSON, plus \"trainer\": "
                   "TrainerConfig overrides for the online arms, e.g. "
                   "'{\"rounds\": 4, \"trainer\": {\"lr\": 2e-4}}'")
    p.add_argument("--out", type=Path, default=None,
                   help="default: bench/results/learning.json (learning_lazy.json for lazy)")
    p.add_argument("--runs", type=Path, default=None,
                   help="sidecar of finished runs (default: <out>_runs.jsonl)")
    p.add_argument("--resume", action="store_true",
                   help="skip runs already in the sidecar for the same settings")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: summarise the sidecar's runs for these settings")
    args = p.parse_args(argv)
    out = args.out or RESULTS.with_name("learning.json" if args.champion == "warm"
                                        else f"learning_{args.champion}.json")
    result = run(args.steps, args.seeds, args.fresh, args.arms, args.threads, args.config,
                 out, workers=args.workers, eval_set=args.eval, online=args.online,
                 runs_path=args.runs, resume=args.resume, report_only=args.report_only,
                 champion=args.champion)
    print(f"{'arm':<16}{'before':>8}{'after':>8}{'delta':>8}{'95% CI':>18}{'tokens':>16}"
          f"{'KL':>8}")
    for arm, r in result.get("arms", {}).items():  # empty: no "before" in the sidecar yet
        print(f"{arm:<16}{r['pass_before']:>8.3f}{r['pass_after']:>8.3f}{r['delta']:>+8.3f}"
              f"  [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]"
              f"{r['tokens_before']:>8.2f} ->{r['tokens_after']:>5.2f}"
              f"{_num(r.get('kl_to_start')):>8}")


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


if __name__ == "__main__":
    main()
