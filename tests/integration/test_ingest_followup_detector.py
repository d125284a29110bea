"""The follow-up detector inside the Beam pipeline (recorded-file source, no broker): the span's
rows carry the detector's decision, not the producer's flag, and the span's monitors compare them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ingest.config import FileSource, IngestConfig
from ingest.detector import detector_version
from ingest.pipeline import run_config
from ingest.schema import Followup
from ingest.spans import read_spans
from ingest.synthetic import append_records, completion

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _followup(rid: str, t: datetime, text: str, flag: bool | None) -> Followup:
    return Followup(event_id=f"fu-{rid}", response_id=rid, event_time=t, text=text,
                    dissatisfied=flag)


def test_span_rows_take_the_detectors_decision_and_monitors_compare(tmp_path):
    src = tmp_path / "events.jsonl"
    t0 = datetime.now(UTC) - timedelta(hours=2)
    later = t0 + timedelta(seconds=20)
    append_records(src, [
        completion("a", t0), _followup("a", later, "Still the same error on case 3.", False),
        completion("b", t0), _followup("b", later, "cheers, works now", True),
        completion("c", t0), _followup("c", later, "IndexError: list index out of range", None),
        completion("d", t0),
    ])
    cfg = IngestConfig(source=FileSource(path=src), output_root=tmp_path / "out", drain=True)
    result = run_config(cfg)
    rows = {r["response_id"]: r for r in read_spans(tmp_path / "out").to_pylist()}
    assert result.rows == 4
    decided = {k: (r["followup_dissatisfied"], r["followup_flag"]) for k, r in rows.items()}
    assert decided == {"a": (True, False), "b": (False, True), "c": (True, None), "d": (None, None)}
    assert rows["c"]["followup_text"] == "IndexError: list index out of range"
    assert {rows[k]["detector_version"] for k in "abc"} == {detector_version()}
    assert rows["d"]["detector_version"] is None and rows["d"]["dissatisfied_score"] is None
    assert result.monitors["followup_pairs"] == 2.0
    assert result.monitors["detector_agreement"] == 0.0
