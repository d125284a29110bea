"""A recording cut mid-window, through the real broker and Beam: a drain keeps the completions
whose persistence windows are still open pending, and the next span scores them exactly once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ingest.config import IngestConfig
from ingest.kafka_io import EventProducer, ensure_topics, start_group_at_end
from ingest.pipeline import run_span
from ingest.schema import TOPICS
from ingest.spans import read_spans
from ingest.synthetic import completion, persistence

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WINDOWS = (30, 120, 300, 600)


def _served(rid: str, t: datetime, client_id: str | None):
    return completion(rid, t).model_copy(update={"client_id": client_id})


def test_a_cut_recording_does_not_score_its_last_accepted_suggestions_as_rejections(
    broker, tmp_path
):
    ensure_topics(broker.bootstrap)
    group = "g-drain-open"
    start_group_at_end(broker.bootstrap, group, TOPICS.values())
    cfg = IngestConfig.model_validate(
        {"rewards": {"clients": {"editor": {"reports_persistence_for_inserted": True}}}})
    t0 = datetime.now(UTC) - timedelta(hours=2)
    early = t0 - timedelta(seconds=2000)
    end = t0 + timedelta(seconds=5)
    # part 1 of the recording: an earlier suggestion with every checkpoint in, then the last
    # three suggestions (two from the declaring client, one from a client that declares
    # nothing), cut before any of their checkpoints came
    with EventProducer(broker.bootstrap) as p:
        p.send(_served("early", early, "editor"))
        for w in WINDOWS:
            p.send(persistence("early", early, w, 0.9))
        for rid, t, client in (("last-a", t0, "editor"), ("last-b", end, "editor"),
                               ("last-c", end, None)):
            p.send(_served(rid, t, client))
    first = run_span(bootstrap=broker.bootstrap, group_id=group, output_root=tmp_path,
                     config=cfg, drain=True)
    rows = {r["response_id"]: r for r in read_spans(tmp_path).to_pylist()}
    assert set(rows) == {"early"}  # the open windows were not closed by the drain
    assert first.pending == 3

    # part 2: the rest of the recording: the suggestions were kept (checkpoints at 1.0)
    with EventProducer(broker.bootstrap) as p:
        for rid, t in (("last-a", t0), ("last-b", end), ("last-c", end)):
            for w in WINDOWS:
                p.send(persistence(rid, t, w, 1.0))
    second = run_span(bootstrap=broker.bootstrap, group_id=group, output_root=tmp_path,
                      config=cfg, drain=True)
    table = read_spans(tmp_path)
    ids = table.column("response_id").to_pylist()
    assert sorted(ids) == ["early", "last-a", "last-b", "last-c"]  # each exactly once
    assert second.rows == 3 and second.pending == 0
    rows = {r["response_id"]: r for r in table.to_pylist()}
    for rid in ("last-a", "last-b", "last-c"):
        row = rows[rid]
        assert row["edit_persistence_600"] == pytest.approx(1.0)
        assert row["trainable"] is True
        # kept: persistence +1, no feedback (0), no follow-up (0), 8 tokens of 32 (w 0.5);
        # the drain that closed its window would have scored it -1 - 1 = -2 (a rejection)
        assert row["reward"] == pytest.approx(1.0 - 0.5 * 8 / 32)
