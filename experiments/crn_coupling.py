"""Do the gate's common random numbers hold? Coupled (per-row) against shared-generator sampling.

The gate samples champion and candidate "with the same seeds", but one generator serves a whole
batch: once a row of one model ends at another step than the other model's, every later draw of
every row shifts, and the two models' samples are no longer paired. ``per_row`` sampling
(:mod:`policy.hf_generate`) gives each row its own seeded stream. This measures what that buys on
the real model, fixed before it ran:

- models: the preset's first champion and its weight-noise nulls ``--noise-seeds`` (0.067 x each
  tensor's std on the layers the preset trains, the gate's nulls of ``bench.real_gate``);
- tasks: the first ``--tasks`` functions of decision 0's draw of the preset's gate pool, decoded as
  the gate decodes them (chat turn, stop at the closed code block, the suite's seed, batch size,
  k = ``gate.suite.samples`` at its temperature), with ``per_row=True``;
- outcome: per function, the null's sampled pass minus the champion's; its standard deviation
  over functions and nulls, and the share of functions whose change is exactly 0, against the same
  functions' changes in the committed shared-generator units (``bench/results/real_gate_units``)
  and against what independent sampling predicts (sqrt(2 p (1 - p) / k), p the champion's rate).
  The same per family (the gate's independence unit).

Units (one model, a JSON ``SuiteResult``) go to ``bench/results/crn_coupling_units`` as they
finish, so a run cut short resumes; the summary goes to ``bench/results/crn_coupling.json``.

    .venv/bin/python -m experiments.crn_coupling [--tasks 48] [--noise-seeds 0,1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402
from bench._common import perturb, say, show_progress  # noqa: E402

CONFIG = ROOT / "configs" / "smollm2-pyfuncs.json"
UNITS = ROOT / "bench" / "results" / "crn_coupling_units"
SHARED_UNITS = ROOT / "bench" / "results" / "real_gate_units"
OUT = ROOT / "bench" / "results" / "crn_coupling.json"
SCALE = 0.067


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.crn_coupling",
                                description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=CONFIG)
    p.add_argument("--tasks", type=int, default=48)
    p.add_argument("--noise-seeds", default="0,1")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workdir", type=Path, default=ROOT / ".cache" / "real_gate")
    p.add_argument("--units", type=Path, default=UNITS)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    args.noise_seeds = [int(s) for s in args.noise_seeds.split(",") if s.strip()]
    return args


def changes(null: dict[str, float], champ: dict[str, float]) -> list[float]:
    return [null[t] - champ[t] for t in champ]


def family_changes(null: dict[str, float], champ: dict[str, float],
                   family: dict[str, str]) -> list[float]:
    by: dict[str, list[float]] = {}
    for t in champ:
        by.setdefault(family[t], []).append(null[t] - champ[t])
    return [statistics.fmean(v) for v in by.values()]


def figures(nulls: list[dict[str, float]], champ: dict[str, float], family: dict[str, str],
            k: int) -> dict:
    """Spread of the nulls' changes against the champion, per function and per family."""
    fn = [c for n in nulls for c in changes(n, champ)]
    fam = [c for n in nulls for c in family_changes(n, champ, family)]
    return {"function_sd": round(statistics.pstdev(fn), 4),
            "function_zero_share": round(sum(c == 0 for c in fn) / len(fn), 4),
            "family_sd": round(statistics.pstdev(fam), 4),
            "mean_change": round(statistics.fmean(fn), 4),
            "independent_function_sd": round(math.sqrt(statistics.fmean(
                [2 * p * (1 - p) / k for p in champ.values()])), 4)}


def _sampled(result) -> dict[str, float]:
    return {t.task_id: t.sampled_pass for t in result.tasks}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    from bench.real_gate import _champion, _trained_params, _unit_name, pools_digest, score_suite
    from gating.records import SuiteResult
    from ratchet.config import load_config

    torch.set_num_threads(args.threads)
    preset = load_config(args.config)
    suite = preset.gate.suite
    digest = f"pools-{pools_digest()}"
    _, policy = _champion(args, args.workdir / digest)
    params = _trained_params(policy, preset.trainer.trainable.top_layers)
    saved = [p.detach().clone() for p in params]
    units = args.units / digest
    units.mkdir(parents=True, exist_ok=True)
    family: dict[str, str] = {}

    def coupled(stem: str) -> dict[str, float]:
        path = units / f"{stem}-n{args.tasks}-k{suite.samples}-t{suite.temperature:g}-per-row.json"
        if not path.is_file():
            t0 = time.perf_counter()
            result = score_suite(policy, suite, suite.temperature, first=args.tasks, per_row=True)
            path.write_text(result.model_dump_json())
            say(f"{stem}: sampled {result.sampled_pass_rate:.3f} per row "
                f"({time.perf_counter() - t0:.0f} s)")
        result = SuiteResult.model_validate_json(path.read_text())
        family.update({t.task_id: t.kind for t in result.tasks})
        return _sampled(result)

    def shared(stem: str) -> dict[str, float]:
        unit = SHARED_UNITS / digest / f"{_unit_name(stem, suite, suite.temperature)}.json"
        every = _sampled(SuiteResult.model_validate_json(unit.read_text()))
        return {t: every[t] for t in family}

    champ = coupled("v1")
    nulls = []
    for seed in args.noise_seeds:
        perturb(params, saved, scale=SCALE, seed=seed)
        nulls.append(coupled(f"noise{SCALE:g}-seed{seed}"))
    perturb(params, saved, scale=0.0, seed=0)
    stems = [f"noise{SCALE:g}-seed{s}" for s in args.noise_seeds]
    k = suite.samples
    doc = {"date": provenance.now(), "commit": provenance.commit(),
           "machine": provenance.machine(), "load1_end": provenance.load1(),
           "tasks": len(family), "families": len(set(family.values())),
           "samples": k, "temperature": suite.temperature, "noise_seeds": args.noise_seeds,
           "per_row": figures(nulls, champ, family, k),
           "shared_generator": figures([shared(s) for s in stems], shared("v1"), family, k)}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    say(f"per row {doc['per_row']}")
    say(f"shared  {doc['shared_generator']}")
    say(f"wrote {args.out}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    show_progress()
    main()
