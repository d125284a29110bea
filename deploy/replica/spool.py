"""A bounded, ordered, on-disk spool of Kafka records (topic, key, value).

Records are appended to segment files (``seg-<n>.log``, one record per line) and read back in the
order they were written; a cursor file (written atomically) remembers how far the records were
delivered, so a replica that restarts resends what was left. The spool is bounded in bytes: a
record that does not fit is refused and the caller counts it as dropped.

Deliberately left out: fsync (records survive a crashed process, not a lost machine), concurrent
writers (one logging thread owns a spool), and anything about Kafka
(deploy/replica/behaviour_log.py).
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path

Record = tuple[str, bytes, bytes] | tuple[str, bytes, bytes, int]
"""(topic, key, value) of one Kafka record, optionally with its timestamp in ms."""

_SEGMENT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class SpoolBatch:
    """Records read from the spool, and the cursor position just after the last of them."""

    records: list[Record]
    end: tuple[int, int]
    nbytes: int


def _encode(record: Record) -> bytes:
    topic, key, value, *ts = record
    fields = [topic, base64.b64encode(key).decode(), base64.b64encode(value).decode()]
    line = "\t".join(fields + [str(int(t)) for t in ts])
    return line.encode() + b"\n"


def _decode(line: bytes) -> Record:
    topic, key, value, *ts = line.rstrip(b"\n").decode().split("\t")
    record = (topic, base64.b64decode(key), base64.b64decode(value))
    return record + (int(ts[0]),) if ts else record


class Spool:
    """FIFO of records in ``directory``, at most ``max_bytes`` of undelivered records."""

    def __init__(self, directory: Path, *, max_bytes: int) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self._cursor_path = self.directory / "cursor.json"
        self._read_seg, self._read_pos = self._load_cursor()
        segs = self._segments()
        self._write_seg = segs[-1] if segs else self._read_seg
        self._writer = open(self._seg_path(self._write_seg), "ab")  # noqa: SIM115  (long-lived writer)
        self.depth, self.pending_bytes = self._count_pending()

    # -- paths and cursor ---------------------------------------------------------------------
    def _seg_path(self, n: int) -> Path:
        return self.directory / f"seg-{n:012d}.log"

    def _segments(self) -> list[int]:
        return sorted(int(p.stem.split("-")[1]) for p in self.directory.glob("seg-*.log"))

    def _load_cursor(self) -> tuple[int, int]:
        if not self._cursor_path.exists():
            segs = self._segments()
            return (segs[0] if segs else 0), 0
        data = json.loads(self._cursor_path.read_text())
        return int(data["segment"]), int(data["offset"])

    def _save_cursor(self) -> None:
        tmp = self._cursor_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"segment": self._read_seg, "offset": self._read_pos}))
        os.replace(tmp, self._cursor_path)

    def _count_pending(self) -> tuple[int, int]:
        n = size = 0
        for seg in self._segments():
            if seg < self._read_seg:
                continue
            with open(self._seg_path(seg), "rb") as f:
                if seg == self._read_seg:
                    f.seek(self._read_pos)
                for line in f:
                    n += 1
                    size += len(line)
        return n, size

    # -- writing ------------------------------------------------------------------------------
    def append(self, records: list[Record]) -> int:
        """Append records in order; returns how many fitted (the rest were refused)."""
        written = 0
        for record in records:
            line = _encode(record)
            if self.pending_bytes + len(line) > self.max_bytes:
                break
            if self._writer.tell() >= _SEGMENT_BYTES:
                self._roll()
            self._writer.write(line)
            self.depth += 1
            self.pending_bytes += len(line)
            written += 1
        self._writer.flush()
        return written

    def _roll(self) -> None:
        self._writer.close()
        self._write_seg += 1
        self._writer = open(self._seg_path(self._write_seg), "ab")  # noqa: SIM115  (long-lived writer)

    # -- reading ------------------------------------------------------------------------------
    def peek(self, max_records: int) -> SpoolBatch:
        """Up to ``max_records`` undelivered records, oldest first; the cursor does not move."""
        records: list[Record] = []
        seg, pos, nbytes = self._read_seg, self._read_pos, 0
        while len(records) < max_records and seg <= self._write_seg:
            path = self._seg_path(seg)
            if path.exists():
                with open(path, "rb") as f:
                    f.seek(pos)
                    while len(records) < max_records:
                        line = f.readline()
                        if not line.endswith(b"\n"):
                            break
                        records.append(_decode(line))
                        pos += len(line)
                        nbytes += len(line)
            if len(records) < max_records and seg < self._write_seg:
                seg, pos = seg + 1, 0
            else:
                break
        return SpoolBatch(records, (seg, pos), nbytes)

    def commit(self, batch: SpoolBatch) -> None:
        """Mark ``batch`` (the last peek) delivered; delete segments that are fully delivered."""
        if not batch.records:
            return
        self._read_seg, self._read_pos = batch.end
        self.depth -= len(batch.records)
        self.pending_bytes -= batch.nbytes
        self._save_cursor()
        for seg in self._segments():
            if seg < self._read_seg:
                self._seg_path(seg).unlink(missing_ok=True)
        if self.depth == 0 and self._read_seg == self._write_seg:
            self._reset()

    def _reset(self) -> None:
        """All delivered: start a fresh segment so the files do not grow forever."""
        self._writer.close()
        self._seg_path(self._write_seg).unlink(missing_ok=True)
        self._write_seg += 1
        self._read_seg, self._read_pos = self._write_seg, 0
        self._writer = open(self._seg_path(self._write_seg), "ab")  # noqa: SIM115  (long-lived writer)
        self._save_cursor()

    def close(self) -> None:
        self._writer.close()
