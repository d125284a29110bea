"""The OpenAI-compatible gateway in-process: a real toy MoE behind the real torch engine and app.

The model is built from the toy config (untrained, seeded) and put in the host directly instead of
being downloaded from MLflow; everything from the HTTP body to the behaviour event in the spool is
the production path. OpenAI-client tests against a replica process: tests/integration/.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from fastapi.testclient import TestClient

from deploy.replica.engines.base import SamplingRequest
from deploy.replica.engines.torch_engine import TorchEngine, ToyStepModel
from deploy.replica.model_host import ServedModel
from deploy.replica.server import create_app
from deploy.replica.settings import ServerSettings
from deploy.replica.spool import Spool
from deploy.replica.toy_models import build_untrained
from ingest.schema import Completion, parse_event
from policy.toy.generate import sampling_logprobs

PROMPT = "# evaluate\n12+7 = "


@pytest.fixture(scope="module")
def model():
    return build_untrained(0)


@pytest.fixture
def app_client(tmp_path, model):
    settings = ServerSettings(
        tracking_uri="http://127.0.0.1:9",
        model_name="toy",
        admin_token="unit-test-admin-token",
        spool_dir=tmp_path / "spool",
        cache_dir=tmp_path / "cache",
    )
    app = create_app(settings)
    with TestClient(app) as client:
        app.state.host._current = ServedModel(model, 7)
        yield app, client


def logged(app) -> list[Completion]:
    """The completion events the replica's logger spooled (no Kafka configured)."""
    logger = app.state.behaviour_logger
    assert logger.flush(timeout_s=0.3) is False  # nothing can reach Kafka: all in the spool
    spool = Spool(logger.spool.directory, max_bytes=1 << 30)
    return [parse_event(v) for _, _, v in spool.peek(1000).records]


def test_completion_shape_ids_and_logged_event(app_client, model):
    app, client = app_client
    body = {
        "model": "toy",
        "prompt": PROMPT,
        "max_tokens": 6,
        "temperature": 0.7,
        "top_p": 0.9,
        "seed": 3,
        "n": 2,
        "logprobs": 0,
        "user": "alice",
        "metadata": {"task_kind": "arith"},
    }
    r = client.post("/v1/completions", json=body, headers={"X-Conversation-Id": "conv-a"})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["object"] == "text_completion" and data["system_fingerprint"] == "ratchet-v7"
    assert [c["index"] for c in data["choices"]] == [0, 1]
    ids = r.headers["x-ratchet-response-ids"].split(",")
    assert ids == [f"{data['id']}-0", f"{data['id']}-1"]
    assert r.headers["x-conversation-id"] == "conv-a"
    events = {e.response_id: e for e in logged(app)}
    assert set(events) == set(ids)
    for choice, rid in zip(data["choices"], ids):
        e = events[rid]
        assert e.response_text == choice["text"] and e.conversation_id == "conv-a"
        assert e.task_kind == "arith" and e.user_hash != "alice"
        assert e.response_logprobs == choice["logprobs"]["token_logprobs"]
        assert (e.sampling.temperature, e.sampling.top_p) == (0.7, 0.9)
        _check_processed_logprobs(model, e)
    usage = data["usage"]
    assert usage["prompt_tokens"] == len(PROMPT) + 1  # counted once, not per choice
    assert usage["completion_tokens"] == sum(len(e.response_token_ids) for e in events.values())


def _check_processed_logprobs(model, e: Completion) -> None:
    """Logged logprobs = log of the distribution sampled (T and top-p applied), recomputed."""
    ids = e.prompt_token_ids + e.response_token_ids
    with torch.no_grad():
        out = model(torch.tensor([ids[:-1]]))
    p = len(e.prompt_token_ids)
    logits = out.logits[0, p - 1 :]
    logp = sampling_logprobs(logits, e.sampling.temperature, e.sampling.top_p)
    want = logp.gather(1, torch.tensor(e.response_token_ids).unsqueeze(1)).squeeze(1)
    assert torch.allclose(want, torch.tensor(e.response_logprobs), atol=1e-4)
    routes = out.routed_experts[0].tolist()
    assert e.prompt_routed_experts == routes[:p] and e.routed_experts == routes[p - 1 :]
    assert e.routed_experts_source == "engine"


def test_missing_conversation_id_is_generated_and_returned(app_client):
    app, client = app_client
    r = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2})
    conv = r.headers["x-conversation-id"]
    assert r.status_code == 200 and conv.startswith("conv-")
    (event,) = logged(app)
    assert event.conversation_id == conv and event.task_kind == "unknown"


def test_chat_stream_sends_chunks_then_done(app_client):
    app, client = app_client
    body = {
        "model": "toy",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
        "metadata": {"conversation_id": "conv-s"},
    }
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(ln.removeprefix("data: ")) for ln in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert chunks[-1]["usage"]["completion_tokens"] >= 1
    (event,) = logged(app)
    assert event.response_text == text and event.conversation_id == "conv-s"
    assert event.prompt == PROMPT  # toy chat template: one user message is served verbatim
    assert 0 < event.time_to_first_token_ms <= event.latency_ms


def test_stop_string_ends_the_choice(app_client):
    _, client = app_client
    greedy = {"prompt": PROMPT, "max_tokens": 6, "temperature": 0}
    full = client.post("/v1/completions", json=greedy).json()["choices"][0]
    assert full["finish_reason"] == "length" and len(full["text"]) >= 2
    stop = full["text"][1]
    cut = client.post("/v1/completions", json={**greedy, "stop": [stop]}).json()["choices"][0]
    assert cut["finish_reason"] == "stop"
    assert cut["text"] == full["text"][: full["text"].index(stop)]


