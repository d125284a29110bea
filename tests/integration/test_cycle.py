"""A whole cycle on the real broker, MLflow server, Beam DirectRunner and the tiny MoE.

Recorded simulator traffic (tests/fixtures/events.jsonl) is replayed into Kafka; the cycle ingests
it, trains a candidate, gates it and moves ``champion`` only when the gate passes.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ratchet.bootstrap import ensure_champion
from ratchet.config import ChampionBootstrapConfig, RatchetConfig
from ratchet.cycle import Cycle
from ratchet.replay import replay
from runtime import registry

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "events.jsonl"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _config(model_name: str, group_id: str, *, permissive: bool) -> RatchetConfig:
    base = RatchetConfig(
        model_name=model_name,
        champion=ChampionBootstrapConfig(sft_steps=60, seed=0),
        min_rows_to_train=8,
    )
    gate = base.gate.model_copy(
        update={
            "suite": base.gate.suite.model_copy(update={"size": 48}),
            # A perfect-score bar (out of the toy's reach) fails the strict gate; the
            # permissive one lets anything healthy through (gate logic: tests/unit/gating).
            "min_pass_rate": 0.0 if permissive else 1.0,
        }
    )
    if permissive:
        gate = gate.model_copy(
            update={
                "pass_rate_change": gate.pass_rate_change.model_copy(update={"min_abs": -1.0}),
                "improvement": None,
                "token_budget": gate.token_budget.model_copy(
                    update={"max_abs_increase": 1e6, "max_rel_increase": 1e6}
                ),
                "bootstrap": gate.bootstrap.model_copy(
                    update={"max_pass_rate_drop": 1.0, "max_token_rise": 1e6}
                ),
                "hack": gate.hack.model_copy(
                    update={"max_no_edit_increase": 1.0, "max_malformed_increase": 1.0}
                ),
            }
        )
    # A few small RL steps: this test is about the loop's wiring (tests/integration/
    # test_trainer_* and bench/learning.py are about learning).
    trainer = base.trainer.model_copy(update={"seed": 0, "steps": 4, "batch_size": 32})
    # Every recorded signal is replayed before the cycle: finalise all completions (end of stream).
    ingest = base.ingest.model_copy(update={"group_id": group_id, "drain": True})
    return base.model_copy(update={"gate": gate, "trainer": trainer, "ingest": ingest})


def test_cycle_moves_champion_only_when_the_gate_passes(broker, mlflow_server, tmp_path):
    from ingest.kafka_io import ensure_topics

    ensure_topics(broker.bootstrap)
    name = f"cycle-{uuid.uuid4().hex[:8]}"
    uri = mlflow_server.uri
    strict = _config(name, f"g-{uuid.uuid4().hex[:6]}", permissive=False)
    v1 = ensure_champion(strict, tracking_uri=uri, workdir=tmp_path / "a")
    assert registry.resolve_alias(uri, name, registry.CHAMPION) == v1
    sent = replay(FIXTURE, bootstrap=broker.bootstrap)
    assert sent > 100

    # A gate nobody can pass: a candidate is registered, the alias stays.
    rejected = Cycle(strict, tracking_uri=uri, bootstrap=broker.bootstrap, workdir=tmp_path / "a")
    r1 = rejected.run(0)
    assert r1.skipped is None, r1.skipped
    assert r1.span_rows > 50
    assert r1.candidate_version == v1 + 1
    assert not r1.gate_passed and not r1.promoted
    assert registry.resolve_alias(uri, name, registry.CHAMPION) == v1
    assert registry.resolve_alias(uri, name, registry.CANDIDATE) is None  # decided: released
    assert registry.version_tags(uri, name, r1.candidate_version)["gate.verdict"] == "fail"
    # decided: the registry holds the candidate, the trainer's local copy is gone
    assert not (tmp_path / "a" / "candidates" / r1.cycle_id).exists()
    assert (tmp_path / "a" / "candidates").is_dir()  # where it was written

    # The same traffic read again by a fresh consumer group, through a permissive gate.
    permissive = _config(name, f"g-{uuid.uuid4().hex[:6]}", permissive=True)
    passed = Cycle(permissive, tracking_uri=uri, bootstrap=broker.bootstrap, workdir=tmp_path / "b")
    r2 = passed.run(1)
    assert r2.gate_passed and r2.promoted
    assert r2.rollout.startswith("alias only") and not r2.rolled_back  # no fleet configured
    assert registry.resolve_alias(uri, name, registry.CHAMPION) == r2.candidate_version
    assert registry.resolve_alias(uri, name, registry.PREVIOUS_CHAMPION) == v1
    assert not (tmp_path / "b" / "candidates" / r2.cycle_id).exists()

    # The cycle is one MLflow parent run with a nested run per stage.
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    parent = client.get_run(r2.run_id)
    children = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{r2.run_id}'",
    )
    stages = {c.data.tags.get("ratchet.stage") for c in children}
    assert {"ingest", "train", "gate"} <= stages
    assert parent.data.tags["ratchet.outcome"] == "promoted"
    experiment = client.get_experiment(parent.info.experiment_id)  # the UI lands on the runs
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert registry.runs_page(uri, experiment.name) == (
        f"{uri}/#/experiments/{experiment.experiment_id}?workflowType=machine_learning")
