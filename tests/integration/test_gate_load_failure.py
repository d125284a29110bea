"""A candidate whose weights do not match its config is a recorded failing verdict, not a crash."""

from __future__ import annotations

import json
import shutil
import uuid

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_unloadable_candidate_gets_a_failing_verdict_and_champion_stays(mlflow_server, tmp_path):
    import mlflow
    from mlflow import MlflowClient

    from gating.config import GateConfig, SuiteConfig
    from gating.gate import run_gate
    from runtime import registry
    from trainer.fixtures import champion_dir

    uri, name = mlflow_server.uri, f"load-{uuid.uuid4().hex[:8]}"
    broken = tmp_path / "broken"
    shutil.copytree(champion_dir(), broken)
    config = json.loads((broken / "config.json").read_text())
    config["n_layers"] = max(1, config["n_layers"] - 1)  # weights of one layer too many
    (broken / "config.json").write_text(json.dumps(config))
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("gate-load-test")
    with mlflow.start_run():
        champ = registry.log_checkpoint(champion_dir(), model_name=name, alias="champion").version
        cand = registry.log_checkpoint(broken, model_name=name, alias="candidate").version

    verdict = run_gate(
        tracking_uri=uri, model_name=name, candidate_version=cand, champion_version=champ,
        config=GateConfig(suite=SuiteConfig(size=4, max_new_tokens=8)), workdir=tmp_path / "g",
    )
    assert not verdict.passed and not verdict.promoted
    assert verdict.failed_gates == ["loads"]
    assert "size mismatch" in verdict.gates[0].detail or "Unexpected" in verdict.gates[0].detail
    assert registry.resolve_alias(uri, name, "champion") == champ
    tags = registry.version_tags(uri, name, cand)
    assert tags["gate.verdict"] == "fail" and tags["gate.loads"] == "fail"
    run = MlflowClient(uri).get_run(verdict.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["gate.verdict"] == "fail"
