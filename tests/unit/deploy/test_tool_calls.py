"""Tool calls through the chat template, as the ``openai`` client sees them on 127.0.0.1.

A tiny random Qwen3-MoE (built from its config, local BPE: no download) is given a chat template
in Qwen3's tool format (the tools listed in the system turn, calls written as
``<tool_call>{json}</tool_call>``) and trained for a few seconds to answer a request with a call,
so the whole path is real: the tools are rendered into the prompt ids the engine decodes, the
model writes a call, the gateway reads it back as OpenAI ``tool_calls``. A policy whose template
renders no tools (SmolLM2-135M-Instruct's is plain ChatML) is refused with a 400; so are forced
calls and JSON mode. The parser is tested on strings.
"""

from __future__ import annotations

import copy
import json

import openai
import pytest
import torch
from fastapi.testclient import TestClient

from deploy.replica.model_host import ServedModel
from deploy.replica.server import create_app
from deploy.replica.settings import ServerSettings
from deploy.replica.spool import Spool
from deploy.replica.tool_calls import (
    ToolTurnError,
    parse_tool_calls,
    template_messages,
    template_tool_format,
)
from ingest.schema import parse_event

NAME = "tiny-qwen3"
# Qwen3's tool format, cut to what a 512-position tiny model holds
TOOL_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n<tools>"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n"
    "Call as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call><|im_end|>\n"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n"
    "</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>\n{\"name\": \"{{ c.function.name }}\", "
    "\"arguments\": {{ c.function.arguments | tojson }}}\n</tool_call>{%- endfor %}"
    "<|im_end|>\n{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)
# SmolLM2-135M-Instruct's kind of template: ChatML that ignores ``tools``
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOL = {"type": "function", "function": {"name": "add_numbers", "parameters": {"type": "object"}}}
ASK = [{"role": "user", "content": "1+2?"}]
SERVED = pytest.mark.slow  # the served model first learns to call: ~100 steps on one sequence
CALL_TEXT = '<tool_call>\n{"name": "add_numbers", "arguments": {"a": 1, "b": 2}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer():
    from policy.tiny import build_tokenizer

    return build_tokenizer(vocab=320, seed=0)


def _tok(tokenizer, template: str):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = template
    return tok


def _model(tokenizer, template: str):
    from policy.config import TinyHFSpec
    from policy.tiny import build_model

    return build_model(TinyHFSpec(family="qwen3_moe", vocab=320, hidden=32, heads=2, kv_heads=1,
                                  moe_intermediate=32, intermediate=64), _tok(tokenizer, template))


def _teach_to_call(model, tok, lessons=((ASK, CALL_TEXT),), steps: int = 300) -> None:
    """A few hundred steps on a few sequences: asked each lesson's messages with TOOL, the model
    answers its text (by default: asked ASK, it answers CALL_TEXT)."""
    batch = []
    for messages, text in lessons:
        prompt = list(tok.apply_chat_template(messages, tools=[TOOL], tokenize=True,
                                              add_generation_prompt=True)["input_ids"])
        target = list(tok(text, add_special_tokens=False)["input_ids"]) + [tok.eos_token_id]
        ids = torch.tensor([prompt + target])
        labels = ids.clone()
        labels[0, :len(prompt)] = -100
        batch.append((ids, labels))
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    model.train()
    for _ in range(steps):
        losses = [model(input_ids=ids, labels=labels).loss for ids, labels in batch]
        loss = sum(losses) / len(losses)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if max(x.item() for x in losses) < 2e-3:
            break
    model.eval()


@pytest.fixture(scope="module")
def caller(tokenizer):
    """A tiny Qwen3-MoE with the tool template that has learnt to call add_numbers."""
    from policy.hf import HFPolicy

    model, tok = _model(tokenizer, TOOL_TEMPLATE)
    _teach_to_call(model, tok)
    return HFPolicy(model, tok)


@pytest.fixture(scope="module")
def chatml(tokenizer):
    from policy.hf import HFPolicy

    return HFPolicy(*_model(tokenizer, CHATML))


