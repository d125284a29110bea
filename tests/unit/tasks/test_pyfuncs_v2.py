"""Pools v2: the calibration rule, and pools that are disjoint, balanced and sealed.

The calibration records here are written by hand (no model runs): the rule and the split are
what is under test; the committed pools are checked against the same invariants, and the
sealed pool's widened domains against solutions written from their descriptions.
"""

from __future__ import annotations

import json
import random

import pytest

from tasks import pyfuncs_v2 as v2
from tasks.jsonl_suite import cluster_key
from tasks.pyfuncs import constants, function_id, function_tasks, read_jsonl


def _records(rates: dict[str, float]) -> list[dict]:
    tuning, seen = v2.tuning_functions(), v2.seen_functions()
    out = []
    for fam, rate in rates.items():
        tasks = v2.calibration_tasks(v2.BY_V2[fam], tuning, seen)
        out.append({"family": fam, "functions": [t.function for t in tasks],
                    "sampled_pass": rate})
    return out


def test_the_rule_sorts_families_by_their_sampled_pass():
    fams = list(v2.BY_V2)
    rates = {f: 0.3 for f in fams[:60]} | {fams[60]: 0.05, fams[61]: 0.7, fams[62]: 0.71,
                                           fams[63]: 0.049}
    role = v2.roles([{"family": f, "functions": [], "sampled_pass": r}
                     for f, r in rates.items()])
    assert fams[62] in role["guard"] and fams[63] in role["left_out"]
    usable = set(role["trained"]) | set(role["transfer"])
    assert usable == set(fams[:62]) and len(role["transfer"]) == 62 // 5
    assert not set(role["trained"]) & set(role["transfer"])


def test_pools_are_disjoint_balanced_and_the_sealed_pool_unseen():
    fams = list(v2.BY_V2)
    rates = {f: (0.9 if i % 7 == 0 else 0.3) for i, f in enumerate(fams)}
    records = _records(rates)
    tuning, seen = v2.tuning_functions(), v2.seen_functions()
    pools = v2.build_pools(records, tuning, seen)
    stats = v2.check_pools(pools, tuning)  # raises on a shared function or a family over 10%
    sealed = {cluster_key(t.to_json()) for t in pools["sealed"]}
    assert sealed and not sealed & seen
    calibrated = {f for r in records for f in r["functions"]}
    assert not calibrated & {cluster_key(t.to_json()) for p in v2.SCORING for t in pools[p]}
    role = v2.roles(records, v2.spare_functions(records, tuning))
    trained_pools = {t.family for p in ("train", "gate", "sealed") for t in pools[p]}
    assert not trained_pools & set(role["transfer"])
    assert {t.family for t in pools["transfer"]} == set(role["transfer"])
    assert all(s["max_family_share"] <= v2.MAX_FAMILY_SHARE for p, s in stats.items()
               if p in v2.SCORING)


def test_a_family_over_its_share_is_refused():
    fams = list(v2.BY_V2)
    rates = {f: 0.3 for f in fams[:3]}  # three trained families: each a third of every pool
    records = _records(rates)
    tuning, seen = v2.tuning_functions(), v2.seen_functions()
    with pytest.raises(ValueError, match="a family holds"):
        v2.check_pools(v2.build_pools(records, tuning, seen), tuning)


def test_the_committed_pools_keep_the_invariants():
    manifest_path = v2.OUT / "manifest.json"
    if not manifest_path.exists():
        pytest.skip("pools v2 are not written yet (python -m bench.real_gate calibrate)")
    manifest = json.loads(manifest_path.read_text())
    pools = {p: read_jsonl(v2.OUT / f) for p, f in v2.FILES.items() if (v2.OUT / f).exists()}
    tuning, seen = v2.tuning_functions(), v2.seen_functions()
    stats = v2.check_pools(pools, tuning | v2.retain_functions())
    if "guard" not in pools:  # the first generation's guard pool guards; no pool v2 uses it
        assert manifest["guard"].startswith(v2.GUARD_V1.name)
        guard = {cluster_key(t) for t in read_jsonl(v2.GUARD_V1)}
        assert not guard & {cluster_key(t) for ts in pools.values() for t in ts}
    assert {p: s["tasks"] for p, s in stats.items()} == {
        p: s["tasks"] for p, s in manifest["pools"].items()}
    assert not {cluster_key(t) for t in pools["sealed"]} & seen
    assert manifest["independence_unit"] == "family"


@pytest.fixture(scope="module")
def committed():
    """The committed calibration with what the writer excludes: (records, tuning, seen)."""
    records = v2._read(v2.CALIBRATION)
    if not records:
        pytest.skip("pools v2 are not calibrated yet (python -m bench.real_gate calibrate)")
    tuning = v2.tuning_functions() | v2.retain_functions() | v2.guard_v1_functions()
    return records, tuning, v2.seen_functions()


