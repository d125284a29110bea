"""pyfuncs: 30-50 templates, 3-5 asserts each, distinct prompts, stable ids, the shared JSONL
format, grading by the hidden asserts in the sandbox, and pools disjoint by prompt text."""

import json

import pytest

from tasks.pyfuncs import (
    BY_FAMILY,
    FAMILIES,
    HELD_OUT,
    TEMPLATES,
    grade,
    instances,
    read_jsonl,
    split_pools,
    write_jsonl,
)


def test_template_count_asserts_and_distinct_prompts():
    from tasks.pyfuncs import TEMPLATES_2

    first = TEMPLATES[:-len(TEMPLATES_2)]
    assert 30 <= len(first) <= 50 and 30 <= len(TEMPLATES_2) <= 50
    assert len(set(FAMILIES)) == len(FAMILIES)
    assert set(HELD_OUT) <= set(FAMILIES)
    for t in TEMPLATES:
        tasks = instances(t, 6, seed=0)
        assert len(tasks) == 6, t.family
        assert len({x.prompt for x in tasks}) == 6
        for x in tasks:
            assert 3 <= len(x.tests) <= 5 + 6  # drawn, then the family's edge cases
            assert all(a.startswith(f"assert {x.entry_point}(") for a in x.tests)
            assert "```python" in x.prompt and x.family == t.family


def test_draws_are_stable_and_ids_unique():
    a = [x.to_json() for t in TEMPLATES for x in instances(t, 4, seed=3)]
    b = [x.to_json() for t in TEMPLATES for x in instances(t, 4, seed=3)]
    assert a == b
    assert len({x["task_id"] for x in a}) == len(a)
    c = [x.to_json() for t in TEMPLATES for x in instances(t, 4, seed=4)]
    assert not {x["task_id"] for x in a} & {x["task_id"] for x in c}


@pytest.mark.parametrize(("reply", "passed"), [
    ("Here it is:\n```python\ndef {n}(x):\n    return x + {k}\n```\nDone.", True),
    ("def {n}(x):\n    return x + {k}", True),
    ("```python\ndef {n}(x):\n    return x + {k} + 1\n```", False),
    ("```python\ndef {n}(x) return\n```", False),
])
def test_grade_runs_the_hidden_asserts(reply, passed):
    task = instances(BY_FAMILY["add_const"], 1, seed=0)[0]
    k = int(task.prompt.split(" plus ")[1].split(".")[0])
    assert grade(task, reply.format(n=task.entry_point, k=k)).passed is passed


def test_jsonl_round_trip_is_the_shared_format(tmp_path):
    tasks = instances(BY_FAMILY["join_sep"], 5, seed=0)
    path = write_jsonl(tasks, tmp_path / "s.jsonl")
    raw = path.read_bytes()
    assert raw.isascii() and raw.endswith(b"\n")
    rows = read_jsonl(path)
    assert rows == [t.to_json() for t in tasks]
    assert set(rows[0]) == {"task_id", "prompt", "messages", "entry_point", "tests", "family"}
    assert rows[0]["messages"] == [{"role": "user", "content": rows[0]["prompt"]}]
    assert json.loads(raw.split(b"\n")[0]) == rows[0]


def test_pools_are_disjoint_by_prompt_and_hold_out_families():
    kept = [f for f in FAMILIES if f not in HELD_OUT][:6]
    calib = [t.prompt for f in kept for t in instances(BY_FAMILY[f], 4, seed=1000)]
    pools = split_pools(kept, HELD_OUT[:2], per_family=8, seed=0, exclude=calib)
    sets = [{t.prompt for t in p} for p in (pools.train, pools.gate, pools.sealed,
                                            pools.transfer)]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not sets[i] & sets[j]
        assert not sets[i] & set(calib)
    assert {t.family for t in pools.transfer} == set(HELD_OUT[:2])
    assert not {t.family for t in pools.train + pools.gate + pools.sealed} & set(HELD_OUT)
    with pytest.raises(ValueError, match="overlap"):
        split_pools([HELD_OUT[0]], HELD_OUT[:1], per_family=2)


def test_every_drawn_function_name_is_an_identifier():
    for t in TEMPLATES:
        for x in instances(t, 60, seed=0):
            assert x.entry_point.isidentifier(), (t.family, x.entry_point)


