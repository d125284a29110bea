"""The holdback arm: a fixed share of users stays on the anchor, across promotions and restarts."""

import json

from fastapi.testclient import TestClient

from deploy.fleet.router import (
    RouterSettings,
    create_router_app,
    in_holdback,
    user_bucket,
    user_key,
)

STABLE, CANARY, HOLDBACK = "http://127.0.0.1:9", "http://127.0.0.1:10", "http://127.0.0.1:11"
TOKEN = {"Authorization": "Bearer router-token"}


def test_user_key_prefers_the_user_field_then_the_api_key():
    assert user_key(json.dumps({"user": "u1"}).encode(), "Bearer sk-a") == "user:u1"
    assert user_key(json.dumps({"user_id": "u2"}).encode(), None) == "user:u2"
    assert user_key(b"{}", "Bearer sk-a") == "key:sk-a"
    assert user_key(b"not json", None) is None
    assert not in_holdback(None, 0.5)


def test_holdback_share_is_the_share_of_users_and_independent_of_conversations():
    from deploy.fleet.router import bucket

    users = [f"user:u{i}" for i in range(20_000)]
    held = [u for u in users if in_holdback(u, 0.2)]
    assert 0.19 < len(held) / len(users) < 0.21
    # independent of the conversation split: a fifth of the held-back users would be canaries
    assert 0.17 < sum(bucket(u) < 0.2 for u in held) / len(held) < 0.23
    assert user_bucket("user:u1") == user_bucket("user:u1")


def _arm_counts(client) -> dict[str, int]:
    counts = {}
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("ratchet_router_requests_total"):
            arm = line.split('arm="')[1].split('"')[0]
            counts[arm] = counts.get(arm, 0) + int(line.rsplit(" ", 1)[1])
    return counts


def _arm_of(client, user: str, conversation: str) -> str:
    """The arm a request lands on (its upstream is unreachable: the 502 is counted per arm)."""
    before = _arm_counts(client)
    body = {"prompt": "x", "user": user}
    r = client.post("/v1/completions", json=body, headers={"X-Conversation-Id": conversation})
    assert r.status_code == 502
    after = _arm_counts(client)
    (arm,) = [a for a in after if after[a] != before.get(a, 0)]
    return arm


def _router(weight: float = 0.0):
    return create_router_app(stable_urls=[STABLE], canary_urls=[CANARY], holdback_urls=[HOLDBACK],
                             holdback_share=0.2, admin_token="router-token",
                             canary_weight=weight)


def test_holdback_users_stay_on_the_anchor_across_promotions_and_restarts():
    users = [f"user-{i}" for i in range(60)]
    held = {u for u in users if in_holdback(f"user:{u}", 0.2)}
    assert 4 <= len(held) <= 24
    with TestClient(_router()) as client:
        first = {u: _arm_of(client, u, f"c-{u}-0") for u in users}
        assert {u for u, a in first.items() if a == "holdback"} == held
        # a rollout: the canary gets every conversation, then the stable group is replaced
        client.put("/admin/weights", json={"canary_weight": 1.0}, headers=TOKEN)
        during = {u: _arm_of(client, u, f"c-{u}-1") for u in users}
        assert {u for u, a in during.items() if a == "holdback"} == held
        assert {a for u, a in during.items() if u not in held} == {"canary"}
        groups = client.put("/admin/groups", json={"stable_urls": [CANARY]}, headers=TOKEN)
        assert groups.json()["holdback_urls"] == [HOLDBACK]  # a PUT without it leaves it
        client.put("/admin/weights", json={"canary_weight": 0.0}, headers=TOKEN)
    with TestClient(_router()) as restarted:  # a new process with the same settings
        after = {u: _arm_of(restarted, u, f"c-{u}-2") for u in users}
    assert {u for u, a in after.items() if a == "holdback"} == held


def test_without_holdback_replicas_nobody_is_held_back():
    app = create_router_app(stable_urls=[STABLE], canary_urls=[], admin_token="router-token",
                            holdback_share=0.5)
    with TestClient(app) as client:
        assert {_arm_of(client, f"u{i}", f"c{i}") for i in range(20)} == {"stable"}
        assert "ratchet_router_holdback_share 0" in client.get("/metrics").text


def test_settings_default_share_is_five_percent(monkeypatch):
    monkeypatch.setenv("RATCHET_ROUTER_STABLE_URLS", json.dumps([STABLE]))
    monkeypatch.setenv("RATCHET_ROUTER_HOLDBACK_URLS", json.dumps([HOLDBACK]))
    monkeypatch.setenv("RATCHET_ROUTER_LOCAL_MODE", "true")
    settings = RouterSettings()
    assert settings.holdback_share == 0.05 and settings.holdback_urls == [HOLDBACK]
