"""Pools v2: the calibration rule, and pools that are disjoint, balanced and sealed.

The calibration records here are written by hand (no model runs): the rule and the split are
what is under test; the committed pools are checked against the same invariants.
"""

from __future__ import annotations

import json

import pytest

from tasks import pyfuncs_v2 as v2
from tasks.jsonl_suite import cluster_key
from tasks.pyfuncs import read_jsonl


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
