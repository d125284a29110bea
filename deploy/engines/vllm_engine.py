"""An external engine: a vLLM OpenAI-compatible server, reached over HTTP.

Each ``SamplingRequest`` becomes one ``POST {url}/v1/completions`` with ``n=1``, ``logprobs=0``
(the sampled token's logprob) and ``return_token_ids: true``; vLLM batches concurrent requests
itself. The server must run with ``--logprobs-mode processed_logprobs`` so the logprobs are those
of the distribution actually sampled (temperature and top-p applied) — deploy/ENGINES.md states
the whole contract. The result keeps exactly the token ids and logprobs vLLM returned.

Routed experts: vLLM's CPU build cannot return them, so when a ``router_pass`` (the same
checkpoint loaded in this replica, as a ``StepModel`` source) is given, they are recomputed by a
teacher-forced forward over prompt + response ids (``routed_experts_source="teacher_forced"``);
otherwise they are left empty (``"none"``).

Status: written against vLLM's documented response shape; not exercised by the default test
suite (no vLLM here) — the ``make test-vllm`` tier is where it is run for real.

Deliberately left out: starting or reloading the vLLM process, chat templates (the chat route's
prompt comes from ``chat_prompt``: the local policy's template when one is loaded).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence

from deploy.engines.base import (
    DeltaCallback,
    EngineInputError,
    EngineResult,
    EngineUnavailable,
    SamplingRequest,
)


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
        self._client = None

    def start(self) -> None:
        import httpx

        self._client = httpx.AsyncClient(timeout=self.timeout_s)

    def close(self) -> None:
        self._client = None  # connections close with the event loop

    def served_version(self) -> int | None:
        if self.version_source is not None:
            return self.version_source()
        model = self.router_pass() if self.router_pass else None
        return getattr(model, "version", None)

    def chat_prompt(self, messages: Sequence[tuple[str, str]]) -> str:
        model = self.router_pass() if self.router_pass else None
        if model is None:
            return "\n".join(content for _, content in messages)
        return model.chat_prompt(messages)

    async def generate(
        self, requests: Sequence[SamplingRequest], on_delta: DeltaCallback | None = None
    ) -> list[EngineResult]:
        if self._client is None:
            raise EngineUnavailable("vLLM engine not started")
        return list(
            await asyncio.gather(*(self._one(i, r, on_delta) for i, r in enumerate(requests)))
        )

    async def _one(self, index: int, req: SamplingRequest, on_delta) -> EngineResult:
        import httpx

        start, acc = time.perf_counter(), _Acc()
        body = vllm_body(req, self.served_model, stream=on_delta is not None)
        try:
            if on_delta is None:
                resp = await self._client.post(f"{self.url}/v1/completions", json=body)
                _raise_for(resp.status_code, resp.text)
                acc.add(resp.json())
            else:
                await self._stream(body, acc, index, on_delta)
        except httpx.TransportError as exc:
            raise EngineUnavailable(f"vLLM at {self.url} unreachable: {exc}") from exc
        return self._result(acc, start)

    async def _stream(self, body: dict, acc: _Acc, index: int, on_delta) -> None:
        async with self._client.stream("POST", f"{self.url}/v1/completions", json=body) as resp:
            if resp.status_code != 200:
                _raise_for(resp.status_code, (await resp.aread()).decode(errors="replace"))
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                text = acc.add(json.loads(line[len("data: ") :]))
                if text:
                    on_delta(index, text)

    def _result(self, acc: _Acc, start: float) -> EngineResult:
        done = time.perf_counter()
        result = EngineResult(
            text=acc.text,
            token_ids=acc.ids,
            logprobs=acc.lps,
            prompt_token_ids=acc.prompt_ids,
            finish_reason=acc.finish,
            model_version=self.served_version() or 0,
            time_to_first_token_ms=((acc.first_at or done) - start) * 1000.0,
            latency_ms=(done - start) * 1000.0,
            routed_experts_source="none",
            token_texts=acc.tokens,
        )
        self._teacher_force(result)
        return result

    def _teacher_force(self, result: EngineResult) -> None:
        """Fill routed experts from a forward of prompt + response ids with the local model."""
        model = self.router_pass() if self.router_pass else None
        route = getattr(model, "route", None)
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
