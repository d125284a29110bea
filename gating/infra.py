"""Infra check: the candidate in a real serving process, loaded and queried.

Starts one replica (deploy.fleet.fleet.Fleet, a separate uvicorn process) pinned to the candidate
version, with behaviour logging off (gate traffic must not become training data), sends
``n_requests`` completions from the held-out toy tasks one after another, and gates on
``infra_errors`` (any non-200 or transport error fails) and ``infra_p95_ms`` (p95 request
latency within budget). The replica is stopped by its PID whatever happens.

Deliberately left out: load under concurrency and multi-replica reloads (deploy/ and
bench/serve.py own those).
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import numpy as np

from gating.config import InfraConfig
from gating.records import GateResult


def infra_results(latencies_ms: list[float], errors: int, config: InfraConfig
                  ) -> tuple[list[GateResult], dict[str, float]]:
    """Gates from measured request latencies (successful requests) and the error count."""
    p95 = float(np.percentile(latencies_ms, 95)) if latencies_ms else float("inf")
    total = len(latencies_ms) + errors
    gates = [
        GateResult(name="infra_errors", value=float(errors), threshold=0.0, passed=errors == 0,
                   comparator="<=", detail=f"{errors} of {total} requests failed"),
        GateResult(name="infra_p95_ms", value=p95, threshold=config.p95_budget_ms,
                   passed=bool(latencies_ms) and p95 <= config.p95_budget_ms, comparator="<="),
    ]
    figures = {"infra.requests": float(total), "infra.p95_ms": p95}
    if latencies_ms:
        figures["infra.p50_ms"] = float(np.percentile(latencies_ms, 50))
    return gates, figures


def _query(url: str, config: InfraConfig, seed: int) -> tuple[list[float], int]:
    import httpx

    from tasks.toy import generate_tasks

    tasks = generate_tasks(config.n_requests, seed, "heldout")
    latencies, errors = [], 0
    with httpx.Client(base_url=url, timeout=60.0) as client:
        for i, task in enumerate(tasks):
            body = {"prompt": task.prompt, "max_tokens": config.max_tokens, "temperature": 0.0,
                    "conversation_id": f"gate-{i}", "user_id": "gate", "task_kind": task.kind}
            start = time.perf_counter()
            try:
                ok = client.post("/v1/completions", json=body).status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                latencies.append((time.perf_counter() - start) * 1000.0)
            else:
                errors += 1
    return latencies, errors


def infra_gates(
    *, tracking_uri: str, model_name: str, version: int, config: InfraConfig, workdir: Path,
    seed: int = 0,
) -> tuple[list[GateResult], dict[str, float]]:
    """Serve ``version`` in a real replica and gate on errors and p95 latency."""
    from deploy.fleet.fleet import Fleet

    start = time.perf_counter()
    fleet = Fleet.start(
        n_replicas=1, tracking_uri=tracking_uri, model_name=model_name, bootstrap=None,
        workdir=workdir, admin_token=secrets.token_urlsafe(24), version=version,
        name="gate-infra", ready_timeout_s=config.startup_timeout_s,
        extra_env={"RATCHET_LOG_BEHAVIOUR": "false"},
    )
    try:
        ready_s = time.perf_counter() - start
        latencies, errors = _query(fleet.urls[0], config, seed)
    finally:
        fleet.stop()
    gates, figures = infra_results(latencies, errors, config)
    figures["infra.startup_seconds"] = ready_s
    return gates, figures
