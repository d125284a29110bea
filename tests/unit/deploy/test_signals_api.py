"""The signals API on a replica app without a model or broker: auth, validation, lookups and the
events it queues (read back from the replica's on-disk spool, where they wait while Kafka is
absent). The Kafka write itself is tested against the real broker in
tests/integration/test_serve_signals.py."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from deploy.replica.server import create_app
from deploy.replica.settings import ServerSettings
from deploy.replica.spool import Spool
from ingest.schema import TOPICS, parse_event

TOKEN = "unit-test-admin-token"
SERVED = "def add(a, b):\n    return a + b\n"


@pytest.fixture
def app(tmp_path):
    settings = ServerSettings(
        tracking_uri="http://127.0.0.1:9",
        model_name="m",
        admin_token=TOKEN,
        spool_dir=tmp_path / "spool",
        cache_dir=tmp_path / "cache",
        api_keys_path=tmp_path / "keys.json",
        max_body_bytes=4096,
    )
    return create_app(settings)


@pytest.fixture
def client(app):
    with TestClient(app) as c:
        yield c


@pytest.fixture
def key(client):
    admin = {"Authorization": f"Bearer {TOKEN}"}
    r = client.post("/admin/keys", json={"name": "ide"}, headers=admin)
    assert r.status_code == 201
    return r.json()["key"]


def _serve(app, rid="cmpl-1", created=None):
    created = created or datetime.now(UTC) - timedelta(seconds=1)
    app.state.responses.remember(rid, text=SERVED, created=created, conversation_id="c")
    return created


def _auth(key):
    return {"Authorization": f"Bearer {key}"}


def _spooled(app, n):
    logger = app.state.behaviour_logger
    deadline = datetime.now(UTC) + timedelta(seconds=5)
    while logger.spool_depth < n and datetime.now(UTC) < deadline:
        pass
    spool = Spool(logger.spool.directory, max_bytes=1 << 20)
    return spool.peek(100).records


def test_missing_wrong_and_admin_keys_are_401(client, app, key):
    _serve(app)
    body = {"response_id": "cmpl-1", "label": "accept"}
    assert client.post("/v1/feedback", json=body).status_code == 401
    r = client.post("/v1/feedback", json=body, headers=_auth(key[:-2] + "xx"))
    assert r.status_code == 401 and "unknown API key" in r.text
    r = client.post("/v1/feedback", json=body, headers=_auth(TOKEN))  # admin token is not a key
    assert r.status_code == 401 and "malformed" in r.text
    assert client.post("/v1/feedback", json=body, headers=_auth(key)).status_code == 202


def test_revoked_key_is_refused(client, app, key):
    _serve(app)
    key_id = key.split("_")[1]
    admin = {"Authorization": f"Bearer {TOKEN}"}
    assert client.delete(f"/admin/keys/{key_id}", headers=admin).status_code == 204
    r = client.post("/v1/feedback", json={"response_id": "cmpl-1", "label": "accept"},
                    headers=_auth(key))
    assert r.status_code == 401 and "revoked" in r.text
    listed = client.get("/admin/keys", headers=admin).json()
    assert listed[0]["key_id"] == key_id and listed[0]["revoked_at"] is not None
    assert "hash" not in listed[0] and "salt" not in listed[0]
    assert client.delete("/admin/keys/nope", headers=admin).status_code == 404
    assert client.post("/admin/keys", json={"name": "x"}, headers=_auth(key)).status_code == 403


def test_key_is_stored_hashed(app, client, key):
    stored = app.state.settings.api_keys_path.read_text()
    secret = key.split("_", 2)[2]
    assert secret not in stored and key not in stored
    assert (app.state.settings.api_keys_path.stat().st_mode & 0o777) == 0o600


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/feedback", {"response_id": "cmpl-1", "label": "meh"}, "label"),
        ("/v1/feedback", {"response_id": "cmpl-1", "label": "accept", "rating": 9}, "rating"),
        ("/v1/feedback", {"label": "accept"}, "response_id"),
        ("/v1/edits", {"response_id": "cmpl-1", "window_s": 45, "score": 0.5}, "window_s"),
        ("/v1/edits", {"response_id": "cmpl-1", "window_s": 30, "score": 1.5}, "score"),
        ("/v1/edits", {"response_id": "cmpl-1", "window_s": 30}, "exactly one of text, score"),
        ("/v1/followups", {"response_id": "cmpl-1", "text": ""}, "text"),
        ("/v1/followups", {"response_id": "cmpl-1", "text": "x", "extra": 1}, "extra"),
        ("/v1/feedback",
         {"response_id": "cmpl-1", "label": "accept", "created": "2026-01-01T00:00"}, "created"),
    ],
)
def test_bad_bodies_are_422_naming_the_field(client, app, key, path, body, field):
    _serve(app)
    r = client.post(path, json=body, headers=_auth(key))
    assert r.status_code == 422, r.text
    assert field in r.text


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"response_id": "cmpl-1", "window_s": 30, "score": NaN}', "score"),
        ('{"response_id": "cmpl-1", "window_s": 30, "score": Infinity}', "score"),
        ('{"response_id": "cmpl-1", "window_s": 30, "text": "a\\ud800b"}', "text"),
        ('{"response_id": "cmpl-1", "text": "\\udfff"}', "text"),
    ],
)
def test_non_finite_and_lone_surrogates_are_422(client, app, key, raw, field):
    _serve(app)
    path = "/v1/edits" if "window_s" in raw else "/v1/followups"
    headers = {**_auth(key), "content-type": "application/json"}
    r = client.post(path, content=raw, headers=headers)
    assert r.status_code == 422 and field in r.text, r.text


def test_unknown_duplicate_and_oversized(client, app, key):
    _serve(app)
    r = client.post("/v1/followups", json={"response_id": "cmpl-nope", "text": "hi"},
                    headers=_auth(key))
    assert r.status_code == 404 and "cmpl-nope" in r.text
    body = {"response_id": "cmpl-1", "window_s": 30, "score": 0.5}
    assert client.post("/v1/edits", json=body, headers=_auth(key)).status_code == 202
    r = client.post("/v1/edits", json=body, headers=_auth(key))
    assert r.status_code == 409 and "window_s=30" in r.text
    assert client.post("/v1/edits", json={**body, "window_s": 120},
                       headers=_auth(key)).status_code == 202
    r = client.post("/v1/followups", json={"response_id": "cmpl-1", "text": "x" * 5000},
                    headers=_auth(key))
    assert r.status_code == 413


def test_expired_response_is_404(client, app, key):
    _serve(app, created=datetime.now(UTC) - timedelta(hours=2))
    r = client.post("/v1/feedback", json={"response_id": "cmpl-1", "label": "accept"},
                    headers=_auth(key))
    assert r.status_code == 404


def test_created_is_bounded(client, app, key):
    served_at = _serve(app)
    far = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    r = client.post("/v1/feedback", json={"response_id": "cmpl-1", "label": "accept",
                                          "created": far}, headers=_auth(key))
    assert r.status_code == 422 and "created" in r.text
    before = (served_at - timedelta(seconds=5)).isoformat()  # more than the 1 s grain
    r = client.post("/v1/feedback", json={"response_id": "cmpl-1", "label": "accept",
                                          "created": before}, headers=_auth(key))
    assert r.status_code == 422 and "precedes" in r.text
    ok = (served_at + timedelta(seconds=30)).isoformat()
    r = client.post("/v1/feedback", json={"response_id": "cmpl-1", "label": "accept",
                                          "created": ok}, headers=_auth(key))
    assert r.status_code == 202
    assert datetime.fromisoformat(r.json()["event_time"]) == served_at + timedelta(seconds=30)


def test_events_are_queued_with_persistence_and_event_time_stamp(client, app, key):
    served_at = _serve(app)
    edited = SERVED.replace("a + b", "b + a")
    r = client.post("/v1/edits", json={"response_id": "cmpl-1", "window_s": 600, "text": edited},
                    headers=_auth(key))
    assert r.status_code == 202
    from rapidfuzz.distance import Levenshtein

    code, now = SERVED.strip(), edited.strip()  # the code, without the blank space around it
    expected = 1 - Levenshtein.distance(code, now) / max(len(code), len(now))
    assert r.json()["score"] == pytest.approx(expected) and 0.8 < expected < 1.0
    assert client.post("/v1/followups", json={"response_id": "cmpl-1", "text": "still wrong",
                                              "dissatisfied": True},
                       headers=_auth(key)).status_code == 202
    created = (served_at + timedelta(seconds=3)).isoformat()
    assert client.post("/v1/feedback", json={"response_id": "cmpl-1", "label": "reject",
                                             "rating": 2, "comment": "nope", "created": created},
                       headers=_auth(key)).status_code == 202
    records = _spooled(app, 3)
    assert [r[0] for r in records] == [
        TOPICS["edit_persistence"], TOPICS["followup"], TOPICS["feedback"]
    ]
    events = [parse_event(r[2]) for r in records]
    assert events[0].score == pytest.approx(expected) and events[0].window_s == 600
    assert events[1].text == "still wrong" and events[1].dissatisfied is True
    assert (events[2].label, events[2].rating, events[2].comment) == ("reject", 2, "nope")
    for rec, event in zip(records, events):
        assert rec[1] == b"cmpl-1"
        assert rec[3] == int(event.event_time.timestamp() * 1000)  # Kafka timestamp = event time
    assert json.loads(records[2][2])["event_time"].startswith(created[:19])
    text = client.get("/metrics").text
    assert 'ratchet_signals_total{kind="feedback",result="accepted"} 1.0' in text


def test_persistence_is_measured_over_the_code_not_the_prose(client, app, key):
    created = datetime.now(UTC) - timedelta(seconds=1)
    padded = "Sure! " * 50 + f"```python\n{SERVED}```" + "\nHope this helps." * 20
    app.state.responses.remember("cmpl-pad", text=padded, created=created, conversation_id="c")
    _serve(app)
    edited = SERVED.replace("a + b", "b + a")
    scores = [client.post("/v1/edits", json={"response_id": rid, "window_s": 30, "text": edited},
                          headers=_auth(key)).json()["score"] for rid in ("cmpl-pad", "cmpl-1")]
    assert scores[0] == pytest.approx(scores[1]) and scores[0] < 0.95  # padding earns nothing


def test_an_answer_without_code_has_no_persistence_to_report(client, app, key):
    created = datetime.now(UTC) - timedelta(seconds=1)
    app.state.responses.remember("cmpl-empty", text="  ", created=created, conversation_id="c")
    for body in ({"score": 0.9}, {"text": "anything"}):
        r = client.post("/v1/edits", json={"response_id": "cmpl-empty", "window_s": 30, **body},
                        headers=_auth(key))
        assert r.status_code == 422 and "holds no code" in r.text  # not a 409: claim released


def test_only_answers_after_the_lookup_say_the_response_is_known(client, app, key):
    admin = {"Authorization": f"Bearer {TOKEN}"}
    other = client.post("/admin/keys", json={"name": "someone else"}, headers=admin).json()["key"]
    created = datetime.now(UTC) - timedelta(seconds=1)
    app.state.responses.remember("cmpl-1", text=SERVED, created=created, conversation_id="c",
                                 owner=app.state.api_keys.verify(key))
    feedback = {"response_id": "cmpl-1", "label": "accept"}
    far = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    before_lookup = [
        client.post("/v1/feedback", json=feedback),
        client.post("/v1/feedback", json={**feedback, "label": "meh"}, headers=_auth(key)),
        client.post("/v1/feedback", json={**feedback, "response_id": "cmpl-2"},
                    headers=_auth(key)),
        client.post("/v1/feedback", json=feedback, headers=_auth(other)),  # not theirs
    ]
    assert [r.status_code for r in before_lookup] == [401, 422, 404, 404]
    assert all("x-ratchet-response-known" not in r.headers for r in before_lookup)
    after_lookup = [
        client.post("/v1/followups", json={"response_id": "cmpl-1", "text": "hm", "created": far},
                    headers=_auth(key)),
        client.post("/v1/feedback", json=feedback, headers=_auth(key)),
        client.post("/v1/feedback", json=feedback, headers=_auth(key)),
    ]
    assert [r.status_code for r in after_lookup] == [422, 202, 409]
    assert all(r.headers["x-ratchet-response-known"] == "1" for r in after_lookup)
