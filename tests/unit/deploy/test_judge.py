import math
import random

import pytest

from deploy.fleet.judge import ArmSamples, JudgeConfig, judge, mann_whitney, p95, two_proportion_z


def test_two_proportion_z_hand_computed():
    # p_pool = 55/200 = 0.275; se = sqrt(0.275 * 0.725 * (1/100 + 1/100)) = 0.0631466
    z, p = two_proportion_z(20, 100, 35, 100)
    assert z == pytest.approx(0.15 / math.sqrt(0.275 * 0.725 * 0.02), rel=1e-9)
    assert z == pytest.approx(2.3754, abs=1e-4)
    assert p == pytest.approx(0.008766, abs=1e-5)
    z, p = two_proportion_z(35, 100, 20, 100)  # canary better: not significant one-sided
    assert z < 0 and p > 0.99


def test_two_proportion_z_degenerate():
    assert two_proportion_z(0, 50, 0, 50) == (0.0, 1.0)


def test_mann_whitney_direction():
    u, p = mann_whitney([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], "greater")
    assert u == 16.0 and p < 0.05
    u, p = mann_whitney([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], "less")
    assert u == 16.0 and p > 0.95


def test_p95_nearest_rank():
    assert p95([float(i) for i in range(1, 101)]) == 95.0
    assert p95([3.0]) == 3.0


def _arm(rng, n, *, err=0.0, lat=50.0, persist=0.8, dissat=0.2):
    return ArmSamples(
        requests=n,
        errors=sum(rng.random() < err for _ in range(n)),
        latencies_ms=[rng.gauss(lat, 5.0) for _ in range(n)],
        edit_persistence=[min(1.0, max(0.0, rng.gauss(persist, 0.1))) for _ in range(n)],
        dissatisfied=[rng.random() < dissat for _ in range(n)],
    )


def test_same_distribution_passes():
    rng = random.Random(0)
    verdict = judge(_arm(rng, 300), _arm(rng, 300), JudgeConfig())
    assert verdict.decision == "pass"
    assert {m.decision for m in verdict.metrics} == {"pass"}


def test_dissatisfied_canary_fails_with_a_reason():
    rng = random.Random(1)
    verdict = judge(_arm(rng, 300), _arm(rng, 300, dissat=0.45), JudgeConfig())
    assert verdict.decision == "fail"
    failed = [m.name for m in verdict.metrics if m.decision == "fail"]
    assert failed == ["dissatisfied_rate"]
    assert verdict.reasons[0].startswith("dissatisfied_rate: canary")


def test_slow_canary_fails_on_latency():
    rng = random.Random(2)
    verdict = judge(_arm(rng, 200), _arm(rng, 200, lat=90.0), JudgeConfig())
    assert [m.name for m in verdict.metrics if m.decision == "fail"] == ["p95_latency_ms"]


def test_too_few_samples_are_not_judged():
    rng = random.Random(3)
    verdict = judge(_arm(rng, 10), _arm(rng, 10, dissat=0.9), JudgeConfig())
    assert verdict.decision == "extend"
    assert {m.decision for m in verdict.metrics} == {"insufficient"}
    assert all(m.p_value is None for m in verdict.metrics)


def test_significant_but_negligible_difference_passes():
    stable = ArmSamples(requests=200_000, errors=2_000)
    canary = ArmSamples(requests=200_000, errors=2_400)  # 1.0% -> 1.2%: p tiny, below margin
    cfg = JudgeConfig(min_signals=1)
    verdict = judge(stable, canary, cfg)
    error = verdict.metrics[0]
    assert error.p_value < 1e-6 and error.decision == "pass"


# -- the always-valid judge ---------------------------------------------------------------------

def test_msprt_half_width_hand_computed():
    from deploy.fleet.judge import msprt_half_width, msprt_p_value

    # V = 0.01, tau = 0.1: 2 V (V + tau^2) / tau^2 = 0.04; log(1/0.05) + log(2) / 2 = 3.34231
    assert msprt_half_width(0.01, 0.05, 0.1) == pytest.approx(math.sqrt(0.04 * 3.342306), rel=1e-5)
    # p-value at the boundary is alpha: estimate = half-width
    h = msprt_half_width(0.01, 0.05, 0.1)
    assert msprt_p_value(h, 0.01, 0.1) == pytest.approx(0.05, rel=1e-6)
    assert msprt_p_value(-0.2, 0.01, 0.1) == 1.0


def _aa_fails(method: str, windows: int, looks: int, step: int, seed: int) -> int:
    """Windows (same distribution on both arms) judged fail at any of ``looks`` growing looks,
    with zero margins: every look is a plain significance test."""
    cfg = JudgeConfig(method=method, error_rate_margin=0.0, latency_p95_margin=0.0,
                      edit_persistence_margin=0.0, dissatisfied_margin=0.0, min_requests=20,
                      min_signals=20)
    rng = random.Random(seed)
    fails = 0
    for _ in range(windows):
        s, c = _arm(rng, step), _arm(rng, step)
        for look in range(looks):
            if look:
                ds, dc = _arm(rng, step), _arm(rng, step)
                s = ArmSamples(s.requests + ds.requests, 0, s.latencies_ms + ds.latencies_ms,
                               s.edit_persistence + ds.edit_persistence,
                               s.dissatisfied + ds.dissatisfied)
                c = ArmSamples(c.requests + dc.requests, 0, c.latencies_ms + dc.latencies_ms,
                               c.edit_persistence + dc.edit_persistence,
                               c.dissatisfied + dc.dissatisfied)
            if judge(s, c, cfg).decision == "fail":
                fails += 1
                break
    return fails


def test_repeated_looks_inflate_the_fixed_test_but_not_the_always_valid_one():
    """200 A/A windows, 10 looks each (the sample grows by 40 per arm per look): the fixed-horizon
    tests, each at alpha/4 per look, reject far more often than alpha over the looks; the
    confidence sequences stay under alpha = 0.05 (expected at most 10 of 200)."""
    fixed = _aa_fails("fixed_horizon", 200, 10, 40, seed=5)
    valid = _aa_fails("always_valid", 200, 10, 40, seed=5)
    assert valid <= 10, valid
    assert fixed > 2 * max(valid, 5), (fixed, valid)


def test_always_valid_reports_the_harm_sequence_and_non_inferiority():
    rng = random.Random(7)
    verdict = judge(_arm(rng, 2000), _arm(rng, 2000), JudgeConfig())
    assert verdict.decision == "pass"
    dissat = next(m for m in verdict.metrics if m.name == "dissatisfied_rate")
    assert dissat.test == "msprt" and dissat.harm_low < 0.0 < dissat.harm_high
    assert dissat.margin == 0.05 and dissat.non_inferior  # 2,000 per arm: within +/- 0.05
    small = judge(_arm(rng, 60), _arm(rng, 60), JudgeConfig())
    assert not next(m for m in small.metrics if m.name == "dissatisfied_rate").non_inferior
