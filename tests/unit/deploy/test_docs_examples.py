"""Every Python example of docs/API.md and docs/SERVING.md runs, as written, with the official
``openai`` client against a live replica (uvicorn on 127.0.0.1, an untrained toy MoE behind the
real torch engine): the placeholders (URL, KEY, MODEL, ID, text_now) are filled in, nothing else."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import openai
import pytest
from fastapi.testclient import TestClient

from deploy.replica.model_host import ServedModel
from deploy.replica.server import create_app
from deploy.replica.settings import ServerSettings
from deploy.replica.toy_models import build_untrained

DOCS = Path(__file__).resolve().parents[3] / "docs"
NAME = "toy-coder"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _blocks() -> list[tuple[str, str]]:
    out = []
    for doc in ("API.md", "SERVING.md"):
        for i, code in enumerate(BLOCK.findall((DOCS / doc).read_text())):
            if "openai" in code.lower():
                out.append((f"{doc}#{i}", code))
    return out


@pytest.fixture(scope="module")
def replica(tmp_path_factory, live):
    tmp = tmp_path_factory.mktemp("docs")
    settings = ServerSettings(
        tracking_uri="http://127.0.0.1:9", model_name=NAME, admin_token="docs-admin-token",
        spool_dir=tmp / "spool", cache_dir=tmp / "cache", api_keys_path=tmp / "keys.json",
        max_tokens_limit=64)
    app = create_app(settings)
    with TestClient(app), live(app) as url:
        app.state.host._current = ServedModel(build_untrained(0), 7)
        yield app, url


def test_the_docs_have_client_examples():
    assert {name.split("#")[0] for name, _ in _blocks()} == {"API.md", "SERVING.md"}


@pytest.mark.parametrize(("name", "code"), _blocks(), ids=[n for n, _ in _blocks()])
def test_example_runs_against_a_live_replica(replica, name, code):
    app, url = replica
    key = app.state.api_keys.create("docs", None)[1]
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)
    served = client.completions.create(model=NAME, prompt="# evaluate\n12+7 = ", max_tokens=8)
    code = (code.replace("http://127.0.0.1:8000", url).replace('"rk_..."', repr(key))
            .replace('"MODEL"', repr(NAME)))
    env = {"URL": url, "KEY": key, "ID": served.id, "text_now": "def add(a, b):\n    return a+b\n"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, name, "exec"), env)  # noqa: S102 - the docs' own examples
