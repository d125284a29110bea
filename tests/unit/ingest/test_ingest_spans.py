"""Span storage: manifests as the commit point, carried state round trip, orphan cleanup, spans
as folders of parts."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ingest.join import reward_row
from ingest.kafka_io import KafkaRecord
from ingest.parse import classify, dead_letter
from ingest.schema import REWARD_SCHEMA, TOPICS
from ingest.spans import SpanStore, manifest_record, read_spans, span_id_for, span_location
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


def _parts(tmp_path, rows: pa.Table, cuts: list[int]) -> list:
    """Sorted parts of ``rows`` written where a worker would (a staging folder)."""
    staging = tmp_path / "_staging" / "parts"
    staging.mkdir(parents=True, exist_ok=True)
    out = []
    for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
        path = staging / f"part-{i}.parquet"
        pq.write_table(rows.slice(a, b - a), path)
        out.append(path)
    return out


def _manifest(store: SpanStore, seq: int, files: list[str], status: str = "ok") -> None:
    manifest = manifest_record(
        span_id=span_id_for(seq), seq=seq, source={"type": "file"},
        offsets={"file": {0: (0, 10 * seq)}}, files=files, status=status,
        counts={"rows": 0}, max_event_time_us=None, watermark_us=None, stats={},
        validation={"success": status == "ok"},
    )
    store.commit_manifest(manifest, [], {}, [], [])


def _table(n: int) -> pa.Table:
    rows = [reward_row(f"r{i}", _item(completion(f"r{i}", T0), i), [], RewardConfig())
            for i in range(n)]
    return pa.Table.from_pylist(rows, schema=REWARD_SCHEMA)


def test_a_span_is_a_folder_of_parts_read_as_one_table(tmp_path):
    store = SpanStore(tmp_path)
    rows = _table(5)
    files = store.move_parts("span-000001", _parts(tmp_path, rows, [0, 2, 5]), quarantined=False)
    assert [f.rsplit("/", 1)[1] for f in files] == ["part-0000.parquet", "part-0001.parquet"]
    _manifest(store, 1, files)
    folder = span_location(store.span_files())
    assert folder.name == "span-000001" and folder.parent.name.startswith("hour=")
    assert pq.read_table(folder).column("response_id").to_pylist() == [f"r{i}" for i in range(5)]
    assert read_spans(tmp_path).num_rows == 5
    assert ds.dataset(tmp_path / "spans", partitioning="hive").count_rows() == 5
    assert store.remove_orphans() == []


def test_an_empty_span_is_one_empty_part(tmp_path):
    store = SpanStore(tmp_path)
    files = store.move_parts("span-000001", [], quarantined=False)
    _manifest(store, 1, files)
    table = pq.read_table(span_location(store.span_files()))
    assert table.num_rows == 0 and table.schema.equals(REWARD_SCHEMA, check_metadata=False)


def test_parts_moved_without_a_manifest_are_removed_with_their_folder(tmp_path):
    store = SpanStore(tmp_path)
    rows = _table(4)
    _manifest(store, 1, store.move_parts("span-000001", _parts(tmp_path, rows, [0, 4]), False))
    orphan = store.move_parts("span-000002", _parts(tmp_path, rows, [0, 1, 4]), False)
    assert read_spans(tmp_path).num_rows == 4  # readers go through manifests
    assert sorted(store.remove_orphans()) == sorted(orphan)
    assert not (tmp_path / orphan[0]).parent.exists()
    assert ds.dataset(tmp_path / "spans", partitioning="hive").count_rows() == 4


def test_releasing_a_quarantined_folder_moves_every_part_and_removes_the_folder(tmp_path):
    store = SpanStore(tmp_path)
    files = store.move_parts("span-000001", _parts(tmp_path, _table(3), [0, 1, 3]), True)
    _manifest(store, 1, files, status="quarantined")
    quarantined = (tmp_path / files[0]).parent
    store.release("span-000001")
    assert not quarantined.exists()
    assert read_spans(tmp_path).num_rows == 3 and read_spans(tmp_path, "quarantined").num_rows == 0
