import json
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


ADMIN = {"Authorization": "Bearer router-token"}


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1.5", "-0.1", '"half"'])
def test_a_weight_that_is_not_a_share_is_422_naming_the_field(client, value):
    ok = {**ADMIN, "content-type": "application/json"}
    assert client.put("/admin/weights", json={"canary_weight": 0.25}, headers=ok).status_code == 200
    r = client.put("/admin/weights", content=f'{{"canary_weight": {value}}}', headers=ok)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["param"] == "canary_weight"
    assert client.get("/admin/weights", headers=ADMIN).json() == {"canary_weight": 0.25}


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1",  # unclosed IPv6 literal
        "127.0.0.1:8000",  # no scheme
        "ftp://127.0.0.1:8000",
        "http://:8000",  # no host
        "http://a b:8000",
        "http://\ud800:8000",
        "http://127.0.0.1:99999",
        "http://127.0.0.1:0",
        "http://127.0.0.1:-1",
        "http://127.0.0.1:8000:1",
        "http://127.0.0.1:8000/?q=1",
        "http://127.0.0.1:8000/#top",
        "http://user:pw@127.0.0.1:8000",
        "",
    ],
)
@pytest.mark.parametrize("field", ["stable_urls", "canary_urls"])
def test_groups_with_a_bad_url_are_422_naming_the_field_and_change_nothing(client, url, field):
    body = {"stable_urls": ["http://127.0.0.1:9"], "canary_urls": []}
    body[field] = [url] if field == "stable_urls" else ["http://127.0.0.1:9", url]
    raw = json.dumps(body)  # ASCII, so a lone surrogate travels as its JSON escape
    json_admin = {**ADMIN, "content-type": "application/json"}
    r = client.put("/admin/groups", content=raw, headers=json_admin)
    assert r.status_code == 422, r.text
    expected = "stable_urls.0" if field == "stable_urls" else "canary_urls.1"
    assert r.json()["error"]["param"] == expected
    got = client.get("/admin/groups", headers=ADMIN).json()
    assert got == {"stable_urls": ["http://127.0.0.1:9"], "canary_urls": [], "holdback_urls": []}
    r = client.post("/v1/completions", json={"prompt": "x"}, headers={"X-Conversation-Id": "c"})
    assert r.status_code == 502  # still routed to the stored replica (nothing listens there)


def test_groups_take_http_and_https_urls_by_name_ipv4_or_ipv6(client):
    body = {
        "stable_urls": ["http://127.0.0.1:9", "https://replica-1.example.internal"],
        "canary_urls": ["http://[::1]:8001/", "http://localhost:8002/prefix"],
    }
    r = client.put("/admin/groups", json=body, headers=ADMIN)
    assert r.status_code == 200, r.text
    stored = {
        "stable_urls": ["http://127.0.0.1:9", "https://replica-1.example.internal"],
        "canary_urls": ["http://[::1]:8001", "http://localhost:8002/prefix"],
        "holdback_urls": [],
    }
    assert r.json() == stored  # without a trailing slash: the router appends /v1/...
    assert client.get("/admin/groups", headers=ADMIN).json() == stored


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RATCHET_ROUTER_STABLE_URLS", '["http://[::1"]'),
        ("RATCHET_ROUTER_CANARY_URLS", '["127.0.0.1:8001"]'),
        ("RATCHET_ROUTER_CANARY_WEIGHT", "nan"),
        ("RATCHET_ROUTER_CANARY_WEIGHT", "inf"),
    ],
)
def test_router_settings_refuse_bad_urls_and_weights(monkeypatch, name, value):
    monkeypatch.setenv("RATCHET_ROUTER_STABLE_URLS", '["http://127.0.0.1:1"]')
    monkeypatch.setenv("RATCHET_ROUTER_ADMIN_TOKEN", "t0ken")
    monkeypatch.setenv(name, value)
    field = name.removeprefix("RATCHET_ROUTER_").lower()
    with pytest.raises(ValidationError, match=field):
        RouterSettings()


# -- signals for responses the router does not know (served before it restarted) -------------

REPLICA_TOKEN = "router-unit-replica-admin"


@pytest.fixture
def fleet(tmp_path, live):
    """A stable and a canary replica (no model; one key file) behind a router that has routed
    nothing, as after a restart. The canary served ``cmpl-canary`` to the client ``key``."""
    import httpx

    from deploy.replica.server import create_app
    from deploy.replica.settings import ServerSettings

    def replica(name):
        return create_app(ServerSettings(
            tracking_uri="http://127.0.0.1:9", model_name="m", admin_token=REPLICA_TOKEN,
            replica_id=name, spool_dir=tmp_path / name / "spool",
            cache_dir=tmp_path / name / "cache", api_keys_path=tmp_path / "keys.json",
        ))

    stable, canary = replica("stable-0"), replica("canary-0")
    with live(stable) as stable_url, live(canary) as canary_url:
        r = httpx.post(f"{stable_url}/admin/keys", json={"name": "ide"},
                       headers={"Authorization": f"Bearer {REPLICA_TOKEN}"})
        key = r.json()["key"]
        canary.state.responses.remember(
            "cmpl-canary", text="x = 1\n", created=datetime.now(UTC) - timedelta(seconds=1),
            conversation_id="c", owner=canary.state.api_keys.verify(key),
        )
        router = create_router_app(
            stable_urls=[stable_url], canary_urls=[canary_url], admin_token="router-token"
        )
        with TestClient(router) as client:
            yield client, {"Authorization": f"Bearer {key}"}


def test_a_signal_without_a_key_does_not_make_the_first_replica_its_owner(fleet):
    router, auth = fleet
    feedback = {"response_id": "cmpl-canary", "label": "accept"}
    r = router.post("/v1/feedback", json=feedback)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    r = router.post("/v1/feedback", json=feedback, headers=auth)
    assert r.status_code == 202, r.text  # the canary, which served it, took it
    assert r.json()["response_id"] == "cmpl-canary"
    r = router.post("/v1/feedback", json=feedback, headers=auth)
    assert r.status_code == 409  # and is now remembered as its owner


def test_a_corrected_signal_reaches_the_owner_after_a_422(fleet):
    router, auth = fleet
    r = router.post("/v1/edits", json={"response_id": "cmpl-canary", "window_s": 45, "score": 1},
                    headers=auth)
    assert r.status_code == 422 and r.json()["error"]["param"] == "window_s"
    r = router.post("/v1/edits", json={"response_id": "cmpl-canary", "window_s": 30, "score": 1},
                    headers=auth)
    assert r.status_code == 202, r.text
    assert r.json()["kind"] == "edit_persistence"


def test_a_signal_no_replica_holds_is_404(fleet):
    router, auth = fleet
    r = router.post("/v1/followups", json={"response_id": "cmpl-nope", "text": "hm"},
                    headers=auth)
    assert r.status_code == 404
    r = router.post("/v1/followups", json={"response_id": "cmpl-canary", "text": "hm"},
                    headers=auth)
    assert r.status_code == 202, r.text
