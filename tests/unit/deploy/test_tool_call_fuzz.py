"""Tool calls fuzzed: hostile requests against the real app on 127.0.0.1, and hostile model output
through the call parser. Neither may ever produce a 5xx, a broken stream or non-JSON ``arguments``.

Requests are written as raw JSON text (deep nesting, lone surrogates and NaN cannot go through an
encoder) by hypothesis strategies, bounded and derandomised so a failure reproduces: ``tools``
with arbitrary ``parameters`` (random JSON, or nesting up to 1,500 levels), ``tool_choice`` of any
shape, history turns whose calls have names of any JSON type and arguments that are JSON text,
broken text or values; half of them streamed. The served model is an untrained tiny Qwen3-MoE
with a tool-rendering chat template (real tokenizer, real torch engine, real uvicorn): what
passes the checks is sampled. The status counts are printed (``-s``).
"""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deploy.replica.model_host import ServedModel
from deploy.replica.server import create_app
from deploy.replica.settings import ServerSettings
from deploy.replica.tool_calls import parse_tool_calls

pytestmark = pytest.mark.slow

NAME = "tiny-qwen3"
SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])
TEXT = st.text(alphabet=st.one_of(st.characters(), SURROGATES), max_size=12)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), TEXT)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(TEXT, children, max_size=3),
    max_leaves=12,
)


def _encode(value) -> str:
    """JSON text as a careless client writes it: NaN/Infinity bare, surrogates as escapes."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True)


@st.composite
def json_text(draw) -> str:
    """A JSON value's text: random, or nested 1-1,500 levels deep (objects or arrays)."""
    if draw(st.booleans()):
        return _encode(draw(VALUES))
    depth = draw(st.integers(1, 1500))
    if draw(st.booleans()):
        return '{"a": ' * depth + _encode(draw(SCALARS)) + "}" * depth
    return "[" * depth + "]" * depth


@st.composite
def tool(draw) -> str:
    name = draw(st.one_of(st.just("add_numbers"), st.from_regex(r"[A-Za-z0-9_-]{1,8}",
                                                                fullmatch=True), TEXT))
    parts = [f'"name": {_encode(name)}']
    if draw(st.booleans()):
        parts.append(f'"parameters": {draw(json_text())}')
    if draw(st.booleans()):
        parts.append(f'"description": {_encode(draw(TEXT))}')
    return '{"type": "function", "function": {' + ", ".join(parts) + "}}"


@st.composite
def history_call(draw) -> str:
    name = draw(st.one_of(st.just('"add_numbers"'), st.builds(_encode, VALUES)))
    kind = draw(st.sampled_from(["json string", "broken string", "value"]))
    if kind == "json string":
        arguments = _encode(draw(json_text()))
    elif kind == "broken string":
        arguments = _encode(draw(TEXT))
    else:
        arguments = draw(json_text())
    call_id = _encode(draw(st.one_of(st.just("c1"), TEXT)))
    return ('{"id": ' + call_id + ', "type": "function", "function": {"name": ' + name
            + ', "arguments": ' + arguments + "}}")


@st.composite
def chat_body(draw) -> tuple[str, bool]:
    stream = draw(st.booleans())
    parts = [f'"model": "{NAME}"', '"max_tokens": 3', '"temperature": 0',
             f'"stream": {json.dumps(stream)}']
    messages = ['{"role": "user", "content": ' + _encode(draw(TEXT)) + "}"]
    if draw(st.booleans()):
        calls = draw(st.lists(history_call(), min_size=1, max_size=2))
        messages.append('{"role": "assistant", "content": null, "tool_calls": ['
                        + ", ".join(calls) + "]}")
        messages.append('{"role": "tool", "tool_call_id": "c1", "content": '
                        + _encode(draw(TEXT)) + "}")
    parts.append('"messages": [' + ", ".join(messages) + "]")
    if draw(st.booleans()):
        parts.append('"tools": [' + ", ".join(draw(st.lists(tool(), max_size=2))) + "]")
    if draw(st.booleans()):
        choice = draw(st.one_of(st.sampled_from(['"auto"', '"none"', '"required"']),
                                st.builds(lambda t: '{"type": "function", "function": ' + t + "}",
                                          json_text())))
        parts.append(f'"tool_choice": {choice}')
    return "{" + ", ".join(parts) + "}", stream


