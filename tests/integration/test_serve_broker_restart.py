"""Kafka goes away and comes back: no request fails, no behaviour event is lost or duplicated.

The test runs its own Tansu broker on a fixed port so it can stop and restart it. Tansu keeps
topics in memory, so the events delivered before the outage are read (as ingest would) before the
broker is stopped; count in = requests answered, count out = events read before + after.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from deploy.fleet.fleet import Fleet
from deploy.replica.toy_models import register_untrained
from ingest.kafka_io import high_watermarks, read_range
from ingest.schema import TOPICS, parse_event
from runtime.services import free_port, stop_pid, tansu_binary

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOKEN = "restart-test-token"


class FixedPortBroker:
    """Tansu on a port that survives a restart; stopped by its PID."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        with open(self.workdir / "tansu.log", "ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(tansu_binary()),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                high_watermarks(self.bootstrap, "probe", timeout_s=1)
                return
            except Exception:  # noqa: BLE001 — any failure means "not up yet"
                time.sleep(0.1)
        raise TimeoutError("tansu did not come up")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_pid(self.proc.pid, timeout_s=5)
            self.proc.wait(timeout=10)


def metric(url: str, name: str, labels: str = "") -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    match = re.search(rf"^{re.escape(name + labels)} ([0-9.e+-]+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def read_completions(bootstrap: str) -> dict[int, list]:
    """Every completion event in the topic, per partition in offset order."""
    topic = TOPICS["completion"]
    return {
        p: [parse_event(v) for _, _, v, _ in read_range(bootstrap, topic, p, 0, hw)]
        for p, hw in high_watermarks(bootstrap, topic).items()
    }


def test_broker_restart_loses_no_event(mlflow_server, tmp_path):
    name = f"deploy-restart-{uuid.uuid4().hex[:6]}"
    version = register_untrained(mlflow_server.uri, name, seed=3, workdir=tmp_path)
    broker = FixedPortBroker(tmp_path)
    broker.start()
    fleet = None
    try:
        fleet = Fleet.start(
            n_replicas=1,
            tracking_uri=mlflow_server.uri,
            model_name=name,
            version=version,
            bootstrap=broker.bootstrap,
            workdir=tmp_path / "fleet",
            admin_token=TOKEN,
        )
        url = fleet.urls[0]
        _run_outage(url, broker, fleet)
    finally:
        if fleet is not None:
            fleet.stop()
        broker.stop()


def _send(url: str, n: int, tag: str) -> list[str]:
    ids = []
    for i in range(n):
        r = httpx.post(
            f"{url}/v1/completions",
            timeout=30,
            json={
                "prompt": "# evaluate\n3+4 = ",
                "max_tokens": 4,
                "seed": i,
                "conversation_id": f"{tag}-{i}",
                "user_id": "u",
                "task_kind": "arith",
            },
        )
        assert r.status_code == 200, r.text  # no request fails, whatever Kafka does
        ids.append(r.json()["id"])
    return ids


def _run_outage(url: str, broker: FixedPortBroker, fleet: Fleet) -> None:
    sent = 'ratchet_behaviour_events_total{outcome="sent"}'
    before = _send(url, 10, "before")
    wait_for(lambda: metric(url, sent) == 10, 30, "the first 10 events to be sent")
    delivered = [e for part in read_completions(broker.bootstrap).values() for e in part]
    assert {e.response_id for e in delivered} == set(before)

    broker.stop()
    during = _send(url, 15, "during")
    wait_for(lambda: metric(url, "ratchet_spool_depth") == 15, 30, "15 events in the spool")

    broker.start()  # same port, empty (Tansu keeps topics in memory)
    after = _send(url, 10, "after")
    wait_for(
        lambda: metric(url, sent) == 35 and metric(url, "ratchet_spool_depth") == 0,
        60,
        "the spool to drain",
    )

    parts = read_completions(broker.bootstrap)
    delivered += [e for part in parts.values() for e in part]
    ids = [e.response_id for e in delivered]
    assert len(ids) == len(set(ids)) == 35  # count in == count out, no duplicate
    assert set(ids) == set(before + during + after)
    for events in parts.values():  # re-sent in order: spooled events first, in request order
        times = [e.event_time for e in events]
        assert times == sorted(times)
    dropped = metric(url, "ratchet_behaviour_events_total", '{outcome="dropped_spool_full"}')
    assert dropped == 0
    assert fleet.versions() == {"replica-0": fleet_version(parts)}


def fleet_version(parts: dict[int, list]) -> int:
    versions = {e.model_version for events in parts.values() for e in events}
    assert len(versions) == 1
    return versions.pop()
