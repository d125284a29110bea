"""A simulated user population: sends TRAIN-split tasks to the fleet and emits delayed signals.

``UserSimulator.run_round(n)`` sends ``n`` tasks (``tasks.toy.generate_tasks(..., "train")``)
round-robin over the given URLs (replicas or a router), judges each answer with
``tasks.toy.check``, and lets deploy/signal_policy.py decide the user's reaction. Each signal's
event time is the completion's ``created`` + its delay; it is *sent* to Kafka ``delay / speed``
wall seconds after the answer arrived (``speed=600`` makes ten event-minutes cost one second), by
one scheduler thread. ``drain()`` waits until every scheduled signal has been sent.

Deliberately left out: the signal policy itself (pure, in deploy/signal_policy.py) and reading
anything back from Kafka.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Self

import httpx

from deploy.signal_policy import Outcome, PlannedSignal, SignalPolicy, plan_signals
from ingest.schema import TOPICS, EditPersistence, Feedback, Followup
from runtime.progress import Progress
from tasks.toy import Task, check, generate_tasks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundStats:
    """What one round of traffic looked like, from the users' side."""

    requests: int
    errors: int
    pass_rate: float
    edit_persistence: float
    """Mean edit-persistence score at 600 s."""
    dissatisfied_rate: float
    mean_latency_ms: float
    """Mean client-observed request latency."""
    mean_completion_tokens: float
    signals_scheduled: int


@dataclass(frozen=True)
class _Served:
    task: Task
    response: dict
    latency_ms: float
    arrived: float
    """time.monotonic() when the answer arrived; signals are due relative to it."""


