"""The shipped pyfuncs pools are split by meaning: no independent function (family + constants)
in two pools, no function name of training in the sealed set, held-out families in the transfer
pool only, enough functions in the gate and sealed pools; the files are what the generator
writes; every template's reference passes its own asserts under the real grader."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tasks.pyfuncs import (
    BY_FAMILY,
    CALIBRATIONS,
    DATA,
    GUARD_MIN_GREEDY,
    HELD_OUT,
    MANIFEST,
    NEW_HELD_OUT,
    POOL_FILES,
    TEMPLATES,
    TEMPLATES_3,
    _in_name,
    aliases,
    constants,
    function_id,
    function_tasks,
    grade,
    pool_stats,
    read_jsonl,
    split_pools,
    write_pools,
)

SCORED_OR_TRAINED = ("train", "gate", "sealed", "guard", "retain")


@pytest.fixture(scope="module")
def shipped() -> dict[str, list[dict]]:
    return {name: read_jsonl(DATA / file) for name, file in POOL_FILES.items()}


def test_shipped_pools_share_no_independent_function(shipped):
    functions = {name: {r["function"] for r in rows} for name, rows in shipped.items()}
    names = list(functions)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not functions[a] & functions[b], (a, b, sorted(functions[a] & functions[b])[:5])
    for rows in shipped.values():
        for r in rows:
            assert r["function"] == r["family"] or r["function"].startswith(r["family"] + "/")


def test_shipped_gate_and_sealed_hold_at_least_150_independent_functions(shipped):
    assert pool_stats(shipped["gate"])["functions"] >= 150
    assert pool_stats(shipped["sealed"])["functions"] >= 150
    assert pool_stats(shipped["train"])["functions"] >= 150


def test_no_function_name_of_training_appears_in_the_sealed_set(shipped):
    trained_names = {r["entry_point"] for p in ("train", "retain") for r in shipped[p]}
    assert not trained_names & {r["entry_point"] for r in shipped["sealed"]}
    # no alias of training is used in the sealed set, whatever its constants
    for fam in {r["family"] for r in shipped["sealed"]}:
        t = BY_FAMILY[fam]
        sealed_aliases = {n.format(**{a: _in_name(v) for a, v in k.items()})
                          for k in constants(t) for n in aliases(t, "sealed")}
        train_aliases = {n.format(**{a: _in_name(v) for a, v in k.items()})
                         for k in constants(t) for n in aliases(t, "train")}
        assert not sealed_aliases & train_aliases, fam
        assert {r["entry_point"] for r in shipped["sealed"] if r["family"] == fam} <= sealed_aliases
        assert not {r["entry_point"] for r in shipped["train"]} & sealed_aliases, fam


def test_transfer_families_are_held_out_of_every_other_pool(shipped):
    transfer = {r["family"] for r in shipped["transfer"]}
    assert transfer and transfer <= set(HELD_OUT) and set(NEW_HELD_OUT) <= transfer
    for name in SCORED_OR_TRAINED:
        assert not {r["family"] for r in shipped[name]} & transfer, name
    # held-out families that share their phrasing with trained ones
    trained = {r["family"] for r in shipped["train"]}
    assert {"count_above", "count_outside", "all_below", "square_minus"} <= transfer
    assert {"all_above", "square_plus"} <= trained  # the twins of all_below and square_minus


def test_shipped_pools_skip_the_calibration_draw_and_have_distinct_prompts(shipped):
    draw = json.loads((DATA / "pyfuncs_calibration_draw.json").read_text())["tasks"]
    calib = {t["prompt"] for t in draw}
    assert len(calib) == len(draw) == 356 + 120  # the third calibration's 24 families x 5
    seen: set[str] = set()
    for name, rows in shipped.items():
        prompts = {r["prompt"] for r in rows}
        assert len(prompts) == len(rows) and not prompts & seen and not prompts & calib, name
        assert len({r["task_id"] for r in rows}) == len(rows)
        seen |= prompts


def test_shipped_files_and_manifest_are_what_the_generator_writes(shipped, tmp_path):
    stats = write_pools(out_dir=tmp_path)
    for file in (*POOL_FILES.values(), MANIFEST):
        assert (tmp_path / file).read_bytes() == (DATA / file).read_bytes(), (
            f"{file} is stale: regenerate with `python -m tasks.pyfuncs`")
    for name, rows in shipped.items():
        assert {k: stats[name][k] for k in ("tasks", "functions", "families")} == pool_stats(rows)


def test_the_third_batch_of_templates_takes_the_roles_its_calibration_gave():
    manifest = json.loads((DATA / MANIFEST).read_text())
    record = json.loads((CALIBRATIONS[2]).read_text())
    assert set(record["families"]) == {t.family for t in TEMPLATES_3}
    assert manifest["roles"]["uncalibrated"] == []
    trained, guard = set(manifest["roles"]["trained"]), set(manifest["roles"]["guard"])
    for t in TEMPLATES_3:
        r = record["families"][t.family]
        assert (t.family in trained) == (r["kept"] and t.family not in NEW_HELD_OUT), t.family
        assert (t.family in guard) == (r["pass1_greedy"] >= GUARD_MIN_GREEDY
                                       and not r["kept"] and t.family not in HELD_OUT), t.family


def _table_solution(task, ref) -> str:
    """A reply that answers each call of the asserts with what ``ref`` returns on its arguments:
    it passes iff the reference and the asserts agree under the grader."""
    table = {}
    for node in ast.walk(ast.parse("\n".join(task.tests))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == task.entry_point:
            args = tuple(ast.literal_eval(a) for a in node.args)
            table[repr(args)] = repr(ref(*args))
    body = ", ".join(f"{k!r}: {v}" for k, v in table.items())
    return (f"```python\n_T = {{{body}}}\n\ndef {task.entry_point}(*args):\n"
            f"    return _T[repr(args)]\n```")


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.family)
def test_every_reference_passes_its_own_asserts_under_the_real_grader(template):
    ks = constants(template)
    k = ks[len(ks) // 2]
    task = function_tasks(template, [k], "gate", seed=0)[0]
    assert task.function == function_id(template.family, k)
    assert grade(task, _table_solution(task, template.ref(k))).passed, task.tests


def test_a_reference_of_other_constants_fails_the_asserts():
    template = BY_FAMILY["count_between"]
    ks = constants(template)
    task = function_tasks(template, [ks[0]], "gate", seed=0)[0]
    right = _table_solution(task, template.ref(ks[0]))
    wrong = next(w for k in ks[1:] if (w := _table_solution(task, template.ref(k))) != right)
    assert grade(task, right).passed
    assert not grade(task, wrong).passed


def test_split_pools_cuts_each_family_by_function():
    pools = split_pools(["at_least", "reverse_str"], ["count_above"], seed=0,
                        guard_families=["add_const", "evens"], guard_per_family=5)
    by = {name: {t.function for t in getattr(pools, name)}
          for name in ("train", "gate", "sealed", "transfer", "guard", "retain")}
    assert len(by["gate"]) == len(by["sealed"]) == 18  # at_least's 61 constants, 30% each
    assert len(by["train"]) == 25 + 1  # the other 25; reverse_str has one function: training
    assert {t.family for t in pools.transfer} == {"count_above"}
    assert len(by["transfer"]) == 21
    assert {t.family for t in pools.guard} == {"add_const", "evens"}
    assert sum(t.family == "evens" for t in pools.guard) == 5  # one function, five prompts
    assert {t.family for t in pools.retain} == {"add_const"}
    assert len(by["retain"]) == 40
    for i, a in enumerate(by):
        for b in list(by)[i + 1:]:
            assert not by[a] & by[b]
    with pytest.raises(ValueError, match="overlap"):
        split_pools(["count_above"], ["count_above"])


def test_write_pools_is_deterministic(tmp_path):
    write_pools(out_dir=tmp_path / "a", seed=3)
    write_pools(out_dir=tmp_path / "b", seed=3)
    for file in (*POOL_FILES.values(), MANIFEST):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()


def test_main_prints_tasks_and_functions_per_pool(capsys):
    from tasks.pyfuncs import main

    main(["--report"])
    out = capsys.readouterr().out
    gate = next(line for line in out.splitlines() if line.startswith("gate"))
    manifest = json.loads((DATA / MANIFEST).read_text())["pools"]["gate"]
    assert gate.split()[1:3] == [str(manifest["tasks"]), str(manifest["functions"])]
    assert Path(DATA / MANIFEST).exists()


def test_tuning_draw_is_disjoint_by_function_from_every_pool_that_scores(shipped):
    from tasks.pyfuncs import tuning_draw

    draw = tuning_draw()
    held = {t["function"] for t in draw["trained"]}
    scored = {t["function"] for name in ("gate", "sealed", "transfer", "guard", "retain")
              for t in shipped[name]}
    for side in ("trained", "guard", "transfer"):
        fns = {t["function"] for t in draw[side]}
        assert len(fns) == len(draw[side]) >= 40, side
        assert not fns & scored, side
    # the traffic a tuning run trains on never asks for a held-out function
    assert not {t["function"] for t in draw["traffic"]} & held
    assert {t["function"] for t in draw["traffic"]} <= {t["function"] for t in shipped["train"]}
    roles = json.loads((DATA / MANIFEST).read_text())["roles"]
    assert {t["family"] for t in draw["trained"]} <= set(roles["trained"])
    assert {t["family"] for t in draw["guard"]} <= set(roles["guard"])
    assert {t["family"] for t in draw["transfer"]} <= set(roles["transfer"])
    assert tuning_draw() == draw  # deterministic


def test_tuning_draw_has_an_outside_side_of_neighbour_families_no_pool_uses(shipped):
    from tasks.pyfuncs import OUTSIDE_FUNCTIONS, OUTSIDE_MIN_TASKS, tuning_draw

    outside = tuning_draw()["outside"]
    roles = json.loads((DATA / MANIFEST).read_text())["roles"]
    pooled = {f for side in ("trained", "transfer", "guard") for f in roles[side]}
    families = {t["family"] for t in outside}
    assert not families & pooled
    # the neighbours of the families that broke: "less than k" (sum_below), the smallest
    # (max_list, at_most), "between, inclusive" (sum_between)
    assert {"filter_below", "min_list", "filter_between"} <= families
    scored = {t["function"] for name in ("gate", "sealed", "transfer", "guard", "retain")
              for t in shipped[name]}
    assert not {t["function"] for t in outside} & scored
    for fam in families:
        tasks = [t for t in outside if t["family"] == fam]
        assert len({t["function"] for t in tasks}) <= OUTSIDE_FUNCTIONS
        assert len(tasks) >= OUTSIDE_MIN_TASKS, fam
    assert len(outside) >= 60 and len({t["task_id"] for t in outside}) == len(outside)