def _serve(tmp, policy, live):
    settings = ServerSettings(
        tracking_uri="http://127.0.0.1:9", model_name=NAME, admin_token="unit-test-admin-token",
        spool_dir=tmp / "spool", cache_dir=tmp / "cache",
    )
    app = create_app(settings)
    client = TestClient(app)
    client.__enter__()
    app.state.host._current = ServedModel(policy, 4)
    return app, client, live(app)


@pytest.fixture(scope="module")
def replica(tmp_path_factory, caller, live):
    app, test_client, server = _serve(tmp_path_factory.mktemp("tools"), caller, live)
    with server as url:
        yield app, openai.OpenAI(base_url=f"{url}/v1", api_key="EMPTY", max_retries=0,
                                 timeout=60)
    test_client.__exit__(None, None, None)


@pytest.fixture(scope="module")
def plain(tmp_path_factory, chatml, live):
    app, test_client, server = _serve(tmp_path_factory.mktemp("chatml"), chatml, live)
    with server as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="EMPTY", max_retries=0, timeout=60)
    test_client.__exit__(None, None, None)


def _chat(client, **kw):
    return client.chat.completions.create(
        **{"model": NAME, "messages": ASK, "max_tokens": 96, "temperature": 0, **kw})


def _last_event(app):
    logger = app.state.behaviour_logger
    assert logger.flush(timeout_s=0.3) is False
    spool = Spool(logger.spool.directory, max_bytes=1 << 30)
    return [parse_event(v) for _, _, v in spool.peek(1000).records][-1]


# -- which templates render tools -----------------------------------------------------------------
def test_a_template_that_renders_tools_is_found_by_rendering_a_probe(tokenizer):
    assert template_tool_format(_tok(tokenizer, TOOL_TEMPLATE)) == "hermes"
    assert template_tool_format(_tok(tokenizer, CHATML)) is None  # renders no tools
    assert template_tool_format(tokenizer) is None  # no template at all
    mentions_only = "{# <tool_call> #}" + CHATML  # names the format but drops the tools
    assert template_tool_format(_tok(tokenizer, mentions_only)) is None


# -- the parser, on strings -----------------------------------------------------------------------
NAMES = frozenset({"add_numbers", "lookup"})


def test_one_call_becomes_an_openai_tool_call():
    parsed = parse_tool_calls(CALL_TEXT, NAMES)
    assert parsed.content is None
    (call,) = parsed.tool_calls
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "add_numbers"
    assert json.loads(call["function"]["arguments"]) == {"a": 1, "b": 2}


def test_text_around_calls_is_content_and_calls_keep_their_order():
    text = ('Let me check.\n<tool_call>{"name": "lookup", "arguments": {"q": "x"}}</tool_call>\n'
            '<tool_call>\n{"name": "add_numbers", "arguments": "{\\"a\\": 3}"}\n</tool_call>')
    parsed = parse_tool_calls(text, NAMES)
    assert parsed.content == "Let me check."
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["lookup", "add_numbers"]
    assert json.loads(parsed.tool_calls[1]["function"]["arguments"]) == {"a": 3}
    assert len({c["id"] for c in parsed.tool_calls}) == 2


@pytest.mark.parametrize("text", [
    "no call here",
    '<tool_call>{"name": "add_numbers", "arguments": {"a": 1</tool_call>',  # not JSON
    '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',  # not an offered tool
    '<tool_call>{"name": "add_numbers", "arguments": [1, 2]}</tool_call>',  # not an object
    '<tool_call>\n{"name": "add_numbers", "arguments": {"a": 1}}',  # cut by max_tokens
])
def test_what_is_not_a_call_to_an_offered_tool_stays_text(text):
    parsed = parse_tool_calls(text, NAMES)
    assert parsed.tool_calls == [] and parsed.content == text


def test_only_bad_blocks_stay_in_the_content():
    text = ('<tool_call>{"name": "nope", "arguments": {}}</tool_call>'
            '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>')
    parsed = parse_tool_calls(text, NAMES)
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["lookup"]
    assert parsed.content == '<tool_call>{"name": "nope", "arguments": {}}</tool_call>'


