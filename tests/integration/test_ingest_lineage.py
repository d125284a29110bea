"""A run that used a span records it as an mlflow.data input with its offsets."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from ingest.config import FileSource, IngestConfig
from ingest.lineage import log_span_input
from ingest.pipeline import run_config
from ingest.schema import TOPICS
from ingest.synthetic import stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_span_is_logged_as_a_run_input(mlflow_server, tmp_path):
    import mlflow

    src = tmp_path / "events.jsonl"
    with src.open("w") as f:
        for e in stream(5, start=datetime.now(UTC) - timedelta(hours=1)):
            rec = {
                "topic": TOPICS[e.kind],
                "key": None,
                "value": e.to_json().decode(),
                "timestamp_ms": int(e.event_time.timestamp() * 1000),
            }
            f.write(json.dumps(rec) + "\n")
    span = run_config(
        IngestConfig(source=FileSource(path=src), output_root=tmp_path / "o", drain=True)
    )
    mlflow.set_tracking_uri(mlflow_server.uri)
    with mlflow.start_run() as run:
        log_span_input(span.path, span.manifest)
    inputs = mlflow.get_run(run.info.run_id).inputs.dataset_inputs
    assert [i.dataset.name for i in inputs] == [span.span_id]
    tags = {t.key: t.value for t in inputs[0].tags}
    assert tags["ratchet.rows"] == "5" and tags["mlflow.data.context"] == "training"
    n = span.completions_in + span.signals_in
    assert json.loads(tags["ratchet.offsets"]) == {"file": {"0": [0, n]}}
    assert inputs[0].dataset.source_type == "local"
