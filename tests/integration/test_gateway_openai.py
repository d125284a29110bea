"""The official ``openai`` client against a real replica process (broker + MLflow + a registered
toy champion): completions, chat, streaming, ``n > 1``, an error, and the logged events.
"""

from __future__ import annotations

import uuid

import pytest

from deploy.fleet.fleet import Fleet
from deploy.replica.toy_models import register_untrained
from ingest.kafka_io import logged_completions
from policy.toy.tokenizer import EOS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOKEN = "gateway-openai-token"
PROMPT = "# evaluate\n12+7 = "


@pytest.fixture(scope="module")
def replica(mlflow_server, broker, tmp_path_factory):
    from runtime import registry

    name = f"gateway-{uuid.uuid4().hex[:6]}"
    work = tmp_path_factory.mktemp("gateway")
    version = register_untrained(mlflow_server.uri, name, seed=1, workdir=work)
    registry.set_alias(mlflow_server.uri, name, registry.CHAMPION, version)
    with Fleet.start(
        n_replicas=1,
        tracking_uri=mlflow_server.uri,
        model_name=name,
        bootstrap=broker.bootstrap,
        workdir=work / "fleet",
        admin_token=TOKEN,
    ) as fleet:
        yield fleet.urls[0], name, version


@pytest.fixture
def client(replica):
    import openai

    url, _, _ = replica
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused-locally", max_retries=0)


def test_models_lists_the_champion(client, replica):
    _, name, version = replica
    models = client.models.list()
    assert [m.id for m in models.data] == [name]
    assert models.data[0].model_extra["version"] == version


def test_completion_and_its_event(client, replica, broker):
    _, name, version = replica
    raw = client.completions.with_raw_response.create(
        model=name,
        prompt=PROMPT,
        max_tokens=8,
        temperature=0.8,
        top_p=0.95,
        seed=11,
        logprobs=0,
        user="ide-user-1",
        extra_headers={"X-Conversation-Id": "oa-conv-1"},
        extra_body={"metadata": {"task_kind": "arith"}},  # the legacy completions API has none
    )
    assert raw.headers["x-conversation-id"] == "oa-conv-1"
    c = raw.parse()
    assert c.object == "text_completion" and c.system_fingerprint == f"ratchet-v{version}"
    (choice,) = c.choices
    assert c.usage.completion_tokens == len(choice.logprobs.token_logprobs) >= 1
    event = logged_completions(broker.bootstrap, {c.id})[c.id]
    assert event.response_text == choice.text and event.conversation_id == "oa-conv-1"
    shown = c.usage.completion_tokens  # a final EOS is logged for training but not shown
    assert len(event.response_token_ids) - shown == (event.response_token_ids[-1] == EOS)
    assert event.response_logprobs[:shown] == pytest.approx(choice.logprobs.token_logprobs)
    assert (event.sampling.temperature, event.sampling.top_p) == (0.8, 0.95)
    assert event.task_kind == "arith" and event.model_version == version


def test_chat_completion(client, replica):
    _, name, _ = replica
    chat = client.chat.completions.create(
        model=name,
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=6,
        seed=1,
        logprobs=True,
    )
    (choice,) = chat.choices
    assert chat.object == "chat.completion" and choice.message.role == "assistant"
    assert choice.finish_reason in ("stop", "length")
    assert len(choice.logprobs.content) == chat.usage.completion_tokens


def test_streaming_chat_matches_the_logged_text(client, replica, broker):
    _, name, _ = replica
    stream = client.chat.completions.create(
        model=name,
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=10,
        seed=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, ids, usage, finish = [], set(), None, None
    for chunk in stream:
        ids.add(chunk.id)
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            pieces.append(ch.delta.content or "")
            finish = ch.finish_reason or finish
    (rid,) = ids
    event = logged_completions(broker.bootstrap, {rid})[rid]
    assert "".join(pieces) == event.response_text and finish == event.finish_reason
    eos = event.response_token_ids[-1] == EOS  # logged for training, not counted for the client
    assert usage.completion_tokens == len(event.response_token_ids) - eos
    assert 0 < event.time_to_first_token_ms <= event.latency_ms


def test_n_choices_are_logged_one_event_each(client, replica, broker):
    _, name, _ = replica
    raw = client.completions.with_raw_response.create(
        model=name, prompt=PROMPT, max_tokens=6, n=3, seed=2
    )
    c = raw.parse()
    assert [ch.index for ch in c.choices] == [0, 1, 2]
    ids = raw.headers["x-ratchet-response-ids"].split(",")
    assert ids == [f"{c.id}-{i}" for i in range(3)]
    events = logged_completions(broker.bootstrap, set(ids))
    assert [events[i].response_text for i in ids] == [ch.text for ch in c.choices]
    assert [events[i].sampling.seed for i in ids] == [2, 3, 4]


def test_errors_are_openai_errors(client, replica):
    import openai

    _, name, _ = replica
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=name, prompt=PROMPT, max_tokens=100_000)
    assert err.value.status_code == 400
    assert "max_tokens" in err.value.message and err.value.body["param"] == "max_tokens"
    assert err.value.code == "invalid_value"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "x"}], temperature=1e-300
        )
    assert err.value.body["param"] == "temperature"