def test_history_tool_calls_reach_the_template_as_objects():
    from deploy.replica.api import ChatCompletionRequest

    call = {"id": "c1", "type": "function",
            "function": {"name": "add_numbers", "arguments": '{"a": 1}'}}
    body = ChatCompletionRequest(messages=[
        {"role": "developer", "content": "be brief"}, *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"}])
    msgs = template_messages(body.messages)
    assert msgs[0]["role"] == "system"
    assert msgs[2]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert msgs[3] == {"role": "tool", "content": "3", "tool_call_id": "c1"}
    bad = ChatCompletionRequest(messages=[
        *ASK, {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}])
    with pytest.raises(ToolTurnError) as err:
        template_messages(bad.messages)
    assert err.value.param == "messages.1.tool_calls.0"


# -- through the server, with the openai client ----------------------------------------------------
@SERVED
def test_tools_are_rendered_into_the_prompt_and_the_call_comes_back(replica, caller):
    app, client = replica
    reply = _chat(client, tools=[TOOL])
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "add_numbers"
    assert json.loads(call.function.arguments) == {"a": 1, "b": 2}
    assert choice.message.content is None
    event = _last_event(app)
    want = caller.tokenizer.apply_chat_template(ASK, tools=[TOOL], tokenize=True,
                                                add_generation_prompt=True)["input_ids"]
    assert event.prompt_token_ids == list(want)  # the ids the engine decoded
    assert "add_numbers" in caller.tokenizer.decode(event.prompt_token_ids)
    assert "<tool_call>" in event.response_text  # what the model wrote is what is logged


@SERVED
def test_tool_choice_none_renders_no_tools(replica, caller):
    app, client = replica
    reply = _chat(client, tools=[TOOL], tool_choice="none", max_tokens=4)
    assert reply.choices[0].finish_reason != "tool_calls"
    assert reply.choices[0].message.tool_calls is None
    assert "add_numbers" not in caller.tokenizer.decode(_last_event(app).prompt_token_ids)


@SERVED
def test_a_streamed_tool_request_sends_the_call_in_a_delta(replica):
    _, client = replica
    chunks = list(_chat(client, tools=[TOOL], stream=True,
                        stream_options={"include_usage": True}))
    calls = [c for ch in chunks if ch.choices for c in ch.choices[0].delta.tool_calls or []]
    assert [c.function.name for c in calls] == ["add_numbers"]
    assert json.loads(calls[0].function.arguments) == {"a": 1, "b": 2}
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].usage.completion_tokens > 0


@SERVED
def test_a_tool_result_turn_is_rendered(replica, caller):
    app, client = replica
    first = _chat(client, tools=[TOOL]).choices[0].message
    history = [*ASK, first.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "3"}]
    reply = _chat(client, tools=[TOOL], messages=history, max_tokens=4)
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
    prompt = caller.tokenizer.decode(_last_event(app).prompt_token_ids)
    assert "<tool_response>\n3\n</tool_response>" in prompt
    assert '"arguments": {"a": 1, "b": 2}' in prompt


@SERVED
@pytest.mark.parametrize(("kw", "param", "code"), [
    ({"tool_choice": "required"}, "tool_choice", "unsupported_value"),
    ({"tool_choice": {"type": "function", "function": {"name": "add_numbers"}}}, "tool_choice",
     "unsupported_value"),
    ({"tools": [{"type": "function", "function": {**TOOL["function"], "strict": True}}]},
     "tools.0.function.strict", "unsupported_value"),
    ({"response_format": {"type": "json_object"}}, "response_format", "unsupported_parameter"),
])
def test_what_cannot_be_guaranteed_is_refused(replica, kw, param, code):
    _, client = replica
    kw = {"tools": [TOOL], **kw}
    with pytest.raises(openai.BadRequestError) as err:
        _chat(client, **kw)
    assert (err.value.code, err.value.param) == (code, param)


@SERVED
def test_a_template_without_tools_refuses_them(plain):
    with pytest.raises(openai.BadRequestError) as err:
        _chat(plain, tools=[TOOL])
    assert (err.value.code, err.value.param) == ("unsupported_parameter", "tools")
    assert "does not render tools" in err.value.message
    assert _chat(plain, tools=[TOOL], tool_choice="none", max_tokens=2).choices  # honoured


