"""An external engine: a vLLM OpenAI-compatible server, reached over HTTP.

Each ``SamplingRequest`` becomes one ``POST {url}/v1/completions`` with ``n=1``, ``logprobs=0``
(the sampled token's logprob) and ``return_token_ids: true``; vLLM batches concurrent requests
itself. The server must run with ``--logprobs-mode processed_logprobs`` so the logprobs are those
of the distribution actually sampled (temperature and top-p applied) — deploy/replica/ENGINES.md
states
the whole contract. The result keeps exactly the token ids and logprobs vLLM returned.

Routed experts: vLLM's CPU build cannot return them, so when a ``router_pass`` (the same
checkpoint loaded in this replica) is given, they are recomputed by a teacher-forced forward over
prompt + response ids (``routed_experts_source="teacher_forced"``); otherwise they are left empty
(``"none"``). ``PolicyRoutes`` is that pass for any policy of the plug (policy/base.py).

Two ways to run it: ``VllmEngine(url=...)`` forwards to a server someone else runs;
``VllmEngine.managed(ManagedVllm(...))`` owns the server — a child process started by
runtime/vllm_server.py on the champion's HF checkpoint, with the same checkpoint loaded as a
policy for the router pass — and ``reload()`` restarts it on a new champion: the new child starts
while the old one serves, requests switch to it, the old one is stopped by PID once its requests
are done. A request keeps the server and version it started with.

``stop_after_code_block``: vLLM has no such rule, so the reply is sampled to its budget and cut
after the token that closes its first code block (``cut_after_code_block``): the tokens kept are
those a decode that stopped there would have sampled, the ones after it are discarded (computed
for nothing). Not while streaming (the text after the block would already have been sent): a 400.

Exercised for real by the ``make test-vllm`` tier (tests/vllm/), not by the default suite.

Deliberately left out: chat templates beyond the policy's own (``chat_prompt``), vLLM's GPU-only
native routed experts, and wiring ``reload`` to ``POST /admin/reload`` (the model host loads toy
checkpoints only; see deploy/replica/ENGINES.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from deploy.replica.engines.base import (
    DeltaCallback,
    EngineInputError,
    EngineResult,
    EngineUnavailable,
    SamplingRequest,
)

log = logging.getLogger(__name__)


def vllm_body(req: SamplingRequest, served_model: str, stream: bool) -> dict:
    """The vLLM ``/v1/completions`` body for one sequence."""
    body = {
        "model": served_model,
        "prompt": req.prompt,
        "max_tokens": req.max_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "n": 1,
        "logprobs": 0,
        "return_token_ids": True,
        "stream": stream,
    }
    if req.seed is not None:
        body["seed"] = req.seed
    if req.stop:
        body["stop"] = list(req.stop)
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


class _Acc:
    """What the response (or its stream) said about one sequence."""

    def __init__(self) -> None:
        self.text, self.ids, self.lps, self.tokens = "", [], [], []
        self.prompt_ids: list[int] = []
        self.finish = "length"
        self.first_at: float | None = None

    def add(self, payload: dict) -> str:
        """Fold one response or chunk in; returns its new text."""
        if payload.get("prompt_token_ids"):
            self.prompt_ids = list(payload["prompt_token_ids"])
        if not payload.get("choices"):
            return ""
        choice = payload["choices"][0]
        if choice.get("prompt_token_ids"):
            self.prompt_ids = list(choice["prompt_token_ids"])
        self.ids += list(choice.get("token_ids") or [])
        lp = choice.get("logprobs") or {}
        self.lps += [min(float(x), 0.0) for x in lp.get("token_logprobs") or []]
        self.tokens += list(lp.get("tokens") or [])
        if choice.get("finish_reason"):
            self.finish = "stop" if choice["finish_reason"] == "stop" else "length"
        text = choice.get("text") or ""
        self.text += text
        if self.first_at is None and (text or self.ids):
            self.first_at = time.perf_counter()
        return text


@dataclass
class _Target:
    """Where a request goes and what answers there; a request keeps the one it started with."""

    url: str
    served_model: str
    version: int | None
    routes: object | None
    """``route(ids) -> (T, L, k) | None`` and ``chat_prompt(messages)``: the router pass."""
    inflight: int = 0


class PolicyRoutes:
    """The router pass over a policy of the plug (policy/base.py): teacher-forced routes of a
    sequence, and the policy's chat template. One forward at a time (the policy's routing hooks
    keep per-forward state)."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self._lock = threading.Lock()

    def route(self, ids: Sequence[int]) -> list | None:
        """Experts per position of ``ids``, (T, L, k); None for a dense policy."""
        from policy.base import teacher_forced_routes

        with self._lock:
            routes, _ = teacher_forced_routes(self.policy, list(ids), [])
        return routes or None

    def chat_prompt(self, messages: Sequence[tuple[str, str]]) -> str:
        """The tokenizer's chat template when it has one, else the contents joined by newlines."""
        tok = getattr(self.policy, "tokenizer", None)
        if tok is not None and getattr(tok, "chat_template", None):
            chat = [{"role": r, "content": c} for r, c in messages]
            return tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        return "\n".join(content for _, content in messages)


