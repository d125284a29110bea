"""experiments/crn_coupling.py: the spread figures, by hand."""

import pytest

from experiments import crn_coupling as cc


def test_the_spread_of_the_nulls_changes_by_hand():
    champ = {"a": 0.5, "b": 0.25, "c": 0.0, "d": 1.0}
    family = {"a": "f", "b": "f", "c": "g", "d": "g"}
    nulls = [{"a": 0.75, "b": 0.25, "c": 0.0, "d": 0.5},  # changes +0.25, 0, 0, -0.5
             {"a": 0.5, "b": 0.0, "c": 0.25, "d": 1.0}]   # changes 0, -0.25, +0.25, 0
    assert cc.changes(nulls[0], champ) == [0.25, 0.0, 0.0, -0.5]
    assert cc.family_changes(nulls[0], champ, family) == [0.125, -0.25]
    got = cc.figures(nulls, champ, family, k=4)
    # function changes: +0.25, 0, 0, -0.5, 0, -0.25, +0.25, 0 (mean -0.03125)
    assert got["mean_change"] == pytest.approx(-0.0312, abs=1e-4)
    assert got["function_zero_share"] == 0.5
    assert got["function_sd"] == pytest.approx(0.2318, abs=1e-4)
    # family changes: +0.125, -0.25, -0.125, +0.125
    assert got["family_sd"] == pytest.approx(0.1624, abs=1e-4)
    # independent sampling: sqrt(mean 2 p (1 - p) / 4) over p = 0.5, 0.25, 0, 1
    assert got["independent_function_sd"] == pytest.approx(((0.125 + 0.09375) / 4) ** 0.5,
                                                           abs=1e-4)
