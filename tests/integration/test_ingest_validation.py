"""Great Expectations per span: a failing span is quarantined, kept and marked; drift is caught.

Uses the recorded-file source, so the Beam pipeline and the suite run without a broker.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow.dataset as ds
import pytest

from ingest.config import FileSource, IngestConfig, ValidationConfig
from ingest.pipeline import run_config
from ingest.spans import SpanStore, read_spans
from ingest.synthetic import append_records, stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_failing_span_is_quarantined_not_served(tmp_path):
    src = tmp_path / "events.jsonl"
    append_records(src, stream(30, start=datetime.now(UTC) - timedelta(hours=2), p_feedback=0.3))
    strict = ValidationConfig(min_join_share={"feedback": 0.95})
    cfg = IngestConfig(
        source=FileSource(path=src), output_root=tmp_path / "out", validation=strict, drain=True
    )
    r = run_config(cfg)
    assert r.rows == 30 and not r.validated and r.quarantined
    assert "quarantine" in r.path.parts and r.path.exists()
    failed = [f["expectation"] for f in r.validation_report["failed"]]
    assert failed == ["expect_column_values_to_be_in_set"]
    assert read_spans(tmp_path / "out").num_rows == 0
    assert read_spans(tmp_path / "out", status="quarantined").num_rows == 30
    manifest = SpanStore(tmp_path / "out").manifests_list()[0]
    assert manifest["status"] == "quarantined" and manifest["offsets"]["file"]["0"] == [
        0,
        r.completions_in + r.signals_in,
    ]


def test_drift_against_the_previous_span_is_flagged(tmp_path):
    src = tmp_path / "events.jsonl"
    t0 = datetime.now(UTC) - timedelta(hours=3)
    append_records(src, stream(40, start=t0, n_tokens=8, prefix="a"))
    cfg = IngestConfig(
        source=FileSource(path=src),
        output_root=tmp_path / "out",
        drain=True,
        validation=ValidationConfig(max_length_drift_ratio=2.0),
    )
    first = run_config(cfg)
    assert first.validated and first.rows == 40
    append_records(src, stream(40, start=t0 + timedelta(hours=1), n_tokens=64, prefix="b"))
    second = run_config(cfg)
    assert second.rows == 40 and second.quarantined
    failed = {f["expectation"] for f in second.validation_report["failed"]}
    assert "expect_column_mean_to_be_between" in failed
    # the good span stays readable as hive-partitioned Parquet
    assert ds.dataset(tmp_path / "out" / "spans", partitioning="hive").count_rows() == 40
