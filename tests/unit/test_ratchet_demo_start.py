"""The toy demo says what its first champion is: the planted flaw, and the undamaged warm
start's fresh-set score beside the gain."""

from ratchet.config import RatchetConfig
from ratchet.demo import format_start, starting_point


def test_the_lazy_fix_champion_is_named_and_its_warm_start_scored():
    config = RatchetConfig.model_validate({"champion": {"lazy_fix": True}})
    gain = {"final_version": 4, "pass_final": 0.3}
    start = starting_point(config, gain, n_tasks=60)
    assert start["champion"] == "lazy_fix" and "lazy-fix habit" in start["planted_flaw"]
    assert start["tasks"] == 60 and start["split"] == "fresh"
    assert 0.0 < start["warm_start_pass"] <= 1.0
    assert abs(start["final_minus_warm_start"] - (0.3 - start["warm_start_pass"])) < 1e-12


def test_a_plain_warm_start_has_no_planted_flaw():
    start = starting_point(RatchetConfig(), None)
    assert start == {"champion": "warm_start", "planted_flaw": None}
    assert format_start(start, None) == "champion v1: the warm start (no flaw planted)"


def test_the_start_line_puts_the_warm_start_beside_the_final_champion():
    start = {"planted_flaw": "a planted habit", "warm_start_pass": 0.529, "tasks": 1000,
             "final_minus_warm_start": -0.05}
    line = format_start(start, {"final_version": 4, "pass_final": 0.479})
    assert line == ("champion v1 is the warm start damaged on purpose (a planted habit); the "
                    "undamaged warm start scores 0.529 on the same 1,000 fresh tasks (final "
                    "champion v4: 0.479, -0.050 against it)")
