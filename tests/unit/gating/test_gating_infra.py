"""Infra gates from measured latencies and errors (the serving run is in the integration test)."""

from __future__ import annotations

import pytest

from gating.config import InfraConfig
from gating.infra import infra_results


def test_clean_fast_requests_pass():
    gates, figures = infra_results([10.0] * 19 + [50.0], 0, InfraConfig(p95_budget_ms=100.0))
    assert all(g.passed for g in gates)
    assert figures["infra.requests"] == 20
    assert figures["infra.p95_ms"] == pytest.approx(12.0)  # numpy's linear interpolation


def test_an_error_or_a_slow_tail_fails():
    gates, _ = infra_results([10.0] * 9, 1, InfraConfig())
    assert [g.passed for g in gates] == [False, True]
    slow, _ = infra_results([10.0] * 10 + [5000.0] * 2, 0, InfraConfig(p95_budget_ms=100.0))
    assert [g.passed for g in slow] == [True, False]


def test_no_successful_request_fails_latency_too():
    gates, figures = infra_results([], 5, InfraConfig())
    assert not any(g.passed for g in gates)
    assert figures["infra.requests"] == 5
