"""What the real-preset benchmarks share: the preset, the pyfuncs pool files, the preset's first
champion, a cycle's traffic sampled from it, greedy scoring on the pools, and a timestamped line.

Used by bench/pool_scores.py, bench/real_gate.py, bench/train_step_real.py and the experiments
that score candidates the same way (experiments/local_update.py, experiments/churn_floor.py).
Left out: any statistic (bench/loop_real.py holds the paired ones) and any trainer setting.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "smollm2-pyfuncs.json"
DATA = ROOT / "tasks" / "data"
POOLS = {"sealed": DATA / "pyfuncs_sealed.jsonl", "transfer": DATA / "pyfuncs_transfer.jsonl",
         "guard": DATA / "pyfuncs_guard.jsonl", "gate": DATA / "pyfuncs_gate.jsonl",
         "sealed_fresh": DATA / "pyfuncs_sealed_fresh.jsonl",
         "transfer_fresh": DATA / "pyfuncs_transfer_fresh.jsonl",
         "guard_fresh": DATA / "pyfuncs_guard_fresh.jsonl",
         "sealed_fresh2": DATA / "pyfuncs_sealed_fresh2.jsonl",
         "transfer_fresh2": DATA / "pyfuncs_transfer_fresh2.jsonl",
         "guard_fresh2": DATA / "pyfuncs_guard_fresh2.jsonl",
         "sealed_fresh3": DATA / "pyfuncs_sealed_fresh3.jsonl",
         "transfer_fresh3": DATA / "pyfuncs_transfer_fresh3.jsonl",
         "guard_fresh3": DATA / "pyfuncs_guard_fresh3.jsonl"}
"""The first pools and the fresh ones (tasks.pyfuncs_fresh: functions no pool, traffic, retain set
or tuning draw holds, scored by no earlier run), in three rounds: ``*_fresh``, ``*_fresh2`` and
``*_fresh3`` (the same families' next constants). tasks/data/README.md names every file."""


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def show_progress() -> None:
    """Route logging as the CLI does (ratchet/console.py), for a benchmark run as a program: the
    progress lines of decoding and training (runtime/progress.py logs them) reach the terminal,
    library chatter does not. Without it a real model's scoring step runs for half an hour
    silent."""
    from ratchet.console import setup

    setup(None)


def choices(allowed: tuple[str, ...]):
    """An argparse type: a comma list of names from ``allowed``, deduplicated in order."""
    def parse(text: str) -> list[str]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in allowed]
        if not items or bad:
            raise argparse.ArgumentTypeError(f"expected a comma list of {list(allowed)}, "
                                             f"got {text!r}")
        return list(dict.fromkeys(items))
    return parse


def commit() -> str:
    """The short hash of ``HEAD``, or ``unknown`` outside a checkout."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def build_champion(args, workdir: Path) -> Path:
    """The preset's policy (``args.config``; a tiny random Mixtral with ``args.tiny``) saved under
    ``workdir/champion`` (reused when present)."""
    out = workdir / "champion"
    if (out / "metadata.json").is_file():
        return out
    from policy.loader import load_policy

    if args.tiny:
        from policy.config import HFPolicyConfig, TinyHFSpec

        spec = TinyHFSpec(family="mixtral", hidden=32, heads=2, kv_heads=1, experts=4, top_k=2,
                          vocab=320, max_positions=512)
        plug = load_policy(HFPolicyConfig(build=spec), workdir=workdir)
    else:
        from ratchet.config import load_config

        plug = load_policy(load_config(args.config).policy, workdir=workdir)
    return plug.save(out, metadata={"model_version": 1})


def traffic_tasks(tasks: list[dict], n: int, seed: int) -> list[dict]:
    """The ``n`` tasks a batch of traffic asks: with seed 0 the first ``n`` (cycled), as every
    committed run sampled them; with another seed ``n`` distinct tasks drawn with it (cycled
    when the pool is smaller), another cycle's traffic from the same pool."""
    if seed == 0 or n > len(tasks):
        return [tasks[i % len(tasks)] for i in range(n)]
    return random.Random(f"rows/{seed}").sample(tasks, n)