def registry_champion(
    tracking_uri: str, model_name: str, cache_dir: Path, alias: str = "champion"
) -> Callable[[], tuple[int, Path]]:
    """A ``ManagedVllm`` source: the version ``alias`` points to and its downloaded directory."""

    def source() -> tuple[int, Path]:
        from runtime import registry

        version = registry.resolve_alias(tracking_uri, model_name, alias)
        if version is None:
            raise LookupError(f"alias {alias!r} of model {model_name!r} is not set")
        return version, registry.download_checkpoint(tracking_uri, model_name, version,
                                                     Path(cache_dir))

    return source


class ManagedVllm:
    """A vLLM child process on the checkpoint ``source()`` names, plus that checkpoint loaded as
    a policy (``policy.loader.load_policy``) for the router pass. ``reload()`` switches to a new
    version (start new, switch, drain and stop old); a failure leaves the old one serving."""

    def __init__(
        self,
        source: Callable[[], tuple[int, Path]],
        workdir: Path,
        *,
        venv: Path | None = None,
        dtype: str = "bfloat16",
        start_timeout_s: float = 900.0,
        drain_timeout_s: float = 60.0,
    ) -> None:
        self.source, self.workdir, self.venv, self.dtype = source, Path(workdir), venv, dtype
        self.start_timeout_s, self.drain_timeout_s = start_timeout_s, drain_timeout_s
        self.target: _Target | None = None
        self.server = None
        self.load_error: str | None = None
        self._lock = threading.Lock()
        self._starts = 0

    def reload(self) -> int:
        """Serve the version ``source()`` names now (no-op if served already); returns it."""
        from policy.loader import load_policy
        from runtime.vllm_server import VllmServer

        with self._lock:
            try:
                version, directory = self.source()
                if self.target is not None and self.target.version == version:
                    return version
                policy = load_policy(directory)
                self._starts += 1
                server = VllmServer.start(
                    directory, self.workdir / f"v{version}-{self._starts}", venv=self.venv,
                    served_model=f"v{version}", dtype=self.dtype, timeout_s=self.start_timeout_s)
            except Exception as exc:
                self.load_error = f"{type(exc).__name__}: {exc}"[:2000]
                raise
            old, old_server = self.target, self.server
            self.target = _Target(server.url, server.served_model, version, PolicyRoutes(policy))
            self.server, self.load_error = server, None
        if old_server is not None:
            self._drain(old)
            old_server.stop()
        return version

    def _drain(self, old: _Target) -> None:
        deadline = time.monotonic() + self.drain_timeout_s
        while old.inflight > 0 and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self) -> None:
        """Stop the vLLM child by its PID."""
        with self._lock:
            if self.server is not None:
                self.server.stop()
            self.server, self.target = None, None


