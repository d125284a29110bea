"""bench/loop_real.py end to end on the tiny Qwen3-MoE preset (the real model's loop, shrunk): the
simulator sends pyfuncs chat requests to the replica, signals come back through the API, one
cycle of each arm runs (the placebo with shuffled rewards), the champion is scored on sealed tasks
before and after, and the result file carries every key with a per-cycle row of live signals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _tiny_run(tmp_path: Path) -> tuple[Path, list[str], dict]:
    """The tiny preset's config file, the pool arguments of a loop_real run, and its env."""
    import os

    from ratchet.config import load_config
    from tasks.pyfuncs import BY_FAMILY, instances, write_jsonl

    pool = write_jsonl([t for f in ("add_const", "reverse_str", "clamp")
                        for t in instances(BY_FAMILY[f], 8, seed=5)], tmp_path / "pool.jsonl")
    sealed = write_jsonl([t for f in ("add_const", "reverse_str")
                          for t in instances(BY_FAMILY[f], 4, seed=6)], tmp_path / "sealed.jsonl")
    transfer = write_jsonl(instances(BY_FAMILY["sub_const"], 4, seed=7),
                           tmp_path / "transfer.jsonl")
    guard = write_jsonl(instances(BY_FAMILY["mul_const"], 4, seed=8), tmp_path / "guard.jsonl")
    config = load_config(ROOT / "configs" / "tiny-qwen3moe.json")
    config = config.model_copy(update={
        "model_name": "loop-real-it",
        "simulator": config.simulator.model_copy(update={
            "requests_per_round": 48, "tasks_path": pool, "max_tokens": 24}),
        "gate": config.gate.model_copy(update={
            "suite": config.gate.suite.model_copy(update={"size": 16})}),
    })
    config_file = tmp_path / "loop-real-it.json"
    config_file.write_text(config.model_dump_json())
    pools = ["--requests", "48", "--sealed", "8", "--sealed-file", str(sealed), "--humaneval",
             "0", "--transfer-file", str(transfer), "--guard-file", str(guard),
             "--max-new-tokens", "24", "--score-cache", str(tmp_path / "scores")]
    return config_file, pools, {**os.environ, "PYTHONPATH": str(ROOT)}


