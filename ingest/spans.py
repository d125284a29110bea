"""Durable span storage: atomic files, manifests, carried state, recovery after a crash.

Layout under ``output_root``::

    spans/date=YYYY-MM-DD/hour=HH/<span_id>/part-NNNN.parquet       validated reward rows
    quarantine/date=YYYY-MM-DD/hour=HH/<span_id>/part-NNNN.parquet  rows of spans that failed

A span is ONE folder of Parquet parts, partitioned by the UTC date and hour at which it was
ingested (ingestion-time partitioning: a span never straddles partitions). Each part was sorted
by ``SORT_KEYS``, checked and written by the worker that computed its rows; the manifest lists
the parts (``files``), and ``pq.read_table(span_folder)`` gives exactly ``REWARD_SCHEMA`` (the
rows of all parts; each part is sorted, the folder as a whole is not). Spans written before
the commit in parts are one file, ``<span_id>.parquet``, and are read the same way
(``span_location``, ``read_spans``).
``pyarrow.dataset.dataset(root / "spans", partitioning="hive")`` reads them all, with ``date``
and ``hour`` as columns.
    _manifests/<span_id>/manifest.json                    the commit record of a span
    _manifests/<span_id>/{pending,late,dead_letters}.jsonl, finalized.json
    _manifests/<span_id>/{published,committed}            markers of the after-commit steps
    _staging/<span_id>/                                   the Beam pipeline's scratch output

A span exists once its manifest directory has been renamed into ``_manifests`` (one atomic
rename, after its Parquet parts were written, each via temp + fsync + rename, and renamed into
the span's folder). The manifest holds
the offset range per topic partition, schema version, row counts, state for the next span and
validation results. Offsets are committed to Kafka only after that; ``recover`` finishes the
after-commit steps of a span whose process died, and deletes Parquet files (and folders of
parts) of spans that never got a manifest. Readers use ``span_files`` / ``read_spans``, which
list manifested files only.
A quarantined span keeps all its rows (its offsets are committed like any other span's), and
``release`` re-admits it after review (``ratchet spans release ID``).

Deliberately left out: computing the rows (ingest/pipeline.py) and validating them.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ingest.parse import EventItem
from ingest.schema import REWARD_SCHEMA, SCHEMA_VERSION, DeadLetter, upgrade_reward_table
from runtime import jsonl

MANIFESTS = "_manifests"
STAGING = "_staging"
SPANS = "spans"
QUARANTINE = "quarantine"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder, fsync, rename, fsync dir."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".tmp-{path.name}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_parquet_atomic(table: pa.Table, path: Path) -> None:
    """Write ``table`` via a hidden temp file (pyarrow.dataset skips it), fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".tmp-{path.name}"
    pq.write_table(table, tmp, compression="zstd")
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


SORT_KEYS = [("event_time", "ascending"), ("response_id", "ascending")]
"""Order of a span file's rows."""


def write_merged_atomic(parts: list[Path], path: Path, batch_rows: int = 16_384) -> int:
    """Merge Parquet ``parts``, each sorted by ``SORT_KEYS``, into one file sorted the same way
    (temp file, fsync, rename, as ``write_parquet_atomic``), in row groups of ``batch_rows``.

    Holds one batch per part at a time, and the batches of all parts together come to about
    ``4 * batch_rows`` rows however many parts there are (a span of many chunks reads smaller
    batches). Rows with equal keys keep the parts' order. Returns the number of rows written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".tmp-{path.name}"
    per_part = max(1, 4 * batch_rows // max(1, len(parts)))
    readers = [pq.ParquetFile(p).iter_batches(batch_size=per_part) for p in parts]
    bufs = [_next_table(r) for r in readers]
    out, held, n = [], 0, 0
    with pq.ParquetWriter(tmp, REWARD_SCHEMA, compression="zstd") as writer:
        while any(b is not None for b in bufs):
            live = [i for i, b in enumerate(bufs) if b is not None]
            frontier = min(_last_key(bufs[i]) for i in live)
            taken = []
            for i in live:
                k = _rows_upto(bufs[i], frontier)
                taken.append(bufs[i].slice(0, k))
                bufs[i] = bufs[i].slice(k) if k < bufs[i].num_rows else _next_table(readers[i])
            merged = pa.concat_tables(taken).sort_by(SORT_KEYS)
            out.append(merged)
            held += merged.num_rows
            if held >= batch_rows:
                writer.write_table(pa.concat_tables(out))
                n, out, held = n + held, [], 0
        if held:
            writer.write_table(pa.concat_tables(out))
            n += held
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return n


def _next_table(batches: Any) -> pa.Table | None:
    """The next non-empty batch of a part as a ``REWARD_SCHEMA`` table (``None``: no more)."""
    for b in batches:
        if b.num_rows:
            return pa.Table.from_batches([b]).cast(REWARD_SCHEMA)
    return None


def _last_key(t: pa.Table) -> tuple[Any, str]:
    return t.column("event_time")[-1].value, t.column("response_id")[-1].as_py()


def _rows_upto(t: pa.Table, key: tuple[Any, str]) -> int:
    """How many leading rows of the sorted ``t`` have a sort key <= ``key``."""
    import pyarrow.compute as pc

    at, rid = key
    times = pc.cast(t.column("event_time"), pa.int64())
    before = pc.less(times, at)
    tie = pc.and_(pc.equal(times, at), pc.less_equal(t.column("response_id"), rid))
    return int(pc.sum(pc.cast(pc.or_(before, tie), pa.int64())).as_py() or 0)


def _remove_if_empty(folder: Path) -> None:
    """Remove a span's folder of parts once it holds nothing (never a partition folder)."""
    if folder.name.startswith("span-") and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def span_id_for(seq: int) -> str:
    return f"span-{seq:06d}"


