"""OpenAI-compatible routes: ``POST /v1/completions``, ``POST /v1/chat/completions``,
``GET /v1/models`` and ``GET /v1/models/{id}``.

Each route authenticates the client when the replica requires keys (deploy/replica/deps.py),
validates the
body (deploy/replica/api.py: unsupported parameters are refused there), checks the model id and the
replica's limits, plans the sequences (deploy/replica/gateway.py), and either awaits the engine and
answers JSON or streams server-sent events. Every choice is logged as a behaviour event
(deploy/replica/completion_log.py) without blocking.

Chat ``tools`` go through the policy's chat template where it renders them
(deploy/replica/tool_calls.py): the calls the model writes come back as ``tool_calls``.

Deliberately left out: forced tool calls and JSON mode (refused), multimodal content.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from deploy.replica import gateway
from deploy.replica.api import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    ErrorResponse,
    ModelCard,
    ModelList,
)
from deploy.replica.deps import (
    EngineDep,
    HostDep,
    InferenceClientDep,
    LoggerDep,
    MetricsDep,
    SettingsDep,
)
from deploy.replica.errors import APIError
from deploy.replica.tool_calls import ToolTurnError, parse_tool_calls, template_messages

router = APIRouter(prefix="/v1", tags=["openai"])

_ERRORS = {
    code: {"model": ErrorResponse, "description": text}
    for code, text in (
        (400, "Invalid request; error.param names the field, error.code the rule."),
        (401, "Missing or wrong client key (error.code invalid_api_key)."),
        (404, "Unknown model (error.code model_not_found)."),
        (408, "Body not received in time (error.code request_timeout)."),
        (413, "Body too large (error.code request_too_large)."),
        (503, "No model loaded yet."),
    )
}
_SSE = {"content": {"text/event-stream": {}}, "description": "JSON, or SSE when stream=true."}


def _max_tokens(asked: int | None, default: int, limit: int, param: str = "max_tokens") -> int:
    value = min(default, limit) if asked is None else asked
    if value > limit:
        raise APIError(
            400, f"{param}={value} exceeds this model's limit of {limit} completion tokens",
            param, "invalid_value",
        )
    return value


def _check_prompt(prompt: str, limit: int, param: str) -> None:
    if len(prompt) > limit:
        raise APIError(
            400, f"{param} has {len(prompt)} characters, more than this replica's limit {limit}",
            param, "context_length_exceeded",
        )


def served_model_ids(settings) -> list[str]:
    """The ids a request's ``model`` may name: the registered name, then its aliases."""
    return [settings.model_name, *settings.model_aliases]


def _check_model(model: str | None, settings) -> None:
    """None is the served model; any id other than the served model's is a 404, as OpenAI's."""
    if model is not None and model not in served_model_ids(settings):
        raise APIError(
            404, f"The model {model!r} does not exist on this replica; it serves "
            f"{settings.model_name!r}", "model", "model_not_found", kind="invalid_request_error",
        )


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
    client: InferenceClientDep,
):
    _check_model(body.model, settings)
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
        ctx=gateway.context(request, body, settings.model_name,
                            trust_arm=settings.trust_arm_header),
        replica_id=settings.replica_id,
        memory=getattr(request.app.state, "responses", None),
        owner=client,
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
    texts, logprobs = gateway.shown(r)
    offsets, at = [], 0
    for t in texts:
        offsets.append(at)
        at += len(t)
    return {
        "tokens": texts,
        "token_logprobs": logprobs,
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
    client: InferenceClientDep,
):
    from deploy.replica.engines.base import EngineUnavailable

    _check_model(body.model, settings)
    try:
        templated = _tool_template(body, engine)
        if templated:
            prompt = _tool_prompt(body, engine)
        else:
            prompt = engine.chat_prompt([(m.role, m.text()) for m in body.messages])
    except EngineUnavailable as exc:
        raise APIError(503, str(exc), code="model_not_ready") from exc
    _check_prompt(prompt, settings.max_prompt_chars, "messages")
    param = "max_completion_tokens" if body.max_completion_tokens else "max_tokens"
    asked = body.max_completion_tokens or body.max_tokens
    max_tokens = _max_tokens(asked, settings.default_max_tokens, settings.max_tokens_limit, param)
    call = gateway.plan(
        prefix="chatcmpl",
        prompts=[prompt],
        n=body.n,
        max_tokens=max_tokens,
        body=body,
        ctx=gateway.context(request, body, settings.model_name,
                            trust_arm=settings.trust_arm_header),
        replica_id=settings.replica_id,
        memory=getattr(request.app.state, "responses", None),
        owner=client,
        templated=templated,
    )
    if body.stream and body.renders_tools():
        return await _stream_tool_chat(call, body, engine, logger, metrics)
    if body.stream:
        return await _stream_chat(call, body, engine, logger, metrics)
    results = await gateway.run(call, engine, logger, metrics)
    await _test_extra_latency(settings, results[0].model_version)
    choices = []
    for i, r in enumerate(results):
        message, finish = _assistant(r, body)
        choices.append({
            "index": i,
            "message": message,
            "logprobs": _chat_logprobs(r) if body.logprobs else None,
            "finish_reason": finish,
        })
    return _response(call, settings, results, "chat.completion", choices)


