"""``POST /v1/completions``: sample from the served model and log the behaviour event.

The sampled tokens' logprobs, the routed experts and the sampling parameters go into an
``ingest.schema.Completion`` that is handed to the behaviour logger without blocking; a failure to
build or queue it is counted in /metrics and never reaches the caller. The API is not streaming,
so ``time_to_first_token_ms`` is the time to the first byte of the response: the full latency.

Deliberately left out: streaming, batching requests across callers, stop strings.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from datetime import UTC, datetime

from fastapi import APIRouter, HTTPException, Request, status

from deploy.api import CompletionRequest, CompletionResponse, UsageOut
from deploy.deps import HostDep, LoggerDep, MetricsDep, SettingsDep
from ingest.schema import TOPICS, Completion, SamplingParams, Usage

router = APIRouter(prefix="/v1", tags=["completions"])
log = logging.getLogger(__name__)


def hash_user(user_id: str) -> str:
    """Stable pseudonym of a user id (the raw id is never logged)."""
    return hashlib.sha256(f"ratchet:{user_id}".encode()).hexdigest()[:32]


@router.post("/completions", response_model=CompletionResponse)
def create_completion(
    req: CompletionRequest,
    request: Request,
    host: HostDep,
    settings: SettingsDep,
    logger: LoggerDep,
    metrics: MetricsDep,
) -> CompletionResponse:
    from policy.toy.generate import generate

    _validate_limits(req, settings.max_prompt_chars, settings.max_tokens_limit)
    served = host.current
    if served is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "model is loading")
    created = datetime.now(UTC)
    start = time.perf_counter()
    try:
        gen = generate(
            served.model,
            [req.prompt],
            max_new_tokens=req.max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            seed=req.seed,
        )[0]
    except ValueError as exc:  # e.g. a prompt that leaves no room under max_seq_len
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    latency_ms = (time.perf_counter() - start) * 1000.0
    response_id = f"cmpl-{uuid.uuid4().hex}"
    request.app.state.responses.remember(
        response_id, text=gen.text, created=created, conversation_id=req.conversation_id
    )
    metrics.prompt_tokens.inc(gen.prompt_tokens)
    metrics.completion_tokens.inc(len(gen.token_ids))
    if logger is not None:
        _log_completion(
            logger,
            metrics,
            settings.model_name,
            served.version,
            req,
            gen,
            response_id,
            created,
            latency_ms,
        )
    return CompletionResponse(
        id=response_id,
        text=gen.text,
        model_version=served.version,
        created=created,
        usage=UsageOut(input_tokens=gen.prompt_tokens, output_tokens=len(gen.token_ids)),
        finish_reason=gen.finish_reason,
        latency_ms=latency_ms,
        replica_id=settings.replica_id,
    )


def _validate_limits(req: CompletionRequest, max_prompt_chars: int, max_tokens: int) -> None:
    if len(req.prompt) > max_prompt_chars:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"prompt has {len(req.prompt)} characters, limit {max_prompt_chars}",
        )
    if req.max_tokens > max_tokens:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"max_tokens={req.max_tokens} exceeds the limit {max_tokens}",
        )


def _log_completion(
    logger, metrics, model_name, version, req, gen, response_id, created, latency_ms
) -> None:
    try:
        event = Completion(
            event_id=uuid.uuid4().hex,
            response_id=response_id,
            event_time=created,
            conversation_id=req.conversation_id,
            user_hash=hash_user(req.user_id),
            model_name=model_name,
            model_version=version,
            task_kind=req.task_kind,
            prompt=req.prompt,
            response_text=gen.text,
            response_token_ids=gen.token_ids,
            response_logprobs=[min(lp, 0.0) for lp in gen.logprobs],
            sampling=SamplingParams(
                temperature=req.temperature,
                top_p=req.top_p,
                max_tokens=req.max_tokens,
                seed=req.seed,
            ),
            routed_experts=gen.routed_experts,
            time_to_first_token_ms=latency_ms,
            latency_ms=latency_ms,
            finish_reason=gen.finish_reason,
            usage=Usage(input_tokens=gen.prompt_tokens, output_tokens=len(gen.token_ids)),
        )
    except ValueError as exc:  # a schema violation is counted, never returned to the caller
        metrics.log_errors.inc()
        log.warning("behaviour event for %s not built: %s", response_id, exc)
        return
    logger.submit(TOPICS["completion"], response_id, event)
