"""experiments/update_arms.py: the choice rule by hand, the split of units over processes, and a
dry run on a tiny random Mixtral that writes its units, resumes without training again and
applies the rule (its figures mean nothing)."""

import json

import pytest

from experiments import update_arms as ua


def run(changes: dict[str, float], seed: int = 0) -> dict:
    return {"seed": seed, "change": changes}


def side_runs(trained: list[float], guard: float = 0.0, transfer: float = 0.0) -> list[dict]:
    return [run({"trained": t, "guard": guard, "transfer": transfer}, i)
            for i, t in enumerate(trained)]


def test_family_average_counts_each_family_once():
    tasks = [{"family": "a", "sampled_pass": 1.0}, {"family": "a", "sampled_pass": 0.5},
             {"family": "a", "sampled_pass": 0.0}, {"family": "b", "sampled_pass": 0.25}]
    assert ua.family_average(tasks) == pytest.approx((0.5 + 0.25) / 2)  # not 1.75 / 4
    tasks[0]["passed"], tasks[1]["passed"], tasks[2]["passed"], tasks[3]["passed"] = 1, 0, 0, 1
    assert ua.family_average(tasks, "passed") == pytest.approx((1 / 3 + 1) / 2)


def test_every_real_seed_above_every_placebo_seed_is_p_one_in_seventy():
    arm = ua.judge("a", side_runs([0.05, 0.06, 0.07, 0.08]),
                   side_runs([0.01, 0.02, 0.03, 0.04]), 4)
    assert arm["permutation_p"] == pytest.approx(1 / 70, abs=1e-4)
    assert arm["every_real_beats_every_placebo"] and arm["admissible"]
    assert arm["trained_change"] == pytest.approx(0.065)


@pytest.mark.parametrize("real, placebo, guard, transfer, seeds", [
    ([0.05, 0.06, 0.07, 0.04], [0.01, 0.02, 0.03, 0.04], 0.0, 0.0, 4),  # a tie with a placebo
    ([0.05, 0.06, 0.07, 0.30], [0.01, 0.02, 0.03, 0.10], 0.0, 0.0, 4),  # one placebo above one real
    ([0.05, 0.06, 0.07, 0.08], [0.01, 0.02, 0.03, 0.04], -0.021, 0.0, 4),  # guard below the floor
    ([0.05, 0.06, 0.07, 0.08], [0.01, 0.02, 0.03, 0.04], 0.0, -0.03, 4),  # transfer below it
    ([0.05, 0.06, 0.07], [0.01, 0.02, 0.03], 0.0, 0.0, 4),  # not every run has finished
])
def test_an_arm_is_not_admissible(real, placebo, guard, transfer, seeds):
    arm = ua.judge("a", side_runs(real, guard, transfer), side_runs(placebo), seeds)
    assert not arm["admissible"]


@pytest.mark.parametrize("real, placebo, gone", [
    ([0.05], [0.05], True),  # a tie: this real seed does not beat this placebo seed
    ([0.05, 0.01], [0.03], True),
    ([0.05, 0.06], [0.04, 0.01], False),
    ([0.05], [], False), ([], [0.9], False),  # nothing to compare yet
])
def test_an_arm_is_out_once_a_real_seed_does_not_beat_a_placebo_seed(real, placebo, gone):
    assert ua.out(real, placebo) is gone
    arm = ua.judge("a", side_runs(real), side_runs(placebo), 4)
    assert arm["out_early"] is gone and not arm["admissible"]


def test_the_largest_admissible_gain_is_chosen_and_none_keeps_the_preset():
    good = ua.judge("good", side_runs([0.05, 0.06, 0.07, 0.08]), side_runs([0.0] * 4), 4)
    better = ua.judge("better", side_runs([0.1, 0.1, 0.1, 0.1]), side_runs([0.0] * 4), 4)
    larger_but_harmful = ua.judge("harmful", side_runs([0.3] * 4, guard=-0.05),
                                  side_runs([0.0] * 4), 4)
    assert ua.choose([good, larger_but_harmful, better]) == "better"
    assert ua.choose([larger_but_harmful]) is None


