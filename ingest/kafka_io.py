"""Kafka transport for ratchet: topic setup, producing events, bounded reads, committed offsets.

Written against kafka-python and the embedded Tansu broker, whose two traps shape it
(/work/shared/STACK.md):

1. ``KafkaConsumer.end_offsets()`` is wrong on Tansu (last batch's base offset + 1), so
   ``high_watermarks`` derives the high-water mark from fetch responses instead.
2. A consumer-group join takes ~23 s with default timeouts. Nothing here joins a group: reads use
   manual assignment, and offsets are committed for a group id without membership, which is
   what a batch job that owns its ranges needs.

Deliberately left out: parsing and validation (ingest/schema.py), dead-letter classification
(ingest/parse.py), and any retry policy beyond kafka-python's own.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import NamedTuple, Protocol

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError
from kafka.structs import OffsetAndMetadata

from ingest.schema import DEAD_LETTER_TOPIC, LATE_TOPIC, TOPICS

CONSUMER_TIMEOUTS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}
"""Consumer timeouts that make a group join ~3 s instead of ~23 s on Tansu (trap 2)."""

FETCH_SETTINGS = {
    "max_partition_fetch_bytes": 8 * 1024 * 1024,
    "fetch_max_bytes": 64 * 1024 * 1024,
    "max_poll_records": 5000,
    "fetch_max_wait_ms": 10,
    "retry_backoff_ms": 10,
}
"""Consumer settings for bounded reads: big fetches, no 500 ms broker-side wait at the end
of a partition (a reader that knows its end offset never wants to wait for more), and a 10 ms
retry backoff instead of 100: kafka-python delays a metadata refresh until the backoff has
passed since the last one, and a poll with nothing fetchable yet sleeps that long, so a read
that assigns one partition after another waited ~0.1 s at every new topic (100k events, 4
topics read in turn: 1.13 s -> 0.78 s wall, same CPU). Failed metadata requests still back
off exponentially (kafka-python's connection delay, KIP-580)."""


class KafkaRecord(NamedTuple):
    """One record as read from a topic partition."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int


class _Keyed(Protocol):
    response_id: str

    def to_json(self) -> bytes: ...


def all_topics() -> list[str]:
    """Every topic ratchet uses: the event topics, the dead-letter topic and the late topic."""
    return [*TOPICS.values(), DEAD_LETTER_TOPIC, LATE_TOPIC]


def ensure_topics(bootstrap: str, partitions: int = 4, topics: Iterable[str] | None = None) -> None:
    """Create the topics that do not exist yet (all of ``all_topics()`` unless given)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        existing = set(admin.list_topics())
        missing = [t for t in (topics or all_topics()) if t not in existing]
        for topic in missing:
            try:
                admin.create_topics([NewTopic(topic, partitions, 1)])
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()


class EventProducer:
    """Produces events with ``acks=all``: key = response_id, value = the event's JSON."""

    def __init__(
        self, bootstrap: str, *, linger_ms: int = 5, max_request_size: int = 1_048_576
    ) -> None:
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            linger_ms=linger_ms,
            retries=5,
            max_request_size=max_request_size,
        )

    def send(self, event: _Keyed) -> None:
        """Send an event to its kind's topic (``TOPICS[event.kind]``)."""
        topic = TOPICS[event.kind]  # type: ignore[attr-defined]
        self._producer.send(topic, key=event.response_id.encode(), value=event.to_json())

    def send_raw(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ):
        """Send raw bytes (tests, replays, dead letters); ``timestamp_ms`` sets the record's
        timestamp (default: the broker client's clock now)."""
        return self._producer.send(
            topic, key=key, value=value, partition=partition, timestamp_ms=timestamp_ms
        )

    def flush(self, timeout_s: float = 60.0) -> None:
        self._producer.flush(timeout=timeout_s)

    def close(self) -> None:
        self._producer.close()

    def __enter__(self) -> EventProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()
        self.close()


