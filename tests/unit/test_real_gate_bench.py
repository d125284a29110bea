"""The real gate bench's pure parts: the exact upper bound and the planted-power simulation run
through the preset's own rule (no model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.real_gate import clopper_pearson_upper, planted_power
from gating.config import GateConfig
from gating.records import SuiteResult, TaskOutcome

ROOT = Path(__file__).resolve().parents[2]
PRESET = ROOT / "configs" / "smollm2-pyfuncs.json"


def _champion(families: int = 30, per: int = 4) -> SuiteResult:
    return SuiteResult(tasks=[
        TaskOutcome(task_id=f"t{f}-{i}", kind=f"fam{f}", prompt_key=f"fn{f}-{i}",
                    passed=i % 2 == 0, malformed=False, no_edit=False, completion_tokens=20,
                    score=0.5, sampled_pass=0.25)
        for f in range(families) for i in range(per)])


def test_the_preset_gates_on_the_design_whose_nulls_met_both_bars():
    """The preset's gate is the design measured under ``aa_gate.json`` ``real_nulls``: every
    function of the gate pool at the recorded sample count, at most 1 of 20 nulls promoted and
    power >= 0.8 for the planted +0.10 (the bars of docs/STATISTICS.md section 7)."""
    from bench.real_gate import _draw_name

    gate = GateConfig.model_validate(json.loads(PRESET.read_text())["gate"])
    measured = json.loads((ROOT / "bench" / "results" / "aa_gate.json").read_text())["real_nulls"]
    pool = sum(1 for line in (ROOT / gate.suite.path).read_text().splitlines() if line.strip())
    assert gate.suite.size == pool == measured["tasks"]
    assert measured["complete"] and measured["n"] >= 20 and measured["promoted"] <= 1
    assert measured["power_sampled_0.10"] >= 0.8
    assert f"k = {gate.suite.samples} at {gate.suite.temperature:g}" in measured["gate"]
    assert _draw_name(gate.suite).startswith(f"gate-n{pool}-")


def test_the_exact_upper_bound():
    assert clopper_pearson_upper(0, 20) == pytest.approx(1 - 0.05 ** (1 / 20))
    assert clopper_pearson_upper(20, 20) == 1.0
    assert 0.05 < clopper_pearson_upper(1, 20) < 0.25


def test_planted_gains_are_found_and_no_gain_is_not():
    gate = GateConfig.model_validate(json.loads(PRESET.read_text())["gate"])
    champ = _champion()
    quiet = [{f"fam{f}": 0.0 for f in range(30)}]
    assert planted_power(champ, quiet, gate, effect=0.10, draws=5) == 1.0
    churn = [{f"fam{f}": (0.05 if f % 2 else -0.05) for f in range(30)}]
    assert planted_power(champ, churn, gate, effect=0.0, draws=5) == 0.0


def test_scored_placebo_candidates_count_with_the_noise_nulls(tmp_path):
    """A placebo the `placebo` part scored (its unit cached) is gated against the champion by
    the preset's rule and counted in the promotions and their upper bound; one not yet scored
    leaves the summary incomplete."""
    import argparse

    from bench.real_gate import _placebo_meta, _placebo_name, _placebos, _summary

    gate = GateConfig.model_validate(json.loads(PRESET.read_text())["gate"])
    champ = _champion()
    better = champ.model_copy(update={"tasks": [t.model_copy(update={"sampled_pass": 1.0})
                                                for t in champ.tasks]})
    (tmp_path / f"{_placebo_name(gate, 0)}.json").write_text(better.model_dump_json())
    (tmp_path / "placebo").mkdir()
    _placebo_meta(tmp_path, gate, 0).write_text(json.dumps({"passing_rows": 41}))
    args = argparse.Namespace(placebo=2, noise=0, power_draws=2)
    changes: list[dict] = []
    placebos = _placebos(args, gate, champ, tmp_path, changes)
    assert [p["seed"] for p in placebos] == [0] and placebos[0]["passing_rows"] == 41
    assert placebos[0]["sampled_change"] == pytest.approx(0.75) and placebos[0]["promoted"]
    assert changes == [{f"fam{f}": pytest.approx(0.75) for f in range(30)}]
    s = _summary(args, gate, champ, [], placebos, changes, gate.suite.temperature,
                 complete=len(placebos) >= args.placebo)
    assert s["promoted"] == 1 and s["n"] == 1 and s["upper95"] == 1.0 and not s["complete"]


def test_each_null_counts_once_in_the_power_draws(tmp_path, monkeypatch):
    """The summary written after every noise null reads the scored placebos too; their family
    changes must enter the final power draws once, not once per noise null."""
    import argparse

    import bench.real_gate as rg

    gate = GateConfig.model_validate(json.loads(PRESET.read_text())["gate"])
    champ = _champion()
    (tmp_path / f"{rg._placebo_name(gate, 0)}.json").write_text(champ.model_dump_json())
    seen: list[int] = []
    monkeypatch.setattr(rg, "_champion", lambda args, workdir: (tmp_path, object()))
    monkeypatch.setattr(rg, "_trained_params", lambda policy, top: [])
    monkeypatch.setattr(rg, "perturb", lambda *a, **k: None)
    monkeypatch.setattr(rg, "_unit", lambda units, name, run: (
        units / f"{name}.json").write_text(champ.model_dump_json()) and champ)
    monkeypatch.setattr(rg, "planted_power", lambda c, changes, g, **k: seen.append(len(changes))
                        or 0.0)
    args = argparse.Namespace(noise=3, placebo=1, power_draws=1, scale=0.1, noise_seeds=None)
    trainer = argparse.Namespace(trainable=argparse.Namespace(top_layers=1))
    out = rg.run_nulls(args, gate, trainer, tmp_path, tmp_path)
    assert out["n"] == 4 and out["complete"]
    assert seen[-1] == 4  # 3 noise nulls and 1 placebo, each once


def test_units_are_keyed_by_the_pools_they_score(tmp_path):
    """A unit cached on other pools is never read again: the cache directory is named by a
    digest of the pool files, which moves when any of them changes."""
    from bench.real_gate import pools_digest

    pools = tmp_path / "pools_v2"
    pools.mkdir()
    (pools / "gate.jsonl").write_text('{"task_id": "a"}\n')
    (pools / "calibration.jsonl").write_text("{}\n")
    first = pools_digest(pools)
    assert first == pools_digest(pools)
    (pools / "gate.jsonl").write_text('{"task_id": "a"}\n{"task_id": "b"}\n')
    assert pools_digest(pools) != first


def test_centred_changes_take_out_each_nulls_loss_on_the_whole():
    """A null that lost 0.10 on every family eats the planted +0.10 in the rule's figure; the
    centred figure keeps its spread between families and drops that loss."""
    from bench.real_gate import centred

    assert centred([{"a": -0.2, "b": 0.0}, {}]) == [{"a": pytest.approx(-0.1),
                                                    "b": pytest.approx(0.1)}, {}]
    gate = GateConfig.model_validate(json.loads(PRESET.read_text())["gate"])
    champ = _champion()
    lost = [{f"fam{f}": -0.10 for f in range(30)}]
    assert planted_power(champ, lost, gate, effect=0.10, draws=3) == 0.0
    assert planted_power(champ, centred(lost), gate, effect=0.10, draws=3) == 1.0


def test_units_scored_at_another_sample_count_or_draw_size_are_never_read():
    from bench.real_gate import _draw_name, _placebo_meta, _placebo_name

    gate = GateConfig.model_validate(json.loads(PRESET.read_text())["gate"])
    more = gate.model_copy(update={"suite": gate.suite.model_copy(
        update={"samples": gate.suite.samples * 2})})
    part = gate.model_copy(update={"suite": gate.suite.model_copy(update={"size": 50})})
    assert len({_draw_name(g.suite) for g in (gate, more, part)}) == 3
    assert len({_placebo_name(g, 0) for g in (gate, more, part)}) == 3
    assert len({_placebo_meta(Path("u"), g, 0) for g in (gate, more, part)}) == 3


def test_a_model_scored_with_fewer_samples_is_extended_not_scored_again(tmp_path, monkeypatch):
    """At k = 8 the champion's (or a seeded noise null's) k = 4 unit is extended by four draws;
    a unit at a larger k, or of another model, is never read; with none cached it is scored
    whole; the finished k = 8 unit is read as it is."""
    import bench.real_gate as rg

    gate = GateConfig.model_validate(json.loads(PRESET.read_text())["gate"])
    suite = gate.suite.model_copy(update={"samples": 8, "size": 50})  # the k = 8 design
    units = tmp_path
    four = _champion()
    for name in ("v1-gate-n50-draw0-k4-t0.8", "v1-gate-n50-draw0-k16-t0.8",
                 "v1-gate-n50-draw0-k2-t0.3", "v1-gate-n141-draw0-k4-t0.8",
                 "noise0.1-seed1-gate-n50-draw0-k2-t0.8"):
        (units / f"{name}.json").write_text(four.model_dump_json())
    calls: list[tuple] = []
    monkeypatch.setattr(rg, "_extend", lambda policy, s, t, prior, have: calls.append(
        ("extend", have, s.samples)) or prior)
    monkeypatch.setattr(rg, "score_suite", lambda policy, s, t: calls.append(
        ("whole", s.samples)) or four)
    rg._scored(units, "v1", object(), suite, 0.8)
    assert calls == [("extend", 4, 8)] and (units / "v1-gate-n50-draw0-k8-t0.8.json").is_file()
    rg._scored(units, "v1", object(), suite, 0.8)  # cached now
    rg._scored(units, "noise0.1-seed0", object(), suite, 0.8)
    assert calls == [("extend", 4, 8), ("whole", 8)]


def test_nulls_are_counted_in_seed_order_whoever_scored_them(tmp_path):
    """Two processes may score different noise seeds: the count reads every unit there, in seed
    order with the placebos after, so the figures do not depend on who finished first, and it
    is complete only when every null is there."""
    import argparse

    import bench.real_gate as rg

    gate = GateConfig.model_validate(json.loads(PRESET.read_text())["gate"])
    champ = _champion()
    args = argparse.Namespace(noise=3, placebo=1, scale=0.1, power_draws=20)
    draw = f"{rg._draw_name(gate.suite)}-t{gate.suite.temperature:g}"

    def cand(shift: float) -> SuiteResult:
        return champ.model_copy(update={"tasks": [t.model_copy(update={
            "sampled_pass": t.sampled_pass + shift}) for t in champ.tasks]})

    (tmp_path / "placebo").mkdir()
    (tmp_path / f"noise0.1-seed2-{draw}.json").write_text(cand(-0.02).model_dump_json())
    part = rg._counted(args, gate, champ, tmp_path)
    assert [n["seed"] for n in part["noise_nulls"]] == [2] and not part["complete"]
    (tmp_path / f"noise0.1-seed0-{draw}.json").write_text(cand(0.01).model_dump_json())
    (tmp_path / f"noise0.1-seed1-{draw}.json").write_text(cand(0.0).model_dump_json())
    (tmp_path / f"{rg._placebo_name(gate, 0)}.json").write_text(cand(0.03).model_dump_json())
    whole = rg._counted(args, gate, champ, tmp_path)
    assert [n["seed"] for n in whole["noise_nulls"]] == [0, 1, 2] and whole["complete"]
    assert [n["sampled_change"] for n in whole["noise_nulls"] + whole["placebo_nulls"]] == [
        0.01, 0.0, -0.02, 0.03]
    assert whole["n"] == 4 and whole["promoted"] == 2  # every family up: the two gains


def test_noise_seed_ranges_are_checked():
    from bench.real_gate import parse_args

    assert parse_args(["nulls", "--noise-seeds", "8:16"]).noise_seeds == (8, 16)
    assert parse_args(["nulls"]).noise_seeds is None
    for bad in ("8", "16:8", "a:b"):
        with pytest.raises(SystemExit):
            parse_args(["nulls", "--noise-seeds", bad])
