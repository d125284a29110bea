"""bench/loop_real_seeds.py: seeds reach the traffic, the trainer and the gate; a function's change
is pooled over seeds before the bootstrap; the family test flips a function in every seed at once;
complete units are kept and a unit cut short is rerun; the goals are judged from the figures."""

import argparse
import json
import os
from pathlib import Path

import pytest

from bench import loop_real_seeds as seeds
from bench.loop_real import summarise, with_seed

ROOT = Path(__file__).resolve().parents[2]


def test_a_seed_changes_traffic_trainer_and_gate_draws_only():
    from ratchet.config import load_config

    base = load_config(ROOT / "configs" / "smollm2-pyfuncs.json", check_paths=False)
    two = with_seed(base, 2)
    assert (two.simulator.seed, two.trainer.seed, two.gate.suite.seed) == (2, 2, 2000)
    assert two.policy == base.policy and two.champion == base.champion  # same first champion
    assert two.trainer.lr == base.trainer.lr and two.gate.suite.path == base.gate.suite.path
    assert with_seed(base, 0).model_dump() == base.model_dump()


def test_a_function_change_is_its_mean_over_seeds_before_the_bootstrap():
    keys = ["a", "a", "b", "c"]
    pairs = [([False, False, True, True], [True, True, True, True]),   # a +1, b 0, c 0
             ([False, False, True, False], [False, False, True, True])]  # a 0, b 0, c +1
    delta, low, high = seeds.pooled_change(keys, pairs)
    assert delta == pytest.approx((0.5 + 0 + 0.5) / 3)
    assert low <= delta <= high
    assert seeds.pooled_change(keys, [pairs[0][:1] * 2]) == (0.0, 0.0, 0.0)


def _tasks(families: dict[str, int]) -> list[dict]:
    return [{"prompt": f"{f} {i}", "family": f, "function": f"{f}:{i}"}
            for f, n in families.items() for i in range(n)]


def test_a_family_that_dropped_in_every_seed_is_surely_worse():
    tasks = _tasks({"kept": 8, "broken": 8})
    first = [True] * 16
    final = [True] * 8 + [False] * 8
    out = seeds.pooled_families(tasks, [(first, final), (first, final)])
    assert out["family_max_drop"]["family"] == "broken"
    assert out["family_max_drop"]["surely_worse"]
    assert out["per_family"]["broken"] == {"tasks": 16, "first": 16, "final": 0}
    # one seed's drop undone by the other's gain: no family surely worse
    mixed = seeds.pooled_families(tasks, [(first, final), (final, first)])
    assert not mixed["family_max_drop"]["surely_worse"]


def _unit(path: Path, seed: int, arm: str, tasks: list[dict], first: list[bool],
          final: list[bool], *, complete: bool = True, promoted: bool = True,
          live: tuple[float, float] = (0.3, 0.5)) -> Path:
    args = argparse.Namespace(cycles=2, requests=8, config=Path("c.json"), humaneval=0,
                              seed=seed, arm=arm, guard_tasks=tasks, transfer_tasks=[],
                              sealed_file=path.parent / "sealed.jsonl",
                              guard_file=path.parent / "guard.jsonl")
    rows = [{"arm": arm, "cycle": i, "promoted": promoted and i == 0, "live_pass_rate": p,
             "edit_persistence": p, "dissatisfied_rate": 1 - p} for i, p in enumerate(live)]
    he = [True, False, True, False]
    scores = {"first": {"version": 1, "passed": first, "guard": first, "transfer": None,
                        "humaneval": 0.5, "humaneval_passed": he},
              f"{arm}-final": {"version": 3, "passed": final, "guard": first, "transfer": None,
                               "humaneval": 0.5, "humaneval_passed": he}}
    out = summarise(args, rows, scores, tasks, 60.0)
    out.update(complete=complete, workdir=str(path.parent / f"run{seed}{arm}"))
    path.write_text(json.dumps(out))
    return path