def partitions_of(bootstrap: str, topic: str) -> list[int]:
    """Partition ids of ``topic`` (empty if the topic does not exist)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        return sorted(consumer.partitions_for_topic(topic) or [])
    finally:
        consumer.close()


def high_watermarks(bootstrap: str, topic: str, *, timeout_s: float = 20.0) -> dict[int, int]:
    """High-water mark per partition of ``topic``, taken from fetch responses (not ListOffsets).

    The consumer is positioned at ``end_offsets()`` (a lower bound on Tansu) so each fetch is
    small, then polls until every partition's fetch response has reported its high-water mark.
    """
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        retry_backoff_ms=FETCH_SETTINGS["retry_backoff_ms"],
    )
    try:
        parts = sorted(consumer.partitions_for_topic(topic) or [])
        tps = [TopicPartition(topic, p) for p in parts]
        if not tps:
            return {}
        consumer.assign(tps)
        for tp, lower in consumer.end_offsets(tps).items():
            consumer.seek(tp, lower)
        deadline = time.monotonic() + timeout_s
        marks: dict[int, int] = {}
        while len(marks) < len(tps):
            consumer.poll(timeout_ms=200, max_records=1)
            for tp in tps:
                hw = consumer.highwater(tp)
                if hw is not None:
                    marks[tp.partition] = hw
            if time.monotonic() > deadline:
                raise TimeoutError(f"no high-water mark for {topic} partitions in {timeout_s}s")
        return marks
    finally:
        consumer.close()


def read_range(
    bootstrap: str, topic: str, partition: int, start: int, end: int, *, poll_ms: int = 500
) -> Iterator[tuple[int, bytes | None, bytes, int]]:
    """``(offset, key, value, timestamp_ms)`` of one partition, ``start <= offset < end``."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, **FETCH_SETTINGS
    )
    try:
        for r in iter_range(consumer, topic, partition, start, end, poll_ms=poll_ms):
            yield r.offset, r.key, r.value, r.timestamp_ms
    finally:
        consumer.close()


def iter_range(
    consumer: KafkaConsumer, topic: str, partition: int, start: int, end: int, *, poll_ms: int = 500
) -> Iterator[KafkaRecord]:
    """Like ``read_range`` on an existing consumer (re-assigned to this one partition).

    Stops at ``end`` or when the consumer's position has passed ``end - 1`` (offset gaps such as
    transaction markers); raises ``TimeoutError`` after 20 empty polls in a row.
    """
    if start >= end:
        return
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek(tp, start)
    empty = 0
    while consumer.position(tp) < end:
        batch = consumer.poll(timeout_ms=poll_ms).get(tp, [])
        if not batch:
            empty += 1
            if empty > 20:
                raise TimeoutError(
                    f"{topic}[{partition}] stalled at {consumer.position(tp)} < {end}"
                )
            continue
        empty = 0
        for r in batch:
            if r.offset >= end:
                return
            if r.offset >= start:
                yield KafkaRecord(topic, partition, r.offset, r.key, r.value, r.timestamp)


def committed_offsets(
    bootstrap: str, group_id: str, topics: Iterable[str]
) -> dict[str, dict[int, int]]:
    """Committed offset per topic partition for ``group_id`` (never committed: absent)."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        **CONSUMER_TIMEOUTS,
    )
    try:
        out: dict[str, dict[int, int]] = {}
        for topic in topics:
            out[topic] = {}
            for p in sorted(consumer.partitions_for_topic(topic) or []):
                off = consumer.committed(TopicPartition(topic, p))
                if off is not None:
                    out[topic][p] = off
        return out
    finally:
        consumer.close()


def commit_offsets(bootstrap: str, group_id: str, offsets: dict[str, dict[int, int]]) -> None:
    """Commit ``offsets`` (next offset to read, per topic partition) for ``group_id``.

    Uses a simple (non-member) commit, so no group join is needed.
    """
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        **CONSUMER_TIMEOUTS,
    )
    try:
        commits = {
            TopicPartition(t, p): OffsetAndMetadata(off, "", -1)
            for t, parts in offsets.items()
            for p, off in parts.items()
        }
        if commits:
            consumer.commit(commits)
    finally:
        consumer.close()


def start_group_at_end(
    bootstrap: str, group_id: str, topics: Iterable[str]
) -> dict[str, dict[int, int]]:
    """Commit the current high-water marks for ``group_id``: it will read only newer records.

    Returns the committed offsets (what the group will start from).
    """
    ends = {t: high_watermarks(bootstrap, t) for t in topics}
    commit_offsets(bootstrap, group_id, ends)
    return ends


def read_topic(
    bootstrap: str, topic: str, since: dict[int, int] | None = None
) -> Iterator[tuple[int, int, bytes | None, bytes]]:
    """``(partition, offset, key, value)`` of every record of ``topic`` at or after ``since``."""
    for partition, end in sorted(high_watermarks(bootstrap, topic).items()):
        start = (since or {}).get(partition, 0)
        for offset, key, value, _ in read_range(bootstrap, topic, partition, start, end):
            yield partition, offset, key, value


def logged_completions(bootstrap: str, response_ids: set[str], *, timeout_s: float = 30.0) -> dict:
    """The completion events of ``response_ids`` found on the broker, by response id; waits up to
    ``timeout_s`` for all of them (the gateway logs without blocking) and returns what it found."""
    from ingest.schema import parse_event

    deadline = time.monotonic() + timeout_s
    while True:
        found = {}
        for _, _, _, value in read_topic(bootstrap, TOPICS["completion"]):
            try:
                event = parse_event(value)
            except ValueError:
                continue
            if getattr(event, "response_id", None) in response_ids:
                found[event.response_id] = event
        if len(found) == len(response_ids) or time.monotonic() > deadline:
            return found
        time.sleep(0.5)
