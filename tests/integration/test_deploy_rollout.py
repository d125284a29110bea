"""Rollout controller against a real MLflow registry and a real router process.

Traffic outcomes are fed as data: the router-side ledger (``RequestLedger``, the class the router
uses) and finalised reward rows in ``REWARD_SCHEMA`` (what ingest writes), both in event time
driven by the test's clock. The registry (alias ``champion``, version tags and description) and
the router's weights are the real services.
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from mlflow import MlflowClient

from deploy.fleet.fleet import RouterProcess
from deploy.fleet.judge import JudgeConfig
from deploy.fleet.rollout import RewardTable, RolloutConfig, RolloutController
from deploy.fleet.router import RequestLedger
from deploy.replica.toy_models import register_untrained
from ingest.schema import REWARD_SCHEMA
from runtime import registry

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOKEN = "rollout-test-token"
WINDOW_S = 600.0


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(scope="module")
def router(tmp_path_factory):
    with RouterProcess.start(
        stable_urls=["http://127.0.0.1:9"],
        canary_urls=[],
        admin_token=TOKEN,
        workdir=tmp_path_factory.mktemp("router"),
    ) as r:
        yield r


@pytest.fixture
def versions(mlflow_server, tmp_path):
    """v1 was champion; the gate promoted v2 (previous-champion = v1); the rollout starts."""
    name = f"deploy-rollout-{uuid.uuid4().hex[:6]}"
    v1 = register_untrained(mlflow_server.uri, name, seed=1, workdir=tmp_path)
    v2 = register_untrained(mlflow_server.uri, name, seed=2, workdir=tmp_path)
    registry.promote(mlflow_server.uri, name, v1)
    registry.set_version_tags(
        mlflow_server.uri,
        name,
        v2,
        {"ratchet.gate.verdict": "pass"},
        description="Gate: passed (run abc).",
    )
    registry.promote(mlflow_server.uri, name, v2)
    return name, v1, v2


def reward_rows(
    name: str,
    version: int,
    n: int,
    start: datetime,
    *,
    dissatisfied: float,
    persistence: float,
    rng: random.Random,
) -> pa.Table:
    rows = []
    for i in range(n):
        rows.append(
            {
                "schema_version": 1,
                "response_id": f"r-{version}-{uuid.uuid4().hex}",
                "conversation_id": f"c{i}",
                "event_time": start + timedelta(seconds=rng.uniform(0, 590)),
                "model_name": name,
                "model_version": version,
                "task_kind": "arith",
                "prompt": "1+1 = ",
                "response_text": "2",
                "response_token_ids": [50, 2],
                "response_logprobs": [-0.1, -0.2],
                "routed_experts": [[[0, 1]], [[1, 2]]],
                "temperature": 1.0,
                "finish_reason": "stop",
                "completion_tokens": 2,
                "latency_ms": 40.0,
                **{
                    f"edit_persistence_{w}": min(1.0, max(0.0, rng.gauss(persistence, 0.1)))
                    for w in (30, 120, 300, 600)
                },
                "followup_dissatisfied": rng.random() < dissatisfied
                if rng.random() < 0.9
                else None,
                "feedback_accept": None,
                "reward": 0.0,
                "reward_components": [("edit", 0.0)],
                "defaulted_signals": [],
            }
        )
    return pa.Table.from_pylist(rows, schema=REWARD_SCHEMA)


class World:
    """Serves one step's window: requests in the ledger, finalised rows in the reward table."""

    def __init__(self, name: str, stable: int, canary: int, seed: int) -> None:
        self.name, self.stable, self.canary = name, stable, canary
        self.rng = random.Random(seed)
        self.ledger = RequestLedger()
        self.rows = RewardTable(REWARD_SCHEMA.empty_table(), None, model_name=name)

    def serve_window(
        self,
        ctl: RolloutController,
        clock: Clock,
        n: int,
        *,
        canary_dissatisfied: float,
        canary_latency: float = 40.0,
    ) -> None:
        start = ctl.window_start
        for arm, lat in (("stable", 40.0), ("canary", canary_latency)):
            for _ in range(n):
                when = start + timedelta(seconds=self.rng.uniform(0, 590))
                self.ledger.record(when, arm, self.rng.random() > 0.005, self.rng.gauss(lat, 4.0))
        end = ctl.window_end
        clock.now = end + timedelta(seconds=1)
        table = pa.concat_tables(
            [
                reward_rows(
                    self.name,
                    self.stable,
                    n,
                    start,
                    dissatisfied=0.2,
                    persistence=0.8,
                    rng=self.rng,
                ),
                reward_rows(
                    self.name,
                    self.canary,
                    n,
                    start,
                    dissatisfied=canary_dissatisfied,
                    persistence=0.8,
                    rng=self.rng,
                ),
            ]
        )
        self.rows.extend(table, closed_until=end)  # ingest's watermark passed the window


