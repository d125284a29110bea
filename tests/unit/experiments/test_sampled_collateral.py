"""experiments/sampled_collateral.py: its arguments and the paired change over prompts by hand (the
figures need the real checkpoints: bench/results/sampled_collateral.json)."""

import pytest

from experiments import sampled_collateral as sc


def test_paired_change_by_hand():
    r = sc.paired_change([0.5, 0.25, 0.75, 0.5], [0.75, 0.25, 0.5, 1.0])
    assert r["delta"] == pytest.approx((0.25 + 0.0 - 0.25 + 0.5) / 4)
    assert r["ci_low"] <= r["delta"] <= r["ci_high"]
    assert r["ci_low"] >= -0.25 and r["ci_high"] <= 0.5  # a mean of resampled changes
    same = sc.paired_change([0.5] * 5, [0.5] * 5)
    assert same == {"delta": 0.0, "ci_low": 0.0, "ci_high": 0.0}


@pytest.mark.parametrize("extra", [["--samples", "0"], ["--temperature", "0"]])
def test_bad_arguments_exit(tmp_path, extra):
    with pytest.raises(SystemExit):
        sc.parse_args(["--champion", str(tmp_path), "--candidates", str(tmp_path),
                       "--families", "count_even", *extra])


def test_a_missing_checkpoint_exits(tmp_path):
    with pytest.raises(SystemExit):
        sc.parse_args(["--champion", str(tmp_path / "none"), "--candidates", str(tmp_path),
                       "--families", "count_even"])
