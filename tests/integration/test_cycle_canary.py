"""The canary inside a cycle: real broker, MLflow, replicas, router, simulated users, Beam ingest.

A cycle is resumed at stage ``gated`` with a passing verdict for the candidate (the gate itself is
tested in test_gate_promotion.py / test_cycle.py), so its deploy stage runs the rollout on the
fleet named in the config (``fleet.router_url``). Versions differ only in serving latency, injected
per version by the replicas' test-only ``RATCHET_TEST_EXTRA_LATENCY_MS``: the stable champion
v2 takes +150 ms per completion, the worse candidate +700 ms (it would pass any offline gate: same
weights), the better one +0 ms. Product signals come from the simulator at 600x time compression
through Kafka and ingest; the judge needs 15 requests and 10 finalised rows per arm.
"""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest
from mlflow import MlflowClient

from deploy.fleet.fleet import Fleet, RouterProcess
from deploy.replica.toy_models import register_untrained
from ratchet.config import RatchetConfig
from ratchet.cycle import Cycle
from ratchet.cycle_state import CycleStore
from runtime import registry
from simulation.simulator import UserSimulator

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
]

TOKEN = "canary-cycle-token"


@pytest.fixture(scope="module")
def world(broker, mlflow_server, tmp_path_factory):
    """v1 (old), v2 (stable, +150 ms), v3 (worse, +700 ms), v4 (better, +0 ms) behind a router."""
    from ingest.kafka_io import ensure_topics
    from simulation.simulator import SIMULATED_SKEW_S

    ensure_topics(broker.bootstrap)
    work = tmp_path_factory.mktemp("canary-fleet")
    name = f"canary-cycle-{uuid.uuid4().hex[:6]}"
    uri = mlflow_server.uri
    v = {i: register_untrained(uri, name, seed=1, workdir=work / f"v{i}") for i in (1, 2, 3, 4)}
    slow = json.dumps({str(v[2]): 150, str(v[3]): 700})
    common = dict(n_replicas=1, tracking_uri=uri, model_name=name, bootstrap=broker.bootstrap,
                  admin_token=TOKEN, extra_env={"RATCHET_TEST_EXTRA_LATENCY_MS": slow},
                  api_keys_path=work / "api_keys.json", signal_max_skew_s=SIMULATED_SKEW_S)
    with (
        Fleet.start(**common, version=v[2], workdir=work / "stable", name="stable") as stable,
        Fleet.start(**common, version=v[2], workdir=work / "canary", name="canary") as canary,
        RouterProcess.start(stable_urls=stable.urls, canary_urls=canary.urls, admin_token=TOKEN,
                            workdir=work / "router") as router,
    ):
        yield {"name": name, "v": v, "router": router, "stable": stable, "uri": uri,
               "bootstrap": broker.bootstrap, "api_key": stable.create_api_key("canary-test")}


def _config(world) -> RatchetConfig:
    from simulation.simulator import SIMULATED_SKEW_S

    return RatchetConfig.model_validate({
        "model_name": world["name"],
        "experiment": f"canary-{world['name']}",
        "ingest": {
            "group_id": f"canary-{uuid.uuid4().hex[:6]}",
            # The simulator compresses time: its signals are stamped up to 10 event-minutes
            # ahead of the wall clock, which ingest's future bound would dead-letter.
            "parse": {"max_future_skew_s": SIMULATED_SKEW_S},
            "join": {"followup_window_s": 600.0, "feedback_window_s": 600.0,
                     "allowed_lateness_s": 0.0},
            "validation": {"max_reward_mean_drift": 10.0, "max_reward_std_drift": 10.0,
                           "max_length_drift_ratio": 100.0},
        },
        "fleet": {"router_url": world["router"].url, "admin_token": TOKEN,
                  "rollout_timeout_s": 240.0},
        "rollout": {"steps": [0.5, 1.0], "window_s": 8.0, "max_extensions": 6,
                    "judge": {"min_requests": 15, "min_signals": 10}},
        "lock": {"ttl_s": 30.0, "wait_s": 5.0, "settle_s": 0.2},
    })


