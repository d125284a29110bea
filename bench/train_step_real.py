"""Where the real preset's train stage goes, and what the frozen prefix saves: one trainer run per
setting on the same reward rows, timed part by part.

The champion is the preset's policy (``--config``, default configs/smollm2-pyfuncs.json), built
once under ``--workdir``; the rows are ``--rows N`` completions it samples on the train-traffic
pool (``bench._common.sample_traffic``: chat, the preset's temperature and max_tokens, graded
+1 / -1), sampled once and kept in the workdir. Each setting (``--settings``: ``prefix`` = the
preset's trainer, ``whole`` = the same with ``frozen_prefix`` off, ``once`` = the preset's trainer
with the retain samples drawn once at setup, ``retain.resample_every: 0``, instead of every step)
runs ``RLRecipe`` for ``--steps`` steps with ``--threads`` torch threads. Figures per setting:
CPU-seconds (``time.process_time``: all threads of this process) of setup, of the steps and of
the final KLs, and per step of the parts (the retain term: sampling and its two forwards;
backward with the optimizer step; the policy's forward on the batch and the rest); wall seconds;
and the run's last metrics (the loss, the KLs: the same within float noise between ``prefix`` and
``whole``, or the prefix is wrong). Writes ``--out`` (default bench/results/train_step_real.json)
with the date, commit, machine and the 1-minute load at the start and end of each setting.

    .venv/bin/python -m bench.train_step_real [--steps 3] [--threads 1] [--rows 32]

Left out: the checkpoint's registration and the gate (bench/loop_real.py times whole cycles).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import CONFIG, DATA, build_champion, commit, say, show_progress  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "train_step_real.json"
PARTS = ("_setup_replay", "_setup_reference_logprobs", "_retain_term", "_backward_step",
         "train_step", "_final_kls")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.train_step_real",
                                description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=CONFIG)
    p.add_argument("--rows", type=int, default=32, help="completions sampled as training rows")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--settings", default="prefix,whole",
                   help="comma list of prefix, whole, once; the first also pays the warm-up")
    p.add_argument("--workdir", type=Path, default=ROOT / ".cache" / "local_update")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--tiny", action="store_true", help="dry run on a tiny random Mixtral")
    return p.parse_args(argv)


def _timers(cls) -> tuple[dict[str, float], list]:
    """CPU-seconds spent in each of ``PARTS`` of ``cls`` (patched in place; undo restores)."""
    spent: dict[str, float] = {}
    undo = []
    for name in PARTS:
        original = getattr(cls, name)

        @functools.wraps(original)
        def timed(*a, _f=original, _n=name, **k):
            t = time.process_time()
            try:
                return _f(*a, **k)
            finally:
                spent[_n] = spent.get(_n, 0.0) + time.process_time() - t

        setattr(cls, name, timed)
        undo.append((name, original))
    return spent, undo


def setting(config, name: str):
    """The trainer config of setting ``name`` (see the module's text)."""
    if name not in ("prefix", "whole", "once"):
        raise ValueError(f"unknown setting {name!r}: prefix, whole or once")
    update: dict = {"frozen_prefix": name != "whole"}
    if name == "once":
        if config.retain.path is None:
            raise ValueError("setting 'once' needs a trainer with a retain set")
        update["retain"] = config.retain.model_copy(update={"resample_every": 0})
    return config.model_copy(update=update)


def run_setting(champion: Path, rows, config, *, steps: int) -> dict:
    from trainer.recipe import RLRecipe

    cfg = config.model_copy(update={"steps": steps})
    frozen_prefix = cfg.frozen_prefix
    spent, undo = _timers(RLRecipe)
    load_start = os.getloadavg()[0]
    wall, cpu = time.perf_counter(), time.process_time()
    recipe = RLRecipe(champion, rows, cfg)
    try:
        recipe.setup()
        setup_cpu = time.process_time() - cpu
        metrics = recipe.train()
    finally:
        recipe.cleanup()
        for name, original in undo:
            setattr(RLRecipe, name, original)
    total_cpu = time.process_time() - cpu
    steps_done = int(metrics["steps_done"])
    step_cpu = spent["train_step"] / steps_done
    retain = spent.get("_retain_term", 0.0) / steps_done
    backward = spent["_backward_step"] / steps_done
    return {
        "frozen_prefix": frozen_prefix, "frozen_prefix_layers": metrics["frozen_prefix_layers"],
        "steps": steps_done, "load1_start": round(load_start, 2),
        "load1_end": round(os.getloadavg()[0], 2),
        "wall_s": round(time.perf_counter() - wall, 1), "cpu_s": round(total_cpu, 1),
        "setup_cpu_s": round(setup_cpu, 1),
        "setup_replay_cpu_s": round(spent["_setup_replay"], 1),
        "setup_reference_cpu_s": round(spent["_setup_reference_logprobs"], 1),
        "step_cpu_s": round(step_cpu, 2),
        "step_parts_cpu_s": {
            "retain_sample_and_kl": round(retain, 2),  # the policy samples, then two forwards
            "backward_and_optimizer": round(backward, 2),
            "policy_forward_and_rest": round(step_cpu - retain - backward, 2)},
        "final_kls_cpu_s": round(spent["_final_kls"], 1),
        "retain_resample_every": cfg.retain.resample_every if cfg.retain.path else None,
        "metrics": {k: metrics[k] for k in ("loss", "kl_theta_ref_k3", "retain_kl",
                                            "kl_theta_ref_k3_final", "retain_kl_final",
                                            "retain_kl_k3_final")
                    if k in metrics},
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import pyarrow.parquet as pq
    import torch

    from ratchet.config import load_config
    from tasks.pyfuncs import read_jsonl

    torch.set_num_threads(args.threads)
    workdir = args.workdir / ("tiny" if args.tiny else "real")
    workdir.mkdir(parents=True, exist_ok=True)
    preset = load_config(args.config, check_paths=not args.tiny)
    champion = build_champion(args, workdir)
    rows_file = workdir / f"train_rows_{args.rows}.parquet"
    if rows_file.is_file():
        rows = pq.read_table(rows_file)
    else:
        from bench._common import sample_traffic

        say(f"sampling {args.rows} training rows from the champion")
        sim = preset.simulator
        rows = sample_traffic(champion, read_jsonl(DATA / "pyfuncs_train.jsonl"), n=args.rows,
                              temperature=sim.temperature, max_new_tokens=sim.max_tokens, seed=0)
        pq.write_table(rows, rows_file)
    result = {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
              "commit": commit(), "machine": f"{os.cpu_count()} CPU cores",
              "config": str(args.config), "threads": args.threads, "rows": rows.num_rows,
              "tiny": args.tiny, "settings": {}}
    trainer = preset.trainer
    if args.tiny:  # two layers: the top one trains; a random model passes no task, so the
        # dry run trains every row under token_clip (filtered imitation would have none)
        from trainer.config import TokenClip

        trainer = trainer.model_copy(update={"trainable": trainer.trainable.model_copy(
            update={"top_layers": 1}), "objective": TokenClip()})
    for name in args.settings.split(","):
        say(f"{name}: {args.steps} steps on {rows.num_rows} rows, {args.threads} thread(s)")
        result["settings"][name] = run_setting(champion, rows, setting(trainer, name),
                                               steps=args.steps)
        s = result["settings"][name]
        say(f"{name}: {s['step_cpu_s']} CPU-s a step, setup {s['setup_cpu_s']} CPU-s, final KLs "
            f"{s['final_kls_cpu_s']} CPU-s, wall {s['wall_s']} s (load {s['load1_start']} -> "
            f"{s['load1_end']})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    say(f"wrote {args.out}")


if __name__ == "__main__":
    show_progress()
    main()
