from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from deploy.fleet.router import RequestLedger, RouterSettings, bucket, choose_arm, create_router_app

IDS = [f"conv-{i}" for i in range(10_000)]


def test_bucket_is_stable_and_uniform():
    assert bucket("abc") == bucket("abc")
    share = sum(bucket(c) < 0.25 for c in IDS) / len(IDS)
    assert 0.23 < share < 0.27


def test_raising_the_weight_never_moves_a_canary_conversation_back():
    weights = (0.1, 0.25, 0.5, 1.0)
    for c in IDS[:2000]:
        arms = [choose_arm(c, w) for w in weights]
        first = arms.index("canary")  # 1.0 puts everyone on canary
        assert all(a == "canary" for a in arms[first:])
    assert all(choose_arm(c, 0.0) == "stable" for c in IDS[:2000])


def test_ledger_window_counts_per_arm():
    ledger = RequestLedger()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    ledger.record(t0, "stable", True, 10.0)
    ledger.record(t0 + timedelta(seconds=1), "canary", False, 20.0)
    ledger.record(t0 + timedelta(seconds=5), "canary", True, 30.0)
    got = ledger.serving(t0, t0 + timedelta(seconds=5))
    assert (got["stable"].requests, got["stable"].errors) == (1, 0)
    assert (got["canary"].requests, got["canary"].errors, got["canary"].latencies_ms) == (
        1,
        1,
        [20.0],
    )


@pytest.fixture
def client():
    app = create_router_app(
        stable_urls=["http://127.0.0.1:9"],
        canary_urls=[],
        admin_token="router-token",
        max_body_bytes=1024,
    )
    with TestClient(app) as c:
        yield c


def test_router_admin_needs_token(client):
    assert client.put("/admin/weights", json={"canary_weight": 0.5}).status_code == 401
    bad = {"Authorization": "Bearer nope"}
    assert client.put("/admin/weights", json={"canary_weight": 0.5}, headers=bad).status_code == 403
    ok = {"Authorization": "Bearer router-token"}
    assert client.put("/admin/weights", json={"canary_weight": 0.5}, headers=ok).status_code == 200
    assert client.get("/admin/weights", headers=ok).json() == {"canary_weight": 0.5}
    assert client.put("/admin/weights", json={"canary_weight": 1.5}, headers=ok).status_code == 422


def test_router_limits_and_upstream_errors(client):
    big = {"conversation_id": "c", "prompt": "x" * 2000}
    r = client.post("/v1/completions", json=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    r = client.post("/v1/completions", json={"conversation_id": "c", "prompt": "x"})
    assert r.status_code == 502  # nothing listens on port 9: counted as a stable error
    # no conversation id anywhere: the router makes one up instead of refusing the request
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 502
    r = client.post("/v1/completions", json={"prompt": "x"}, headers={"X-Conversation-Id": "h"})
    assert r.status_code == 502
    assert (
        'ratchet_router_requests_total{arm="stable",status="502"} 3' in client.get("/metrics").text
    )


def test_router_settings_refuse_default_token(monkeypatch):
    monkeypatch.setenv("RATCHET_ROUTER_STABLE_URLS", '["http://127.0.0.1:1"]')
    with pytest.raises(ValidationError, match="admin_token is the default"):
        RouterSettings()
    monkeypatch.setenv("RATCHET_ROUTER_ADMIN_TOKEN", "t0ken")
    assert RouterSettings().stable_urls == ["http://127.0.0.1:1"]
