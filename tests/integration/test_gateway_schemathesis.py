"""Schemathesis against the replica's own OpenAPI schema: no body makes the OpenAI endpoints
answer 5xx, and every 4xx is in OpenAI's error shape.

The app runs in-process (ASGI, through Starlette's TestClient with its lifespan started) with a
real untrained toy MoE behind the real torch engine; the model is put in the host directly rather
than downloaded. Examples are bounded (50 per endpoint and mode) and derandomised, so a failure
reproduces. ``max_tokens_limit`` is 16 to keep sampling cheap: larger asks are a 400. The chat
endpoint is also run against a tiny Qwen3-MoE whose template renders tools (the toy refuses
``tools`` before rendering anything). Status counts are printed (``-s``).
"""

from __future__ import annotations

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.generation import GenerationMode

from deploy.replica.model_host import ServedModel
from deploy.replica.server import create_app
from deploy.replica.settings import ServerSettings
from deploy.replica.toy_models import build_untrained

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ENDPOINTS = ["/v1/completions", "/v1/chat/completions"]


def _app(tmp):
    return create_app(
        ServerSettings(
            tracking_uri="http://127.0.0.1:9",
            model_name="toy",
            admin_token="schemathesis-admin-token",
            spool_dir=tmp / "spool",
            cache_dir=tmp / "cache",
            max_tokens_limit=16,
        )
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    app = _app(tmp_path_factory.mktemp("schemathesis"))
    with TestClient(app, raise_server_exceptions=False) as client:
        app.state.host._current = ServedModel(build_untrained(0), 1)
        yield app, client


@pytest.fixture(scope="module")
def served_tools(tmp_path_factory):
    """The same app serving an untrained tiny Qwen3-MoE whose chat template renders tools, so
    generated ``tools``, ``tool_choice`` and history ``tool_calls`` reach the template."""
    from policy.hf import HFPolicy
    from policy.tiny import build_tokenizer
    from tests.unit.deploy.test_tool_calls import TOOL_TEMPLATE, _model

    app = _app(tmp_path_factory.mktemp("schemathesis-tools"))
    policy = HFPolicy(*_model(build_tokenizer(vocab=320, seed=0), TOOL_TEMPLATE))
    with TestClient(app, raise_server_exceptions=False) as client:
        app.state.host._current = ServedModel(policy, 1)
        yield app, client


def _no_server_errors(app, client, path, mode) -> dict[int, int]:
    schema = schemathesis.openapi.from_dict(app.openapi())
    operation = schema[path]["POST"]
    seen: dict[int, int] = {}

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=50,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def check(case) -> None:
        kwargs = case.as_transport_kwargs(base_url="http://testserver")
        response = client.request(**kwargs)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        assert response.status_code < 500, (kwargs, response.text)
        if response.status_code >= 400:
            error = response.json()["error"]
            assert error["message"] and error["type"]

    check()
    print(f"schemathesis {path} {mode.value}: statuses {dict(sorted(seen.items()))}")
    assert sum(seen.values()) >= 10
    return seen


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("path", ENDPOINTS)
def test_no_server_errors(served, path, mode):
    seen = _no_server_errors(*served, path, mode)
    if mode is GenerationMode.POSITIVE:
        assert seen.get(200, 0) > 0, seen  # some valid bodies were actually served


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_errors_where_tools_are_rendered(served_tools, mode):
    seen = _no_server_errors(*served_tools, "/v1/chat/completions", mode)
    if mode is GenerationMode.POSITIVE:
        assert seen.get(200, 0) > 0, seen