class _SignalScheduler:
    """Sends events at their due wall time, in due order, from one thread.

    Each record's Kafka timestamp is the signal's event time: in simulated time the user acts
    at that moment, and ingest checks event time against the record timestamp (a 600 s signal
    sent one wall second after its completion would otherwise look 599 s in the future).
    """

    def __init__(self, bootstrap: str) -> None:
        from kafka import KafkaProducer

        from ingest.kafka_io import ensure_topics

        ensure_topics(bootstrap)
        self._bootstrap = bootstrap
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        self.failed = 0
        """Signals that could not be sent after every retry (counted, logged)."""
        self._heap: list[tuple[float, int, object]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stop = False
        self._sending = 0
        self.sent = 0
        self._thread = threading.Thread(target=self._run, name="signal-scheduler", daemon=True)
        self._thread.start()

    def schedule(self, due: float, event) -> None:
        with self._cond:
            heapq.heappush(self._heap, (due, next(self._seq), event))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stop and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                if self._stop and not self._heap:
                    return
                _, _, event = heapq.heappop(self._heap)
                self._sending += 1
            self._send(event)
            with self._cond:
                self._sending -= 1
                self.sent += 1
                self._cond.notify_all()

    def _send(self, event, attempts: int = 5) -> None:
        """Send one signal and wait for its ack. A kafka-python producer that lived through a
        restart of the (memory-only) broker times out on every later send (measured against
        Tansu), so a failed send gets a fresh producer and is retried; a copy that did land is
        dropped by ingest's de-duplication on event id."""
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        for _ in range(attempts):
            try:
                self._producer.send(
                    TOPICS[event.kind],
                    key=event.response_id.encode(),
                    value=event.to_json(),
                    timestamp_ms=int(event.event_time.timestamp() * 1000),
                ).get(timeout=10)
                return
            except KafkaError:
                self._producer.close(timeout=0)
                self._producer = KafkaProducer(
                    bootstrap_servers=self._bootstrap, acks="all", linger_ms=5
                )
        self.failed += 1
        log.error("signal %s of %s not sent after %d attempts", event.kind, event.response_id,
                  attempts)

    def drain(self, timeout_s: float | None) -> bool:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self._heap or self._sending:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(0.05 if left is None else min(left, 0.05))
        self._producer.flush()
        return True

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join()
        self._producer.flush()
        self._producer.close()


class UserSimulator:
    """Users sending tasks to ``urls`` and reacting in Kafka; randomness from ``seed``."""

    def __init__(
        self,
        *,
        urls: list[str],
        bootstrap: str,
        speed: float,
        seed: int,
        policy: SignalPolicy | None = None,
        max_tokens: int = 32,
        temperature: float = 1.0,
        n_users: int = 50,
        request_timeout_s: float = 60.0,
    ) -> None:
        if not urls:
            raise ValueError("urls must not be empty")
        if speed <= 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self.urls = list(urls)
        self.speed = speed
        self.seed = seed
        self.policy = policy or SignalPolicy()
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.n_users = n_users
        self._rng = random.Random(seed)
        self._round = 0
        self._client = httpx.Client(timeout=request_timeout_s)
        self._scheduler = _SignalScheduler(bootstrap)

    def run_round(self, n_requests: int, concurrency: int = 4) -> RoundStats:
        """Send ``n_requests`` train tasks with ``concurrency`` callers; schedule their signals."""
        self._round += 1
        tasks = generate_tasks(n_requests, seed=self._rng.randrange(2**31), split="train")
        seeds = [self._rng.randrange(2**31) for _ in tasks]
        users = [f"user-{self._rng.randrange(self.n_users)}" for _ in tasks]
        results = []
        with ThreadPoolExecutor(max_workers=concurrency) as pool, \
                Progress("traffic", total=n_requests, unit="req") as progress:
            for result in pool.map(self._call, range(n_requests), tasks, seeds, users):
                results.append(result)
                progress.update()
        served = [r for r in results if r is not None]
        return self._judge(served, errors=n_requests - len(served))

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until every scheduled signal has been sent; False on timeout."""
        return self._scheduler.drain(timeout_s)

    def close(self) -> None:
        """Send what is still scheduled (waiting for it), then close the producer."""
        self._scheduler.drain(None)
        self._scheduler.close()
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one request --------------------------------------------------------------------------
    def _call(self, i: int, task: Task, seed: int, user: str) -> _Served | None:
        url = self.urls[i % len(self.urls)]
        body = {
            "prompt": task.prompt,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": 1.0,
            "seed": seed,
            "conversation_id": f"conv-{self.seed}-{self._round}-{i}",
            "user_id": user,
            "task_kind": task.kind,
        }
        start = time.perf_counter()
        try:
            resp = self._client.post(f"{url}/v1/completions", json=body)
        except httpx.TransportError:
            return None
        if resp.status_code != 200:
            return None
        return _Served(task, resp.json(), (time.perf_counter() - start) * 1000.0, time.monotonic())

    # -- judging and scheduling ---------------------------------------------------------------
    def _judge(self, served: list[_Served], errors: int) -> RoundStats:
        passed, persist, dissatisfied, scheduled = [], [], [], 0
        for s in served:
            result = check(s.task, s.response["text"])
            outcome = Outcome(
                result.passed,
                result.malformed,
                result.no_edit,
                s.response["latency_ms"],
                s.response["usage"]["output_tokens"],
            )
            plan = plan_signals(outcome, self.policy, self._rng)
            created = datetime.fromisoformat(s.response["created"])
            for signal in plan:
                event = _event(signal, s.response["id"], created)
                self._scheduler.schedule(s.arrived + signal.delay_s / self.speed, event)
            scheduled += len(plan)
            passed.append(result.passed)
            persist.append(next(p.score for p in plan if p.window_s == 600))
            dissatisfied.append(any(p.dissatisfied for p in plan if p.kind == "followup"))
        return RoundStats(
            requests=len(served) + errors,
            errors=errors,
            pass_rate=_mean(passed),
            edit_persistence=_mean(persist),
            dissatisfied_rate=_mean(dissatisfied),
            mean_latency_ms=_mean([s.latency_ms for s in served]),
            mean_completion_tokens=_mean([s.response["usage"]["output_tokens"] for s in served]),
            signals_scheduled=scheduled,
        )


def _mean(values: list) -> float:
    return float(statistics.fmean(values)) if values else 0.0


def _event(signal: PlannedSignal, response_id: str, created: datetime):
    common = {
        "event_id": uuid.uuid4().hex,
        "response_id": response_id,
        "event_time": created + timedelta(seconds=signal.delay_s),
    }
    if signal.kind == "edit_persistence":
        return EditPersistence(**common, window_s=signal.window_s, score=signal.score)
    if signal.kind == "followup":
        return Followup(**common, text=signal.text, dissatisfied=signal.dissatisfied)
    return Feedback(**common, label=signal.label)
