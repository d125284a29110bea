"""A bootstrap killed after registering the champion's version is completed by the rerun."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.integration


def test_a_rerun_completes_the_version_a_killed_bootstrap_left(mlflow_server, tmp_path):
    import mlflow
    from mlflow import MlflowClient

    from ratchet.bootstrap import ensure_champion
    from ratchet.config import RatchetConfig
    from runtime import registry
    from trainer.fixtures import champion_dir

    name = f"boot-{uuid.uuid4().hex[:8]}"
    config = RatchetConfig.model_validate({"model_name": name})
    mlflow.set_tracking_uri(mlflow_server.uri)
    mlflow.set_experiment(config.experiment)
    # What a kill between registering and tagging leaves: a version, no tag, no alias.
    with mlflow.start_run(run_name="bootstrap-champion"):
        mlflow.set_tags({"ratchet.stage": "bootstrap", "ratchet.model": name})
        left = registry.log_checkpoint(champion_dir(), model_name=name).version

    version = ensure_champion(config, tracking_uri=mlflow_server.uri, workdir=tmp_path)

    assert version == left  # not a second bootstrap version
    assert registry.resolve_alias(mlflow_server.uri, name, registry.CHAMPION) == left
    assert registry.version_tags(mlflow_server.uri, name, left)["ratchet.origin"] == "warm_start"
    versions = MlflowClient(mlflow_server.uri).search_model_versions(f"name = '{name}'")
    assert [int(v.version) for v in versions] == [left]