def _no_constants(name):
    raise AssertionError(f"{name} sent to a client")


def _check_answer(response: httpx.Response, stream: bool) -> None:
    """A 200 is strict JSON (or SSE of strict JSON ending in [DONE]), with strict-JSON arguments."""
    if not stream:
        bodies = [response.text]
    else:
        events = [line[len("data: "):] for line in response.text.splitlines()
                  if line.startswith("data: ")]
        assert events and events[-1] == "[DONE]", response.text[-500:]
        bodies = events[:-1]
    for text in bodies:
        data = json.loads(text, parse_constant=_no_constants)
        for choice in data.get("choices", []):
            message = choice.get("message") or choice.get("delta") or {}
            for call in message.get("tool_calls") or []:
                arguments = json.loads(call["function"]["arguments"],
                                       parse_constant=_no_constants)
                assert isinstance(arguments, dict)


@pytest.fixture(scope="module")
def served_url(tmp_path_factory, live):
    from policy.hf import HFPolicy
    from policy.tiny import build_tokenizer
    from tests.unit.deploy.test_tool_calls import TOOL_TEMPLATE, _model

    tmp = tmp_path_factory.mktemp("fuzz")
    app = create_app(ServerSettings(
        tracking_uri="http://127.0.0.1:9", model_name=NAME, admin_token="unit-test-admin-token",
        spool_dir=tmp / "spool", cache_dir=tmp / "cache",
    ))
    with TestClient(app):  # runs the lifespan (logger, host); uvicorn serves the same app
        app.state.host._current = ServedModel(
            HFPolicy(*_model(build_tokenizer(vocab=320, seed=0), TOOL_TEMPLATE)), 1)
        with live(app) as url:
            yield url


def test_fuzzed_tool_requests_never_get_a_5xx(served_url):
    seen: Counter = Counter()
    fives: list[str] = []
    with httpx.Client(base_url=served_url, timeout=60) as client:

        @given(chat_body())
        @settings(max_examples=400, derandomize=True, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case) -> None:
            body, stream = case
            response = client.post("/v1/chat/completions", content=body.encode("utf-8"),
                                   headers={"content-type": "application/json"})
            seen[response.status_code] += 1
            if response.status_code >= 500:
                fives.append(body[:300])
            assert response.status_code < 500, (body[:2000], response.text[:500])
            if response.status_code == 200:
                _check_answer(response, stream)
            else:
                assert response.json()["error"]["message"]

        check()
    print(f"fuzzed tool requests: {sum(seen.values())}, statuses {dict(sorted(seen.items()))}, "
          f"5xx {len(fives)}")
    assert seen[200] > 0 and seen[400] > 0  # both sides of the checks were reached


@st.composite
def model_block(draw) -> str:
    """What a model might write inside a call block: a call of any shape, or broken text."""
    if draw(st.booleans()):
        return draw(TEXT)
    name = draw(st.one_of(st.just('"add_numbers"'), st.builds(_encode, VALUES)))
    arguments = draw(st.one_of(json_text(), st.builds(_encode, json_text())))
    return '{"name": ' + name + ', "arguments": ' + arguments + "}"


@given(st.lists(st.tuples(TEXT, model_block()), min_size=1, max_size=3))
@settings(max_examples=500, derandomize=True, deadline=None, database=None)
def test_fuzzed_model_calls_parse_to_strict_json_or_stay_text(pieces):
    text = "".join(f"{before}<tool_call>{block}</tool_call>" for before, block in pieces)
    parsed = parse_tool_calls(text, frozenset({"add_numbers"}))
    for call in parsed.tool_calls:
        assert call["function"]["name"] == "add_numbers"
        arguments = json.loads(call["function"]["arguments"], parse_constant=_no_constants)
        assert isinstance(arguments, dict)
        call["function"]["arguments"].encode("utf-8")  # valid Unicode: a client can read it
    if not parsed.tool_calls:
        assert parsed.content == text