class VllmEngine:
    """Forwards to a vLLM server; ``router_pass`` supplies teacher-forced routed experts."""

    def __init__(
        self,
        *,
        url: str,
        served_model: str,
        timeout_s: float = 120.0,
        router_pass: Callable[[], object | None] | None = None,
        version_source: Callable[[], int | None] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.served_model = served_model
        self.timeout_s = timeout_s
        self.router_pass = router_pass
        self.version_source = version_source
        self.server: ManagedVllm | None = None
        self._client = None

    @classmethod
    def managed(cls, server: ManagedVllm, *, timeout_s: float = 120.0) -> VllmEngine:
        """An engine that owns ``server``: started by ``start`` if not yet, stopped by
        ``close``, restarted on a new champion by ``reload``."""
        engine = cls(url="managed", served_model="managed", timeout_s=timeout_s)
        engine.server = server
        return engine

    def start(self) -> None:
        import httpx

        self._client = httpx.AsyncClient(timeout=self.timeout_s)
        if self.server is not None and self.server.target is None:
            threading.Thread(target=self._first_load, name="vllm-start", daemon=True).start()

    def _first_load(self) -> None:
        try:
            self.server.reload()
        except Exception:  # noqa: BLE001  (kept in server.load_error; requests get 503)
            log.warning("vLLM did not start: %s", self.server.load_error)

    async def reload(self) -> int:
        """Serve the champion ``source()`` names now; restarts the vLLM child if it changed."""
        if self.server is None:
            raise RuntimeError("only a managed vLLM engine reloads")
        return await asyncio.to_thread(self.server.reload)

    def close(self) -> None:
        self._client = None  # connections close with the event loop
        if self.server is not None:
            self.server.close()

    def _target(self) -> _Target:
        if self.server is None:
            routes = self.router_pass() if self.router_pass else None
            return _Target(self.url, self.served_model, self.served_version(), routes)
        target = self.server.target
        if target is None:
            why = self.server.load_error or "starting"
            raise EngineUnavailable(f"vLLM engine not serving yet ({why})")
        return target

    def served_version(self) -> int | None:
        if self.server is not None:
            return self.server.target.version if self.server.target else None
        if self.version_source is not None:
            return self.version_source()
        model = self.router_pass() if self.router_pass else None
        return getattr(model, "version", None)

    def chat_prompt(self, messages: Sequence[tuple[str, str]]) -> str:
        routes = self._target().routes
        if routes is None:
            return "\n".join(content for _, content in messages)
        return routes.chat_prompt(messages)

    def tool_format(self) -> None:
        """Tools are not rendered for the external engine yet (its tool parsers are not wired to
        the behaviour log): a tool request is refused."""
        return None

    def tool_prompt(self, messages: list[dict], tools: list[dict] | None) -> str:
        raise EngineInputError("tool calls are not served through the vLLM engine", "tools",
                               "unsupported_parameter")

    async def generate(
        self, requests: Sequence[SamplingRequest], on_delta: DeltaCallback | None = None
    ) -> list[EngineResult]:
        if self._client is None:
            raise EngineUnavailable("vLLM engine not started")
        target = self._target()
        target.inflight += 1
        try:
            return list(await asyncio.gather(
                *(self._one(target, i, r, on_delta) for i, r in enumerate(requests))))
        finally:
            target.inflight -= 1

    async def _one(self, target: _Target, index: int, req: SamplingRequest, on_delta
                   ) -> EngineResult:
        import httpx

        if req.stop_after_code_block and on_delta is not None:
            raise EngineInputError("stop_after_code_block is not served while streaming from "
                                   "the vLLM engine; use stream=false", "stop_after_code_block",
                                   "unsupported_value")
        start, acc = time.perf_counter(), _Acc()
        body = vllm_body(req, target.served_model, stream=on_delta is not None)
        url = f"{target.url}/v1/completions"
        try:
            if on_delta is None:
                resp = await self._client.post(url, json=body)
                _raise_for(resp.status_code, resp.text)
                acc.add(resp.json())
            else:
                await self._stream(url, body, acc, index, on_delta)
        except httpx.TransportError as exc:
            raise EngineUnavailable(f"vLLM at {target.url} unreachable: {exc}") from exc
        done = time.perf_counter()
        result = EngineResult(
            text=acc.text,
            token_ids=acc.ids,
            logprobs=acc.lps,
            prompt_token_ids=acc.prompt_ids,
            finish_reason=acc.finish,
            model_version=target.version or 0,
            time_to_first_token_ms=((acc.first_at or done) - start) * 1000.0,
            latency_ms=(done - start) * 1000.0,
            routed_experts_source="none",
            token_texts=acc.tokens,
        )
        if req.stop_after_code_block:
            cut_after_code_block(result)
        if target.routes is not None:
            await asyncio.to_thread(_teacher_force, target.routes, result)
        return result

    async def _stream(self, url: str, body: dict, acc: _Acc, index: int, on_delta) -> None:
        async with self._client.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                _raise_for(resp.status_code, (await resp.aread()).decode(errors="replace"))
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                text = acc.add(json.loads(line[len("data: ") :]))
                if text:
                    on_delta(index, text)


def cut_after_code_block(result: EngineResult) -> None:
    """End ``result`` on the token whose text closes its first code block
    (``tasks.humaneval.reply_complete`` of the tokens' texts so far), finish_reason 'stop';
    unchanged when the block is never closed or the reply ended first (EOS, a stop string)."""
    from tasks.humaneval import reply_complete

    if result.finish_reason == "stop" and not reply_complete(result.text):
        return
    text, end = "", None
    for i, piece in enumerate(result.token_texts):
        text += piece
        if reply_complete(text):
            end = i + 1
            break
    if end is None or (end == len(result.token_ids) and result.finish_reason == "stop"):
        return  # never closed, or it ended there anyway (EOS or a stop string)
    result.token_ids, result.logprobs = result.token_ids[:end], result.logprobs[:end]
    result.token_texts, result.text = result.token_texts[:end], text
    result.finish_reason, result.ends_with_eos = "stop", False


def _teacher_force(routes, result: EngineResult) -> None:
    """Fill routed experts from a forward of prompt + response ids with the local model: the
    response token j's experts are those at the position that predicted it (P - 1 + j)."""
    route = getattr(routes, "route", None)
    if route is None or not result.token_ids or not result.prompt_token_ids:
        return
    per_position = route(result.prompt_token_ids + result.token_ids[:-1])
    if per_position is None:
        return
    p = len(result.prompt_token_ids)
    result.prompt_routed_experts = per_position[:p]
    result.routed_experts = per_position[p - 1 :]
    result.routed_experts_source = "teacher_forced"


def _raise_for(status: int, text: str) -> None:
    if 400 <= status < 500:
        raise EngineInputError(f"vLLM refused the request: {text[:500]}")
    if status != 200:
        raise EngineUnavailable(f"vLLM answered {status}: {text[:500]}")
