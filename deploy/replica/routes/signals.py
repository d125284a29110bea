"""``POST /v1/feedback``, ``/v1/edits``, ``/v1/followups``: what the user did with a response.

Each call names a ``response_id`` this replica served (deploy/replica/responses.py remembers them),
carries a client API key (``Authorization: Bearer rk_...``, deploy/replica/api_keys.py) that owns
the
response (the key it was served to, or one of that key's organisation), and becomes one
``ingest.schema`` event handed to the behaviour logger — the same non-blocking queue and on-disk
spool as completions. The Kafka record's timestamp is the event time. Answers: 202 with the event,
401 (missing, unknown or revoked key), 404 (unknown or expired response id, or a response served
to another client), 409 (this signal was already given: one feedback and one follow-up per
response, one edit per window), 413 (body over the replica's limit), 422 (a field out of bounds,
named in ``error.param``), 503 (logging off or its queue full). Every error is in OpenAI's shape.

The key and the body are checked *before* the response is looked up, because the lookup is per
key: a response is found only for a key that may signal about it, and any other key gets the 404
an unknown id gets, so no one can probe which ids a replica holds. A 401 or a validation 422
therefore says nothing about where a response lives. Every answer given after the lookup found
the response (202, 409, a 422 about ``created`` or an empty response, 503 queue full) carries
``X-Ratchet-Response-Known: 1`` (``api.RESPONSE_KNOWN_HEADER``): that, or a 2xx, is how the
router (deploy/fleet/router.py) learns which replica owns a response it does not know.

Edit persistence is ``1 - normalised Levenshtein distance`` between the code served and the code
as it stands now (rapidfuzz, ``rewards.answers.persistence``: the fenced blocks of a chat reply,
or the whole text without a fence, so prose around the code earns nothing), or a precomputed
score. A response that holds no code (empty) has nothing to persist: an edit for it is a 422.

Deliberately left out: rate limits per key, and interpreting follow-ups (ingest's detector does).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from deploy.replica.api import (
    RESPONSE_KNOWN_HEADER,
    EditRequest,
    FeedbackRequest,
    FollowupRequest,
    SignalAccepted,
    _SignalRequest,
)
from deploy.replica.api_keys import ApiClient
from deploy.replica.deps import ClientDep, LoggerDep, MetricsDep, SettingsDep
from deploy.replica.errors import validation_error
from deploy.replica.responses import ResponseMemory, ServedResponse
from ingest.schema import TOPICS, EditPersistence, Feedback, Followup


class _SignalRoute(APIRoute):
    """Validation errors are 422 (these routes' documented status) in OpenAI's error shape; the
    offending input is left out (it may be NaN or hold a lone surrogate, which JSON cannot
    carry), ``param`` names the field and ``code`` the rule."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def route(request: Request):
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return validation_error(exc, status.HTTP_422_UNPROCESSABLE_CONTENT)

        return route


router = APIRouter(prefix="/v1", tags=["signals"], route_class=_SignalRoute)
_CLOCK_GRAIN = timedelta(seconds=1)
"""A ``created`` this little before the response is clamped to it (OpenAI's ``created`` is in
whole seconds); earlier is refused."""


def get_responses(request: Request) -> ResponseMemory:
    return request.app.state.responses


ResponsesDep = Annotated[ResponseMemory, Depends(get_responses)]


def persistence(served_text: str, text_now: str) -> float:
    """1 - normalised Levenshtein distance between the code served and the code now
    (``rewards.answers.persistence``): 1.0 = untouched, 0.0 = all rewritten."""
    from rewards.answers import persistence as code_persistence

    return code_persistence(served_text, text_now)


def _event_time(body: _SignalRequest, served: ServedResponse, max_skew_s: float) -> datetime:
    received = datetime.now(UTC)
    if body.created is None:
        return max(received, served.created)
    created = body.created.astimezone(UTC)
    if abs(created - received) > timedelta(seconds=max_skew_s):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"created: {created.isoformat()} is more than {max_skew_s:g}s from the receive time "
            f"{received.isoformat()}",
        )
    if created < served.created - _CLOCK_GRAIN:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"created: {created.isoformat()} precedes the response ({served.created.isoformat()})",
        )
    return max(created, served.created)