@dataclass(frozen=True)
class CarriedState:
    """State handed from one span to the next."""

    seq: int
    """Sequence number of the last span (0: none yet)."""
    ends: dict[str, dict[int, int]]
    """Next offset to read per topic partition."""
    pending: list[tuple[str, EventItem]]
    finalized: dict[str, int]
    """Finalised response ids -> completion event time (µs), for recognising late signals."""
    max_event_time_us: int | None
    stats: dict[str, float] | None
    """Monitor figures of the last validated span (drift baseline)."""


class SpanStore:
    """Reads and writes spans, manifests and carried state under one output root."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.manifests = self.root / MANIFESTS

    # --- reading -----------------------------------------------------------------------------
    def manifest_dirs(self) -> list[Path]:
        if not self.manifests.is_dir():
            return []
        return sorted(p for p in self.manifests.iterdir() if p.name.startswith("span-"))

    def manifests_list(self) -> list[dict[str, Any]]:
        return [json.loads((d / "manifest.json").read_text()) for d in self.manifest_dirs()]

    def load_state(self) -> CarriedState:
        dirs = self.manifest_dirs()
        if not dirs:
            return CarriedState(0, {}, [], {}, None, None)
        last = dirs[-1]
        m = json.loads((last / "manifest.json").read_text())
        ends = {
            t: {int(p): int(r[1]) for p, r in parts.items()} for t, parts in m["offsets"].items()
        }
        pending = [_item_from_json(line) for line in jsonl.read_lines(last / "pending.jsonl")]
        finalized = json.loads((last / "finalized.json").read_text())
        stats = next(
            (
                x["stats"]
                for x in reversed(self.manifests_list())
                if x["status"] == "ok" and x["rows"] > 0
            ),
            None,
        )
        return CarriedState(m["seq"], ends, pending, finalized, m["max_event_time_us"], stats)

    # --- writing ------------------------------------------------------------------------------
    def staging_dir(self, span_id: str) -> Path:
        path = self.root / STAGING / span_id
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path

    def write_rows(
        self, span_id: str, table: pa.Table, quarantined: bool, at: datetime | None = None
    ) -> str:
        """Write the span's rows as one file in the partition of ``at`` (default: now, UTC).

        Returns the path relative to the root.
        """
        at = at or datetime.now(UTC)
        base = QUARANTINE if quarantined else SPANS
        rel = f"{base}/date={at:%Y-%m-%d}/hour={at:%H}/{span_id}.parquet"
        write_parquet_atomic(table, self.root / rel)
        return rel

    def write_rows_merged(
        self, span_id: str, parts: list[Path], quarantined: bool, at: datetime | None = None
    ) -> str:
        """As ``write_rows``, from sorted Parquet parts merged into one file
        (``write_merged_atomic``: one batch per part in memory)."""
        at = at or datetime.now(UTC)
        base = QUARANTINE if quarantined else SPANS
        rel = f"{base}/date={at:%Y-%m-%d}/hour={at:%H}/{span_id}.parquet"
        write_merged_atomic(parts, self.root / rel)
        return rel

    def move_parts(
        self, span_id: str, parts: list[Path], quarantined: bool, at: datetime | None = None
    ) -> list[str]:
        """Rename the span's sorted parts (written and fsynced by the workers) into the span's
        folder, ``<base>/date=…/hour=…/<span_id>/part-NNNN.parquet``, in the given order; a span
        without rows gets one empty part, so its folder always reads as ``REWARD_SCHEMA``.
        Returns the paths relative to the root. Nothing is visible before the manifest names
        them: ``remove_orphans`` deletes a folder of a span that has none."""
        at = at or datetime.now(UTC)
        base = QUARANTINE if quarantined else SPANS
        rel = f"{base}/date={at:%Y-%m-%d}/hour={at:%H}/{span_id}"
        folder = self.root / rel
        if folder.exists():  # a crashed earlier attempt of this span
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        out = []
        if not parts:
            write_parquet_atomic(REWARD_SCHEMA.empty_table(), folder / "part-0000.parquet")
            out.append(f"{rel}/part-0000.parquet")
        for i, src in enumerate(parts):
            os.replace(src, folder / f"part-{i:04d}.parquet")
            out.append(f"{rel}/part-{i:04d}.parquet")
        fsync_dir(folder)
        fsync_dir(folder.parent)
        return out

    def commit_manifest(
        self,
        manifest: dict[str, Any],
        pending: Iterable[tuple[str, EventItem]],
        finalized: dict[str, int],
        late: Iterable[DeadLetter],
        dead: Iterable[DeadLetter],
    ) -> Path:
        """Write the manifest folder to a temp name, fsync everything, rename it into place."""
        span_id = manifest["span_id"]
        tmp = self.root / STAGING / f"{span_id}.manifest"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        pending_lines = (_item_to_json(k, i) for k, i in pending)
        atomic_write_bytes(tmp / "pending.jsonl", jsonl.encode(pending_lines))
        atomic_write_bytes(tmp / "finalized.json", json.dumps(finalized).encode())
        for name, letters in (("late", late), ("dead_letters", dead)):
            body = jsonl.encode(d.model_dump_json() for d in letters)
            atomic_write_bytes(tmp / f"{name}.jsonl", body)
        atomic_write_bytes(tmp / "manifest.json", json.dumps(manifest, indent=1).encode())
        self.manifests.mkdir(parents=True, exist_ok=True)
        final = self.manifests / span_id
        os.replace(tmp, final)
        fsync_dir(self.manifests)
        return final

    def mark(self, span_id: str, marker: str) -> None:
        atomic_write_bytes(self.manifests / span_id / marker, b"")

    def has_mark(self, span_id: str, marker: str) -> bool:
        return (self.manifests / span_id / marker).exists()

    def dead_letters(self, span_id: str, name: str) -> list[DeadLetter]:
        path = self.manifests / span_id / f"{name}.jsonl"
        return [DeadLetter.model_validate_json(line) for line in jsonl.read_lines(path)]

    # --- recovery -----------------------------------------------------------------------------
    def unreadable(self, span_id: str) -> dict[str, str]:
        """The span's carried files that do not parse, ``{name: why}`` (empty: all read)."""
        parsers = {
            "pending": _item_from_json,
            "late": DeadLetter.model_validate_json,
            "dead_letters": DeadLetter.model_validate_json,
        }
        problems = {}
        for name, parse in parsers.items():
            path = self.manifests / span_id / f"{name}.jsonl"
            try:
                for line in jsonl.read_lines(path):
                    parse(line)
            except (ValueError, TypeError, KeyError) as e:
                problems[name] = f"{type(e).__name__}: {str(e)[:300]}"
        return problems

    def quarantine_unreadable(self, span_id: str, problems: dict[str, str]) -> None:
        """Quarantine a committed span whose carried files do not parse, so recovery goes on.

        The manifest (the commit point) becomes ``quarantined`` with a ``recovery`` record
        naming each file and why; then each such file is renamed ``NAME.jsonl.unreadable`` (kept
        for review, never read again). The span's rows and offsets stay as they were;
        ``release`` re-admits the rows. A rerun after a crash between the two steps repeats
        them.
        """
        path = self.manifests / span_id / "manifest.json"
        m = json.loads(path.read_text())
        recovery = {"at": datetime.now(UTC).isoformat(), "unreadable": problems}
        atomic_write_bytes(path, json.dumps({**m, "status": "quarantined",
                                             "recovery": recovery}, indent=1).encode())
        for name in problems:
            src = self.manifests / span_id / f"{name}.jsonl"
            if src.exists():
                os.replace(src, src.with_name(f"{name}.jsonl.unreadable"))
        fsync_dir(self.manifests / span_id)

    def remove_orphans(self) -> list[str]:
        """Delete Parquet files (and temp files) of spans without a manifest, and staging."""
        known = {d.name for d in self.manifest_dirs()}
        removed = []
        for base in (SPANS, QUARANTINE):
            top = self.root / base
            paths = list(top.rglob("*.parquet")) if top.exists() else []
            for path in paths:
                # a span is one file (span-N.parquet) or a folder of parts (span-N/part-M.parquet)
                span = path.parent.name if path.parent.name.startswith("span-") else path.stem
                if path.name.startswith(".tmp-") or span not in known:
                    path.unlink()
                    removed.append(str(path.relative_to(self.root)))
            for folder in {p.parent for p in paths}:
                _remove_if_empty(folder)
        shutil.rmtree(self.root / STAGING, ignore_errors=True)
        return removed

    def release(self, span_id: str, note: str = "") -> dict[str, Any]:
        """Re-admit a quarantined span after an operator reviewed it: its file moves to
        ``spans/`` (same partition) and its manifest becomes ``ok`` with a ``released`` record
        (when, note, the original files; the failed validation report is kept).

        Crash-safe: the copy is written first, then the manifest (the commit point), then the
        quarantined file is removed; a rerun finishes the job. Raises ``ValueError`` for a span
        that is not quarantined, ``FileNotFoundError`` for an unknown one.
        """
        path = self.manifests / span_id / "manifest.json"
        m = json.loads(path.read_text())
        if m["status"] != "quarantined":
            raise ValueError(f"{span_id} has status {m['status']!r}, not 'quarantined'")
        moved = []
        for rel in m["files"]:
            dst = SPANS + rel[len(QUARANTINE) :] if rel.startswith(QUARANTINE + "/") else rel
            atomic_write_bytes(self.root / dst, (self.root / rel).read_bytes())
            moved.append(dst)
        released = {"at": datetime.now(UTC).isoformat(), "note": note, "from": m["files"]}
        new = {**m, "status": "ok", "files": moved, "released": released}
        atomic_write_bytes(path, json.dumps(new, indent=1).encode())
        for rel in m["files"]:
            if rel not in moved:
                (self.root / rel).unlink(missing_ok=True)
                _remove_if_empty((self.root / rel).parent)
        return new

    def span_files(self, status: str = "ok") -> list[Path]:
        """Parquet files of committed spans with ``status`` ('ok' or 'quarantined')."""
        out = []
        for m in self.manifests_list():
            if m["status"] == status:
                out += [self.root / f for f in m["files"]]
        return out