def _tool_template(body: ChatCompletionRequest, engine) -> bool:
    """Whether the chat goes through the policy's tool template (tools rendered, or tool turns in
    the history); a 400 ``unsupported_parameter`` when the template renders no tools."""
    history = body.history_tool_calls()
    if not body.renders_tools() and history is None:
        return False
    if engine.tool_format() is None:
        param = "tools" if body.renders_tools() else f"messages.{history}.tool_calls"
        raise APIError(
            400, f"{param}: this model's chat template does not render tools", param,
            "unsupported_parameter",
        )
    return True


def _tool_prompt(body: ChatCompletionRequest, engine) -> str:
    from jinja2 import TemplateError

    try:
        messages = template_messages(body.messages)
    except ToolTurnError as exc:
        raise APIError(400, str(exc), exc.param, "invalid_value") from exc
    tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.renders_tools() else None
    try:
        return engine.tool_prompt(messages, tools)
    except (TemplateError, RecursionError) as exc:  # depth is bounded by the request's checks
        raise APIError(
            400, f"messages: the model's chat template cannot render this conversation ({exc})",
            "messages", "invalid_value",
        ) from exc


def _assistant(result, body: ChatCompletionRequest) -> tuple[dict, str]:
    """The assistant message and finish reason of one choice: with tools rendered, the calls
    the model wrote (hermes blocks naming an offered tool) become ``tool_calls``."""
    if not body.renders_tools():
        return {"role": "assistant", "content": result.text}, result.finish_reason
    parsed = parse_tool_calls(result.text, body.tool_names())
    if not parsed.tool_calls:
        return {"role": "assistant", "content": result.text}, result.finish_reason
    calls = parsed.tool_calls if body.parallel_tool_calls is not False else parsed.tool_calls[:1]
    return {"role": "assistant", "content": parsed.content, "tool_calls": calls}, "tool_calls"


def _chat_logprobs(r) -> dict:
    return {
        "content": [
            {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
            for t, lp in zip(*gateway.shown(r))
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


async def _stream_tool_chat(call, body, engine, logger, metrics) -> StreamingResponse:
    """A streamed request with tools: the calls are read from the whole completion, so each
    choice is sent as one delta (content and/or ``tool_calls``) once it is complete."""
    results = await gateway.run(call, engine, logger, metrics)
    # read before the 200 goes out: whatever the model wrote, the stream then cannot break
    replies = [_assistant(r, body) for r in results]
    base = {
        "id": call.response_id,
        "object": "chat.completion.chunk",
        "created": call.created_unix,
        "model": call.ctx.model_name,
        "system_fingerprint": _fingerprint(results[0].model_version),
    }

    def chunk(index: int, delta: dict, finish: str | None) -> dict:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {**base, "choices": [choice]}

    def events():
        for i, (message, finish) in enumerate(replies):
            delta = {"role": "assistant", "content": message["content"]}
            if message.get("tool_calls"):
                delta["tool_calls"] = [
                    {"index": j, **c} for j, c in enumerate(message["tool_calls"])
                ]
            yield gateway.sse(chunk(i, delta, None))
            yield gateway.sse(chunk(i, {}, finish))
        if body.include_usage():
            yield gateway.sse({**base, "choices": [], "usage": gateway.usage(call, results)})
        yield gateway.sse("[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream", headers=call.headers())


def _card(model_id: str, engine, host, request: Request):
    from deploy.replica.api import ModelCard

    current = host.current
    created = current.loaded_unix if current is not None else request.app.state.started_unix
    return ModelCard(id=model_id, created=int(created), version=engine.served_version())


@router.get("/models", response_model=ModelList)
def list_models(
    engine: EngineDep, settings: SettingsDep, host: HostDep, request: Request,
    _: InferenceClientDep,
) -> ModelList:
    return ModelList(data=[_card(settings.model_name, engine, host, request)])


@router.get(
    "/models/{model_id}", response_model=ModelCard, responses={404: _ERRORS[404]}
)
def retrieve_model(
    model_id: str, engine: EngineDep, settings: SettingsDep, host: HostDep, request: Request,
    _: InferenceClientDep,
) -> ModelCard:
    _check_model(model_id, settings)
    return _card(model_id, engine, host, request)


async def _test_extra_latency(settings, version: int) -> None:
    """Test only: a deliberately slower version (``RATCHET_TEST_EXTRA_LATENCY_MS``)."""
    extra_ms = settings.test_extra_latency_ms.get(version)
    if extra_ms:
        await asyncio.sleep(extra_ms / 1000.0)
