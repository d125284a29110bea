"""Pools v2 of the pyfuncs tasks: families calibrated on the pass rate users are served.

The first pools were calibrated on greedy answers and are dominated by a few families (two of
them hold 96 of the gate pool's 162 functions), while the model is served at temperature 0.8 and
a family's functions flip together. Pools v2 fix both:

- **Calibration** (:func:`calibrate`, ``python -m bench.real_gate calibrate`` on the real
  model): every family of
  :data:`TEMPLATES_V2` (the first three template batches, the fresh pools' batch and the fifth
  batch) is asked
  :data:`CALIBRATION_FUNCTIONS` functions, each answered :data:`CALIBRATION_SAMPLES` times at the
  serving temperature, as chat turns whose reply ends once its code block is closed (as served);
  one JSON line per family, appended as it finishes, so a cut-short run resumes where it stopped.
- **The rule** (fixed before any calibration ran): a family with no function left to calibrate
  (every one in the tuning draw) takes no part; a family whose sampled pass lies in
  :data:`SAMPLED_BAND` is usable for training and scoring; one above it is one the model already
  does (a guard family); one below it is left out. Of the usable families, every fifth in a
  seeded order (at least :data:`MIN_TRANSFER_FAMILIES`) is held out of traffic whole, for
  transfer; the rest are the trained families.
- **Pools** (:func:`build_pools`, ``python -m tasks.pyfuncs_v2``): per trained family
  :data:`GATE_FUNCTIONS` functions to the gate pool, :data:`SEALED_FUNCTIONS` to the sealed pool
  (named by an alias training never uses) and up to :data:`TRAIN_FUNCTIONS` to the traffic pool
  (two prompts each); per transfer family :data:`TRANSFER_FUNCTIONS`; per guard family
  :data:`GUARD_FUNCTIONS`. Every pool is disjoint by independent function from the others, from
  the tuning draw and the retain set, the sealed pool also from every pool file of the first
  generation, and the scoring pools from the calibration's own functions (which go to
  traffic); the family is each pool's independence unit (``bootstrap.cluster: family``), and no
  family holds more than :data:`MAX_FAMILY_SHARE` of a scoring pool. A trained family enters
  the pools only with at least one gate and one sealed function.
- **The sealed pool's constants**: a trained family's sealed functions are ones nothing has
  seen, the last of its own constants where at least :data:`SEALED_FUNCTIONS` are left.
  The first generation's pools and their tuning draw used up the small domains (a threshold in
  -5..15, a prefix of 1..6 characters), so a family with fewer draws them instead from a domain
  beyond every value its template draws (:data:`SEALED_CONSTANTS`, e.g. ``count_above`` with k
  in 16..40 where the template draws -5..15), with test inputs drawn around the constant where
  the template's would all fall on one side of it (:data:`SEALED_INPUTS`). Its own constants
  are then left to the gate and traffic. Only the sealed pool widens: the calibration, gate,
  traffic and transfer pools keep each template's domain, so the calibration still describes
  what is trained and gated; on a widened family the sealed pool asks how far a gain reaches
  past that domain.
- **The fifth batch** (tasks.pyfuncs_batch5.TEMPLATES_5): 30 families nothing had asked, each
  drawing from at least 30 constants, declared before any model answered them. The earlier
  batches' small domains were used up by the first generation, so most of their usable
  families have no gate function of their own left; a fifth-batch family in the band enters the
  gate, sealed and train pools whole, from its own domain.

Left out: choosing how many families the gate needs for a given power (docs/STATISTICS.md says
how); the calibration's decode is the real model's, so it runs only where that model is installed
(``make real-model``). Trained families whose own domain leaves no gate or traffic function
take no part, widened sealed domain or not: the families without constants (one function, which
the calibration asked) and the first generation's guard families, whose every constant is in the
retain set, that generation's guard pool or its tuning draw; a gate and traffic from a widened
domain would ask functions no calibration did.
"""

from __future__ import annotations