# -- hostile tool calls: never a 500 ------------------------------------------------------------
def _deep(n: int, leaf: str = "{}") -> str:
    return '{"a": ' * n + leaf + "}" * n


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": ["add_numbers"], "arguments": {}}</tool_call>',  # name is a list
    '<tool_call>{"name": {"add_numbers": 1}, "arguments": {}}</tool_call>',  # name is an object
    '<tool_call>{"name": "add_numbers", "arguments": {"a": "\\ud800"}}</tool_call>',  # surrogate
    '<tool_call>{"name": "add_numbers", "arguments": {"\\udc00": 1}}</tool_call>',  # in a key
    '<tool_call>{"name": "add_numbers", "arguments": {"a": NaN}}</tool_call>',
    '<tool_call>{"name": "add_numbers", "arguments": "{\\"a\\": -Infinity}"}</tool_call>',
    '<tool_call>{"name": "add_numbers", "arguments": ' + _deep(40) + "}</tool_call>",
    '<tool_call>{"name": "add_numbers", "arguments": ' + _deep(3000) + "}</tool_call>",
])
def test_a_call_that_is_not_strict_json_to_an_offered_tool_stays_text(text):
    parsed = parse_tool_calls(text, NAMES)
    assert parsed.tool_calls == [] and parsed.content == text


def test_arguments_sent_out_are_strict_json():
    text = ('<tool_call>{"name": "add_numbers", "arguments": {"a": 1e308, "b": "\\u00e9"}}'
            "</tool_call>")
    (call,) = parse_tool_calls(text, NAMES).tool_calls

    def no_constants(name):
        raise AssertionError(f"{name} in arguments")

    arguments = json.loads(call["function"]["arguments"], parse_constant=no_constants)
    assert arguments == {"a": 1e308, "b": "\u00e9"}


@pytest.fixture(scope="module")
def tool_app(tmp_path_factory, tokenizer):
    """The app serving an untrained tiny Qwen3-MoE with the tool template (no teaching: these
    requests never reach sampling)."""
    from policy.hf import HFPolicy

    tmp = tmp_path_factory.mktemp("hostile")
    settings = ServerSettings(
        tracking_uri="http://127.0.0.1:9", model_name=NAME, admin_token="unit-test-admin-token",
        spool_dir=tmp / "spool", cache_dir=tmp / "cache",
    )
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        app.state.host._current = ServedModel(HFPolicy(*_model(tokenizer, TOOL_TEMPLATE)), 4)
        yield client


def _raw(client, body: str):
    return client.post("/v1/chat/completions", content=body,
                       headers={"content-type": "application/json"})


def _with(tools_params: str | None = None, history_args: str | None = None,
          history_name: str = '"add_numbers"', tool_choice: str | None = None) -> str:
    """A chat body as raw JSON text (deep nesting and lone surrogates cannot go through an
    encoder): tools with ``tools_params`` as parameters, an assistant turn whose call has
    ``history_args`` (a JSON value) and ``history_name``."""
    parts = ['"model": "tiny-qwen3"', '"max_tokens": 2']
    messages = ['{"role": "user", "content": "1+2?"}']
    if history_args is not None:
        messages.append('{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", '
                        '"type": "function", "function": {"name": ' + history_name
                        + ', "arguments": ' + history_args + "}}]}")
        messages.append('{"role": "tool", "tool_call_id": "c1", "content": "3"}')
    parts.append('"messages": [' + ", ".join(messages) + "]")
    if tools_params is not None:
        parts.append('"tools": [{"type": "function", "function": {"name": "add_numbers", '
                     '"parameters": ' + tools_params + "}}]")
    if tool_choice is not None:
        parts.append('"tool_choice": ' + tool_choice)
    return "{" + ", ".join(parts) + "}"


