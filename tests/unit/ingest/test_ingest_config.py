"""IngestConfig: the tagged-union source, bounds, and no heavy imports."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from ingest.config import FileSource, IngestConfig, KafkaSource


def test_source_is_a_tagged_union():
    cfg = IngestConfig.model_validate(
        {"source": {"type": "kafka", "bootstrap": "127.0.0.1:9092", "group_id": "g"}}
    )
    assert isinstance(cfg.source, KafkaSource) and cfg.source.group_id == "g"
    cfg = IngestConfig.model_validate({"source": {"type": "file", "path": "/tmp/x.jsonl"}})
    assert isinstance(cfg.source, FileSource)
    with pytest.raises(ValidationError, match="type"):
        IngestConfig.model_validate({"source": {"type": "s3", "path": "x"}})


def test_defaults_are_usable_by_a_cycle():
    cfg = IngestConfig()
    assert cfg.source is None and cfg.group_id == "ratchet-ingest" and cfg.drain is False
    assert cfg.join.horizon_s() == 1800.0


def test_misspelt_or_out_of_range_fields_fail_loudly():
    with pytest.raises(ValidationError, match="allowed_latenes"):
        IngestConfig.model_validate({"join": {"allowed_latenes_s": 5}})
    with pytest.raises(ValidationError, match="edit_persistence_window_s"):
        IngestConfig.model_validate({"join": {"edit_persistence_window_s": 300}})
    with pytest.raises(ValidationError, match="unknown signals"):
        IngestConfig.model_validate({"validation": {"min_join_share": {"likes": 0.5}}})


def test_importing_the_config_imports_no_heavy_module():
    code = (
        "import sys, ingest.config, rewards.config;"
        "heavy = {'apache_beam', 'great_expectations', 'torch', 'kafka', 'mlflow'};"
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_local_runs_name_the_in_process_runner_not_the_prism_switch():
    from ingest.pipeline import local_runner_args

    assert local_runner_args(None) == ["--runner=FnApiRunner"]
    assert local_runner_args(["--runner=DirectRunner", "--direct_num_workers=2"]) == [
        "--direct_num_workers=2",
        "--runner=FnApiRunner",
    ]
    assert local_runner_args(["--runner=FlinkRunner"]) == ["--runner=FlinkRunner"]


def test_a_runner_that_cannot_run_the_pipeline_is_refused_with_the_reason():
    from ingest.pipeline import local_runner_args

    for runner in ("DaskRunner", "apache_beam.runners.dask.dask_runner.DaskRunner"):
        with pytest.raises(ValueError, match="drops output tags"):
            local_runner_args([f"--runner={runner}"])


def test_expected_signals_and_grace_are_validated():
    from ingest.config import JoinConfig

    with pytest.raises(ValidationError):
        JoinConfig(expected_signals=("telemetry",))
    with pytest.raises(ValidationError):
        JoinConfig(edit_persistence_grace_s=-1)
    assert JoinConfig().horizon_s() == 1800.0