import json
import random
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from tasks.pyfuncs import (
    DATA,
    TEMPLATES,
    PyTask,
    Template,
    _a_b,
    _ints,
    _k,
    _near_k,
    constants,
    function_id,
    function_tasks,
    grade,
    pool_stats,
    read_jsonl,
    write_jsonl,
)
from tasks.pyfuncs_batch5 import TEMPLATES_5
from tasks.pyfuncs_fresh import TEMPLATES_4

TEMPLATES_V2: tuple[Template, ...] = TEMPLATES + TEMPLATES_4 + TEMPLATES_5
BY_V2 = {t.family: t for t in TEMPLATES_V2}
SEED = 2
"""Seed of the calibration draw and of the split."""
SAMPLED_BAND = (0.05, 0.7)
"""Sampled pass (serving temperature) of a usable family: learnable and not yet learned."""
CALIBRATION_FUNCTIONS = 3
CALIBRATION_SAMPLES = 4
CALIBRATION_TEMPERATURE = 0.8
MAX_NEW_TOKENS = 64
MIN_TRANSFER_FAMILIES = 10
TRANSFER_EVERY = 5
GATE_FUNCTIONS = 4
SEALED_FUNCTIONS = 4
TRAIN_FUNCTIONS = 6
TRANSFER_FUNCTIONS = 4
GUARD_FUNCTIONS = 4
MAX_FAMILY_SHARE = 0.10
OUT = DATA / "pools_v2"
CALIBRATION = OUT / "calibration.jsonl"
FILES = {"train": "train.jsonl", "gate": "gate.jsonl", "sealed": "sealed.jsonl",
         "transfer": "transfer.jsonl", "guard": "guard.jsonl"}
SCORING = ("gate", "sealed", "transfer", "guard")


def _near_list(rng: random.Random, k: dict) -> tuple:
    """A list of 1-6 numbers within 6 of ``k``: both sides of a far threshold."""
    return ([rng.randint(k["k"] - 6, k["k"] + 6) for _ in range(rng.randint(1, 6))],)


def _near_values(rng: random.Random, k: dict) -> tuple:
    """A list of 0-7 numbers within 3 of ``k``, so that ``k`` itself turns up."""
    return (_ints(rng, rng.randint(0, 7), k["k"] - 3, k["k"] + 3),)


def _letters(rng: random.Random, k: dict) -> str:
    """Lower-case letters, 3 fewer to 3 more than ``k`` (none below 0)."""
    return "".join(rng.choice(string.ascii_lowercase)
                   for _ in range(rng.randint(max(0, k["k"] - 3), k["k"] + 3)))


SEALED_CONSTANTS: dict[str, Callable[[random.Random], dict]] = {
    "all_below": _k(16, 40), "all_above": _k(-40, -6), "count_above": _k(16, 40),
    "sum_at_least": _k(13, 40), "sum_at_most": _k(13, 40), "at_least": _k(-60, -21),
    "count_equal": _k(10, 40), "keep_value": _k(10, 40), "len_times": _k(13, 40),
    "mod_add": _a_b((51, 90), (2, 9)), "sub_each": _k(41, 99),
    "count_longer": _k(6, 12), "long_enough": _k(9, 20), "prefix_k": _k(7, 12),
    "suffix_k": _k(6, 12), "last_k": _k(5, 12),
}
"""The sealed pool's constant domains of the trained families whose own constants hold fewer
than :data:`SEALED_FUNCTIONS` functions nothing has seen: beyond every value the family's
template draws (``at_least`` and ``all_above`` below it, since the first generation's fresh
pools took k in 41..140 and 16..64; ``mod_add`` with a above 50, past theirs), so that each is a
function no pool, tuning draw or calibration has asked. Same names, description and reference;
the test inputs are drawn around the constant where the template's own would all fall on one
side of it (:data:`SEALED_INPUTS`). Which trained families these are follows the rule's roles:
a family the seeded order moves to transfer has no sealed functions, and none here."""
SEALED_INPUTS: dict[str, Callable[[random.Random, dict], tuple]] = {
    "all_below": _near_list, "all_above": _near_list, "count_above": _near_list,
    "sum_at_least": _near_list, "sum_at_most": _near_list, "at_least": _near_k,
    "count_equal": _near_values, "keep_value": _near_values,
    "count_longer": lambda rng, k: ([_letters(rng, k) for _ in range(rng.randint(0, 6))],),
    "long_enough": lambda rng, k: (_letters(rng, k),),
    "prefix_k": lambda rng, k: (_letters(rng, k),),
    "suffix_k": lambda rng, k: (_letters(rng, k),),
    "last_k": lambda rng, k: (_ints(rng, rng.randint(k["k"], k["k"] + 4)),),
}
SEALED_EDGE_CASES: dict[str, Callable[[dict], list[tuple]]] = {
    "last_k": lambda k: [(list(range(1, k["k"] + 3)),), (list(range(k["k"] + 1, -1, -1)),)],
}
"""Edge cases of a widened family whose template's own assume its small constants (``last_k``:
lists of 6 and 7 numbers, shorter than most widened k)."""


