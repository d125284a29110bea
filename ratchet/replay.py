"""Record the Kafka topics to a JSONL file, and replay such a file into Kafka.

A record is one Kafka message: ``{"topic", "key", "value", "timestamp_ms"}`` with the value kept
as the raw string — or, if it is not UTF-8, as ``value_b64`` — so malformed events replay
byte for byte as they were. Replay keeps the records' relative
timing, compressed by a speed factor (0 = no waiting), and by default rebases event times so the
newest recorded event lands at "now" — recorded traffic then looks fresh to ingest's
too-old/future checks while every interval between events is kept. Each record is sent with its
recorded timestamp, shifted by the same amount as its event time, so ingest's staleness check
(event time against record timestamp) sees exactly what it saw when the traffic was recorded,
and a rerun classifies every record as the first run did.

A replayed recording is finished: nothing more will come for it. :func:`finished_recording` is the
config a cycle on it runs with: ingest drains, and a completion whose persistence window is still
open at the recording's end is finalised as ``ingest.join.open_at_drain`` says, ``neutral`` unless
the config sets it (its row is written once; a missing checkpoint then means nothing, and the row
is trained on if feedback or the checkpoints that came score it). ``pending``, the default of a
plain ``ingest --drain``, is for a recording cut mid-stream whose rest comes later.
"""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime
from pathlib import Path

from ingest.schema import DEAD_LETTER_TOPIC, TOPICS
from ratchet.config import RatchetConfig


def record(bootstrap: str, path: Path) -> int:
    """Dump every message of the event topics (not the dead-letter topic) to ``path``."""
    from ingest.kafka_io import high_watermarks, read_range

    records = []
    for topic in TOPICS.values():
        for partition, end in high_watermarks(bootstrap, topic).items():
            for _offset, key, value, ts in read_range(bootstrap, topic, partition, 0, end):
                records.append(
                    {"topic": topic, "key": key.decode() if key else None, "timestamp_ms": ts,
                     **_encode_value(value)}
                )
    records.sort(key=lambda r: r["timestamp_ms"])
    with path.open("w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return len(records)


def _encode_value(value: bytes) -> dict[str, str]:
    try:
        return {"value": value.decode("utf-8")}
    except UnicodeDecodeError:
        return {"value_b64": base64.b64encode(value).decode()}


def _decode_value(r: dict, shift_s: float | None) -> bytes:
    if "value_b64" in r:
        return base64.b64decode(r["value_b64"])
    return (r["value"] if shift_s is None else _shift_event_time(r["value"], shift_s)).encode()


def _shift_event_time(value: str, shift_s: float) -> str:
    try:
        event = json.loads(value)
        t = datetime.fromisoformat(event["event_time"])
    except (ValueError, KeyError, TypeError):
        return value  # malformed on purpose: replay it untouched
    event["event_time"] = datetime.fromtimestamp(t.timestamp() + shift_s, UTC).isoformat()
    return json.dumps(event)


def finished_recording(config: RatchetConfig) -> RatchetConfig:
    """``config`` for a cycle on a finished recording: ingest drains, and an open persistence
    window ends as ``ingest.join.open_at_drain`` says when the config sets it, else
    ``neutral`` (never ``pending``: no later span will bring what the recording lacks)."""
    join = config.ingest.join
    if "open_at_drain" not in join.model_fields_set:
        join = join.model_copy(update={"open_at_drain": "neutral"})
    ingest = config.ingest.model_copy(update={"drain": True, "join": join})
    return config.model_copy(update={"ingest": ingest})


class RecordingError(ValueError):
    """A recording that cannot be replayed; the message names the file and the line."""


_REQUIRED = ("topic", "timestamp_ms")


def load_recording(path: Path) -> list[dict]:
    """The records of a recording, checked before anything is sent: each line a JSON object
    with ``topic``, an integer ``timestamp_ms`` and a ``value`` or ``value_b64``. Raises
    :class:`RecordingError` naming ``FILE:LINE`` (lines counted from 1, blank lines included)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise RecordingError(f"{path}: no such recording") from None
    except (IsADirectoryError, UnicodeDecodeError) as e:
        raise RecordingError(f"{path}: cannot read as a JSONL recording ({e})") from None
    records = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise RecordingError(f"{path}:{lineno}: not valid JSON: {e.msg}") from None
        if not isinstance(r, dict):
            raise RecordingError(f"{path}:{lineno}: a record must be a JSON object")
        missing = [k for k in _REQUIRED if k not in r]
        if "value" not in r and "value_b64" not in r:
            missing.append("value")
        if missing:
            raise RecordingError(f"{path}:{lineno}: record lacks {', '.join(missing)}")
        if not isinstance(r["timestamp_ms"], int) or isinstance(r["timestamp_ms"], bool):
            raise RecordingError(f"{path}:{lineno}: timestamp_ms must be an integer, "
                                 f"got {r['timestamp_ms']!r}")
        r.setdefault("key", None)
        records.append(r)
    if not records:
        raise RecordingError(f"{path}: the recording holds no records")
    return records


def replay(path: Path, *, bootstrap: str, speed: float = 0.0, rebase: bool = True) -> int:
    """Send the records of ``path`` to Kafka in order; returns how many were sent."""
    from ingest.kafka_io import EventProducer

    records = load_recording(path)
    if not records:
        return 0
    t0 = records[0]["timestamp_ms"]
    newest_ms = max(r["timestamp_ms"] for r in records)
    shift_s = time.time() - newest_ms / 1000 if rebase else 0.0
    producer = EventProducer(bootstrap)
    wall0 = time.monotonic()
    try:
        for r in records:
            if r["topic"] == DEAD_LETTER_TOPIC:
                continue
            if speed > 0:
                due = (r["timestamp_ms"] - t0) / 1000 / speed
                time.sleep(max(0.0, due - (time.monotonic() - wall0)))
            key = r["key"].encode() if r["key"] else None
            value = _decode_value(r, shift_s if rebase else None)
            ts = int(r["timestamp_ms"] + shift_s * 1000) if r["timestamp_ms"] >= 0 else None
            producer.send_raw(r["topic"], key, value, timestamp_ms=ts)
        producer.flush()
    finally:
        producer.close()
    return len(records)