def test_the_parts_split_every_unit_once_seed_major():
    args = ua.parse_args(["--seeds", "4"])
    every = ua.plan(args)
    assert len(every) == len(ua.ARMS) * 2 * 4 == 48
    assert every[: 2 * len(ua.ARMS)] == [(a, k, 0) for a in ua.ARMS for k in ("real", "placebo")]
    halves = [ua.plan(ua.parse_args(["--part", p])) for p in ("0/2", "1/2")]
    assert sorted(halves[0] + halves[1]) == sorted(every) and not set(halves[0]) & set(halves[1])
    assert ua.ARMS["token_clip lr 5e-5"]["lr"] == 5e-5  # the preset before the rule chose


@pytest.mark.parametrize("argv", [["--part", "2/2"], ["--part", "x"], ["--seeds", "0"],
                                  ["--arms", "ppo lr 1e-5"]])
def test_bad_arguments_exit(argv):
    with pytest.raises(SystemExit):
        ua.parse_args(argv)


def test_each_arm_changes_only_its_objective_and_learning_rate():
    from ratchet.config import load_config

    preset = load_config(ua.CONFIG, check_paths=False)
    cfg = ua.trainer_config(preset, "asymmetric lr 2.5e-5", 3, tiny=False)
    assert (cfg.objective.type, cfg.objective.negative_scale, cfg.lr, cfg.seed) == (
        "asymmetric", 0.25, 2.5e-5, 3)
    assert (cfg.steps, cfg.batch_size, cfg.trainable, cfg.retain) == (
        preset.trainer.steps, preset.trainer.batch_size, preset.trainer.trainable,
        preset.trainer.retain)


