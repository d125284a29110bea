"""The fresh pools: new functions only, the guard from the calibration's rule, twins declared."""

import json
import random

import pytest

from tasks import pyfuncs
from tasks import pyfuncs_fresh as fresh
from tasks.jsonl_suite import cluster_key


def _record(solved: set[str]) -> dict:
    """A calibration record of TEMPLATES_4 in which the families ``solved`` pass 4 of 4."""
    return {"families": {t.family: {"pass1_greedy": 1.0 if t.family in solved else 0.25}
                         for t in fresh.TEMPLATES_4},
            "tasks": [{"prompt": "Write a Python function is_less_3(x) that returns True"}]}


def test_the_guard_is_what_the_model_solves_outside_the_declared_twins():
    record = _record({"is_less", "len_plus", "any_below"})
    assert fresh.guard_fresh_families(record) == ["is_less", "len_plus"]  # any_below: a twin
    record["families"]["len_plus"]["pass1_greedy"] = 0.5
    assert fresh.guard_fresh_families(record) == ["is_less"]


def test_the_sealed_side_asks_trained_families_only_beyond_their_own_constants():
    for fam in fresh.FRESH_CONSTANTS:
        own = {pyfuncs.function_id(fam, k) for k in pyfuncs.constants(pyfuncs.BY_FAMILY[fam])}
        new = {pyfuncs.function_id(fam, k)
               for k in pyfuncs.constants(fresh.fresh_sealed_template(fam))}
        assert new and not new & own, fam


def test_fresh_pools_share_no_function_with_the_first_pools_or_the_tuning_draw(tmp_path):
    record = _record({"is_less", "sub_from", "neg_each"})
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(record))
    manifest = fresh.write_fresh_pools(path, tmp_path)
    pools = {n: pyfuncs.read_jsonl(tmp_path / f) for n, f in fresh.FRESH_FILES.items()}
    assert manifest["guard_families"] == ["is_less", "sub_from", "neg_each"]
    assert {t["family"] for t in pools["guard_fresh"]} == {"is_less", "sub_from", "neg_each"}
    assert {t["family"] for t in pools["transfer_fresh"]} == set(fresh.FRESH_TRANSFER)
    assert {t["family"] for t in pools["sealed_fresh"]} == set(fresh.FRESH_CONSTANTS)
    assert len(pools["guard_fresh"]) >= 8 * 3  # a one-function family is asked 8 times
    first = {cluster_key(t) for f in pyfuncs.POOL_FILES.values()
             for t in pyfuncs.read_jsonl(pyfuncs.DATA / f)}
    first |= {cluster_key(t) for ts in pyfuncs.tuning_draw().values() for t in ts}
    keys = [{cluster_key(t) for t in ts} for ts in pools.values()]
    assert not any(k & first for k in keys)
    assert not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2])
    # sealed prompts use the sealed alias only: no training name of the family
    for t in pools["sealed_fresh"]:
        tpl = pyfuncs.BY_FAMILY[t["family"]]
        assert t["entry_point"].startswith(tpl.names[-1].split("{")[0])
    assert record["tasks"][0]["prompt"] not in {t["prompt"] for ts in pools.values() for t in ts}
    # deterministic
    again = tmp_path / "again"
    again.mkdir()
    fresh.write_fresh_pools(path, again)
    for f in fresh.FRESH_FILES.values():
        assert (again / f).read_bytes() == (tmp_path / f).read_bytes()


def test_a_clash_with_a_first_pool_is_refused():
    taken = pyfuncs.read_jsonl(pyfuncs.DATA / pyfuncs.POOL_FILES["sealed"])[0]
    task = pyfuncs.PyTask("x", "p", taken["entry_point"], tuple(taken["tests"]),
                          taken["family"], taken["function"])
    with pytest.raises(ValueError, match="shares"):
        fresh.check_disjoint({"sealed_fresh": [task]})


