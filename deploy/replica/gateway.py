"""The gateway's core, shared by the completions and chat routes: from a validated OpenAI request
to engine requests, to behaviour events, to a JSON body or a stream of server-sent events.

``Call`` holds one HTTP request's plan: its ``SamplingRequest``s (one per prompt and choice;
choice ``k`` samples with ``seed + k``), the response id, the conversation context. ``run`` awaits
the engine and logs; ``stream`` starts the engine, waits for the first token (so a bad request is
still a 4xx, not an error inside a 200 stream) and then yields ``data: {...}`` chunks and a final
``data: [DONE]``. Every served choice is logged once it is complete, even if the client went away
mid-stream, and remembered with the client it was served to (its owner, for the signals API).
A final end-of-sequence token is logged (the trainer learns to stop from it) but is not shown to
the client: ``shown`` leaves it out of the logprobs and ``usage`` out of ``completion_tokens``.

Deliberately left out: the OpenAI body shapes (deploy/replica/api.py), the route wiring
(deploy/replica/routes/completions.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from fastapi import Request

from deploy.replica.api import choice_response_id
from deploy.replica.api_keys import ApiClient
from deploy.replica.completion_log import RequestContext, log_completion
from deploy.replica.engines.base import (
    Engine,
    EngineInputError,
    EngineResult,
    EngineUnavailable,
    SamplingRequest,
)
from deploy.replica.errors import APIError, error_body
from ingest.schema import ARMS

log = logging.getLogger(__name__)

CONVERSATION_HEADER = "X-Conversation-Id"
RESPONSE_IDS_HEADER = "X-Ratchet-Response-Ids"


@dataclass
class Call:
    """One HTTP request's worth of sampling: its sequences, ids and who asked."""

    response_id: str
    requests: list[SamplingRequest]
    prompt_count: int
    ctx: RequestContext
    replica_id: str
    memory: object | None = None
    """The replica's response memory (``remember(id, text=, created=, conversation_id=,
    owner=)``), when it keeps one for the signals API."""
    owner: ApiClient | None = None
    """The client the responses are served to; None when served without a key."""

    @property
    def created_unix(self) -> int:
        return int(self.ctx.created.timestamp())

    def choice_ids(self) -> list[str]:
        n = len(self.requests)
        return [choice_response_id(self.response_id, i, n) for i in range(n)]

    def headers(self) -> dict[str, str]:
        return {
            CONVERSATION_HEADER: self.ctx.conversation_id,
            RESPONSE_IDS_HEADER: ",".join(self.choice_ids()),
            "X-Ratchet-Replica": self.replica_id,
            "X-Ratchet-Created": self.ctx.created.isoformat(),
        }


_ID_CHARS = re.compile(r"[\x21-\x7e]{1,128}")
"""A conversation id is echoed in a response header: 1 to 128 visible ASCII characters."""


def conversation_id(request: Request, body_value: str | None) -> str:
    """Header, else metadata / legacy body field, else a generated id."""
    header = request.headers.get(CONVERSATION_HEADER)
    value = header or body_value
    if value is None:
        return f"conv-{uuid.uuid4().hex}"
    if not _ID_CHARS.fullmatch(value):
        param = CONVERSATION_HEADER if header else "metadata.conversation_id"
        raise APIError(
            400, "conversation id must be 1 to 128 visible ASCII characters (no spaces)", param
        )
    return value


def plan(
    *,
    prefix: str,
    prompts: list[str],
    n: int,
    max_tokens: int,
    body,
    ctx: RequestContext,
    replica_id: str,
    memory: object | None = None,
    owner: ApiClient | None = None,
    templated: bool = False,
) -> Call:
    """The sequences to sample: ``n`` choices of each prompt, choice k seeded ``seed + k``;
    ``templated``: the prompts are already rendered through the chat template (tool requests)."""
    requests = []
    for p in prompts:
        for _ in range(n):
            k = len(requests)
            seed = None if body.seed is None else (body.seed + k) % 2**63
            requests.append(
                SamplingRequest(
                    prompt=p,
                    max_tokens=max_tokens,
                    temperature=body.temperature,
                    top_p=body.top_p,
                    seed=seed,
                    stop=body.stop_strings(),
                    stop_after_code_block=body.stop_after_code_block,
                    templated=templated,
                )
            )
    return Call(
        f"{prefix}-{uuid.uuid4().hex}", requests, len(prompts), ctx, replica_id, memory, owner
    )