def sample_traffic(champion: Path, tasks: list[dict], *, n: int, temperature: float,
                   max_new_tokens: int, seed: int, stop_after_code_block: bool = False):
    """``n`` reward rows the champion samples on :func:`traffic_tasks` of ``tasks`` (``seed``
    picks the tasks and the sampling), graded by their asserts; with ``stop_after_code_block``
    each reply ends once its code block is closed, as the real preset's clients ask."""
    import pyarrow as pa

    from policy.loader import load_policy
    from tasks.pyfuncs import grade

    plug = load_policy(champion)
    chosen = traffic_tasks(tasks, n, seed)
    stop = {}
    if stop_after_code_block:
        from tasks.humaneval import reply_complete

        stop = {"stop_when": reply_complete}
    gens = plug.generate([plug.encode_prompt(t["prompt"]) for t in chosen],
                         max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                         **stop)
    return pa.table({
        "prompt": [t["prompt"] for t in chosen],
        "prompt_token_ids": [g.prompt_token_ids for g in gens],
        "prompt_routed_experts": [g.prompt_routed_experts for g in gens],
        "response_token_ids": [g.token_ids for g in gens],
        "response_logprobs": [g.logprobs for g in gens],
        "routed_experts": [g.routed_experts for g in gens],
        "reward": [1.0 if grade(t, g.text).passed else -1.0 for t, g in zip(chosen, gens)],
        "task_kind": [t.get("family") or "pyfunc" for t in chosen],
        "model_version": [1] * n, "temperature": [temperature] * n, "top_p": [1.0] * n,
    })


def score(checkpoint: Path, pools: dict[str, list[dict]], args) -> dict[str, list[bool]]:
    """Greedy verdicts of ``checkpoint`` on each pool (``args.max_new_tokens``, ``args.batch``),
    decoded as the gate decodes: one chat turn, graded by the task's asserts."""
    from bench.loop_real import score_sealed

    return {name: score_sealed(checkpoint, tasks, max_new_tokens=args.max_new_tokens,
                               batch=args.batch) for name, tasks in pools.items()}


TRAIN_METRICS = "train_metrics.json"
"""The trainer's summary a :func:`train_apart` child writes beside its candidate, so that a resumed
run scores the candidate again without training it again."""


def train_apart(champion: Path, rows, cfg, out: Path, *, threads: int | None) -> dict:
    """``trainer.recipe.run_training`` in a child process, which returns its memory when it ends
    (the allocator keeps what a LoRA update used, ~14 GB here, for the life of the process);
    the child writes the trainer's summary to ``out``/:data:`TRAIN_METRICS`."""
    import multiprocessing

    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    rows_file = out / "rows.parquet"
    pq.write_table(rows, rows_file)
    child = multiprocessing.get_context("spawn").Process(
        target=_train_child, args=(str(champion), str(rows_file), cfg.model_dump_json(),
                                   str(out), threads))
    child.start()
    try:
        child.join()
    except BaseException:
        child.terminate()
        child.join()
        raise
    rows_file.unlink(missing_ok=True)
    if child.exitcode != 0:
        raise RuntimeError(f"training {out} failed (exit code {child.exitcode})")
    return json.loads((out / TRAIN_METRICS).read_text())


def _train_child(champion: str, rows_file: str, cfg_json: str, out: str,
                 threads: int | None) -> None:
    import pyarrow.parquet as pq
    import torch

    from trainer.config import TrainerConfig
    from trainer.recipe import run_training

    show_progress()  # a fresh interpreter: the trainer's step lines are its only sign of life
    if threads:
        torch.set_num_threads(threads)
    metrics = run_training(Path(champion), pq.read_table(rows_file),
                           TrainerConfig.model_validate_json(cfg_json), Path(out))
    (Path(out) / TRAIN_METRICS).write_text(json.dumps(metrics, indent=1, sort_keys=True) + "\n")


def perturb(params, saved, *, scale: float, seed: int) -> None:
    """Each of ``params`` set to its ``saved`` value plus ``scale`` x that value's std x N(0, 1)
    (seeded); a one-element tensor's std is its absolute value."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p, w in zip(params, saved, strict=True):
            spread = w.float().std() if w.numel() > 1 else w.float().abs().reshape(())
            noise = torch.randn(w.shape, generator=gen, dtype=torch.float32)
            p.copy_((w.float() + scale * spread * noise).to(w.dtype))