def test_write_pools_from_a_calibration_record(tmp_path):
    from tasks.pyfuncs import POOL_FILES, instances, write_pools

    record = {"seed": 1000, "per_family": 4, "kept": ["add_const", "clamp", "reverse_str"],
              "held_out_kept": ["sub_const"]}
    (tmp_path / "cal.json").write_text(json.dumps(record))
    sizes = write_pools(tmp_path / "cal.json", tmp_path / "data", per_family=8)
    pools = {k: read_jsonl(tmp_path / "data" / f) for k, f in POOL_FILES.items()}
    assert sizes == {k: len(v) for k, v in pools.items()}
    calib = {t.prompt for f in record["kept"] + record["held_out_kept"]
             for t in instances(BY_FAMILY[f], 4, seed=1000)}
    seen: set[str] = set()
    for rows in pools.values():
        prompts = {r["prompt"] for r in rows}
        assert not prompts & seen and not prompts & calib
        seen |= prompts
    assert {r["family"] for r in pools["transfer"]} == {"sub_const"}


def test_write_pools_from_two_calibration_records_excludes_both_draws(tmp_path):
    from tasks.pyfuncs import POOL_FILES, instances, write_pools

    one = {"seed": 1000, "per_family": 4, "kept": ["reverse_str"], "held_out_kept": []}
    two = {"seed": 1000, "per_family": 5, "kept": ["count_equal"], "held_out_kept": ["any_above"]}
    (tmp_path / "1.json").write_text(json.dumps(one))
    (tmp_path / "2.json").write_text(json.dumps(two))
    write_pools([tmp_path / "1.json", tmp_path / "2.json"], tmp_path / "data", per_family=8)
    pools = {k: read_jsonl(tmp_path / "data" / f) for k, f in POOL_FILES.items()}
    calib = {t.prompt for f in ("count_equal", "any_above")
             for t in instances(BY_FAMILY[f], 5, seed=1000)}
    assert {r["family"] for r in pools["sealed"]} == {"reverse_str", "count_equal"}
    assert {r["family"] for r in pools["transfer"]} == {"any_above"}
    assert not {r["prompt"] for rows in pools.values() for r in rows} & calib


def test_shipped_pools_are_disjoint_by_prompt_and_skip_the_calibration_draw():
    from pathlib import Path

    from tasks.pyfuncs import CALIBRATION_SEED, HELD_OUT, POOL_FILES

    data = Path(__file__).resolve().parents[3] / "tasks" / "data"
    results = data.parents[1] / "bench" / "results"
    records = [json.loads((results / f).read_text())
               for f in ("pyfuncs_calibration.json", "pyfuncs_calibration_2.json")]
    calib = {t.prompt for record in records for tpl in TEMPLATES
             for t in instances(tpl, record["per_family"], seed=CALIBRATION_SEED)}
    assert all(record["seed"] == CALIBRATION_SEED for record in records)
    pools = {k: read_jsonl(data / f) for k, f in POOL_FILES.items()}
    seen: set[str] = set()
    for name, rows in pools.items():
        prompts = [r["prompt"] for r in rows]
        assert len(prompts) == len(set(prompts)), name
        assert not set(prompts) & seen and not set(prompts) & calib, name
        seen |= set(prompts)
        assert all(3 <= len(r["tests"]) <= 5 for r in rows)
    kept = {f for record in records for f in record["kept"]}
    for name in ("train", "gate", "sealed"):
        assert {r["family"] for r in pools[name]} == kept
    assert {r["family"] for r in pools["transfer"]} <= set(HELD_OUT)
    guard = {r["family"] for r in pools["guard"]}
    assert guard and not guard & (kept | set(HELD_OUT))


def test_guard_families_are_the_solved_ones_neither_kept_nor_held_out():
    from tasks.pyfuncs import guard_families

    fam = {"pass1_greedy": 1.0, "kept": False}
    record = {"families": {
        "add_const": fam, "digit_sum": {**fam, "pass1_greedy": 0.75},
        "evens": {**fam, "pass1_greedy": 0.5},          # not solved
        "reverse_str": {**fam, "kept": True},            # trained on
        HELD_OUT[0]: fam}}                               # the transfer check's
    assert guard_families(record) == ["add_const", "digit_sum"]


def test_guard_pool_keeps_out_of_the_other_pools():
    kept, held, guard = ["reverse_str", "clamp"], [HELD_OUT[0]], ["add_const", "evens"]
    pools = split_pools(kept, held, per_family=8, guard_families=guard, guard_per_family=5)
    assert {t.family for t in pools.guard} == set(guard) and len(pools.guard) == 10
    others = {t.prompt for p in (pools.train, pools.gate, pools.sealed, pools.transfer) for t in p}
    assert not {t.prompt for t in pools.guard} & others
    with pytest.raises(ValueError, match="guard_families"):
        split_pools(kept, held, per_family=2, guard_families=["clamp"])
