"""The behaviour event of one served choice: an ``ingest.schema.Completion`` built from what the
engine returned, handed to the behaviour logger without blocking.

The event carries what was served as served: prompt token ids, response token ids, the processed
logprobs (temperature and top-p applied), routed experts of prompt and response positions when the
engine gives them (``routed_experts_source`` says how they were obtained), the real
time-to-first-token and the latency. A failure to build the event is counted in /metrics and never
reaches the caller.

Deliberately left out: the transport (deploy/replica/behaviour_log.py) and HTTP
(deploy/replica/routes/).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime

from deploy.replica.engines.base import EngineResult, SamplingRequest
from ingest.schema import TOPICS, Arm, Completion, SamplingParams, Usage

log = logging.getLogger(__name__)


def hash_user(user_id: str) -> str:
    """Stable pseudonym of a user id (the raw id is never logged)."""
    return hashlib.sha256(f"ratchet:{user_id}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class RequestContext:
    """Who asked, in which conversation, about what; shared by every choice of a response."""

    conversation_id: str
    user: str
    task_kind: str
    model_name: str
    created: datetime
    arm: Arm | None = None
    """The fleet router's arm that served the request (None: no router chose)."""


def build_event(
    ctx: RequestContext, req: SamplingRequest, result: EngineResult, response_id: str
) -> Completion:
    """The Completion event of one choice (raises ValueError on a schema violation)."""
    return Completion(
        event_id=uuid.uuid4().hex,
        response_id=response_id,
        event_time=ctx.created,
        conversation_id=ctx.conversation_id,
        user_hash=hash_user(ctx.user),
        arm=ctx.arm,
        model_name=ctx.model_name,
        model_version=result.model_version,
        task_kind=ctx.task_kind,
        prompt=req.prompt,
        prompt_token_ids=result.prompt_token_ids,
        response_text=result.text,
        response_token_ids=result.token_ids,
        response_logprobs=result.logprobs,
        sampling=SamplingParams(
            temperature=req.temperature, top_p=req.top_p, max_tokens=req.max_tokens, seed=req.seed
        ),
        routed_experts=result.routed_experts,
        prompt_routed_experts=result.prompt_routed_experts,
        routed_experts_source=result.routed_experts_source,
        time_to_first_token_ms=result.time_to_first_token_ms,
        latency_ms=result.latency_ms,
        finish_reason=result.finish_reason,
        usage=Usage(input_tokens=len(result.prompt_token_ids), output_tokens=len(result.token_ids)),
    )


def log_completion(
    logger, metrics, ctx: RequestContext, req: SamplingRequest, result: EngineResult, rid: str
) -> None:
    """Build and queue the event; a schema violation is counted, never raised."""
    try:
        event = build_event(ctx, req, result, rid)
    except ValueError as exc:
        metrics.log_errors.inc()
        log.warning("behaviour event for %s not built: %s", rid, exc)
        return
    logger.submit(TOPICS["completion"], rid, event)