def _accept(
    body, signal_key: str, build, client: ApiClient, responses, logger, metrics, settings,
    response: Response,
) -> SignalAccepted:
    """Look the response up (as ``client`` sees it), then claim the signal, build and queue the
    event; every answer after a successful lookup carries ``RESPONSE_KNOWN_HEADER``."""
    kind = signal_key.split(":")[0]
    if logger is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "behaviour logging is off")
    served = responses.get(body.response_id, client=client)
    if served is None:
        metrics.signals.labels(kind, "unknown_response").inc()
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"response_id: {body.response_id!r} was not served by this replica "
            f"in the last {settings.signal_max_age_s:g}s",
        )
    response.headers[RESPONSE_KNOWN_HEADER] = "1"
    try:
        return _accept_known(body, signal_key, kind, served, build, responses, logger, metrics,
                             settings)
    except HTTPException as exc:
        exc.headers = {**(exc.headers or {}), RESPONSE_KNOWN_HEADER: "1"}
        raise


def _accept_known(
    body, signal_key: str, kind: str, served: ServedResponse, build, responses, logger, metrics,
    settings,
) -> SignalAccepted:
    """Claim the signal about a response found for its client, build and queue the event."""
    event_time = _event_time(body, served, settings.signal_max_skew_s)
    if not responses.claim(body.response_id, signal_key):
        metrics.signals.labels(kind, "duplicate").inc()
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"{signal_key.replace(':', ' window_s=')} for response_id {body.response_id!r} "
            "was already received",
        )
    event = build(served, dict(event_id=uuid.uuid4().hex, response_id=body.response_id,
                               event_time=event_time))
    ts_ms = int(event_time.timestamp() * 1000)
    if not logger.submit(TOPICS[event.kind], body.response_id, event, timestamp_ms=ts_ms):
        responses.release(body.response_id, signal_key)
        metrics.signals.labels(kind, "queue_full").inc()
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE, "signal queue full; retry", {"Retry-After": "1"}
        )
    metrics.signals.labels(kind, "accepted").inc()
    return SignalAccepted(
        event_id=event.event_id, response_id=event.response_id, kind=event.kind,
        event_time=event.event_time, score=getattr(event, "score", None),
    )


@router.post("/feedback", status_code=status.HTTP_202_ACCEPTED, response_model=SignalAccepted)
def post_feedback(
    body: FeedbackRequest, client: ClientDep, responses: ResponsesDep, logger: LoggerDep,
    metrics: MetricsDep, settings: SettingsDep, response: Response,
) -> SignalAccepted:
    def build(served, common):
        return Feedback(**common, label=body.label, rating=body.rating, comment=body.comment)

    return _accept(
        body, "feedback", build, client, responses, logger, metrics, settings, response
    )


@router.post("/edits", status_code=status.HTTP_202_ACCEPTED, response_model=SignalAccepted)
def post_edit(
    body: EditRequest, client: ClientDep, responses: ResponsesDep, logger: LoggerDep,
    metrics: MetricsDep, settings: SettingsDep, response: Response,
) -> SignalAccepted:
    def build(served, common):
        from rewards.answers import code_of

        if not code_of(served.text).strip():
            responses.release(body.response_id, f"edit:{body.window_s}")
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                f"response_id: {body.response_id!r} holds no code: nothing was inserted, so "
                "there is no edit persistence to report",
            )
        score = body.score if body.text is None else persistence(served.text, body.text)
        return EditPersistence(**common, window_s=body.window_s, score=score)

    return _accept(
        body, f"edit:{body.window_s}", build, client, responses, logger, metrics, settings,
        response,
    )


@router.post("/followups", status_code=status.HTTP_202_ACCEPTED, response_model=SignalAccepted)
def post_followup(
    body: FollowupRequest, client: ClientDep, responses: ResponsesDep, logger: LoggerDep,
    metrics: MetricsDep, settings: SettingsDep, response: Response,
) -> SignalAccepted:
    def build(served, common):
        return Followup(**common, text=body.text, dissatisfied=body.dissatisfied)

    return _accept(
        body, "followup", build, client, responses, logger, metrics, settings, response
    )