def _write_pools(units: Path, tasks: list[dict]) -> None:
    for name in ("sealed", "guard"):
        (units / f"{name}.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))


def test_complete_units_are_kept_and_a_unit_cut_short_is_rerun(tmp_path, monkeypatch):
    units = tmp_path / "units"
    units.mkdir()
    tasks = _tasks({"f": 6, "g": 6})
    _write_pools(units, tasks)
    better = [False] * 6 + [True] * 6, [True] * 12
    _unit(seeds.unit_file(units, 0, "rl"), 0, "rl", tasks, *better)
    _unit(seeds.unit_file(units, 0, "placebo"), 0, "placebo", tasks, better[0], better[0],
          promoted=False, live=(0.3, 0.3))
    _unit(seeds.unit_file(units, 1, "rl"), 1, "rl", tasks, *better, complete=False)
    ran = []

    def run_unit(seed, arm, **kwargs):  # stands in for the bench.loop_real process
        ran.append((seed, arm, kwargs["extra"]))
        final = better[1] if arm == "rl" else better[0]  # the placebo changes nothing
        _unit(seeds.unit_file(units, seed, arm), seed, arm, tasks, better[0], final,
              promoted=arm == "rl", live=(0.3, 0.5 if arm == "rl" else 0.25))

    monkeypatch.setattr(seeds, "run_unit", run_unit)
    out = tmp_path / "loop_real.json"
    seeds.main(["--seeds", "0,1", "--units", str(units), "--out", str(out), "--",
                "--humaneval", "0"])
    assert ran == [(1, "rl", ["--humaneval", "0"]), (1, "placebo", ["--humaneval", "0"])]
    r = json.loads(out.read_text())
    assert r["complete"] and r["placebo_complete"] and r["seeds"] == [0, 1]
    assert r["pooled"]["sealed"]["delta"] == pytest.approx(0.5)
    assert r["pooled"]["placebo"]["promotions"] == 0
    assert r["pooled"]["humaneval"]["delta"] == 0.0
    s0 = r["per_seed"]["0"]
    assert s0["checkpoints"]["final"]["version"] == 3
    assert s0["checkpoints"]["final"]["path"].endswith("run0rl/rl/scored/v3")
    assert "gates compare 1 3 --suite FILE.jsonl" in s0["checkpoints"]["compare"]
    g = r["goals"]
    assert g["sealed"]["reached"] and g["sealed"]["ci"][0] > 0
    assert g["guard"]["reached"] and g["humaneval"]["reached"] and g["placebo"]["reached"]
    assert g["live"]["live_pass_rate"] == {"rl_changes": pytest.approx([0.2, 0.2]),
                                           "placebo_changes": pytest.approx([0.0, -0.05]),
                                           "reached": True}
    assert g["minutes"]["whole_run"] == pytest.approx(4.0)
    # the one-run file's keys, from the pooled figures
    assert (r["pass_first"], r["pass_final"]) == (0.5, 1.0) and r["ci_low"] > 0
    assert r["promotions"] == 2 and r["placebo_promotions"] == 0 and r["placebo_delta"] == 0.0
    assert r["guard"] == r["pooled"]["guard"] and r["seconds"] == pytest.approx(240.0)
    assert [(row["seed"], row["arm"]) for row in r["per_cycle"]][::2] == [
        (0, "placebo"), (0, "rl"), (1, "placebo"), (1, "rl")]
    assert set(r["scores"]) == {"seed0_rl", "seed0_placebo", "seed1_rl", "seed1_placebo"}


def _seed0_rl_unit(tmp_path: Path) -> tuple[Path, list[dict]]:
    """A units folder with its pools and one complete unit, seed 0's rl arm (0 -> 4 of 4)."""
    units = tmp_path / "units"
    units.mkdir()
    tasks = _tasks({"f": 4})
    _write_pools(units, tasks)
    _unit(seeds.unit_file(units, 0, "rl"), 0, "rl", tasks, [False] * 4, [True] * 4)
    return units, tasks


def test_pool_only_runs_nothing_and_names_the_missing_units(tmp_path, monkeypatch):
    units, _ = _seed0_rl_unit(tmp_path)
    monkeypatch.setattr(seeds, "run_unit", lambda *a, **k: pytest.fail("ran a unit"))
    out = tmp_path / "r.json"
    seeds.main(["--seeds", "0,1", "--units", str(units), "--pool-only", "--out", str(out)])
    r = json.loads(out.read_text())
    assert not r["complete"] and not r["placebo_complete"]
    assert r["missing_units"] == ["seed0_placebo", "seed1_rl", "seed1_placebo"]
    assert r["unit_commits"] == {"seed0_rl": None}  # the unit file has no commit recorded
    assert r["machine"].startswith(f"{os.cpu_count()}-core") and r["commit"]
    assert r["pooled"]["sealed"]["delta"] == 1.0


def test_run_arms_runs_only_the_named_arms_units_and_pools_the_rest(tmp_path, monkeypatch):
    units, tasks = _seed0_rl_unit(tmp_path)
    ran = []

    def run_unit(seed, arm, **kwargs):
        ran.append((seed, arm))
        _unit(seeds.unit_file(units, seed, arm), seed, arm, tasks, [False] * 4, [False] * 4,
              promoted=False)

    monkeypatch.setattr(seeds, "run_unit", run_unit)
    out = tmp_path / "r.json"
    seeds.main(["--seeds", "0,1", "--units", str(units), "--run-arms", "placebo", "--out",
                str(out)])
    assert ran == [(0, "placebo"), (1, "placebo")]
    r = json.loads(out.read_text())
    assert r["missing_units"] == ["seed1_rl"] and r["placebo_complete"]
    assert r["pooled"]["sealed"]["delta"] == 1.0  # seed 0's rl unit, pooled
    with pytest.raises(SystemExit):
        seeds.main(["--seeds", "0", "--units", str(units), "--no-placebo", "--run-arms",
                    "placebo", "--out", str(out)])
    ran.clear()
    seeds.main(["--seeds", "0,1", "--units", str(units), "--no-placebo", "--out", str(out)])
    assert ran == [(1, "rl")]  # without --run-arms: every arm pooled, here rl alone


def test_a_unit_cut_short_resumes_unless_fresh_or_its_folder_is_gone(tmp_path, monkeypatch):
    units, tasks = _seed0_rl_unit(tmp_path)
    runs, config = tmp_path / "runs", Path("c.json")
    cut = _unit(seeds.unit_file(units, 1, "rl"), 1, "rl", tasks, [False] * 4, [True] * 4,
                complete=False)
    (runs / "seed1" / "rl" / "rl").mkdir(parents=True)
    commands = []

    class Finished:  # the bench.loop_real process: records its command, completes the unit
        def __init__(self, cmd, cwd):
            commands.append(cmd)
            data = json.loads(cut.read_text()) if cut.exists() else {}
            cut.write_text(json.dumps({**data, "complete": True}))

        def wait(self):
            return 0

        def poll(self):
            return 0

    monkeypatch.setattr(seeds.subprocess, "Popen", Finished)
    unit = {"cycles": 2, "config": config, "units": units, "workdir": runs, "extra": []}
    assert seeds.resumable(cut, runs / "seed1" / "rl")
    assert not seeds.resumable(cut, runs / "seed2" / "rl")
    seeds.run_unit(1, "rl", **unit)
    assert "--resume" in commands[-1] and (runs / "seed1" / "rl" / "rl").is_dir()

    _unit(cut, 1, "rl", tasks, [False] * 4, [True] * 4, complete=False)
    seeds.run_unit(1, "rl", **unit, fresh=True)  # from its start: folder emptied, file removed
    assert "--resume" not in commands[-1] and not (runs / "seed1" / "rl").exists()

    _unit(cut, 1, "rl", tasks, [False] * 4, [True] * 4, complete=False)
    seeds.run_unit(1, "rl", **unit)  # its run folder is gone: nothing to resume
    assert "--resume" not in commands[-1]


def test_a_units_suite_results_reach_the_next_unit_before_it_starts(tmp_path, monkeypatch):
    runs, units = tmp_path / "runs", tmp_path / "units"
    units.mkdir()
    seen = {}  # arm: the suite results its process found when it started

    class Unit:  # the bench.loop_real process: its gate writes one result named by its arm
        def __init__(self, cmd, cwd):
            arm = cmd[cmd.index("--arm") + 1]
            run_dir = Path(cmd[cmd.index("--workdir") + 1])
            own = seeds.suite_results(run_dir, arm)
            seen[arm] = sorted(f.name for f in own.glob("*.json")) if own.is_dir() else []
            own.mkdir(parents=True, exist_ok=True)
            (own / f"{arm}-champion-v1.json").write_text(json.dumps({"arm": arm}))
            seeds.unit_file(units, 0, arm).write_text(json.dumps({"complete": True}))

        def wait(self):
            return 0

        def poll(self):
            return 0

    monkeypatch.setattr(seeds.subprocess, "Popen", Unit)
    unit = {"cycles": 1, "config": Path("c.json"), "units": units, "workdir": runs, "extra": []}
    seeds.run_unit(0, "rl", **unit)
    seeds.run_unit(0, "placebo", **unit)
    assert seen == {"rl": [], "placebo": ["rl-champion-v1.json"]}
    assert sorted(f.name for f in seeds.gather_suite_results(runs).glob("*")) == [
        "placebo-champion-v1.json", "rl-champion-v1.json"]
    # the gate writes there: a cycle's gate folder under the arm's folder
    from gating.gate import SUITE_CACHE
    from ratchet.cycle import GATE_DIR
    assert seeds.suite_results(runs / "seed0" / "rl", "rl") == (
        runs / "seed0" / "rl" / "rl" / GATE_DIR / SUITE_CACHE)


def test_a_shared_result_never_overwrites_one_a_unit_has(tmp_path):
    src, dst = tmp_path / "shared", tmp_path / "own"
    src.mkdir()
    dst.mkdir()
    (src / "k1.json").write_text("shared")
    (src / "k2.json").write_text("shared")
    (dst / "k1.json").write_text("own")
    assert seeds.share_suite_results(src, dst) == 1
    assert (dst / "k1.json").read_text() == "own" and (dst / "k2.json").read_text() == "shared"
    assert sorted(f.name for f in dst.iterdir()) == ["k1.json", "k2.json"]  # no part file left
    assert seeds.share_suite_results(tmp_path / "absent", dst) == 0


def test_last_candidates_pool_each_arm_and_the_rl_arm_against_the_placebo():
    tasks = _tasks({"f": 20, "g": 6})
    first = [False] * 20 + [True] * 6
    rl_last = [True] * 26  # f: +20
    placebo_last = [True] * 5 + [False] * 15 + [True] * 6  # f: +5

    def unit(seed: int, arm: str, last: list[bool] | None) -> dict:
        u = {"scores": {"first": {"passed": first, "guard": first, "transfer": None},
                        f"{arm}-final": {"passed": first if last else rl_last, "guard": first,
                                         "transfer": None}}}
        if last:
            u["scores"][f"{arm}-last-candidate"] = {"passed": last, "guard": first,
                                                    "transfer": None}
        return u

    rl = {0: unit(0, "rl", rl_last), 1: unit(1, "rl", None)}  # seed 1 promoted its last one
    placebo = {0: unit(0, "placebo", placebo_last)}
    out = seeds.last_candidates(rl, placebo, {"sealed": tasks, "guard": tasks, "transfer": []})
    sealed = out["sealed"]
    assert sealed["rl"]["delta"] == pytest.approx(20 / 26) and sealed["rl"]["seeds"] == [0, 1]
    assert sealed["placebo"]["delta"] == pytest.approx(5 / 26)
    assert sealed["rl_minus_placebo"]["delta"] == pytest.approx(15 / 26)
    assert sealed["rl_minus_placebo"]["seeds"] == [0]
    assert sealed["rl_minus_placebo"]["ci"][0] > 0
    assert out["guard"]["rl"]["delta"] == 0.0 and "transfer" not in out