BAD_BODIES = [
    ({"temperature": 1e-300}, "temperature"),
    ({"temperature": 5e-324}, "temperature"),
    ({"top_p": 1e-300}, "top_p"),
    ({"top_p": 5e-324}, "top_p"),
    ({"max_tokens": 100_000}, "max_tokens"),
    ({"n": 0}, "n"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": "x" * 300}, "prompt"),  # longer than the toy's 192-token context
]


@pytest.mark.parametrize(("change", "param"), BAD_BODIES)
def test_bad_values_are_400_naming_the_field(app_client, change, param):
    _, client = app_client
    r = client.post("/v1/completions", json={"prompt": PROMPT, **change})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        ('{"prompt": "x", "temperature": NaN}', "temperature"),
        ('{"prompt": "x", "top_p": Infinity}', "top_p"),
        ('{"prompt": "x", "logit_bias": {"5": -Infinity}}', "logit_bias.5"),
        ('{"prompt": "x\\ud800"}', "prompt"),
        ('{"messages": [{"role": "user", "content": "\\udfff"}]}', "messages.0.content"),
        ('{"prompt": "x", ', None),
    ],
)
def test_non_finite_numbers_lone_surrogates_and_broken_json_are_400(app_client, raw, param):
    _, client = app_client
    path = "/v1/chat/completions" if "messages" in raw else "/v1/completions"
    r = client.post(path, content=raw.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_models_lists_the_served_version(app_client):
    _, client = app_client
    data = client.get("/v1/models").json()
    assert data["data"][0]["id"] == "toy" and data["data"][0]["version"] == 7


def test_batcher_serves_concurrent_callers_in_few_batches(model):
    engine = TorchEngine(lambda: ToyStepModel(model, 1), max_batch=32, max_wait_ms=50)
    engine.start()
    try:
        requests = [SamplingRequest(PROMPT, 4, 1.0, seed=i) for i in range(16)]

        async def many():
            return await asyncio.gather(*(engine.generate([r]) for r in requests))

        results = asyncio.run(many())
    finally:
        engine.close()
    assert len(results) == 16 and all(len(r[0].token_ids) == 4 for r in results)
    assert engine.sequences == 16 and engine.batches <= 2


def test_same_seed_same_tokens(model):
    engine = TorchEngine(lambda: ToyStepModel(model, 1), max_wait_ms=0)
    engine.start()
    try:
        req = SamplingRequest(PROMPT, 8, 1.0, seed=42)
        a = asyncio.run(engine.generate([req]))[0]
        b = asyncio.run(engine.generate([req]))[0]
    finally:
        engine.close()
    assert a.token_ids == b.token_ids and a.logprobs == b.logprobs


def test_streamed_text_equals_the_whole_answer_with_stop_strings(app_client):
    _, client = app_client
    greedy = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, "n": 2}
    full = client.post("/v1/completions", json=greedy).json()["choices"][0]["text"]
    stop = full[3:5] if len(full) >= 5 else "\n"
    whole = client.post("/v1/completions", json={**greedy, "stop": stop}).json()["choices"]
    with client.stream(
        "POST", "/v1/completions", json={**greedy, "stop": stop, "stream": True}
    ) as r:
        lines = [ln for ln in r.iter_lines() if ln and ln != "data: [DONE]"]
    streamed = ["", ""]
    for ln in lines:
        (choice,) = json.loads(ln.removeprefix("data: "))["choices"]
        streamed[choice["index"]] += choice["text"]
    assert streamed == [c["text"] for c in whole]
    assert stop not in streamed[0]


def test_long_and_short_prompts_in_one_batch_fit_the_context(model):
    """A 170-token prompt next to a short one asking for 60 tokens: padded to the long prompt's
    width, the short row would overflow the 192-token context; the batcher splits them."""
    engine = TorchEngine(lambda: ToyStepModel(model, 1), max_wait_ms=200)
    engine.start()
    try:
        long_req = SamplingRequest("x" * 169, 16, 1.0, seed=1)
        short_req = SamplingRequest(PROMPT, 60, 1.0, seed=2)

        async def both():
            return await asyncio.gather(engine.generate([long_req]), engine.generate([short_req]))

        (long_out,), (short_out,) = asyncio.run(both())
    finally:
        engine.close()
    assert engine.batches == 1  # taken together, decoded in two parts
    assert len(long_out.token_ids) <= 192 - 170
    assert len(short_out.token_ids) == 60 or short_out.finish_reason == "stop"


@pytest.mark.parametrize("trusted", [False, True])
def test_the_router_arm_is_logged_only_behind_the_router(tmp_path, model, trusted):
    # a replica clients reach directly ignores the header: a client could name any arm
    settings = ServerSettings(
        tracking_uri="http://127.0.0.1:9", model_name="toy", admin_token="unit-test-admin-token",
        spool_dir=tmp_path / "spool", cache_dir=tmp_path / "cache", trust_arm_header=trusted)
    app = create_app(settings)
    with TestClient(app) as client:
        app.state.host._current = ServedModel(model, 7)
        for arm in ("holdback", "not-an-arm"):
            r = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2},
                            headers={"X-Ratchet-Arm": arm, "X-Conversation-Id": f"c-{arm}"})
            assert r.status_code == 200, r.text
        arms = {e.conversation_id: e.arm for e in logged(app)}
    assert arms == {"c-holdback": "holdback" if trusted else None, "c-not-an-arm": None}
