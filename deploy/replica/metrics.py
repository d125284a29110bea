"""Prometheus metrics of one replica, in a registry owned by the app (no global state).

Requests and errors per route and status, a latency histogram, prompt/completion tokens,
behaviour-log counters (sent, spooled, dropped), spool and queue depth, and the served model
version. ``MetricsMiddleware`` times every HTTP request as a pure ASGI middleware.

Deliberately left out: scraping and alerting (a Prometheus server's job).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from deploy.replica.behaviour_log import BehaviourLogger
    from deploy.replica.model_host import ModelHost

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _LiveCollector(Collector):
    """Reads the logger and the model host at scrape time."""

    def __init__(self, logger: BehaviourLogger | None, host: ModelHost, replica: str) -> None:
        self.logger, self.host, self.replica = logger, host, replica

    def collect(self):
        current = self.host.current
        version = GaugeMetricFamily(
            "ratchet_model_version",
            "Registry version served (0 while loading).",
            labels=["replica"],
        )
        version.add_metric([self.replica], current.version if current else 0)
        yield version
        failed = GaugeMetricFamily(
            "ratchet_model_load_failed",
            "1 while the last load or reload failed (the error is in /readyz).",
            labels=["replica"],
        )
        failed.add_metric([self.replica], 1 if self.host.load_error else 0)
        yield failed
        if self.logger is None:
            return
        s = self.logger.stats
        depth = GaugeMetricFamily("ratchet_spool_depth", "Events waiting in the on-disk spool.")
        depth.add_metric([], self.logger.spool_depth)
        yield depth
        qdepth = GaugeMetricFamily("ratchet_log_queue_depth", "Events in the in-memory queue.")
        qdepth.add_metric([], self.logger.queue_depth)
        yield qdepth
        events = CounterMetricFamily(
            "ratchet_behaviour_events", "Behaviour-log events by outcome.", labels=["outcome"]
        )
        for outcome, value in (
            ("submitted", s.submitted),
            ("sent", s.sent),
            ("spooled", s.spooled),
            ("dropped_queue_full", s.dropped_queue_full),
            ("dropped_spool_full", s.dropped_spool_full),
        ):
            events.add_metric([outcome], value)
        yield events


class ServerMetrics:
    """All metrics of one app, in their own ``CollectorRegistry``."""

    def __init__(self, *, replica: str) -> None:
        self.replica = replica
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "ratchet_requests", "HTTP requests.", ["route", "status"], registry=r
        )
        self.errors = Counter(
            "ratchet_request_errors", "HTTP requests answered 5xx.", ["route"], registry=r
        )
        self.latency = Histogram(
            "ratchet_request_latency_seconds",
            "HTTP request latency.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter("ratchet_prompt_tokens", "Prompt tokens.", registry=r)
        self.completion_tokens = Counter(
            "ratchet_completion_tokens", "Generated tokens.", registry=r
        )
        self.log_errors = Counter(
            "ratchet_behaviour_log_errors",
            "Completions whose event could not be built.",
            registry=r,
        )
        self.reloads = Counter("ratchet_model_reloads", "Model reloads.", ["result"], registry=r)
        self.signals = Counter(
            "ratchet_signals", "Signals API calls by kind and result.", ["kind", "result"],
            registry=r,
        )

    def attach(self, logger: BehaviourLogger | None, host: ModelHost) -> None:
        self.registry.register(_LiveCollector(logger, host, self.replica))


class MetricsMiddleware:
    """Pure ASGI middleware: counts and times each request by route template and status."""

    def __init__(self, app, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            name = getattr(route, "path", "unmatched")
            self.metrics.requests.labels(name, str(status["code"])).inc()
            if status["code"] >= 500:
                self.metrics.errors.labels(name).inc()
            self.metrics.latency.labels(name).observe(time.perf_counter() - start)