def _gated_cycle(world, candidate: int, workdir: Path) -> str:
    """Champion v2 (previous v1); a cycle whose gate passed ``candidate``; returns the gate run."""
    import mlflow

    uri, name, v = world["uri"], world["name"], world["v"]
    registry.promote(uri, name, v[1])
    registry.promote(uri, name, v[2])
    world["stable"].rolling_reload(v[2])
    mlflow.set_tracking_uri(uri)
    with mlflow.start_run(run_name="gate") as gate_run:
        mlflow.set_tag("gate.verdict", "pass")
    registry.set_version_tags(uri, name, candidate, {"gate.verdict": "pass"},
                              description="Gate: passed.")
    store = CycleStore(workdir / "spans")
    state = store.new()
    state.stage, state.champion_version, state.candidate_version = "gated", v[2], candidate
    state.verdict = {"passed": True, "run_id": gate_run.info.run_id, "failed": "none"}
    store.save(state)
    return gate_run.info.run_id


def _run_with_traffic(world, config: RatchetConfig, workdir: Path):
    sim = UserSimulator(urls=[world["router"].url], api_key=world["api_key"], speed=600.0, seed=3)
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            sim.run_round(8, concurrency=4)

    thread = threading.Thread(target=traffic, daemon=True)
    thread.start()
    try:
        cycle = Cycle(config, tracking_uri=world["uri"], bootstrap=world["bootstrap"],
                      workdir=workdir)
        return cycle.run(1)
    finally:
        stop.set()
        thread.join()
        sim.close()


def test_slower_candidate_is_rolled_back_by_the_canary_inside_a_cycle(world, tmp_path):
    uri, name, v = world["uri"], world["name"], world["v"]
    gate_run = _gated_cycle(world, v[3], tmp_path)
    result = _run_with_traffic(world, _config(world), tmp_path)

    assert result.gate_passed and result.rolled_back and not result.promoted
    assert result.rollout == "rolled_back"
    assert registry.resolve_alias(uri, name, registry.CHAMPION) == v[2]
    assert registry.resolve_alias(uri, name, registry.PREVIOUS_CHAMPION) == v[1]
    assert world["router"].client().canary_weight() == 0.0
    mv = MlflowClient(uri).get_model_version(name, str(v[3]))
    assert mv.tags["ratchet.rollout.verdict"] == "rolled_back"
    assert "p95_latency_ms" in mv.tags["ratchet.rollout.reason"]
    assert mv.tags["gate.verdict"] == "pass"  # the gate record stays beside it
    assert mv.description.startswith("Gate: passed.") and "Rollout rolled_back" in mv.description
    client = MlflowClient(uri)
    assert client.get_run(gate_run).data.tags["canary.verdict"] == "rolled_back"
    parent = client.get_run(result.run_id)
    assert parent.data.tags["ratchet.outcome"] == "rolled back"
    deploy = client.search_runs([parent.info.experiment_id],
                                f"tags.mlflow.parentRunId = '{result.run_id}'")[0]
    assert deploy.data.tags["canary.verdict"] == "rolled_back"
    assert "canary.p95_latency_ms_canary" in deploy.data.metrics
    steps = client.get_metric_history(deploy.info.run_id, "canary.weight")
    assert [m.value for m in steps][-1] == 0.0  # the rollback record
    latency = client.get_metric_history(deploy.info.run_id, "canary.p95_latency_ms_canary")
    stable = client.get_metric_history(deploy.info.run_id, "canary.p95_latency_ms_stable")
    print(f"canary p95 {[m.value for m in latency]} ms vs stable {[m.value for m in stable]} ms")


def test_faster_candidate_reaches_full_traffic_inside_a_cycle(world, tmp_path):
    uri, name, v = world["uri"], world["name"], world["v"]
    _gated_cycle(world, v[4], tmp_path)
    result = _run_with_traffic(world, _config(world), tmp_path)

    assert result.promoted and not result.rolled_back and result.rollout == "promoted"
    assert registry.resolve_alias(uri, name, registry.CHAMPION) == v[4]
    assert registry.resolve_alias(uri, name, registry.PREVIOUS_CHAMPION) == v[2]
    mv = MlflowClient(uri).get_model_version(name, str(v[4]))
    assert mv.tags["ratchet.rollout.verdict"] == "promoted"
    assert mv.tags["ratchet.rollout.final_weight"] == "1.00"
    assert set(world["stable"].versions().values()) == {v[4]}  # stable group serves the champion
    assert world["router"].client().canary_weight() == 0.0