A = "messages.1.tool_calls.0"
HOSTILE = {
    "parameters 500 deep": (_with(tools_params=_deep(500)),
                            "tools.0.function.parameters", "too_deep"),
    "parameters as lists 500 deep": (_with(tools_params='{"a": ' + "[" * 499 + "]" * 499 + "}"),
                                     "tools.0.function.parameters", "too_deep"),
    "parameters with 25k values": (_with(tools_params='{"a": [' + ",".join("0" * 25_000) + "]}"),
                                   "tools", "too_large"),
    "surrogate in a parameter key": (_with(tools_params='{"\\ud800": {"type": "string"}}'),
                                     "tools.0.function.parameters", "invalid_unicode"),
    "surrogate in a parameter value": (_with(tools_params='{"description": "\\udfff"}'),
                                       "tools.0.function.parameters.description",
                                       "invalid_unicode"),
    "history arguments 500 deep": (_with(history_args=json.dumps(_deep(500))), A, "invalid_value"),
    "history arguments 3000 deep": (_with(history_args=json.dumps(_deep(3000))), A,
                                    "invalid_value"),
    "history arguments object 500 deep": (_with(history_args=_deep(500)),
                                          f"{A}.function.arguments", "too_deep"),
    "surrogate in history arguments": (_with(history_args=json.dumps('{"a": "\\ud800"}')), A,
                                       "invalid_value"),
    "NaN in history arguments": (_with(history_args=json.dumps('{"a": NaN}')), A,
                                 "invalid_value"),
    "surrogate in a history function name": (_with(history_args='"{}"', history_name='"\\ud800"'),
                                             f"{A}.function.name", "invalid_unicode"),
    "tool_choice 100 deep": (_with(tools_params="{}", tool_choice='{"type": "function", '
                                   '"function": ' + _deep(100) + "}"),
                             "tool_choice.function", "too_deep"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_tool_requests_are_a_400_naming_the_field(tool_app, case):
    body, param, code = HOSTILE[case]
    r = _raw(tool_app, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"].startswith(param), error
    assert error["code"] == code, error


def test_fair_tool_requests_still_pass_the_checks(tool_app):
    """The limits leave room: 20 levels of parameters and a history call are served."""
    r = _raw(tool_app, _with(tools_params=_deep(20), history_args=json.dumps('{"a": 1}')))
    assert r.status_code == 200, r.text


# a model that answers with calls no client may receive: each must come back as plain text
BAD_CALLS = [
    ([{"role": "user", "content": "list?"}],
     '<tool_call>\n{"name": ["add_numbers"], "arguments": {"a": 1}}\n</tool_call>'),
    ([{"role": "user", "content": "odd?"}],
     '<tool_call>\n{"name": "add_numbers", "arguments": {"a": "\\ud800"}}\n</tool_call>'),
]  # NaN/Infinity in a call: on strings above and in tests/unit/deploy/test_tool_call_fuzz.py


@pytest.fixture(scope="module")
def bad_caller(tmp_path_factory, tokenizer, live):
    """A tiny Qwen3-MoE with the tool template taught to answer BAD_CALLS, served."""
    from policy.hf import HFPolicy

    model, tok = _model(tokenizer, TOOL_TEMPLATE)
    _teach_to_call(model, tok, BAD_CALLS, steps=1200)  # stops once both lessons are learnt
    app, test_client, server = _serve(tmp_path_factory.mktemp("bad"), HFPolicy(model, tok), live)
    with server as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="EMPTY", max_retries=0, timeout=60)
    test_client.__exit__(None, None, None)


@SERVED
@pytest.mark.parametrize("lesson", range(len(BAD_CALLS)))
def test_a_malformed_model_call_comes_back_as_text(bad_caller, lesson):
    messages, text = BAD_CALLS[lesson]
    reply = _chat(bad_caller, tools=[TOOL], messages=messages)
    choice = reply.choices[0]
    assert choice.message.content == text  # the model learnt it: what it wrote, as text
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"


@SERVED
@pytest.mark.parametrize("lesson", range(len(BAD_CALLS)))
def test_a_malformed_model_call_streams_as_text_to_the_end(bad_caller, lesson):
    messages, text = BAD_CALLS[lesson]
    chunks = list(_chat(bad_caller, tools=[TOOL], messages=messages, stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == text
    assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "stop"
