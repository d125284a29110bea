"""The replica's OpenAI API as the official ``openai`` client sees it, served by uvicorn on
127.0.0.1 with a real untrained toy MoE behind the real torch engine (put in the host directly
rather than downloaded): client keys on inference, who may signal about a response, every request
parameter honoured or refused by name, model ids, limits, and the error shape of 4xx answers.
"""

from __future__ import annotations

import time

import openai
import pytest
import torch
from fastapi.testclient import TestClient

from deploy.replica.model_host import ServedModel
from deploy.replica.server import create_app
from deploy.replica.settings import ServerSettings
from deploy.replica.toy_models import build_untrained
from policy.toy.tokenizer import EOS

ADMIN = "unit-test-admin-token"
NAME = "toy-coder"
PROMPT = "# evaluate\n12+7 = "
MAX_TOKENS = 64


@pytest.fixture(scope="module")
def model():
    return build_untrained(0)


def _app(tmp, model, **overrides):
    settings = ServerSettings(
        tracking_uri="http://127.0.0.1:9",
        model_name=NAME,
        admin_token=ADMIN,
        spool_dir=tmp / "spool",
        cache_dir=tmp / "cache",
        api_keys_path=tmp / "keys.json",
        max_tokens_limit=MAX_TOKENS,
        max_body_bytes=8192,
        **overrides,
    )
    return create_app(settings)


@pytest.fixture(scope="module")
def replica(tmp_path_factory, model, live):
    """Loopback defaults: keys are not required."""
    app = _app(tmp_path_factory.mktemp("open"), model)
    with TestClient(app), live(app) as url:  # TestClient runs the lifespan (engine, logger)
        app.state.host._current = ServedModel(model, 7)
        yield app, url


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, model, live):
    """``require_api_key`` on (the default off loopback)."""
    app = _app(tmp_path_factory.mktemp("keyed"), model, require_api_key=True)
    with TestClient(app), live(app) as url:
        app.state.host._current = ServedModel(model, 7)
        yield app, url


def _key(app, name: str, org: str | None = None) -> str:
    return app.state.api_keys.create(name, org)[1]


def _client(url: str, key: str = "EMPTY") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)


@pytest.fixture
def client(replica):
    return _client(replica[1])


def _complete(client, **kw):
    return client.completions.create(
        **{"model": NAME, "prompt": PROMPT, "max_tokens": 4, "seed": 1, **kw}
    )


def _chat(client, **kw):
    messages = [{"role": "user", "content": PROMPT}]
    return client.chat.completions.create(
        **{"model": NAME, "messages": messages, "max_tokens": 4, "seed": 1, **kw}
    )


# -- client keys on inference ---------------------------------------------------------------------
def test_keyed_replica_refuses_missing_and_wrong_keys(keyed):
    app, url = keyed
    for key in ("EMPTY", "rk_deadbeef_wrongsecret"):
        with pytest.raises(openai.AuthenticationError) as err:
            _complete(_client(url, key))
        assert err.value.code == "invalid_api_key" and err.value.body["type"]
        with pytest.raises(openai.AuthenticationError):
            _chat(_client(url, key))
    good = _client(url, _key(app, "ide"))
    assert _complete(good).choices[0].finish_reason in ("stop", "length")
    assert _chat(good).choices[0].message.role == "assistant"
    assert [m.id for m in good.models.list().data] == [NAME]


def test_loopback_serves_without_a_key_but_checks_a_ratchet_key(replica):
    app, url = replica
    assert _complete(_client(url, "EMPTY")).choices  # a placeholder, as local clients send
    with pytest.raises(openai.AuthenticationError) as err:
        _complete(_client(url, "rk_deadbeef_wrongsecret"))
    assert err.value.code == "invalid_api_key"
    assert _complete(_client(url, _key(app, "ide"))).choices


# -- responses belong to the client that was served them ------------------------------------------
def _signal(client: openai.OpenAI, response_id: str) -> None:
    client.post("/feedback", cast_to=object, body={"response_id": response_id, "label": "accept"})


def _followup(client: openai.OpenAI, response_id: str) -> None:
    client.post("/followups", cast_to=object, body={"response_id": response_id, "text": "again"})