@pytest.mark.parametrize("template", fresh.TEMPLATES_4, ids=lambda t: t.family)
def test_every_fresh_family_asks_a_valid_name_and_its_reference_passes_its_asserts(template):
    for task in pyfuncs.instances(template, 3, seed=3):
        assert task.entry_point.isidentifier() and len(task.tests) >= 3
        k = next(k for k in pyfuncs.constants(template)
                 if pyfuncs.function_id(template.family, k) == task.function)
        namespace = {task.entry_point: template.ref(k)}
        for line in task.tests:  # our own generated asserts, run against the reference
            exec(line, namespace)  # noqa: S102
        wrong = {task.entry_point: lambda *a: None}
        with pytest.raises(AssertionError):
            for line in task.tests:
                exec(line, wrong)  # noqa: S102


def test_the_shipped_fresh_pools_are_what_the_generator_writes(tmp_path):
    manifest = fresh.write_fresh_pools(fresh.CALIBRATION, tmp_path)
    for f in [*fresh.FRESH_FILES.values(), fresh.MANIFEST]:
        assert (tmp_path / f).read_bytes() == (pyfuncs.DATA / f).read_bytes(), f
    assert manifest["pools"]["guard_fresh"]["families"] >= 8
    assert manifest["pools"]["sealed_fresh"]["functions"] >= 120


def test_the_second_round_asks_the_next_constants_and_no_function_of_the_first(tmp_path):
    record = _record({"is_less", "long_enough", "is_equal"})
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(record))
    fresh.write_fresh_pools(path, tmp_path)
    manifest = fresh.write_fresh_pools(path, tmp_path, round_=2)
    first = {n: pyfuncs.read_jsonl(tmp_path / f) for n, f in fresh.round_files(1).items()}
    second = {n: pyfuncs.read_jsonl(tmp_path / f) for n, f in fresh.round_files(2).items()}
    assert list(second) == ["sealed_fresh2", "transfer_fresh2", "guard_fresh2"]
    assert (tmp_path / "pools_fresh2.json").is_file() and manifest["round"] == 2
    keys = {n: {cluster_key(t) for t in ts} for n, ts in first.items()}
    for name, tasks in second.items():
        mine = {cluster_key(t) for t in tasks}
        assert mine and not any(mine & k for k in keys.values()), name
        assert {t["family"] for t in tasks} <= {t["family"] for t in first[name[:-1]]}
    # long_enough has 7 constants, all taken by round 1: it is left out of round 2
    assert {t["family"] for t in second["guard_fresh2"]} == {"is_less", "is_equal"}
    assert manifest["guard_families"] == ["is_equal", "is_less"]
    prompts = {t["prompt"] for ts in first.values() for t in ts}
    assert not prompts & {t["prompt"] for ts in second.values() for t in ts}
    with pytest.raises(ValueError, match="rounds"):
        fresh.write_fresh_pools(path, tmp_path, round_=4)


def test_the_third_round_asks_the_exhausted_trained_families_from_further_domains(tmp_path):
    record = _record({"is_less", "is_equal"})
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(record))
    for r in (1, 2):
        fresh.write_fresh_pools(path, tmp_path, round_=r)
    fresh.write_fresh_pools(path, tmp_path, round_=3)
    earlier = {cluster_key(t): n for r in (1, 2) for n, f in fresh.round_files(r).items()
               for t in pyfuncs.read_jsonl(tmp_path / f)}
    third = {n: pyfuncs.read_jsonl(tmp_path / f) for n, f in fresh.round_files(3).items()}
    assert not {cluster_key(t) for ts in third.values() for t in ts} & set(earlier)
    sealed = third["sealed_fresh3"]
    # all_above has 25 fresh constants: round 1 took 24 and round 2 the last one
    assert {t["family"] for t in sealed} == set(fresh.FRESH_CONSTANTS)
    for fam in fresh.FRESH_CONSTANTS_3:
        ks = {int(t["function"].split("=")[1]) for t in sealed if t["family"] == fam}
        assert len(ks) == fresh.SEALED_FUNCTIONS, fam
        assert min(ks) > max(fresh.FRESH_CONSTANTS[fam](random.Random(i))["k"]
                             for i in range(500)), fam


def test_the_shipped_later_rounds_are_what_the_generator_writes(tmp_path):
    for r in (1, 2, 3):
        fresh.write_fresh_pools(fresh.CALIBRATION, tmp_path, round_=r)
    for r in (2, 3):
        for f in [*fresh.round_files(r).values(), fresh.round_manifest(r)]:
            assert (tmp_path / f).read_bytes() == (pyfuncs.DATA / f).read_bytes(), f
