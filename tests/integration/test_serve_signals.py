"""The signals API against real services: a replica behind the router, a real broker and MLflow.

Signals posted through the router reach the replica that served the response and land in Kafka
as schema events whose record timestamp is their event time. Reloads to a missing version (404),
to NaN weights or to mis-shaped weights (422) are refused while the old version keeps serving, and
the error shows in /readyz and /metrics; a replica pinned to a mis-shaped version says why it is
not ready.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timedelta

import httpx
import pytest
from mlflow import MlflowClient
from safetensors.torch import load_file, save_file

from deploy.fleet.fleet import Fleet, RouterProcess, _spawn
from deploy.replica.toy_models import build_untrained
from ingest.kafka_io import high_watermarks, read_range
from ingest.schema import TOPICS, parse_event
from runtime.services import stop_child

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOKEN = "signals-test-admin-token"


def _register(tracking_uri, name, directory, seed, corrupt=None):
    import mlflow

    from policy.toy.checkpoint import save_checkpoint
    from runtime import registry

    ckpt = save_checkpoint(build_untrained(seed), directory / f"seed{seed}-{corrupt}", metadata={})
    if corrupt == "nan":
        tensors = load_file(str(ckpt / "model.safetensors"))
        name0 = sorted(tensors)[0]
        tensors[name0] = tensors[name0].clone()
        tensors[name0].view(-1)[0] = float("nan")
        save_file(tensors, str(ckpt / "model.safetensors"))
    elif corrupt == "shape":
        config = json.loads((ckpt / "config.json").read_text())
        config["d_model"] *= 2
        (ckpt / "config.json").write_text(json.dumps(config))
    mlflow.set_tracking_uri(tracking_uri)
    with mlflow.start_run(run_name=f"signals-{corrupt}"):
        return registry.log_checkpoint(ckpt, model_name=name).version


@pytest.fixture(scope="module")
def setup(mlflow_server, broker, tmp_path_factory):
    from runtime import registry

    work = tmp_path_factory.mktemp("signals")
    name = f"signals-{uuid.uuid4().hex[:6]}"
    good = _register(mlflow_server.uri, name, work, 1)
    nan = _register(mlflow_server.uri, name, work, 2, "nan")
    shape = _register(mlflow_server.uri, name, work, 3, "shape")
    lost = _register(mlflow_server.uri, name, work, 4)  # then its config.json goes missing
    source = MlflowClient(mlflow_server.uri).get_model_version(name, str(lost)).source
    for path in (mlflow_server.workdir / "artifacts").rglob("config.json"):
        if f"/{source.removeprefix('models:/')}/" in str(path):
            path.unlink()
    registry.set_alias(mlflow_server.uri, name, registry.CHAMPION, good)
    with (
        Fleet.start(n_replicas=1, tracking_uri=mlflow_server.uri, model_name=name,
                    bootstrap=broker.bootstrap, workdir=work / "fleet", admin_token=TOKEN) as fleet,
        RouterProcess.start(stable_urls=fleet.urls, canary_urls=[], admin_token=TOKEN,
                            workdir=work / "router") as router,
    ):
        yield dict(name=name, good=good, nan=nan, shape=shape, lost=lost, fleet=fleet,
                   router=router,
                   work=work, key=fleet.create_api_key("signals-test"))


def _complete(url: str, conv: str) -> dict:
    body = {"prompt": "# evaluate\n4+4 = ", "max_tokens": 8, "temperature": 1.0, "seed": 3,
            "conversation_id": conv, "user_id": "u", "task_kind": "arith"}
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    if r.status_code != 200:  # the OpenAI-shaped gateway (400 or 422 for the legacy body)
        r = httpx.post(f"{url}/v1/completions", timeout=60, headers={"x-conversation-id": conv},
                       json={"prompt": body["prompt"], "max_tokens": 8})
    assert r.status_code == 200, r.text
    return r.json()


def _text(resp: dict) -> str:
    return resp["text"] if "text" in resp else resp["choices"][0]["text"]


def _events(bootstrap: str, kind: str, response_id: str, expect: int) -> list[tuple]:
    deadline = time.monotonic() + 30
    while True:
        out = []
        for part, hw in high_watermarks(bootstrap, TOPICS[kind]).items():
            for _, _, value, ts in read_range(bootstrap, TOPICS[kind], part, 0, hw):
                try:
                    event = parse_event(value)
                except ValueError:
                    continue
                if event.response_id == response_id:
                    out.append((event, ts))
        if len(out) >= expect or time.monotonic() > deadline:
            return out
        time.sleep(0.3)


def test_signals_through_the_router_land_in_kafka(setup, broker):
    router, key = setup["router"], setup["key"]
    auth = {"Authorization": f"Bearer {key}"}
    resp = _complete(router.url, "sig-conv-1")
    rid, text = resp["id"], _text(resp)
    edited = text[: len(text) // 2] + "## rewritten ##"
    r = httpx.post(f"{router.url}/v1/edits", headers=auth, timeout=30,
                   json={"response_id": rid, "window_s": 30, "text": edited})
    assert r.status_code == 202, r.text
    from rapidfuzz.distance import Levenshtein

    assert r.json()["score"] == pytest.approx(Levenshtein.normalized_similarity(text, edited))
    r = httpx.post(f"{router.url}/v1/edits", headers=auth, timeout=30,
                   json={"response_id": rid, "window_s": 30, "text": edited})
    assert r.status_code == 409
    later = datetime.fromisoformat(_created(resp)) + timedelta(seconds=20)
    r = httpx.post(f"{router.url}/v1/followups", headers=auth, timeout=30,
                   json={"response_id": rid, "text": "still the same error", "created":
                         later.isoformat()})
    assert r.status_code == 202, r.text
    r = httpx.post(f"{router.url}/v1/feedback", headers=auth, timeout=30,
                   json={"response_id": rid, "label": "reject"})
    assert r.status_code == 202
    assert httpx.post(f"{router.url}/v1/feedback", timeout=30,
                      json={"response_id": rid, "label": "reject"}).status_code == 401
    assert httpx.post(f"{router.url}/v1/feedback", headers=auth, timeout=30,
                      json={"response_id": "cmpl-unknown", "label": "reject"}).status_code == 404
    for kind in ("edit_persistence", "followup", "feedback"):
        [(event, ts)] = _events(broker.bootstrap, kind, rid, expect=1)
        assert ts == int(event.event_time.timestamp() * 1000)
    [(followup, _)] = _events(broker.bootstrap, "followup", rid, expect=1)
    assert followup.event_time == later and followup.text == "still the same error"


def test_openai_client_posts_a_signal_the_router_never_saw_served(setup, broker):
    """The README's snippet; the router learns the owner by asking the replicas."""
    import openai

    direct = _complete(setup["fleet"].urls[0], "sig-conv-2")  # not through the router
    client = openai.OpenAI(base_url=f"{setup['router'].url}/v1", api_key=setup["key"])
    body = {"response_id": direct["id"], "window_s": 600, "score": 0.25}
    out = client.post("/edits", body=body, cast_to=httpx.Response).json()
    assert out["kind"] == "edit_persistence" and out["score"] == 0.25
    with pytest.raises(openai.ConflictError):
        client.post("/edits", body=body, cast_to=httpx.Response)
    bad = openai.OpenAI(base_url=f"{setup['router'].url}/v1", api_key="rk_0_nope")
    with pytest.raises(openai.AuthenticationError):
        bad.post("/feedback", body={"response_id": direct["id"], "label": "accept"},
                 cast_to=httpx.Response)
    [(event, _)] = _events(broker.bootstrap, "edit_persistence", direct["id"], expect=1)
    assert event.score == 0.25 and event.window_s == 600