def sealed_template(family: str) -> Template:
    """The trained family ``family`` as its sealed functions draw it: from
    :data:`SEALED_CONSTANTS` where it has a domain there, else its own template."""
    t = BY_V2[family]
    if family not in SEALED_CONSTANTS:
        return t
    return replace(t, draw=SEALED_CONSTANTS[family], inputs=SEALED_INPUTS.get(family, t.inputs),
                   edge=SEALED_EDGE_CASES.get(family, t.edge))


def tuning_functions(data: Path = DATA) -> set[str]:
    """Independent functions of the tuning draw (tasks.pyfuncs.tuning_draw): no pool v2 and no
    calibration uses them."""
    from tasks.jsonl_suite import cluster_key
    from tasks.pyfuncs import tuning_draw

    return {cluster_key(t) for side in tuning_draw(Path(data)).values() for t in side}


def retain_functions(data: Path = DATA) -> set[str]:
    """Independent functions of the retain set the preset's trainer anchors on: no scoring pool
    v2 uses them."""
    from tasks.jsonl_suite import cluster_key

    return {cluster_key(t) for t in read_jsonl(Path(data) / "pyfuncs_retain.jsonl")}


GUARD_V1 = DATA / "pyfuncs_guard.jsonl"
"""The first generation's guard pool: 37 families the model already solves greedily. It guards
the preset where the rule's own guard families are too few for the share rule; no pool v2 then
uses its functions."""


def guard_v1_functions() -> set[str]:
    from tasks.jsonl_suite import cluster_key

    return {cluster_key(t) for t in read_jsonl(GUARD_V1)}


def seen_functions(data: Path = DATA) -> set[str]:
    """Independent functions of every first-generation pool file under ``data`` and of their
    tuning draw: functions some gate, training run or choice has seen. The sealed pool v2 uses
    none of them."""
    from tasks.jsonl_suite import cluster_key

    return tuning_functions(data) | {cluster_key(t) for path in
                                     sorted(Path(data).glob("pyfuncs_*.jsonl"))
                                     for t in read_jsonl(path)}


def _functions(template: Template, exclude: set[str], fresh_last: set[str] | None, salt: str
               ) -> list[dict]:
    """A family's constants not in ``exclude``, shuffled with the seed; with ``fresh_last`` the
    ones outside it (never seen) go last, so that they are kept for the sealed pool."""
    ks = [k for k in constants(template) if function_id(template.family, k) not in exclude]
    random.Random(f"{SEED}/{salt}/{template.family}").shuffle(ks)
    if fresh_last is not None:
        ks.sort(key=lambda k: function_id(template.family, k) not in fresh_last)
    return ks


