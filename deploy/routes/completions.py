"""OpenAI-compatible routes: ``POST /v1/completions``, ``POST /v1/chat/completions`` and
``GET /v1/models``.

Each route validates the body (deploy/api.py), checks the replica's limits, plans the sequences
(deploy/gateway.py), and either awaits the engine and answers JSON or streams server-sent events.
Every choice is logged as a behaviour event (deploy/completion_log.py) without blocking.

Deliberately left out: client authentication (added by the signals API work, when merged),
tools/function calling, multimodal content.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from deploy import gateway
from deploy.api import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    ErrorResponse,
    ModelList,
)
from deploy.deps import EngineDep, LoggerDep, MetricsDep, SettingsDep
from deploy.errors import APIError

router = APIRouter(prefix="/v1", tags=["openai"])

_ERRORS = {
    code: {"model": ErrorResponse, "description": text}
    for code, text in (
        (400, "Invalid request; error.param names the field."),
        (413, "Body too large."),
        (503, "No model loaded yet."),
    )
}
_SSE = {"content": {"text/event-stream": {}}, "description": "JSON, or SSE when stream=true."}


def _max_tokens(asked: int | None, default: int, limit: int) -> int:
    value = default if asked is None else asked
    if value > limit:
        raise APIError(400, f"max_tokens={value} exceeds this server's limit {limit}", "max_tokens")
    return value


def _check_prompt(prompt: str, limit: int, param: str) -> None:
    if len(prompt) > limit:
        raise APIError(400, f"{param} has {len(prompt)} characters, limit {limit}", param)


def _fingerprint(version: int) -> str:
    return f"ratchet-v{version}"


@router.post("/completions", response_model=CompletionResponse, responses={**_ERRORS, 200: _SSE})
async def create_completion(
    body: CompletionRequest,
    request: Request,
    engine: EngineDep,
    settings: SettingsDep,
    logger: LoggerDep,
    metrics: MetricsDep,
):
    prompts = body.prompts()
    for p in prompts:
        _check_prompt(p, settings.max_prompt_chars, "prompt")
    max_tokens = _max_tokens(body.max_tokens, 16, settings.max_tokens_limit)
    call = gateway.plan(
        prefix="cmpl",
        prompts=prompts,
        n=body.n,
        max_tokens=max_tokens,
        body=body,
        ctx=gateway.context(request, body, settings.model_name),
        replica_id=settings.replica_id,
        memory=getattr(request.app.state, "responses", None),
    )
    if body.stream:
        return await _stream_completion(call, body, engine, logger, metrics)
    results = await gateway.run(call, engine, logger, metrics)
    await _test_extra_latency(settings, results[0].model_version)
    choices = [
        {
            "index": i,
            "text": r.text,
            "logprobs": _completion_logprobs(r) if body.logprobs is not None else None,
            "finish_reason": r.finish_reason,
        }
        for i, r in enumerate(results)
    ]
    return _response(call, settings, results, "text_completion", choices)


def _response(call, settings, results, kind: str, choices: list[dict]) -> JSONResponse:
    """The non-streaming body both endpoints share: id, object kind, choices, usage."""
    content = {
        "id": call.response_id,
        "object": kind,
        "created": call.created_unix,
        "model": settings.model_name,
        "system_fingerprint": _fingerprint(results[0].model_version),
        "choices": choices,
        "usage": gateway.usage(call, results),
    }
    return JSONResponse(content, headers=call.headers())


def _completion_logprobs(r) -> dict:
    offsets, at = [], 0
    for t in r.token_texts:
        offsets.append(at)
        at += len(t)
    return {
        "tokens": r.token_texts,
        "token_logprobs": r.logprobs,
        "top_logprobs": None,
        "text_offset": offsets,
    }


async def _stream_completion(call, body, engine, logger, metrics) -> StreamingResponse:
    version = engine.served_version() or 0
    base = {
        "id": call.response_id,
        "object": "text_completion",
        "created": call.created_unix,
        "model": call.ctx.model_name,
        "system_fingerprint": _fingerprint(version),
    }

    def chunk(index: int, text: str | None, finish: str | None) -> dict:
        choice = {"index": index, "text": text or "", "logprobs": None, "finish_reason": finish}
        return {**base, "choices": [choice]}

    def usage_chunk(usage: dict) -> dict:
        return {**base, "choices": [], "usage": usage}

    events = await gateway.stream(
        call, engine, logger, metrics, chunk, usage_chunk if body.include_usage() else None
    )
    return StreamingResponse(events, media_type="text/event-stream", headers=call.headers())


@router.post(
    "/chat/completions", response_model=ChatCompletionResponse, responses={**_ERRORS, 200: _SSE}
)
async def create_chat_completion(
    body: ChatCompletionRequest,
    request: Request,
    engine: EngineDep,
    settings: SettingsDep,
    logger: LoggerDep,
    metrics: MetricsDep,
):
    from deploy.engines.base import EngineUnavailable

    try:
        prompt = engine.chat_prompt([(m.role, m.text()) for m in body.messages])
    except EngineUnavailable as exc:
        raise APIError(503, str(exc), code="model_not_ready") from exc
    _check_prompt(prompt, settings.max_prompt_chars, "messages")
    asked = body.max_completion_tokens or body.max_tokens
    max_tokens = _max_tokens(asked, settings.max_tokens_limit, settings.max_tokens_limit)
    call = gateway.plan(
        prefix="chatcmpl",
        prompts=[prompt],
        n=body.n,
        max_tokens=max_tokens,
        body=body,
        ctx=gateway.context(request, body, settings.model_name),
        replica_id=settings.replica_id,
        memory=getattr(request.app.state, "responses", None),
    )
    if body.stream:
        return await _stream_chat(call, body, engine, logger, metrics)
    results = await gateway.run(call, engine, logger, metrics)
    await _test_extra_latency(settings, results[0].model_version)
    choices = [
        {
            "index": i,
            "message": {"role": "assistant", "content": r.text},
            "logprobs": _chat_logprobs(r) if body.logprobs else None,
            "finish_reason": r.finish_reason,
        }
        for i, r in enumerate(results)
    ]
    return _response(call, settings, results, "chat.completion", choices)


def _chat_logprobs(r) -> dict:
    return {
        "content": [
            {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
            for t, lp in zip(r.token_texts, r.logprobs)
        ]
    }


async def _stream_chat(call, body, engine, logger, metrics) -> StreamingResponse:
    version = engine.served_version() or 0
    base = {
        "id": call.response_id,
        "object": "chat.completion.chunk",
        "created": call.created_unix,
        "model": call.ctx.model_name,
        "system_fingerprint": _fingerprint(version),
    }
    started: set[int] = set()

    def chunk(index: int, text: str | None, finish: str | None) -> dict:
        delta = {} if text is None else {"content": text}
        if index not in started:
            started.add(index)
            delta["role"] = "assistant"
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**base, "choices": [choice]}

    def usage_chunk(usage: dict) -> dict:
        return {**base, "choices": [], "usage": usage}

    events = await gateway.stream(
        call, engine, logger, metrics, chunk, usage_chunk if body.include_usage() else None
    )
    return StreamingResponse(events, media_type="text/event-stream", headers=call.headers())


@router.get("/models", response_model=ModelList)
def list_models(engine: EngineDep, settings: SettingsDep) -> ModelList:
    from deploy.api import ModelCard

    version = engine.served_version()
    card = ModelCard(id=settings.model_name, created=0, version=version)
    return ModelList(data=[card])


async def _test_extra_latency(settings, version: int) -> None:
    """Test only: a deliberately slower version (``RATCHET_TEST_EXTRA_LATENCY_MS``)."""
    extra_ms = settings.test_extra_latency_ms.get(version)
    if extra_ms:
        await asyncio.sleep(extra_ms / 1000.0)