def test_loop_real_runs_both_arms_on_chat_traffic(tmp_path):
    import subprocess
    import sys

    config_file, pools, env = _tiny_run(tmp_path)
    out = tmp_path / "loop_real.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.loop_real", "--config", str(config_file), "--cycles", "1",
         *pools, "--workdir", str(tmp_path / "work"), "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["complete"] is True and result["cycles"] == 1
    for key in ("pass_first", "pass_final", "ci_low", "ci_high", "placebo_delta"):
        assert isinstance(result[key], float), key
    assert result["ci_low"] <= result["pass_final"] - result["pass_first"] <= result["ci_high"]
    assert [r["arm"] for r in result["per_cycle"]] == ["rl", "placebo"]
    for row in result["per_cycle"]:
        assert row["requests"] == 48 and row["errors"] == 0
        assert row["rows"] > 0
        assert 0.0 <= row["edit_persistence"] <= 1.0 and 0.0 <= row["dissatisfied_rate"] <= 1.0
    assert "sealed set (8 tasks)" in done.stdout
    assert result["transfer"]["tasks"] == 4 and result["transfer"]["families"] == ["sub_const"]
    assert {"rl-final", "placebo-final"} <= set(result["transfer"])
    assert result["guard"]["tasks"] == 4 and result["guard"]["families"] == ["mul_const"]
    assert {"family", "p", "surely_worse"} <= set(result["guard"]["rl-final"]["family_max_drop"])
    assert all("gate_failed" in r and "gate_guards" in r for r in result["per_cycle"])
    for row in result["per_cycle"]:  # which rule decided, in the results and on the terminal
        assert row["gate_decision"].split(":")[0] in ("promoted", "rejected")
        assert f"cycle 1: {row['gate_decision']}" in done.stdout
    # the rl arm registers under the preset's own name: `gates show --config` finds its decision
    rl = next(r for r in result["per_cycle"] if r["arm"] == "rl")
    shown = subprocess.run(
        [sys.executable, "-m", "ratchet.cli", "gates", "show", str(rl["candidate_version"]),
         "--config", str(config_file), "--workdir", str(tmp_path / "work" / "rl")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert rl["gate_decision"] in shown.stdout
    assert f"gates show VERSION --config {config_file}" in done.stdout


def test_the_seeds_run_keeps_a_complete_unit_and_pools_it(tmp_path):
    import subprocess
    import sys

    config_file, pools, env = _tiny_run(tmp_path)
    out, units = tmp_path / "pooled.json", tmp_path / "units"
    cmd = [sys.executable, "-m", "bench.loop_real_seeds", "--seeds", "1", "--no-placebo",
           "--cycles", "1", "--config", str(config_file), "--units", str(units), "--workdir",
           str(tmp_path / "runs"), "--out", str(out), "--", *pools]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    unit = json.loads((units / "seed1_rl.json").read_text())
    assert unit["complete"] and unit["seed"] == 1
    r = json.loads(out.read_text())
    assert r["complete"] and r["seeds"] == [1] and not r["placebo_complete"]
    assert {"sealed", "transfer", "guard"} <= set(r["pooled"])
    first = r["per_seed"]["1"]["checkpoints"]["first"]
    assert Path(first["path"]).is_dir()  # where `ratchet gates compare` can score it again
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "seed 1 rl: complete, kept" in again.stdout
    assert json.loads(out.read_text())["pooled"] == r["pooled"]


def test_the_proof_runs_a_pair_scores_its_champions_and_pools_it(tmp_path):
    """One pair of one cycle: each unit's champions scored in pieces (sampled and greedy), the
    first one at the grid's temperatures too, every protocol key in the pooled file; a second
    call runs and scores nothing again."""
    import subprocess
    import sys

    config_file, _, env = _tiny_run(tmp_path)
    pools = [f"--{name}-file={tmp_path / f'{name}.jsonl'}" for name in ("sealed", "transfer",
                                                                         "guard")]
    out, units, cache = tmp_path / "proof.json", tmp_path / "units", tmp_path / "scores"
    cmd = [sys.executable, "-m", "bench.loop_proof", "--pairs", "1", "--cycles", "1",
           "--config", str(config_file), "--units", str(units), "--cache", str(cache),
           "--workdir", str(tmp_path / "runs"), "--out", str(out), "--humaneval", "0", *pools,
           "--", "--max-new-tokens", "24"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["complete"] and [p["seed"] for p in r["pairs"]] == [0]
    pair = r["pairs"][0]
    assert {"rl_primary", "placebo_primary", "rl_promotions", "placebo_promotions"} <= set(pair)
    assert r["primary_p"] in (0.5, 1.0)  # one pair: 1/2 when rl is above placebo, else 1
    assert {"sampled", "greedy"} == set(r["transfer_ci_low"]) == set(r["guard_ci_low"])
    assert r["vs_best_temperature"]["first_best"] in ("greedy", "0.3", "0.8")
    assert set(r["targets"]) >= {"rl_above_placebo", "pooled_rl_gain", "promotions", "transfer",
                               "guard", "vs_best_temperature", "live"}
    unit = r["units"]["seed0_rl"]
    assert Path(unit["checkpoints"]["first"]).is_dir() and unit["commit"]
    assert [c["requests"] for c in unit["per_cycle"]] == [48]
    scored = [json.loads(f.read_text()) for f in cache.glob("*.json")]
    sealed = [s for s in scored if s["piece"] == "sealed"]
    assert all(len(s["tasks"]) == 8 and s["samples"] == 8 for s in sealed)
    assert {s["piece"] for s in scored} == {"sealed", "sealed_t0.3", "transfer", "guard"}
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "scoring" not in again.stdout
    assert json.loads(out.read_text())["pairs"] == r["pairs"]


def test_a_run_killed_in_its_gate_resumes_there_and_keeps_its_traffic(tmp_path):
    import subprocess
    import sys

    from ratchet.cycle_state import CycleStore

    config_file, pools, env = _tiny_run(tmp_path)
    out, work = tmp_path / "loop_real.json", tmp_path / "work"
    cmd = [sys.executable, "-m", "bench.loop_real", "--config", str(config_file), "--cycles",
           "2", "--arm", "rl", *pools, "--workdir", str(work), "--out", str(out)]
    killed = subprocess.run(cmd, cwd=ROOT, env={**env, "RATCHET_TEST_DIE_AT": "gate"},
                            capture_output=True, text=True, timeout=1500)
    assert killed.returncode == -9, killed.stderr[-3000:]
    cut = json.loads(out.read_text())
    assert not cut["complete"] and cut["per_cycle"] == [] and "first" in cut["scores"]
    assert cut["pending"]["cycle"] == 0 and cut["pending"]["stats"]["requests"] == 48

    done = subprocess.run([*cmd, "--resume"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["complete"] and [r["cycle"] for r in result["per_cycle"]] == [0, 1]
    first, second = result["per_cycle"]
    assert first["resumed_from"] == "trained" and second["resumed_from"] is None
    assert first["requests"] == 48 and first["live_pass_rate"] == cut["pending"]["stats"][
        "pass_rate"]  # the round sent before the kill, not a second one
    assert "cycle 1/2: resumed at its trained stage" in done.stdout
    assert result["scores"]["first"] == cut["scores"]["first"] and result["pending"] is None
    assert result["resumes"][0]["after"] is None and result["resumes"][0]["pending"]
    states = CycleStore(work / "rl" / "spans").all()
    assert len(states) == 2 and all(s.finished for s in states)
    again = subprocess.run([*cmd, "--resume"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=300)
    assert again.returncode != 0 and "nothing to resume" in again.stderr