def _created(resp: dict) -> str:
    created = resp["created"]
    if isinstance(created, int | float):
        from datetime import UTC

        return datetime.fromtimestamp(created, UTC).isoformat()
    return created


def _reload(url: str, version: int) -> httpx.Response:
    return httpx.post(f"{url}/admin/reload", json={"version": version}, timeout=120,
                      headers={"Authorization": f"Bearer {TOKEN}"})


def test_reload_to_a_missing_version_is_404(setup):
    url = setup["fleet"].urls[0]
    r = _reload(url, 987)
    assert r.status_code == 404 and "987" in r.text
    assert httpx.get(f"{url}/readyz").json()["version"] == setup["good"]


@pytest.mark.parametrize(("which", "why"), [("nan", "non-finite"), ("shape", "size mismatch")])
def test_reload_to_broken_weights_is_refused_and_reported(setup, which, why):
    url = setup["fleet"].urls[0]
    r = _reload(url, setup[which])
    assert r.status_code == 422 and why in r.text, r.text
    ready = httpx.get(f"{url}/readyz")
    assert ready.status_code == 200 and ready.json()["version"] == setup["good"]
    assert why in ready.json()["error"] and f"version {setup[which]}" in ready.json()["error"]
    metrics = httpx.get(f"{url}/metrics").text
    assert 'ratchet_model_load_failed{replica="replica-0"} 1.0' in metrics
    assert 'ratchet_model_reloads_total{result="refused"}' in metrics
    _complete(url, f"after-{which}")  # the previous version still serves
    assert _reload(url, setup["good"]).status_code == 200