def controller(name, v1, v2, router, world, clock, mlflow_uri) -> RolloutController:
    config = RolloutConfig(
        window_s=WINDOW_S, max_extensions=2, judge=JudgeConfig(min_requests=50, min_signals=40)
    )
    return RolloutController(
        config=config,
        splitter=router.client(),
        serving=world.ledger,
        product=world.rows,
        tracking_uri=mlflow_uri,
        model_name=name,
        stable_version=v1,
        canary_version=v2,
        clock=clock,
    )


def test_worse_canary_is_rolled_back(versions, router, mlflow_server):
    name, v1, v2 = versions
    clock, world = Clock(), World(name, v1, v2, seed=1)
    ctl = controller(name, v1, v2, router, world, clock, mlflow_server.uri)
    ctl.start()
    assert router.client().canary_weight() == 0.1
    assert ctl.tick() is None  # window still open
    world.serve_window(ctl, clock, 200, canary_dissatisfied=0.2)
    assert ctl.tick().decision == "pass"
    assert router.client().canary_weight() == 0.25
    world.serve_window(ctl, clock, 200, canary_dissatisfied=0.5)
    record = ctl.tick()
    assert record.decision == "fail" and "dissatisfied_rate" in record.reason
    assert ctl.state == "rolled_back"
    assert router.client().canary_weight() == 0.0
    assert registry.resolve_alias(mlflow_server.uri, name, registry.CHAMPION) == v1
    mv = MlflowClient(mlflow_server.uri).get_model_version(name, str(v2))
    assert mv.tags["ratchet.rollout.verdict"] == "rolled_back"
    assert mv.tags["ratchet.gate.verdict"] == "pass"  # the gate record stays beside it
    assert mv.description.startswith("Gate: passed (run abc).")
    assert "Rollout rolled_back at weight 0.00" in mv.description
    assert "dissatisfied_rate" in mv.tags["ratchet.rollout.reason"]


def test_good_canary_reaches_full_traffic(versions, router, mlflow_server):
    name, v1, v2 = versions
    clock, world = Clock(), World(name, v1, v2, seed=2)
    ctl = controller(name, v1, v2, router, world, clock, mlflow_server.uri)
    ctl.start()
    weights = []
    for _ in range(3):
        world.serve_window(ctl, clock, 200, canary_dissatisfied=0.2)
        assert ctl.tick().decision == "pass"
        weights.append(router.client().canary_weight())
    assert weights == [0.25, 0.5, 1.0]
    assert ctl.state == "promoted" and ctl.result().final_weight == 1.0
    assert registry.resolve_alias(mlflow_server.uri, name, registry.CHAMPION) == v2
    mv = MlflowClient(mlflow_server.uri).get_model_version(name, str(v2))
    assert mv.tags["ratchet.rollout.verdict"] == "promoted"
    assert [r.decision for r in ctl.log] == ["pass", "pass", "pass", "promote"]


def test_too_few_samples_extend_the_step(versions, router, mlflow_server):
    name, v1, v2 = versions
    clock, world = Clock(), World(name, v1, v2, seed=3)
    ctl = controller(name, v1, v2, router, world, clock, mlflow_server.uri)
    ctl.start()
    first_end = ctl.window_end
    world.serve_window(ctl, clock, 10, canary_dissatisfied=0.9)  # bad, but too little data
    record = ctl.tick()
    assert record.decision == "extend"
    assert {m["decision"] for m in record.metrics} == {"insufficient"}
    assert ctl.state == "running" and ctl.step == 0 and ctl.extensions == 1
    assert ctl.window_end == first_end + timedelta(seconds=WINDOW_S)
    assert router.client().canary_weight() == 0.1
    assert registry.resolve_alias(mlflow_server.uri, name, registry.CHAMPION) == v2
    mv = MlflowClient(mlflow_server.uri).get_model_version(name, str(v2))
    assert "ratchet.rollout.verdict" not in mv.tags
    world.serve_window(ctl, clock, 10, canary_dissatisfied=0.9)
    assert ctl.tick().decision == "extend"
    world.serve_window(ctl, clock, 10, canary_dissatisfied=0.9)
    assert ctl.tick().decision == "extend"  # max_extensions=2 used up: roll back, undecided
    assert ctl.state == "rolled_back"
    assert "too few samples" in ctl.log[-1].reason
    assert registry.resolve_alias(mlflow_server.uri, name, registry.CHAMPION) == v1
