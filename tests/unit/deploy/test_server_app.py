"""The replica app without a model: auth, limits, readiness and metrics (no services needed)."""

import time

import pytest
from fastapi.testclient import TestClient

from deploy.replica.behaviour_log import BehaviourLogger
from deploy.replica.server import create_app
from deploy.replica.settings import ServerSettings
from deploy.replica.spool import Spool

TOKEN = "unit-test-admin-token"


@pytest.fixture
def client(tmp_path):
    settings = ServerSettings(
        tracking_uri="http://127.0.0.1:9",
        model_name="m",
        admin_token=TOKEN,
        spool_dir=tmp_path / "spool",
        cache_dir=tmp_path / "cache",
        max_body_bytes=2048,
    )
    with TestClient(create_app(settings)) as c:
        yield c


BODY = {"model": "m", "prompt": "1+1 = ", "user": "u"}


def test_admin_needs_the_bearer_token(client):
    assert client.post("/admin/reload", json={"version": 1}).status_code == 401
    wrong = {"Authorization": "Bearer not-the-token"}
    assert client.post("/admin/reload", json={"version": 1}, headers=wrong).status_code == 403
    basic = {"Authorization": "Basic dXNlcjpwYXNz"}
    assert client.post("/admin/reload", json={"version": 1}, headers=basic).status_code == 401


def test_not_ready_until_a_model_is_loaded(client):
    assert client.get("/healthz").status_code == 200
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json()["version"] is None
    r = client.post("/v1/completions", json=BODY)
    assert r.status_code == 503 and r.json()["error"]["code"] == "model_not_ready"


def test_body_size_limit(client):
    big = {**BODY, "prompt": "x" * 4000}
    assert client.post("/v1/completions", json=big).status_code == 413

    def chunks():
        for _ in range(10):
            yield b"x" * 1000

    assert (
        client.post(
            "/v1/completions", content=chunks(), headers={"content-type": "application/json"}
        ).status_code
        == 413
    )


def test_request_validation_names_the_field(client):
    r = client.post("/v1/completions", json={**BODY, "temperature": -1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"
    r = client.post("/v1/completions", json={**BODY, "max_tokens": 100000})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"


def test_metrics_are_prometheus_text(client):
    client.get("/readyz")
    text = client.get("/metrics").text
    assert 'ratchet_requests_total{route="/readyz",status="503"} 1.0' in text
    assert 'ratchet_model_version{replica="replica-0"} 0.0' in text
    assert "ratchet_spool_depth 0.0" in text
    assert "ratchet_request_latency_seconds_bucket" in text


class _Event:
    def __init__(self, i):
        self.i = i

    def to_json(self):
        return f'{{"i": {self.i}}}'.encode()


def test_logger_without_kafka_spools_in_order(tmp_path):
    logger = BehaviourLogger(bootstrap=None, spool=Spool(tmp_path, max_bytes=1 << 20))
    for i in range(25):
        assert logger.submit("t", f"k{i}", _Event(i))
    deadline = time.monotonic() + 5
    while logger.spool_depth < 25 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert logger.spool_depth == 25
    assert not logger.flush(timeout_s=0.2)  # nothing can reach Kafka
    logger.close()
    values = [v for _, _, v in Spool(tmp_path, max_bytes=1 << 20).peek(100).records]
    assert values == [f'{{"i": {i}}}'.encode() for i in range(25)]
