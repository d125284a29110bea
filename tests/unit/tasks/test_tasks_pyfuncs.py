"""pyfuncs: batches of templates, 3-5 asserts each, distinct prompts, stable ids, the shared JSONL
format, grading by the hidden asserts in the sandbox, and pools written from calibration records
(the split by function on the shipped files: test_pyfuncs_pools.py)."""

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
    from tasks.pyfuncs import TEMPLATES_1, TEMPLATES_2, TEMPLATES_3

    assert 30 <= len(TEMPLATES_1) <= 50 and 30 <= len(TEMPLATES_2) <= 50
    assert 20 <= len(TEMPLATES_3) <= 50
    assert TEMPLATES == TEMPLATES_1 + TEMPLATES_2 + TEMPLATES_3
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
            assert x.function.split("/")[0] == t.family


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
    assert set(rows[0]) == {"task_id", "prompt", "messages", "entry_point", "tests", "family",
                            "function"}
    assert rows[0]["function"].startswith("join_sep/n=")
    assert rows[0]["messages"] == [{"role": "user", "content": rows[0]["prompt"]}]
    assert json.loads(raw.split(b"\n")[0]) == rows[0]


def test_pools_are_disjoint_by_prompt_and_hold_out_families():
    kept = [f for f in FAMILIES if f not in HELD_OUT][:6]
    calib = [t.prompt for f in kept for t in instances(BY_FAMILY[f], 4, seed=1000)]
    pools = split_pools(kept, HELD_OUT[:2], seed=0, exclude=calib)
    sets = [{t.prompt for t in p} for p in (pools.train, pools.gate, pools.sealed,
                                            pools.transfer)]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not sets[i] & sets[j]
        assert not sets[i] & set(calib)
    assert {t.family for t in pools.transfer} == set(HELD_OUT[:2])
    assert not {t.family for t in pools.train + pools.gate + pools.sealed} & set(HELD_OUT)
    with pytest.raises(ValueError, match="overlap"):
        split_pools([HELD_OUT[0]], HELD_OUT[:1])


def test_every_drawn_function_name_is_an_identifier():
    for t in TEMPLATES:
        for x in instances(t, 60, seed=0):
            assert x.entry_point.isidentifier(), (t.family, x.entry_point)


def _draw_file(tmp_path, families, n):
    """A calibration draw file of ``n`` prompts per family (seed 1000)."""
    tasks = [{"family": t.family, "function": t.function, "prompt": t.prompt}
             for f in families for t in instances(BY_FAMILY[f], n, seed=1000)]
    path = tmp_path / "draw.json"
    path.write_text(json.dumps({"seed": 1000, "tasks": tasks}))
    return path, {t["prompt"] for t in tasks}


def test_write_pools_from_a_calibration_record(tmp_path):
    from tasks.pyfuncs import NEW_HELD_OUT, POOL_FILES, TEMPLATES_3, write_pools

    record = {"seed": 1000, "per_family": 4, "kept": ["add_const", "clamp", "reverse_str"],
              "held_out_kept": ["sub_const"]}
    (tmp_path / "cal.json").write_text(json.dumps(record))
    draw, calib = _draw_file(tmp_path, record["kept"] + record["held_out_kept"], 4)
    stats = write_pools(tmp_path / "cal.json", tmp_path / "data", calibration_draw=draw)
    pools = {k: read_jsonl(tmp_path / "data" / f) for k, f in POOL_FILES.items()}
    assert {k: v["tasks"] for k, v in stats.items()} == {k: len(v) for k, v in pools.items()}
    seen: set[str] = set()
    for rows in pools.values():
        prompts = {r["prompt"] for r in rows}
        assert not prompts & seen and not prompts & calib
        seen |= prompts
    assert {r["family"] for r in pools["transfer"]} == {"sub_const", *NEW_HELD_OUT}
    new = {t.family for t in TEMPLATES_3} - set(NEW_HELD_OUT)
    assert {r["family"] for r in pools["train"]} == {"add_const", "clamp", "reverse_str"} | new
    # reverse_str asks for one function: training only
    assert {r["family"] for r in pools["sealed"]} == {"add_const", "clamp"} | new
    manifest = json.loads((tmp_path / "data" / "pools.json").read_text())
    assert manifest["roles"]["uncalibrated"] == [t.family for t in TEMPLATES_3]
    assert manifest["pools"]["sealed"]["functions"] == len({r["function"]
                                                            for r in pools["sealed"]})


def test_write_pools_from_two_calibration_records(tmp_path):
    from tasks.pyfuncs import POOL_FILES, write_pools

    one = {"seed": 1000, "per_family": 4, "kept": ["reverse_str"], "held_out_kept": [],
           "families": {"reverse_str": {"pass1_greedy": 0.5, "kept": True},
                        "add_const": {"pass1_greedy": 1.0, "kept": False}}}
    two = {"seed": 1000, "per_family": 5, "kept": ["count_equal"], "held_out_kept": ["any_above"]}
    (tmp_path / "1.json").write_text(json.dumps(one))
    (tmp_path / "2.json").write_text(json.dumps(two))
    draw, calib = _draw_file(tmp_path, ["count_equal", "any_above"], 5)
    write_pools([tmp_path / "1.json", tmp_path / "2.json"], tmp_path / "data",
                calibration_draw=draw)
    pools = {k: read_jsonl(tmp_path / "data" / f) for k, f in POOL_FILES.items()}
    assert "count_equal" in {r["family"] for r in pools["sealed"]}
    assert "any_above" in {r["family"] for r in pools["transfer"]}
    assert {r["family"] for r in pools["guard"]} == {"add_const"}
    assert not {r["prompt"] for rows in pools.values() for r in rows} & calib


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
    pools = split_pools(kept, held, guard_families=guard, guard_per_family=5)
    assert {t.family for t in pools.guard} == set(guard)
    assert sum(t.family == "evens" for t in pools.guard) == 5
    others = {t.prompt for p in (pools.train, pools.gate, pools.sealed, pools.transfer,
                                 pools.retain) for t in p}
    assert not {t.prompt for t in pools.guard} & others
    with pytest.raises(ValueError, match="guard_families"):
        split_pools(kept, held, guard_families=["clamp"])
