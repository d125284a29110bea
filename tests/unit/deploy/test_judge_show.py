"""The judge's ``show`` mode: the canary carries the burden of proof."""

import random
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from deploy.fleet.judge import ArmSamples, JudgeConfig, judge
from deploy.fleet.rollout import RolloutConfig, RolloutController

SHOW = JudgeConfig(mode="show")


def _arm(rng, n, *, persist=0.8, dissat=0.2):
    return ArmSamples(
        requests=n, errors=0, latencies_ms=[rng.gauss(50.0, 5.0) for _ in range(n)],
        edit_persistence=[min(1.0, max(0.0, rng.gauss(persist, 0.1))) for _ in range(n)],
        dissatisfied=[rng.random() < dissat for _ in range(n)],
    )


def test_a_neutral_canary_with_little_data_passes_on_harm_but_is_unshown_on_show():
    rng = random.Random(3)
    stable, canary = _arm(rng, 60), _arm(rng, 60)
    assert judge(stable, canary, JudgeConfig()).decision == "pass"
    verdict = judge(stable, canary, SHOW)
    assert verdict.decision == "extend"
    assert {m.name for m in verdict.metrics if m.decision == "unshown"} >= {
        "edit_persistence_600", "dissatisfied_rate"}
    assert any(u.startswith("edit_persistence_600 (harm up to +") for u in verdict.unshown)


def test_a_better_canary_with_enough_data_is_shown_and_superior():
    rng = random.Random(4)
    verdict = judge(_arm(rng, 5000), _arm(rng, 5000, persist=0.86), SHOW)
    assert verdict.decision == "pass"
    assert {m.decision for m in verdict.metrics} == {"pass"}
    assert verdict.superior == ["edit_persistence_600"]


def test_a_harmful_canary_still_fails_on_show():
    rng = random.Random(5)
    verdict = judge(_arm(rng, 300), _arm(rng, 300, dissat=0.45), SHOW)
    assert verdict.decision == "fail"


def test_show_needs_the_always_valid_method():
    with pytest.raises(ValidationError, match="always_valid"):
        JudgeConfig(mode="show", method="fixed_horizon")


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


class _Split:
    def __init__(self) -> None:
        self.weights: list[float] = []

    def set_canary_weight(self, weight: float) -> None:
        self.weights.append(weight)


class _Neutral:
    """Both arms drawn from one distribution, 60 samples each per window."""

    def __init__(self) -> None:
        self.rng = random.Random(11)

    def serving(self, start, end):
        return {"stable": _arm(self.rng, 60), "canary": _arm(self.rng, 60)}

    def closed_until(self):
        return datetime(9999, 1, 1, tzinfo=UTC)

    def product(self, start, end, version):
        return _arm(self.rng, 60)


def _run(judge_config: JudgeConfig, monkeypatch) -> RolloutController:
    from runtime import registry

    monkeypatch.setattr(registry, "set_alias", lambda *a, **k: None)
    monkeypatch.setattr(registry, "resolve_alias", lambda *a, **k: 2)
    monkeypatch.setattr(RolloutController, "_write_verdict", lambda self, *a: None)
    clock, source = _Clock(), _Neutral()
    ctl = RolloutController(
        config=RolloutConfig(steps=(0.5, 1.0), window_s=60.0, max_extensions=2,
                             judge=judge_config),
        splitter=_Split(), serving=source, product=source, tracking_uri="http://127.0.0.1:9",
        model_name="m", stable_version=1, canary_version=2, clock=clock,
    )
    ctl.start()
    for _ in range(10):
        clock.now += timedelta(seconds=61)
        ctl.tick()
        if ctl.state != "running":
            break
    return ctl


def test_a_neutral_canary_is_rolled_back_not_shown(monkeypatch):
    ctl = _run(SHOW, monkeypatch)
    assert ctl.state == "rolled_back"
    assert ctl.log[-1].decision == "rollback"
    assert ctl.log[-1].reason.startswith("not shown after 2 extensions: ")
    assert "edit_persistence_600" in ctl.log[-1].reason


def test_the_same_canary_is_promoted_by_default_on_harm(monkeypatch):
    ctl = _run(JudgeConfig(), monkeypatch)
    assert ctl.state == "promoted"