def calibration_tasks(template: Template, tuning: set[str], seen: set[str]) -> list[PyTask]:
    """The calibration's functions of one family (none of the tuning draw's; seen ones first, so
    the never-seen ones stay for the sealed pool), one prompt each."""
    ks = _functions(template, tuning, seen, "calibrate")[:CALIBRATION_FUNCTIONS]
    return function_tasks(template, ks, "calibrate", seed=SEED)


def calibrate(policy, out: Path = CALIBRATION, *, families: Sequence[str] | None = None,
              batch: int = 48, progress=print) -> list[dict]:
    """Sampled pass of each family at the serving temperature (see the module docstring),
    appended to ``out`` one line per family; families already there are skipped. Families are
    decoded together, ``batch`` rows at a time (a decode step costs about the same for 12 rows
    as for 48 on a CPU), and written once their batch is graded."""
    from tasks.humaneval import reply_complete

    out.parent.mkdir(parents=True, exist_ok=True)
    done = {r["family"]: r for r in _read(out)}
    tuning, seen = tuning_functions(), seen_functions()
    todo = [(t, calibration_tasks(t, tuning, seen)) for t in
            (BY_V2[f] for f in (families or BY_V2) if f not in done)]
    todo = [(t, ts) for t, ts in todo if ts]
    while todo:
        chunk, rows = [], 0
        while todo and (not chunk or rows + len(todo[0][1]) * CALIBRATION_SAMPLES <= batch):
            chunk.append(todo.pop(0))
            rows += len(chunk[-1][1]) * CALIBRATION_SAMPLES
        tasks = [t for _, ts in chunk for t in ts]
        ids = [policy.encode_chat(t.prompt) for t in tasks for _ in range(CALIBRATION_SAMPLES)]
        gens = policy.generate(ids, max_new_tokens=MAX_NEW_TOKENS,
                               temperature=CALIBRATION_TEMPERATURE, top_p=1.0,
                               seed=SEED * 100_003 + len(done), stop_when=reply_complete)
        at = 0
        for template, fam_tasks in chunk:
            n = len(fam_tasks) * CALIBRATION_SAMPLES
            fam_gens = gens[at:at + n]
            at += n
            passed = [grade(fam_tasks[j // CALIBRATION_SAMPLES], g.text).passed
                      for j, g in enumerate(fam_gens)]
            record = {"family": template.family, "functions": [t.function for t in fam_tasks],
                      "samples": CALIBRATION_SAMPLES, "temperature": CALIBRATION_TEMPERATURE,
                      "passed": sum(passed), "total": len(passed),
                      "sampled_pass": round(sum(passed) / len(passed), 4),
                      "pass_at_k": round(sum(any(passed[j:j + CALIBRATION_SAMPLES])
                                             for j in range(0, len(passed), CALIBRATION_SAMPLES))
                                         / len(fam_tasks), 4),
                      "mean_tokens": round(sum(len(g.token_ids) for g in fam_gens) / n, 1),
                      "cut_at_cap": sum(g.finish_reason == "length" for g in fam_gens)}
            with out.open("a") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")
            done[template.family] = record
            progress(f"calibrated {len(done)}/{len(BY_V2)} families: {template.family} "
                     f"{record['passed']}/{record['total']}")
    return [done[f] for f in BY_V2 if f in done]


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] \
        if path.exists() else []


def roles(calibration: Sequence[dict], spare: dict[str, int] | None = None
          ) -> dict[str, list[str]]:
    """Each calibrated family's role under the rule: ``trained``, ``transfer`` (usable, held out
    of traffic whole: in a seeded order, the first of the usable families that have at least
    :data:`TRANSFER_FUNCTIONS` functions to spare (``spare``: beyond the tuning draw and the
    calibration; every family when None), one in :data:`TRANSFER_EVERY` and at least
    :data:`MIN_TRANSFER_FAMILIES`), ``guard`` (above the band) and ``left_out`` (below it)."""
    lo, hi = SAMPLED_BAND
    usable = sorted(r["family"] for r in calibration if lo <= r["sampled_pass"] <= hi)
    random.Random(f"{SEED}/transfer").shuffle(usable)
    n_transfer = max(MIN_TRANSFER_FAMILIES, len(usable) // TRANSFER_EVERY)
    held = [f for f in usable if spare is None or spare.get(f, 0) >= TRANSFER_FUNCTIONS]
    held = held[:n_transfer]
    return {"trained": sorted(f for f in usable if f not in held), "transfer": sorted(held),
            "guard": sorted(r["family"] for r in calibration if r["sampled_pass"] > hi),
            "left_out": sorted(r["family"] for r in calibration if r["sampled_pass"] < lo)}


def spare_functions(calibration: Sequence[dict], tuning: set[str]) -> dict[str, int]:
    """Per calibrated family: its functions outside the tuning draw and the calibration."""
    calibrated = {f for r in calibration for f in r["functions"]}
    return {r["family"]: len(_functions(BY_V2[r["family"]], tuning | calibrated, None, "count"))
            for r in calibration}


def sealed_functions(family: str, own: list[dict], exclude: set[str]) -> list[dict]:
    """Up to :data:`SEALED_FUNCTIONS` constants of ``family`` for the sealed pool, none in
    ``exclude``: the last of its own shuffled constants ``own`` (:func:`_functions`, never-seen
    last), or, for a family of :data:`SEALED_CONSTANTS`, the first of its widened domain in a
    seeded order, checked to lie outside the template's own."""
    if family not in SEALED_CONSTANTS:
        return [k for k in own if function_id(family, k) not in exclude][-SEALED_FUNCTIONS:]
    template = BY_V2[family]
    inside = {function_id(family, k) for k in constants(template)}
    widened = _functions(sealed_template(family), exclude, None, "sealed")
    if any(function_id(family, k) in inside for k in widened):
        raise ValueError(f"SEALED_CONSTANTS[{family!r}] overlaps the template's own constants")
    return widened[:SEALED_FUNCTIONS]


def build_pools(calibration: Sequence[dict], tuning: set[str], seen: set[str]
                ) -> dict[str, list[PyTask]]:
    """The pools v2 (module docstring) from calibration records. No pool uses a function of the
    tuning draw (``tuning``); the sealed pool uses only functions nothing has seen (``seen``),
    of the family's own domain or, for a family of :data:`SEALED_CONSTANTS`, of its widened one
    (:func:`sealed_functions`); the calibration's functions go to traffic only. A trained family
    needs at least one sealed and one gate function, else it trains nothing."""
    calibrated = {f for r in calibration for f in r["functions"]}
    role = roles(calibration, spare_functions(calibration, tuning))
    pools: dict[str, list[PyTask]] = {p: [] for p in FILES}
    for fam in role["trained"]:
        t = BY_V2[fam]
        ks = _functions(t, tuning, seen, "split")
        sealed = sealed_functions(fam, ks, tuning | seen | calibrated)
        taken = {function_id(fam, k) for k in sealed} | calibrated
        gate = [k for k in ks if function_id(fam, k) not in taken][:GATE_FUNCTIONS]
        if not sealed or not gate:
            continue
        taken |= {function_id(fam, k) for k in gate}
        train = [k for k in ks if function_id(fam, k) in calibrated]
        train += [k for k in ks if function_id(fam, k) not in taken][:TRAIN_FUNCTIONS]
        pools["sealed"] += function_tasks(sealed_template(fam), sealed, "sealed", seed=SEED)
        pools["gate"] += function_tasks(t, gate, "gate", seed=SEED)
        pools["train"] += function_tasks(t, train[:TRAIN_FUNCTIONS], "train", seed=SEED,
                                         per_function=2)
    for side, n in (("transfer", TRANSFER_FUNCTIONS), ("guard", GUARD_FUNCTIONS)):
        for fam in role[side]:
            t = BY_V2[fam]
            ks = [k for k in _functions(t, tuning | calibrated, None, "split")]
            pools[side] += function_tasks(t, ks[:n], side, seed=SEED)
    return pools


def check_pools(pools: dict[str, list], exclude: set[str]) -> dict[str, dict]:
    """Sizes per pool; raises when two pools share a function, a pool uses an excluded one, or
    a family holds more than :data:`MAX_FAMILY_SHARE` of a scoring pool."""
    from tasks.jsonl_suite import cluster_key

    rows = {p: [t.to_json() if isinstance(t, PyTask) else t for t in ts] for p, ts in pools.items()}
    fns = {p: {cluster_key(t) for t in ts} for p, ts in rows.items()}
    for a in rows:
        if fns[a] & exclude:
            raise ValueError(f"pool {a} uses excluded functions: {sorted(fns[a] & exclude)[:3]}")
        for b in rows:
            if a < b and fns[a] & fns[b]:
                raise ValueError(f"pools {a} and {b} share {sorted(fns[a] & fns[b])[:3]}")
    stats = {}
    for p, ts in rows.items():
        per = Counter(t["family"] for t in ts)
        top = max(per.values()) / len(ts) if ts else 0.0
        if p in SCORING and ts and top > MAX_FAMILY_SHARE:
            raise ValueError(f"pool {p}: a family holds {top:.0%} of it (> "
                             f"{MAX_FAMILY_SHARE:.0%}): {per.most_common(1)}")
        stats[p] = {**pool_stats(ts), "max_family_share": round(top, 4),
                    "per_family": dict(sorted(per.items()))}
    return stats


def write(out: Path = OUT, calibration: Path = CALIBRATION) -> dict:
    """Write the pool files and ``manifest.json`` under ``out`` from the calibration file."""
    records = _read(calibration)
    tuning, seen = tuning_functions(), seen_functions()
    done = {r["family"] for r in records}
    missing = [f for f in BY_V2 if f not in done and calibration_tasks(BY_V2[f], tuning, seen)]
    if missing:
        raise ValueError(f"{len(missing)} families are not calibrated yet (e.g. {missing[:3]}): "
                         "run `python -m bench.real_gate calibrate` first")
    tuning |= retain_functions() | guard_v1_functions()
    pools = build_pools(records, tuning, seen)
    from tasks.jsonl_suite import cluster_key

    guard_note = "the rule's own guard pool"
    try:
        check_pools({"guard": pools["guard"]}, tuning)
        if not pools["guard"]:
            raise ValueError("no guard family has a function to spare")
    except ValueError as e:  # too few guard families for the share rule: the first one guards
        guard_note = (f"{GUARD_V1.name} (the first generation's guard pool; the rule's own, "
                      f"{len({t.family for t in pools['guard']})} families: {e})")
        pools["guard"] = []
    stats = check_pools(pools, tuning)
    if {cluster_key(t.to_json()) for t in pools["sealed"]} & seen:
        raise ValueError("the sealed pool uses a function something has seen")
    for name, file in FILES.items():
        if pools[name]:
            write_jsonl(pools[name], out / file)
        else:
            (out / file).unlink(missing_ok=True)
            stats.pop(name)
    manifest = {"seed": SEED, "rule": {"sampled_band": list(SAMPLED_BAND),
                                       "samples": CALIBRATION_SAMPLES,
                                       "temperature": CALIBRATION_TEMPERATURE,
                                       "transfer": f"every {TRANSFER_EVERY}th usable family, at "
                                       f"least {MIN_TRANSFER_FAMILIES}"},
                "independence_unit": "family", "guard": guard_note,
                "roles": roles(records, spare_functions(records, tuning)), "pools": stats}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    argparse.ArgumentParser(description="Write pools v2 from the calibration file (the "
                            "calibration itself: python -m bench.real_gate calibrate) and print "
                            "their sizes.").parse_args(argv)
    for name, st in write()["pools"].items():
        print(f"{name:<9} {st['tasks']:>5} tasks {st['functions']:>5} functions "
              f"{st['families']:>4} families, largest family {st['max_family_share']:.0%}")


if __name__ == "__main__":
    main()
