"""Behaviour logging that never blocks and never fails a request.

Request threads hand events to ``BehaviourLogger.submit`` (a non-blocking put on a bounded queue).
One background thread serialises them and produces them to Kafka. When Kafka is unreachable the
events go, in order, to a bounded on-disk spool (deploy/replica/spool.py); while the spool holds
anything,
new events queue up behind it, and the thread resends the spool oldest-first once Kafka answers
again. Delivery is at least once (a batch whose acknowledgement was lost is sent again); the
ingest side deduplicates by ``event_id``.

Deliberately left out: schema decisions (ingest/schema.py) and consumer-side concerns.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from deploy.replica.spool import Record, Spool

log = logging.getLogger(__name__)

_BATCH = 64
"""Events per produce batch: small enough that the logging thread holds the GIL only briefly."""


class KafkaEvent(Protocol):
    """Anything with ``to_json() -> bytes`` (every ingest.schema event)."""

    def to_json(self) -> bytes: ...


@dataclass
class LoggerStats:
    """Counters of one logger, read by /metrics."""

    submitted: int = 0
    sent: int = 0
    spooled: int = 0
    dropped_queue_full: int = 0
    dropped_spool_full: int = 0
    send_failures: int = 0


class BehaviourLogger:
    """Queue → Kafka, with a spool while Kafka is down. ``close()`` flushes or spools the rest."""

    def __init__(
        self,
        *,
        bootstrap: str | None,
        spool: Spool,
        queue_max: int = 10_000,
        send_timeout_s: float = 5.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.spool = spool
        self.send_timeout_s = send_timeout_s
        self.stats = LoggerStats()
        self._queue: queue.Queue[tuple[str, bytes, KafkaEvent, int | None]] = queue.Queue(queue_max)
        self._stop = threading.Event()
        self._producer = None
        self._retry_at = 0.0
        self._backoff_s = 0.25
        self._idle = threading.Event()
        self._thread = threading.Thread(target=self._run, name="behaviour-log", daemon=True)
        self._thread.start()

    # -- request side -------------------------------------------------------------------------
    def submit(
        self, topic: str, key: str, event: KafkaEvent, timestamp_ms: int | None = None
    ) -> bool:
        """Queue one event without blocking; False if the queue was full (counted as dropped).

        ``timestamp_ms`` sets the Kafka record's timestamp (signals: their event time); None lets
        the producer stamp the send time.
        """
        try:
            self._queue.put_nowait((topic, key.encode(), event, timestamp_ms))
        except queue.Full:
            self.stats.dropped_queue_full += 1
            return False
        self._idle.clear()
        self.stats.submitted += 1
        return True

    @property
    def spool_depth(self) -> int:
        return self.spool.depth

    @property
    def queue_depth(self) -> int:
        return self._queue.qsize()

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything submitted so far is in Kafka; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._queue.empty() and self.spool.depth == 0 and self._idle.is_set():
                return True
            time.sleep(0.02)
        return False

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the thread; what could not be sent stays in the spool for the next start."""
        self._stop.set()
        self._thread.join(timeout_s)
        self._close_producer(timeout_s=1)
        self.spool.close()

    # -- logging thread -----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            records = self._take(timeout_s=0.05)
            if self._stop.is_set() and not records:
                self._drain_spool(deadline=time.monotonic() + 2.0)
                return
            if records and (self.spool.depth or self._producer is None):
                self._to_spool(records)  # to disk first: connecting may take a while
            elif records:
                failed = self._send(records)
                if failed:
                    self._to_spool(failed)
            if self.spool.depth and self._connected():
                self._drain_spool(deadline=time.monotonic() + 0.5)
            if not records and self._queue.empty() and not self.spool.depth:
                self._idle.set()

    def _take(self, timeout_s: float) -> list[Record]:
        items = []
        try:
            items.append(self._queue.get(timeout=timeout_s))
            while len(items) < _BATCH:
                items.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        return [
            (topic, key, event.to_json()) + (() if ts is None else (ts,))
            for topic, key, event, ts in items
        ]

    def _to_spool(self, records: list[Record]) -> None:
        written = self.spool.append(records)
        self.stats.spooled += written
        if written < len(records):
            self.stats.dropped_spool_full += len(records) - written
            log.warning("spool full: dropped %d events", len(records) - written)

    def _drain_spool(self, deadline: float) -> None:
        while self.spool.depth and time.monotonic() < deadline and self._connected():
            batch = self.spool.peek(_BATCH)
            if not batch.records:
                return
            if self._send(batch.records):
                return  # still down; the whole batch stays in the spool
            self.spool.commit(batch)

    # -- Kafka --------------------------------------------------------------------------------
    def _connected(self) -> bool:
        """A producer exists, or one could be created now (respecting the back-off)."""
        if self._producer is not None:
            return True
        if self.bootstrap is None or time.monotonic() < self._retry_at:
            return False
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        if not _reachable(self.bootstrap):
            self._down(ConnectionRefusedError(f"{self.bootstrap} unreachable"))
            return False
        try:
            _ensure_topics(self.bootstrap)
            self._producer = KafkaProducer(
                bootstrap_servers=self.bootstrap,
                acks="all",
                retries=0,
                max_in_flight_requests_per_connection=1,
                linger_ms=5,
                max_block_ms=2000,
                # a record not acknowledged in time expires in the producer too, so it cannot be
                # delivered later behind our back while its copy waits in the spool
                request_timeout_ms=int(self.send_timeout_s * 1000),
                delivery_timeout_ms=int(self.send_timeout_s * 1000) + 1000,
                reconnect_backoff_max_ms=1000,
            )
        except (KafkaError, OSError) as exc:
            self._down(exc)
            return False
        self._backoff_s = 0.25
        return True

    def _send(self, records: list[Record]) -> list[Record]:
        """Produce ``records``; returns those not acknowledged, in order (empty: all sent)."""
        from kafka.errors import KafkaError

        futures = []
        try:
            for topic, key, value, *ts in records:
                futures.append(
                    self._producer.send(
                        topic, key=key, value=value, timestamp_ms=ts[0] if ts else None
                    )
                )
            self._producer.flush(timeout=self.send_timeout_s + 2.0)
        except KafkaError as exc:
            self._down(exc)
        failed = [
            rec for rec, fut in zip(records, futures) if not (fut.is_done and fut.succeeded())
        ]
        failed += records[len(futures) :]
        self.stats.sent += len(records) - len(failed)
        if failed and self._producer is not None:
            self._down(RuntimeError(f"{len(failed)} of {len(records)} events not acknowledged"))
        return failed

    def _close_producer(self, timeout_s: float) -> None:
        from kafka.errors import KafkaError

        if self._producer is None:
            return
        try:
            self._producer.close(timeout=timeout_s)
        except KafkaError as exc:  # close() flushes, which times out while the broker is down
            log.debug("producer close: %s", exc)
        self._producer = None

    def _down(self, exc: BaseException) -> None:
        self.stats.send_failures += 1
        log.warning("kafka unavailable (%s); spooling, retry in %.2fs", exc, self._backoff_s)
        self._close_producer(timeout_s=0)
        self._retry_at = time.monotonic() + self._backoff_s
        self._backoff_s = min(self._backoff_s * 2, 5.0)


def _reachable(bootstrap: str, timeout_s: float = 0.5) -> bool:
    """A TCP connect to the first bootstrap server succeeds (cheap; kafka clients wait ~30 s)."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


def _ensure_topics(bootstrap: str) -> None:
    """Create the event topics (a restarted in-memory broker has none)."""
    from ingest.kafka_io import ensure_topics

    ensure_topics(bootstrap)
