"""bench/train_step_real.py and bench/pool_scores.py as dry runs on a tiny random Mixtral (their
figures mean nothing there: the measurements are bench/results/train_step_real.json and
pool_scores_v1.json on the real preset)."""

import json


def test_train_step_bench_times_both_settings_with_the_same_numbers(tmp_path):
    from bench import train_step_real as tsr

    out = tmp_path / "tsr.json"
    tsr.main(["--tiny", "--steps", "2", "--rows", "8", "--workdir", str(tmp_path), "--out",
              str(out)])
    got = json.loads(out.read_text())
    prefix, whole = got["settings"]["prefix"], got["settings"]["whole"]
    assert prefix["frozen_prefix_layers"] == 1 and whole["frozen_prefix_layers"] == 0
    assert prefix["steps"] == whole["steps"] == 2 and got["rows"] == 8
    for key in ("loss", "kl_theta_ref_k3", "retain_kl"):
        assert abs(prefix["metrics"][key] - whole["metrics"][key]) <= 1e-5 + 1e-4 * abs(
            whole["metrics"][key]), key
    parts = prefix["step_parts_cpu_s"]
    assert set(parts) == {"retain_sample_and_kl", "backward_and_optimizer",
                          "policy_forward_and_rest"}


def test_the_once_setting_draws_the_retain_samples_at_setup(tmp_path):
    """``once``: the preset's trainer with ``retain.resample_every`` 0 and the frozen prefix on;
    a name the bench does not know is refused."""
    import pytest

    from bench import train_step_real as tsr
    from trainer.config import RetainAnchor, TrainerConfig

    preset = TrainerConfig(retain=RetainAnchor(path=str(tmp_path / "retain.jsonl")))
    once = tsr.setting(preset, "once")
    assert once.retain.resample_every == 0 and once.frozen_prefix
    assert preset.retain.resample_every == 1  # the preset itself is untouched
    assert not tsr.setting(preset, "whole").frozen_prefix
    with pytest.raises(ValueError, match="unknown setting"):
        tsr.setting(preset, "fast")
    with pytest.raises(ValueError, match="retain set"):
        tsr.setting(TrainerConfig(), "once")


def test_pool_scores_keeps_each_tasks_verdict(tmp_path):
    from bench import pool_scores

    out = tmp_path / "scores.json"
    pool_scores.main(["--tiny", "--pools", "sealed", "--workdir", str(tmp_path), "--out",
                      str(out), "--max-new-tokens", "4", "--batch", "64"])
    sealed = json.loads(out.read_text())["pools"]["sealed"]
    assert sealed["tasks"] == len(sealed["verdicts"]) == 162
    assert sealed["functions"] == 162
    lo, hi = sealed["function_ci95"]
    assert lo <= sealed["pass_rate"] == sealed["function_mean"] <= hi  # one task a function
    assert sum(p for p, _ in sealed["per_family"].values()) == sum(sealed["verdicts"].values())
