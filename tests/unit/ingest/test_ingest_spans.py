"""Span storage: manifests as the commit point, carried state round trip, orphan cleanup."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as ds

from ingest.join import reward_row
from ingest.kafka_io import KafkaRecord
from ingest.parse import classify, dead_letter
from ingest.schema import REWARD_SCHEMA, TOPICS
from ingest.spans import SpanStore, manifest_record, read_spans, span_id_for
from ingest.synthetic import T0, completion, feedback
from rewards.config import RewardConfig

LIMITS = {"max_event_bytes": 10**6, "max_future_skew_s": 60.0, "max_age_s": 86400.0}


def _item(event, offset):
    ts = int(event.event_time.timestamp() * 1000)
    _, item = classify(
        KafkaRecord(TOPICS[event.kind], 0, offset, None, event.to_json(), ts), **LIMITS
    )
    return item


def _commit(store: SpanStore, seq: int, table: pa.Table, pending, write_manifest: bool = True):
    span_id = span_id_for(seq)
    rel = store.write_rows(span_id, table, quarantined=False)
    if not write_manifest:
        return rel
    manifest = manifest_record(
        span_id=span_id,
        seq=seq,
        source={"type": "file"},
        offsets={"file": {0: (0, 10 * seq)}},
        files=[rel],
        status="ok",
        counts={"rows": table.num_rows},
        max_event_time_us=123 * seq,
        watermark_us=100,
        stats={"rows": float(table.num_rows)},
        validation={"success": True},
    )
    late = [dead_letter(pending[0][1], "late_signal", "x")] if pending else []
    store.commit_manifest(manifest, pending, {"r0": 5}, late, [])
    return rel


def test_state_round_trips_through_the_last_manifest(tmp_path):
    store = SpanStore(tmp_path)
    c = _item(completion("r1", T0), 3)
    row = reward_row("r1", c, [], RewardConfig())
    table = pa.Table.from_pylist([row], schema=REWARD_SCHEMA)
    fb = _item(feedback("r2", T0, True), 4)
    _commit(store, 1, table, [("r2", fb)])
    state = store.load_state()
    assert state.seq == 1 and state.ends == {"file": {0: 10}}
    assert state.pending == [("r2", fb)] and state.finalized == {"r0": 5}
    assert state.max_event_time_us == 123 and state.stats == {"rows": 1.0}
    assert [d.reason for d in store.dead_letters("span-000001", "late")] == ["late_signal"]
    assert read_spans(tmp_path).column("response_id").to_pylist() == ["r1"]


def test_files_without_a_manifest_are_invisible_and_removed(tmp_path):
    store = SpanStore(tmp_path)
    c = _item(completion("r1", T0), 3)
    table = pa.Table.from_pylist([reward_row("r1", c, [], RewardConfig())], schema=REWARD_SCHEMA)
    _commit(store, 1, table, [])
    orphan = _commit(store, 2, table, [], write_manifest=False)  # crashed before its manifest
    (tmp_path / orphan).with_name(".tmp-span-000003.parquet").write_bytes(b"partial")
    assert read_spans(tmp_path).num_rows == 1  # readers go through manifests
    removed = store.remove_orphans()
    assert sorted(removed) == sorted(
        [
            orphan,
            str((tmp_path / orphan).with_name(".tmp-span-000003.parquet").relative_to(tmp_path)),
        ]
    )
    assert ds.dataset(tmp_path / "spans", partitioning="hive").count_rows() == 1


def test_empty_root_has_empty_state(tmp_path):
    state = SpanStore(tmp_path).load_state()
    assert (state.seq, state.ends, state.pending, state.finalized) == (0, {}, [], {})
    assert read_spans(tmp_path).num_rows == 0


def test_a_span_whose_carried_files_do_not_parse_is_quarantined_and_recovery_goes_on(tmp_path):
    from ingest.config import FileSource, IngestConfig
    from ingest.pipeline import SpanJob

    store = SpanStore(tmp_path)
    c = _item(completion("r1", T0), 3)
    table = pa.Table.from_pylist([reward_row("r1", c, [], RewardConfig())], schema=REWARD_SCHEMA)
    fb = _item(feedback("r2", T0, True), 4)
    _commit(store, 1, table, [("r2", fb)])
    span = span_id_for(1)
    poison = '{"reason": "late_signal", "detail": "cut\n'  # a torn line: not JSON
    (store.manifests / span / "late.jsonl").write_text(poison)
    (tmp_path / "rec.jsonl").write_text("")
    job = SpanJob.from_config(IngestConfig(), source=FileSource(path=tmp_path / "rec.jsonl"),
                              output_root=tmp_path)

    job.recover()  # raised before: the torn line stopped every later run
    job.recover()  # and again: idempotent

    m = store.manifests_list()[0]
    assert m["status"] == "quarantined" and list(m["recovery"]["unreadable"]) == ["late"]
    assert (store.manifests / span / "late.jsonl.unreadable").read_text() == poison
    assert store.has_mark(span, "published") and store.has_mark(span, "committed")
    assert store.load_state().pending == [("r2", fb)]  # the readable files are still carried
    assert read_spans(tmp_path).num_rows == 0
    store.release(span, note="reviewed")
    assert read_spans(tmp_path).column("response_id").to_pylist() == ["r1"]