def span_location(files: list[Path]) -> Path:
    """Where a span's rows are, from its manifest's files: its one file (spans written before
    the commit in parts), or the folder of its parts (``pq.read_table`` reads either)."""
    if len(files) == 1 and not files[0].parent.name.startswith("span-"):
        return files[0]
    return files[0].parent


def read_spans(output_root: Path, status: str = "ok") -> pa.Table:
    """All reward rows of committed spans with ``status``, as one table (``REWARD_SCHEMA``)."""
    files = SpanStore(output_root).span_files(status)
    if not files:
        return REWARD_SCHEMA.empty_table()
    return pa.concat_tables([upgrade_reward_table(pq.read_table(f)) for f in files])


def manifest_record(
    *,
    span_id: str,
    seq: int,
    source: dict[str, Any],
    offsets: dict[str, dict[int, tuple[int, int]]],
    files: list[str],
    status: str,
    counts: dict[str, int],
    max_event_time_us: int | None,
    watermark_us: int | None,
    stats: dict[str, float],
    validation: dict[str, Any],
    drained: bool = False,
) -> dict[str, Any]:
    """The JSON manifest of one span. ``drained``: the span ended its input (a recording or a
    stream's end): everything it did not carry as pending is final."""
    return {
        "span_id": span_id,
        "seq": seq,
        "schema_version": SCHEMA_VERSION,
        "created_at": datetime.now(UTC).isoformat(),
        "source": source,
        "offsets": {t: {str(p): list(r) for p, r in parts.items()} for t, parts in offsets.items()},
        "files": files,
        "status": status,
        **counts,
        "max_event_time_us": max_event_time_us,
        "watermark_us": watermark_us,
        "drained": drained,
        "stats": stats,
        "validation": validation,
    }


def _item_to_json(response_id: str, item: EventItem) -> str:
    d = item._asdict()
    d["value"] = item.value.decode("utf-8")
    return json.dumps({"response_id": response_id, "item": d})


def _item_from_json(line: str) -> tuple[str, EventItem]:
    d = json.loads(line)
    it = d["item"]
    it["value"] = it["value"].encode("utf-8")
    return d["response_id"], EventItem(**it)
