"""The drift alarm: a champion surely worse than the holdback's anchor is rolled back by the
lifetime audit's mechanism, and the cycle does not train on its spans."""

import json

import pyarrow.parquet as pq

from tests.unit.deploy.test_impact import CHAMP, HOLD, _table


def test_a_champion_surely_worse_than_the_anchor_is_rolled_back(tmp_path):
    import mlflow
    from mlflow import MlflowClient

    from ingest.spans import SpanStore
    from ratchet.config import RatchetConfig
    from ratchet.cycle import Cycle, CycleResult
    from runtime import registry

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri, registry_uri=uri)
    client.create_registered_model("m")
    for _ in range(3):
        client.create_model_version("m", source=str(tmp_path), run_id=None)
    registry.set_alias(uri, "m", registry.CHAMPION, 1)
    assert registry.ensure_anchor(uri, "m") == 1  # set once, to the first champion
    registry.set_alias(uri, "m", registry.CHAMPION, 3)
    assert registry.ensure_anchor(uri, "m") == 1
    store = SpanStore(tmp_path / "spans")
    (store.manifests / "span-000001").mkdir(parents=True)
    pq.write_table(_table(3000, seed=1, champ=HOLD, hold=CHAMP),
                   tmp_path / "spans" / "span-000001.parquet")
    (store.manifests / "span-000001" / "manifest.json").write_text(json.dumps(
        {"span_id": "span-000001", "status": "ok", "files": ["span-000001.parquet"]}))
    cycle = Cycle(RatchetConfig(model_name="m"), tracking_uri=uri, bootstrap="unused",
                  workdir=tmp_path)
    served = []
    cycle._serve = served.append
    state = cycle.store.new()
    state.stage = "ingested"
    result = CycleResult(index=0, run_id="")
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:  # its own experiment: another test's active experiment is not in this store
        experiment = mlflow.set_experiment("drift")
        with mlflow.start_run(run_name="cycle", experiment_id=experiment.experiment_id):
            cycle._impact(state, result)
    finally:
        mlflow.set_tracking_uri(previous)
    assert result.drift.startswith("drift: champion v3 surely worse than the holdback's anchor v1")
    assert state.stage == "skipped" and served == [1]
    assert registry.resolve_alias(uri, "m", registry.CHAMPION) == 1
    assert registry.version_tags(uri, "m", 3)[registry.AUDIT_VERDICT] == "fail"
    assert "champion v3 vs holdback on anchor v1" in client.get_registered_model("m").description
    assert (tmp_path / "impact" / f"impact-{state.seq:04d}.json").exists()
    # moving the anchor is explicit and recorded
    assert registry.move_anchor(uri, "m", 2, "re-baseline") == 1
    history = json.loads(registry.model_tags(uri, "m")[registry.ANCHOR_HISTORY])
    assert [h["version"] for h in history] == [1, 2] and history[1]["reason"] == "re-baseline"