def _edit(client: openai.OpenAI, response_id: str) -> None:
    body = {"response_id": response_id, "window_s": 30, "text": "kept as is"}
    client.post("/edits", cast_to=object, body=body)


def test_only_the_owner_or_its_organisation_may_signal(keyed):
    app, url = keyed
    alice, bob = _client(url, _key(app, "alice")), _client(url, _key(app, "bob"))
    carol, dave = _client(url, _key(app, "carol", "acme")), _client(url, _key(app, "dave", "acme"))
    served = _complete(alice).id
    for other in (bob, carol):
        with pytest.raises(openai.NotFoundError) as err:  # as for an id never served
            _signal(other, served)
        assert "was not served" in err.value.message
        for send in (_followup, _edit):
            with pytest.raises(openai.NotFoundError):
                send(other, served)
    _signal(alice, served)
    _edit(alice, served)
    with pytest.raises(openai.ConflictError):  # the owner's duplicate is still a duplicate
        _signal(alice, served)
    acme = _complete(carol).id
    _signal(dave, acme)  # same organisation
    _followup(carol, acme)
    with pytest.raises(openai.NotFoundError):
        _signal(alice, acme)


def test_a_response_served_without_a_key_takes_signals_from_any_key(replica):
    app, url = replica
    anonymous = _complete(_client(url)).id
    _signal(_client(url, _key(app, "someone")), anonymous)


# -- parameters: honoured or refused by name -------------------------------------------------------
@pytest.mark.parametrize(
    ("kw", "param"),
    [
        ({"suffix": "\n"}, "suffix"),
        ({"echo": True}, "echo"),
        ({"best_of": 2}, "best_of"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"frequency_penalty": -1.0}, "frequency_penalty"),
        ({"logit_bias": {"50": 10}}, "logit_bias"),
        ({"extra_body": {"guided_json": {}}}, "guided_json"),
    ],
)
def test_completion_parameters_it_cannot_honour_are_refused(client, kw, param):
    with pytest.raises(openai.BadRequestError) as err:
        _complete(client, **kw)
    assert (err.value.code, err.value.param) == ("unsupported_parameter", param)
    assert param in err.value.message


TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("kw", "param"),
    [
        ({"tools": [TOOL]}, "tools"),  # the toy has no chat template to render them
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
         "response_format"),
        ({"parallel_tool_calls": True, "tools": [TOOL]}, "tools"),
        ({"store": True}, "store"),
        ({"extra_body": {"top_k": 5}}, "top_k"),
    ],
)
def test_chat_parameters_it_cannot_honour_are_refused(client, kw, param):
    with pytest.raises(openai.BadRequestError) as err:
        _chat(client, **kw)
    assert (err.value.code, err.value.param) == ("unsupported_parameter", param)


def test_a_tool_call_turn_in_the_history_is_refused(client):
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    messages = [{"role": "user", "content": "1+1"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "2"}]
    with pytest.raises(openai.BadRequestError) as err:
        _chat(client, messages=messages)
    assert (err.value.code, err.value.param) == ("unsupported_parameter", "messages.1.tool_calls")


@pytest.mark.parametrize(
    ("call", "kw", "param"),
    [
        (_complete, {"logprobs": 2}, "logprobs"),
        (_complete, {"logprobs": 0, "stream": True}, "logprobs"),
        (_chat, {"logprobs": True, "top_logprobs": 3}, "top_logprobs"),
        (_chat, {"logprobs": True, "stream": True}, "logprobs"),
        (_chat, {"tool_choice": "required"}, "tool_choice"),  # a call cannot be forced
        (_chat, {"tool_choice": {"type": "function", "function": {"name": "add"}}},
         "tool_choice"),
    ],
)
def test_values_it_cannot_honour_are_refused(client, call, kw, param):
    with pytest.raises(openai.BadRequestError) as err:
        call(client, **kw)
    assert (err.value.code, err.value.param) == ("unsupported_value", param)