def test_reload_to_a_version_that_lost_its_checkpoint_is_a_4xx_naming_what_is_missing(setup):
    url = setup["fleet"].urls[0]
    r = _reload(url, setup["lost"])
    assert r.status_code == 422 and "holds no checkpoint" in r.text and "config.json" in r.text
    assert httpx.get(f"{url}/readyz").json()["version"] == setup["good"]


def test_a_follow_up_holding_line_separators_is_ingested_and_ingest_goes_on(setup, broker,
                                                                          tmp_path):
    from ingest.config import IngestConfig, JoinConfig
    from ingest.kafka_io import start_group_at_end
    from ingest.pipeline import run_span
    from ingest.spans import read_spans

    group = f"sep-{uuid.uuid4().hex[:6]}"
    start_group_at_end(broker.bootstrap, group, TOPICS.values())
    router, auth = setup["router"], {"Authorization": f"Bearer {setup['key']}"}
    text = "still the same error\u2028TypeError\u0085 at line 3\u2029"
    rid = _complete(router.url, "sep-conv")["id"]
    r = httpx.post(f"{router.url}/v1/followups", headers=auth, timeout=30,
                   json={"response_id": rid, "text": text})
    assert r.status_code == 202, r.text
    _events(broker.bootstrap, "followup", rid, expect=1)
    # no persistence comes for these completions: the drain finalises them rather than keeping
    # them pending (that rule has its own test, test_ingest_drain_open_windows.py)
    cfg = IngestConfig(group_id=group, drain=True, join=JoinConfig(open_at_drain="neutral"))
    out = tmp_path / "spans"
    first = run_span(bootstrap=broker.bootstrap, group_id=group, output_root=out, config=cfg)
    later = _complete(router.url, "sep-conv-2")["id"]  # the next span: ingest is not wedged
    second = run_span(bootstrap=broker.bootstrap, group_id=group, output_root=out, config=cfg)
    rows = {row["response_id"]: row for row in read_spans(out).to_pylist()}
    assert rows[rid]["followup_text"] == text and rows[rid]["followup_dissatisfied"] is not None
    assert later in rows and first.span_id != second.span_id


def test_pinned_to_wrong_shape_reports_the_load_error(setup, mlflow_server):
    work = setup["work"] / "pinned"
    work.mkdir()
    env = {"RATCHET_TRACKING_URI": mlflow_server.uri, "RATCHET_MODEL_NAME": setup["name"],
           "RATCHET_VERSION": str(setup["shape"]), "RATCHET_ADMIN_TOKEN": TOKEN,
           "RATCHET_SPOOL_DIR": str(work / "spool"), "RATCHET_CACHE_DIR": str(work / "cache"),
           "RATCHET_LOG_BEHAVIOUR": "false"}
    replica = _spawn("pinned", work, env)
    try:
        deadline, body = time.monotonic() + 120, None
        while time.monotonic() < deadline:
            try:
                r = httpx.get(f"{replica.url}/readyz", timeout=2)
                body = r.json()
                if r.status_code == 503 and body["error"]:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        assert body is not None and body["ready"] is False
        assert "size mismatch" in body["error"] and f"version {setup['shape']}" in body["error"]
    finally:
        stop_child(replica.proc)