def test_a_trained_family_is_left_out_only_when_its_own_domain_leaves_no_gate_function(
        committed):
    records, tuning, seen = committed
    pools = v2.build_pools(records, tuning, seen)
    gate = {t.family for t in pools["gate"]}
    assert gate == {t.family for t in pools["sealed"]} == {t.family for t in pools["train"]}
    calibrated = {f for r in records for f in r["functions"]}
    role = v2.roles(records, v2.spare_functions(records, tuning))
    for fam in set(role["trained"]) - gate:
        own = {function_id(fam, k) for k in constants(v2.BY_V2[fam])}
        assert own <= tuning | calibrated, fam
    assert len(gate) >= 30  # 14 while the sealed pool drew from the templates' own domains only


def test_the_committed_gate_and_sealed_pools_hold_forty_trained_families():
    """The family is the gate's independence unit: 31 before the fifth batch was calibrated."""
    manifest = json.loads((v2.OUT / "manifest.json").read_text())
    for pool in ("gate", "sealed"):
        fams = {t["family"] for t in read_jsonl(v2.OUT / v2.FILES[pool])}
        assert len(fams) >= 40 and fams <= set(manifest["roles"]["trained"]), pool
        assert manifest["pools"][pool]["families"] == len(fams)


def test_the_widened_families_are_trained_ones_short_of_never_seen_functions(committed):
    records, tuning, seen = committed
    calibrated = {f for r in records for f in r["functions"]}
    role = v2.roles(records, v2.spare_functions(records, tuning))
    for fam in v2.SEALED_CONSTANTS:
        assert fam in role["trained"], fam
        own = {function_id(fam, k) for k in constants(v2.BY_V2[fam])}
        assert len(own - tuning - seen - calibrated) < v2.SEALED_FUNCTIONS, fam


def test_the_committed_sealed_pool_asks_only_unseen_functions_beyond_widened_domains(committed):
    _, tuning, seen = committed
    sealed = read_jsonl(v2.OUT / v2.FILES["sealed"])
    fams = {t["family"] for t in sealed}
    assert set(v2.SEALED_CONSTANTS) <= fams
    for t in sealed:
        assert t["function"] not in seen | tuning, t["function"]
        if t["family"] in v2.SEALED_CONSTANTS:
            own = {function_id(t["family"], k) for k in constants(v2.BY_V2[t["family"]])}
            assert t["function"] not in own, t["function"]
    per = {f: sum(t["family"] == f for t in sealed) for f in fams}
    assert set(per.values()) == {v2.SEALED_FUNCTIONS}


SOLUTIONS = {  # what each widened family's description asks, written from the text alone
    "all_below": "all(x < {k} for x in xs)", "all_above": "min(xs, default={k} + 1) > {k}",
    "count_above": "len([x for x in xs if x > {k}])",
    "sum_at_least": "sum(x for x in xs if x >= {k})",
    "sum_at_most": "sum(x for x in xs if x <= {k})", "at_least": "max(x, {k})",
    "count_equal": "xs.count({k})", "keep_value": "[x for x in xs if x == {k}]",
    "len_times": "len(s) * {k}", "mod_add": "(x + {a}) % {b}",
    "sub_each": "[x - {k} for x in xs]", "count_longer": "len([w for w in words if len(w) > {k}])",
    "long_enough": "len(s) >= {k}", "prefix_k": "s[:{k}]", "suffix_k": "s[max(0, len(s) - {k}):]",
    "last_k": "xs[max(0, len(xs) - {k}):]",
}


def test_every_widened_family_has_a_solution_written_from_its_description():
    assert set(SOLUTIONS) == set(v2.SEALED_CONSTANTS)


NEAR = {"mod_add": ("a", 1)}
"""The constant a neighbour of a widened function moves, and by how much (default k by 3; a
remainder modulo 3 would not tell a shift of 3 apart)."""


@pytest.mark.parametrize("fam", sorted(v2.SEALED_CONSTANTS))
def test_a_widened_family_asks_discriminating_tests_its_description_answers(fam):
    t = v2.sealed_template(fam)
    ks = sorted(constants(t), key=lambda k: sorted(k.items()))
    own = {function_id(fam, k) for k in constants(v2.BY_V2[fam])}
    assert len(ks) >= v2.SEALED_FUNCTIONS and not {function_id(fam, k) for k in ks} & own
    key, step = NEAR.get(fam, ("k", 3))
    for k in (ks[0], ks[len(ks) // 2], ks[-1]):
        rng = random.Random(f"test/{fam}")
        drawn = [t.inputs(rng, k) for _ in range(40)]
        assert len({repr(t.ref(k)(*x)) for x in drawn}) >= 2, (fam, k)
        for near in ({**k, key: k[key] - step}, {**k, key: k[key] + step}):  # both sides of k
            assert any(t.ref(k)(*x) != t.ref(near)(*x) for x in drawn), (fam, k, near)
        (task,) = function_tasks(t, [k], "sealed", seed=v2.SEED)
        for v in k.values():
            assert f" {v} " in task.prompt or f" {v}." in task.prompt, task.prompt
        answers = {line.split(" == ", 1)[1] for line in task.tests}
        assert len(task.tests) >= 3 and len(answers) >= 2, task.tests
        scope: dict = {}
        exec(f"def {task.entry_point}({t.args}):\n"
             f"    return {SOLUTIONS[fam].format(**k)}", scope)
        for line in task.tests:  # the task's own asserts, generated above
            exec(line, scope)