def context(request: Request, body, model_name: str, *, trust_arm: bool = False
            ) -> RequestContext:
    """Who asked, in which conversation; with ``trust_arm`` (a replica behind the fleet router)
    also the router's arm header, when it names an arm."""
    arm = request.headers.get("x-ratchet-arm") if trust_arm else None
    return RequestContext(
        conversation_id=conversation_id(request, body.meta("conversation_id")),
        user=body.user or body.user_id or "anonymous",
        task_kind=body.meta("task_kind") or "unknown",
        model_name=model_name,
        created=datetime.now(UTC),
        arm=arm if arm in ARMS else None,
    )


def _as_api_error(exc: BaseException) -> APIError | None:
    if isinstance(exc, EngineInputError):
        return APIError(400, str(exc), exc.param, getattr(exc, "code", None))
    if isinstance(exc, EngineUnavailable):
        return APIError(503, str(exc), code="model_not_ready")
    return None


def _log_all(call: Call, results: list[EngineResult], logger, metrics) -> None:
    metrics.prompt_tokens.inc(sum(len(r.prompt_token_ids) for r in results))
    metrics.completion_tokens.inc(sum(len(r.token_ids) for r in results))
    for req, result, rid in zip(call.requests, results, call.choice_ids()):
        if call.memory is not None:  # what signals about this response are checked against
            call.memory.remember(
                rid,
                text=result.text,
                created=call.ctx.created,
                conversation_id=call.ctx.conversation_id,
                owner=call.owner,
            )
        if logger is not None:
            log_completion(logger, metrics, call.ctx, req, result, rid)


async def run(call: Call, engine: Engine, logger, metrics) -> list[EngineResult]:
    """Sample every sequence, log every choice, return the results in choice order."""
    try:
        results = await engine.generate(call.requests)
    except (EngineInputError, EngineUnavailable) as exc:
        raise _as_api_error(exc) from exc
    _log_all(call, results, logger, metrics)
    return results


def shown(result: EngineResult) -> tuple[list[str], list[float]]:
    """The tokens' texts and logprobs a client sees: without a final end-of-sequence token."""
    n = len(result.token_ids) - (1 if result.ends_with_eos else 0)
    return result.token_texts[:n], result.logprobs[:n]


def usage(call: Call, results: list[EngineResult]) -> dict[str, int]:
    """Prompt tokens counted once per prompt (not per choice), as OpenAI does; completion tokens
    without a final end-of-sequence token."""
    per_prompt = len(call.requests) // call.prompt_count
    prompt = sum(len(results[i].prompt_token_ids) for i in range(0, len(results), per_prompt))
    completion = sum(len(r.token_ids) - (1 if r.ends_with_eos else 0) for r in results)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def sse(payload: dict | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


async def stream(
    call: Call,
    engine: Engine,
    logger,
    metrics,
    chunk: Callable[[int, str | None, str | None], dict],
    usage_chunk: Callable[[dict], dict] | None,
) -> AsyncIterator[bytes]:
    """Start sampling; raise APIError if it fails before the first token; else the SSE body.

    ``chunk(index, text, finish_reason)`` builds one event's payload.
    """
    queue: asyncio.Queue = asyncio.Queue()
    task = asyncio.create_task(
        engine.generate(call.requests, lambda i, text: queue.put_nowait((i, text)))
    )
    task.add_done_callback(lambda t: queue.put_nowait(None))
    task.add_done_callback(lambda t: _log_done(t, call, logger, metrics))
    first = await queue.get()
    if first is None and task.exception() is not None:
        error = _as_api_error(task.exception())
        if error is not None:
            raise error
    return _events(first, queue, task, chunk, usage_chunk, call)


def _log_done(task: asyncio.Task, call: Call, logger, metrics) -> None:
    if not task.cancelled() and task.exception() is None:
        _log_all(call, task.result(), logger, metrics)


async def _events(first, queue, task, chunk, usage_chunk, call) -> AsyncIterator[bytes]:
    item = first
    while item is not None:
        index, text = item
        yield sse(chunk(index, text, None))
        item = await queue.get()
    if task.exception() is not None:
        exc = task.exception()
        api = _as_api_error(exc) or APIError(500, f"engine failed ({type(exc).__name__})")
        yield sse(error_body(api.status, api.message, api.param, api.code))
        yield sse("[DONE]")
        return
    results = task.result()
    for i, result in enumerate(results):
        yield sse(chunk(i, None, result.finish_reason))
    if usage_chunk is not None:
        yield sse(usage_chunk(usage(call, results)))
    yield sse("[DONE]")