def test_defaults_of_unimplemented_parameters_are_honoured(client):
    c = _complete(client, echo=False, best_of=1, presence_penalty=0, frequency_penalty=0.0,
                  logit_bias={}, logprobs=0)
    assert len(c.choices[0].logprobs.token_logprobs) == c.usage.completion_tokens
    chat = _chat(client, tool_choice="none", response_format={"type": "text"},
                 logprobs=True, top_logprobs=0)
    assert len(chat.choices[0].logprobs.content) == chat.usage.completion_tokens


# -- model ids ------------------------------------------------------------------------------------
def test_unknown_model_is_404_model_not_found(client):
    for call in (_complete, _chat):
        with pytest.raises(openai.NotFoundError) as err:
            call(client, model="gpt-4")
        assert (err.value.code, err.value.param) == ("model_not_found", "model")
        assert err.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("gpt-4")
    assert err.value.code == "model_not_found"


def test_missing_model_is_the_served_model(client):
    c = client.completions.create(model=openai.omit, prompt=PROMPT, max_tokens=2)
    assert c.model == NAME


def test_models_retrieve_and_created_is_the_real_time(client):
    before = time.time()
    card = client.models.retrieve(NAME)
    assert card.id == NAME and card.object == "model"
    assert card.model_extra["version"] == 7
    assert before - 600 < card.created <= time.time()  # loaded by this test module, not 0
    c = _complete(client)
    assert abs(c.created - time.time()) < 60


# -- limits ---------------------------------------------------------------------------------------
def test_max_tokens_over_the_models_limit_is_invalid_value(client):
    with pytest.raises(openai.BadRequestError) as err:
        _complete(client, max_tokens=MAX_TOKENS + 1)
    assert (err.value.code, err.value.param) == ("invalid_value", "max_tokens")
    assert str(MAX_TOKENS) in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        _chat(client, max_tokens=None, max_completion_tokens=MAX_TOKENS + 1)
    assert (err.value.code, err.value.param) == ("invalid_value", "max_completion_tokens")
    assert _complete(client, max_tokens=MAX_TOKENS).usage.completion_tokens <= MAX_TOKENS


def test_context_overflow_is_context_length_exceeded(client, model):
    too_long = "x" * model.config.max_seq_len  # one byte token each: no room left
    for call, kw in ((_complete, {"prompt": too_long}),
                     (_chat, {"messages": [{"role": "user", "content": too_long}]})):
        with pytest.raises(openai.BadRequestError) as err:
            call(client, **kw)
        assert err.value.code == "context_length_exceeded"


def test_eos_is_neither_a_logprob_entry_nor_a_completion_token(client, model, replica):
    """Make EOS the likeliest token: the answer is empty, with no "" entry and 0 tokens."""
    app, _ = replica

    def favour_eos(_module, _args, out):
        return out.index_add(-1, torch.tensor([EOS]), torch.full_like(out[..., :1], 100.0))

    handle = model.lm_head.register_forward_hook(favour_eos)
    try:
        raw = client.completions.with_raw_response.create(
            model=NAME, prompt=PROMPT, max_tokens=4, logprobs=0, temperature=0
        )
        chat = _chat(client, logprobs=True, temperature=0)
    finally:
        handle.remove()
    c = raw.parse()
    (choice,) = c.choices
    assert (choice.text, choice.finish_reason) == ("", "stop")
    assert choice.logprobs.tokens == [] and choice.logprobs.token_logprobs == []
    assert c.usage.completion_tokens == 0
    assert chat.choices[0].logprobs.content == [] and chat.usage.completion_tokens == 0
    served = app.state.responses.get(c.id)
    assert served is not None and served.text == ""  # what was served (EOS logged for training)


def test_too_large_and_invalid_bodies_are_openai_errors(client, replica):
    with pytest.raises(openai.APIStatusError) as err:
        _complete(client, prompt="x" * 10_000)
    assert err.value.status_code == 413 and err.value.code == "request_too_large"
    app, url = replica
    with pytest.raises(openai.UnprocessableEntityError) as err:  # the signals API's 422
        _client(url, _key(app, "ide")).post(
            "/feedback", cast_to=object, body={"response_id": "r", "label": "meh"}
        )
    assert (err.value.param, err.value.body["type"]) == ("label", "invalid_request_error")
