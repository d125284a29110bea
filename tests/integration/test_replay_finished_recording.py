"""`ratchet replay` of a finished recording: the completions of its last minutes, whose
persistence windows are still open when it ends, each get exactly one reward row in the span the
replay's cycle ingests (none left pending for a span that will never come), scored as the
drain's policy (``open_at_drain``, ``neutral`` for a finished recording) and each client's
declaration say.

Real broker and Beam DirectRunner; the recording goes through ``ratchet.replay.replay`` and the
span is ingested with the config ``ratchet replay`` runs its cycle with.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ingest.kafka_io import ensure_topics, start_group_at_end
from ingest.pipeline import run_span
from ingest.schema import TOPICS
from ingest.spans import read_spans
from ingest.synthetic import append_records, completion, feedback, persistence
from ratchet.config import RatchetConfig
from ratchet.replay import finished_recording, replay

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WINDOWS = (30, 120, 300, 600)
REJECTED = ("rej-1", "rej-2", "rej-3")


def _served(rid: str, t: datetime, client_id: str | None):
    return completion(rid, t).model_copy(update={"client_id": client_id})


def _recording(path) -> None:
    """An early suggestion with every checkpoint, then the recording's last minute: three
    suggestions rejected, one accepted, one left silent by a declaring client and one by a
    client that declares nothing; the recording ends before any of their windows close."""
    t0 = datetime(2026, 3, 2, 10, tzinfo=UTC)
    events = [_served("early", t0, "editor")]
    events += [persistence("early", t0, w, 0.9) for w in WINDOWS]
    last = t0 + timedelta(seconds=1200)
    for i, rid in enumerate(REJECTED):
        t = last + timedelta(seconds=10 * i)
        events += [_served(rid, t, "editor"), feedback(rid, t + timedelta(seconds=4), False)]
    t = last + timedelta(seconds=40)
    events += [_served("acc", t, "editor"), feedback("acc", t + timedelta(seconds=3), True),
               _served("silent-editor", t, "editor"), _served("silent-other", t, None)]
    append_records(path, sorted(events, key=lambda e: e.event_time))


def test_the_last_completions_of_a_finished_recording_each_get_one_row(broker, tmp_path):
    ensure_topics(broker.bootstrap)
    group = "g-replay-finished"
    start_group_at_end(broker.bootstrap, group, TOPICS.values())
    recording = tmp_path / "ide.jsonl"
    _recording(recording)
    config = finished_recording(RatchetConfig.model_validate(
        {"ingest": {"rewards": {"clients": {"editor": {"reports_persistence_for_inserted": True}}}}}
    ))
    assert replay(recording, bootstrap=broker.bootstrap) == 15

    span = run_span(bootstrap=broker.bootstrap, group_id=group, output_root=tmp_path / "spans",
                    config=config.ingest)
    table = read_spans(tmp_path / "spans")
    ids = table.column("response_id").to_pylist()
    assert sorted(ids) == sorted(["early", *REJECTED, "acc", "silent-editor", "silent-other"])
    assert span.pending == 0 and span.dead_letters == 0
    rows = {r["response_id"]: r for r in table.to_pylist()}
    assert rows["early"]["edit_persistence_600"] == pytest.approx(0.9)
    for rid in REJECTED:  # the reject scores it: trained on, persistence as never inserted
        row = rows[rid]
        assert row["feedback_accept"] is False and row["trainable"] is True
        assert row["reward"] == pytest.approx(-1.0 - 1.0 - 0.5 * 8 / 32)
    assert rows["acc"]["feedback_accept"] is True and rows["acc"]["trainable"] is True
    for rid in ("silent-editor", "silent-other"):  # silence before the window closed: unknown
        assert rows[rid]["feedback_accept"] is None and rows[rid]["trainable"] is False