def test_a_dry_run_writes_its_units_resumes_and_applies_the_rule(tmp_path):
    common = ["--tiny", "--limit", "2", "--seeds", "1", "--requests", "8",
              "--arms", "filtered_imitation lr 5e-5", "--units", str(tmp_path / "units"),
              "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "arms.json")]
    # The tiny model passes nothing: half of its rows are rewarded by hand, so the arm has
    # positives to imitate and the placebo has rewards to shuffle.
    import argparse

    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench._common import build_champion
    from ratchet.config import load_config

    args = ua.parse_args(common)
    champion = build_champion(argparse.Namespace(config=ua.CONFIG, tiny=True), args.workdir)
    from tasks.pyfuncs import tuning_draw

    rows = ua.rows_for(args, load_config(ua.CONFIG, check_paths=False), champion, tuning_draw())
    rewards = pa.array([1.0 if i % 2 else -1.0 for i in range(rows.num_rows)], pa.float64())
    pq.write_table(rows.set_column(rows.schema.get_field_index("reward"), "reward", rewards),
                   tmp_path / "units" / "rows.parquet")
    ua.main(common)
    real = ua.unit_path(tmp_path / "units", "filtered_imitation lr 5e-5", "real", 0)
    placebo = ua.unit_path(tmp_path / "units", "filtered_imitation lr 5e-5", "placebo", 0)
    unit = json.loads(real.read_text())
    assert set(unit["change"]) == set(ua.SIDES) and unit["kind"] == "real"
    assert all(len(unit["sides"][s]) == 2 for s in ua.SIDES)
    assert (tmp_path / "units" / "rows.parquet").is_file()
    assert not list((tmp_path / "units").rglob("*.lock"))  # the locks stay out of the units
    assert not (tmp_path / "work" / "runs" / "filtered_imitation_lr_5e-5" / "real-seed0").exists()
    stamps = real.stat().st_mtime_ns, placebo.stat().st_mtime_ns
    ua.main(common)  # everything is there: nothing is trained again
    assert (real.stat().st_mtime_ns, placebo.stat().st_mtime_ns) == stamps
    ua.main([*common, "--choose"])
    doc = json.loads((tmp_path / "arms.json").read_text())
    (arm,) = doc["arms"]
    assert arm["name"] == "filtered_imitation lr 5e-5" and arm["complete"]
    assert {"real_seeds", "placebo_seeds", "permutation_p", "guard_change", "transfer_change",
            "admissible"} <= set(arm)
    assert doc["complete"] and (doc["chosen"] is None) == (not arm["admissible"])
    # Seed 0's real run below its placebo: the arm is out, a second seed trains nothing and the
    # table is decided without it.
    unit["change"]["trained"] = json.loads(placebo.read_text())["change"]["trained"] - 0.1
    real.write_text(json.dumps(unit))
    two = [*common[:4], "2", *common[5:]]
    ua.main(two)
    assert not ua.unit_path(tmp_path / "units", "filtered_imitation lr 5e-5", "real", 1).exists()
    assert not ua.unit_path(tmp_path / "units", "filtered_imitation lr 5e-5", "placebo",
                            1).exists()
    ua.main([*two, "--choose"])
    doc = json.loads((tmp_path / "arms.json").read_text())
    (arm,) = doc["arms"]
    assert arm["out_early"] and not arm["complete"] and doc["complete"] and doc["chosen"] is None


def test_run_as_a_program_its_progress_lines_reach_the_terminal(tmp_path):
    """Scoring a side takes half an hour on the real model: the decode's progress lines
    (runtime/progress.py, logged at INFO) must be shown, not dropped by an unconfigured root
    logger."""
    import subprocess
    import sys

    argv = ["update_arms", "--choose", "--units", str(tmp_path / "units"),
            "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "arms.json")]
    code = ("import logging, runpy, sys; "
            f"sys.argv = {argv!r}; "
            "runpy.run_module('experiments.update_arms', run_name='__main__'); "
            "logging.getLogger('ratchet.progress').info('gate suite (141 tasks): 25 percent done')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ua.ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "gate suite (141 tasks): 25 percent done" in out.stderr
    assert json.loads((tmp_path / "arms.json").read_text())["chosen"] is None


def test_the_training_child_shows_the_trainers_progress(tmp_path, monkeypatch):
    """Each run trains in a spawned child (bench._common.train_apart) for 11-17 minutes: the child
    is a fresh interpreter, so it routes its own logging or its step lines are dropped."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import bench._common as common
    import trainer.recipe

    calls: list[str] = []
    monkeypatch.setattr(common, "show_progress", lambda: calls.append("routed"))

    def train(*_, **__):
        calls.append("trained")
        return {"loss": 0.0}

    monkeypatch.setattr(trainer.recipe, "run_training", train)
    pq.write_table(pa.table({"reward": [1.0]}), tmp_path / "rows.parquet")
    from ratchet.config import load_config

    cfg = load_config(ua.CONFIG, check_paths=False).trainer
    common._train_child(str(tmp_path), str(tmp_path / "rows.parquet"), cfg.model_dump_json(),
                        str(tmp_path), None)
    assert calls == ["routed", "trained"]
    assert json.loads((tmp_path / common.TRAIN_METRICS).read_text()) == {"loss": 0.0}


def test_the_preset_changes_only_by_the_rule():
    """bench/results/update_arms.json: once every arm is complete, the preset trains with the
    chosen arm's objective and learning rate (today's, token_clip at 5e-5, when none is chosen);
    before that, with today's."""
    import json

    from ratchet.config import load_config

    result = json.loads(ua.OUT.read_text())
    arm = (result["chosen"] if result["complete"] else None) or "token_clip lr 5e-5"
    trainer = load_config(ua.CONFIG, check_paths=False).trainer
    objective = trainer.objective.model_dump()
    assert {k: objective[k] for k in ua.ARMS[arm]["objective"]} == ua.ARMS[arm]["objective"]
    assert trainer.lr == ua.ARMS[arm]["lr"]
