"""A router in front of replica groups: stable and canary (weighted, sticky per conversation) and
the holdback (a fixed share of users, kept on the model's anchor version for the model's life).

Both OpenAI endpoints (``/v1/completions``, ``/v1/chat/completions``) are proxied, streams
included; the conversation id is the ``X-Conversation-Id`` header, else ``metadata.conversation_id``
(or the legacy body field), else a generated one that is forwarded. A conversation's bucket is a
hash of its id in [0, 1); it goes to the canary iff the bucket is below
the canary weight. Raising the weight only moves conversations *to* the canary, so a conversation
never flips back and forth during a rollout, and the split is deterministic for a given weight.

The holdback is decided first, per user, not per conversation: the user is the OpenAI ``user``
field (else the legacy ``user_id``), else the API key; a user whose hash (salted apart from the
conversation's, so the two splits are independent) falls below ``holdback_share`` goes to the
holdback group, whose replicas serve the anchor version (registry alias ``anchor``). The decision
is a pure function of the user and the share, so a user stays in the holdback across promotions
(they reload the stable and canary groups only) and router restarts; a request naming no user and
no key is never held back. Holdback requests are proxied, logged and ledgered like any other
(arm ``holdback``); the comparison they feed is deploy/fleet/impact.py.
Within a group, requests go round-robin. Every routed request is written to a ``RequestLedger``
(event time, arm, ok, latency) that the rollout controller reads per window via ``/admin/stats``.

Signals (``/v1/feedback``, ``/v1/edits``, ``/v1/followups``) go to the replica that served the
response they name: the router remembers ``response id -> replica`` from each completion it
routes (bounded). For an id it does not know (served before a router restart, or forgotten) it
asks each replica in turn and remembers only one whose answer proves it holds the response for
the caller's key: a 2xx, or an answer carrying ``X-Ratchet-Response-Known`` (e.g. a 409
duplicate). Replicas check the key and the body before they look the response up (the lookup is
per key, so ids cannot be probed), so a 401, a 403 or a validation 422 proves nothing: it is not
remembered, the other replicas are still asked, and when none proves ownership the client gets
the first such error (else the 404). A corrected or authenticated retry then still reaches the
owner.

Slow or large requests are cut off as at a replica (deploy/replica/http_limits.py): a body size
limit
(413), a body deadline (408) and a header deadline (the connection closes).

The admin API (``/admin/weights``, ``/admin/groups``, bearer token) and ``RouterSettings`` check
what they are given: the canary weight is a finite number in [0, 1], and every replica URL is
``http``/``https`` with a host and a valid port (``replica_url``). Anything else is a 422 in
OpenAI's error shape whose ``param`` names the field (``stable_urls.0``), and nothing is changed.

``create_router_app(...)`` builds the app; ``RouterSettings`` + ``python -m deploy.fleet.router``
run it;
``RouterClient`` is what the rollout controller talks to.

Deliberately left out: health-based ejection of replicas, retries (a failed request is a data
point for the judge, not something to hide), and the judging itself (deploy/fleet/judge.py).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import threading
import time
import uuid
from collections import deque
from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import urlsplit

import httpx
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.background import BackgroundTask

from deploy.fleet.judge import ArmSamples
from deploy.replica.api import RESPONSE_KNOWN_HEADER
from deploy.replica.errors import validation_error
from deploy.replica.http_limits import RequestLimits, header_timeout_protocol
from deploy.replica.settings import DEFAULT_ADMIN_TOKEN, is_loopback, weak_token_reason
from ingest.schema import ARMS, Arm

ARM_HEADER = "x-ratchet-arm"
"""The arm that served a request: on the response to the client, and on the request to the
replica, which records it in the completion event (``ingest.schema.Completion.arm``)."""


def bucket(conversation_id: str) -> float:
    """Stable position of a conversation in [0, 1)."""
    digest = hashlib.sha256(conversation_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def choose_arm(conversation_id: str, canary_weight: float) -> Arm:
    return "canary" if bucket(conversation_id) < canary_weight else "stable"


def user_bucket(user_key: str) -> float:
    """Stable position of a user in [0, 1), independent of the conversation buckets."""
    digest = hashlib.sha256(f"ratchet-holdback:{user_key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def in_holdback(user_key: str | None, holdback_share: float) -> bool:
    """Whether a user belongs to the holdback; a request without a user never does."""
    return user_key is not None and user_bucket(user_key) < holdback_share


def user_key(body: bytes, authorization: str | None) -> str | None:
    """Who a request is for: ``user:<OpenAI user field>`` (or the legacy ``user_id``), else
    ``key:<API key>``, else None."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        user = data.get("user") or data.get("user_id")
        if isinstance(user, str) and user:
            return f"user:{user}"
    if authorization and authorization.lower().startswith("bearer ") and authorization[7:]:
        return f"key:{authorization[7:].strip()}"
    return None


class RequestLedger:
    """Bounded, thread-safe record of routed requests: (event time, arm, ok, latency_ms)."""

    def __init__(self, max_entries: int = 1_000_000) -> None:
        self._entries: deque[tuple[datetime, Arm, bool, float]] = deque(maxlen=max_entries)
        self._lock = threading.Lock()

    def record(self, when: datetime, arm: Arm, ok: bool, latency_ms: float) -> None:
        with self._lock:
            self._entries.append((when, arm, ok, latency_ms))

    def serving(self, start: datetime, end: datetime) -> dict[Arm, ArmSamples]:
        """Per arm: requests, errors and latencies of requests started in [start, end)."""
        with self._lock:
            entries = [e for e in self._entries if start <= e[0] < end]
        out: dict[Arm, ArmSamples] = {}
        for arm in ARMS:
            mine = [e for e in entries if e[1] == arm]
            out[arm] = ArmSamples(
                requests=len(mine),
                errors=sum(not e[2] for e in mine),
                latencies_ms=[e[3] for e in mine],
            )
        return out


_HOSTNAME = re.compile(r"[A-Za-z0-9_.-]+")


def replica_url(url: str) -> str:
    """``url`` as a replica's base URL, without a trailing slash (the router appends ``/v1/...``).

    It must be ``http`` or ``https`` with a host (a name, an IPv4 address or a bracketed IPv6
    one; an international name in its ``xn--`` form), an optional port in 1..65535 and an
    optional path prefix; credentials, a query or a fragment are refused. Raises ValueError
    saying what is wrong."""
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError as exc:  # unclosed "[", a port that is not a number or out of range
        raise ValueError(f"{url!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url!r}: the scheme must be http or https")
    if not host:
        raise ValueError(f"{url!r} has no host")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{url!r}: {host!r} is not an IPv6 address") from None
    elif not _HOSTNAME.fullmatch(host):
        raise ValueError(f"{url!r}: {host!r} is not a host name or address")
    if port == 0:
        raise ValueError(f"{url!r}: the port must be in 1..65535")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"{url!r}: credentials do not belong in a replica URL")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ValueError(f"{url!r}: a replica URL has no query or fragment")
    try:
        httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"{url!r} is not a URL ({exc})") from None
    return url.rstrip("/")


ReplicaUrl = Annotated[str, AfterValidator(replica_url)]
CanaryWeight = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
HoldbackShare = Annotated[float, Field(ge=0.0, le=0.5, allow_inf_nan=False)]


class WeightsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    canary_weight: CanaryWeight = Field(description="Share of conversations on canary.")


class GroupsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stable_urls: list[ReplicaUrl] = Field(
        min_length=1, description="Replica URLs of the stable group."
    )
    canary_urls: list[ReplicaUrl] = Field(
        default_factory=list, description="Replica URLs of the canary."
    )
    holdback_urls: list[ReplicaUrl] | None = Field(
        default=None,
        description="Replica URLs of the holdback (serving the anchor version); omitted in a "
        "PUT: unchanged.",
    )


class _ResponseOwners:
    """Bounded ``response_id -> replica url`` of completions routed here (oldest forgotten)."""

    def __init__(self, max_entries: int = 200_000) -> None:
        from collections import OrderedDict

        self._items: OrderedDict[str, str] = OrderedDict()
        self._max = max_entries
        self._lock = threading.Lock()

    def record(self, response_id: str, url: str) -> None:
        with self._lock:
            self._items[response_id] = url
            while len(self._items) > self._max:
                self._items.popitem(last=False)

    def get(self, response_id: str) -> str | None:
        with self._lock:
            return self._items.get(response_id)


class _State:
    def __init__(self, stable: list[str], canary: list[str], weight: float, token: str,
                 holdback: list[str], holdback_share: float) -> None:
        self.groups: dict[Arm, list[str]] = {"stable": list(stable), "canary": list(canary),
                                             "holdback": list(holdback)}
        self.canary_weight = weight
        self.holdback_share = holdback_share
        self.token = token
        self.ledger = RequestLedger()
        self.owners = _ResponseOwners()
        self.counts: dict[tuple[Arm, int], int] = {}
        self._rr = {arm: 0 for arm in ARMS}

    def pick(self, conversation_id: str, user: str | None = None) -> tuple[Arm, str]:
        if self.groups["holdback"] and in_holdback(user, self.holdback_share):
            arm: Arm = "holdback"
        else:
            arm = choose_arm(conversation_id, self.canary_weight)
        if not self.groups[arm]:
            arm = "stable"
        urls = self.groups[arm]
        self._rr[arm] = (self._rr[arm] + 1) % len(urls)
        return arm, urls[self._rr[arm]]


_bearer = HTTPBearer(auto_error=False)


def _state(request: Request) -> _State:
    return request.app.state.router


def _admin(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    import secrets

    if credentials is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "admin bearer token required",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not secrets.compare_digest(credentials.credentials.encode(), _state(request).token.encode()):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "wrong admin token")


StateDep = Annotated[_State, Depends(_state)]
AdminDep = Annotated[None, Depends(_admin)]

public = APIRouter()
admin = APIRouter(prefix="/admin")


def _conversation_id(request: Request, body: bytes) -> str:
    """Header ``X-Conversation-Id``, else ``metadata.conversation_id`` or the legacy body field,
    else a generated id (forwarded to the replica, which returns it to the client)."""
    header = request.headers.get("x-conversation-id")
    if header:
        return header
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        meta = data.get("metadata")
        value = (meta.get("conversation_id") if isinstance(meta, dict) else None) or data.get(
            "conversation_id"
        )
        if isinstance(value, str) and value:
            return value
    return f"conv-{uuid.uuid4().hex}"


def _wants_stream(body: bytes) -> bool:
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("stream") is True


async def _forward(request: Request, state: _State, path: str) -> Response:
    body = await request.body()
    conversation_id = _conversation_id(request, body)
    arm, url = state.pick(conversation_id, user_key(body, request.headers.get("authorization")))
    headers = {"content-type": "application/json", "x-conversation-id": conversation_id,
               ARM_HEADER: arm}
    if auth := request.headers.get("authorization"):
        headers["authorization"] = auth
    when, start = datetime.now(UTC), time.perf_counter()
    client: httpx.AsyncClient = request.app.state.client
    try:
        upstream = await client.send(
            client.build_request("POST", f"{url}{path}", content=body, headers=headers),
            stream=True,
        )
    except httpx.TransportError:
        state.ledger.record(when, arm, False, (time.perf_counter() - start) * 1000.0)
        state.counts[(arm, 502)] = state.counts.get((arm, 502), 0) + 1
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"{arm} upstream unreachable") from None
    key = (arm, upstream.status_code)
    state.counts[key] = state.counts.get(key, 0) + 1
    out_headers = {ARM_HEADER: arm}
    for name in ("x-conversation-id", "x-ratchet-response-ids", "x-ratchet-replica"):
        if name in upstream.headers:
            out_headers[name] = upstream.headers[name]
    media = upstream.headers.get("content-type")
    if upstream.status_code == 200:
        _remember_owners(state, upstream, url)
    if upstream.status_code == 200 and _wants_stream(body):
        state.ledger.record(when, arm, True, (time.perf_counter() - start) * 1000.0)
        return StreamingResponse(
            upstream.aiter_raw(),
            200,
            media_type=media,
            headers=out_headers,
            background=BackgroundTask(upstream.aclose),
        )
    content = await upstream.aread()
    await upstream.aclose()
    latency_ms = (time.perf_counter() - start) * 1000.0
    if upstream.status_code < 400 or upstream.status_code >= 500:  # 4xx: the caller's fault
        state.ledger.record(when, arm, upstream.status_code < 500, latency_ms)
    return Response(content, upstream.status_code, media_type=media, headers=out_headers)


def _remember_owners(state: _State, upstream: httpx.Response, url: str) -> None:
    """Which replica served each response id (the replica's X-Ratchet-Response-Ids header, so
    streams count too), for routing signals back to it."""
    ids = upstream.headers.get("x-ratchet-response-ids")
    if not ids:
        return
    for response_id in ids.split(","):
        state.owners.record(response_id, url)


@public.post("/v1/completions")
async def route_completion(request: Request, state: StateDep) -> Response:
    return await _forward(request, state, "/v1/completions")


@public.post("/v1/chat/completions")
async def route_chat_completion(request: Request, state: StateDep) -> Response:
    return await _forward(request, state, "/v1/chat/completions")


@public.post("/v1/feedback")
@public.post("/v1/edits")
@public.post("/v1/followups")
async def route_signal(request: Request, state: StateDep) -> Response:
    """Forward a signal (body and API key unchanged) to the replica that served its response."""
    body = await request.body()
    try:
        response_id = str(json.loads(body)["response_id"])
    except (ValueError, KeyError, TypeError) as exc:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, "response_id: body must be JSON with one"
        ) from exc
    headers = {"content-type": "application/json"}
    if auth := request.headers.get("authorization"):
        headers["authorization"] = auth
    owner = state.owners.get(response_id)
    candidates = [owner] if owner else [url for arm in ARMS for url in state.groups[arm]]
    upstream = None  # the answer the client gets
    for url in candidates:
        try:
            answer = await request.app.state.client.post(
                f"{url}{request.url.path}", content=body, headers=headers
            )
        except httpx.TransportError:
            continue
        if owner is not None:
            upstream = answer
        elif _proves_owner(answer):
            state.owners.record(response_id, url)
            upstream = answer
            break
        elif upstream is None or (upstream.status_code == 404 and answer.status_code != 404):
            upstream = answer  # the first error that is not a 404, else a 404
    if upstream is None:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, "no replica reachable")
    return Response(
        upstream.content, upstream.status_code, media_type=upstream.headers.get("content-type"),
        headers={k: v for k, v in upstream.headers.items() if k.lower() == "www-authenticate"},
    )


def _proves_owner(answer: httpx.Response) -> bool:
    """Whether a replica's answer to a signal shows it served the response to this caller."""
    return answer.is_success or answer.headers.get(RESPONSE_KNOWN_HEADER) == "1"


@public.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@public.get("/metrics")
def metrics(state: StateDep) -> Response:
    lines = ["# TYPE ratchet_router_requests_total counter"]
    for (arm, code), n in sorted(state.counts.items()):
        lines.append(f'ratchet_router_requests_total{{arm="{arm}",status="{code}"}} {n}')
    lines += [
        "# TYPE ratchet_router_canary_weight gauge",
        f"ratchet_router_canary_weight {state.canary_weight}",
        "# TYPE ratchet_router_holdback_share gauge",
        f"ratchet_router_holdback_share {state.holdback_share if state.groups['holdback'] else 0}",
    ]
    return Response("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


@admin.get("/weights", response_model=WeightsBody)
def get_weights(state: StateDep, _: AdminDep) -> WeightsBody:
    return WeightsBody(canary_weight=state.canary_weight)


@admin.put("/weights", response_model=WeightsBody)
def set_weights(body: WeightsBody, state: StateDep, _: AdminDep) -> WeightsBody:
    state.canary_weight = body.canary_weight
    return body


@admin.get("/groups", response_model=GroupsBody)
def get_groups(state: StateDep, _: AdminDep) -> GroupsBody:
    return GroupsBody(stable_urls=state.groups["stable"], canary_urls=state.groups["canary"],
                      holdback_urls=state.groups["holdback"])


@admin.put("/groups", response_model=GroupsBody)
def set_groups(body: GroupsBody, state: StateDep, _: AdminDep) -> GroupsBody:
    holdback = state.groups["holdback"] if body.holdback_urls is None else body.holdback_urls
    state.groups = {"stable": list(body.stable_urls), "canary": list(body.canary_urls),
                    "holdback": list(holdback)}
    return GroupsBody(stable_urls=state.groups["stable"], canary_urls=state.groups["canary"],
                      holdback_urls=state.groups["holdback"])


@admin.get("/stats")
def stats(start: datetime, end: datetime, state: StateDep, _: AdminDep) -> dict:
    window = state.ledger.serving(start, end)
    return {
        arm: {"requests": s.requests, "errors": s.errors, "latencies_ms": s.latencies_ms}
        for arm, s in window.items()
    }


async def _on_validation(request: Request, exc: RequestValidationError) -> Response:
    """A 422 in OpenAI's error shape, ``param`` naming the field; the input is not echoed (it may
    be NaN, which JSON cannot carry)."""
    return validation_error(exc, status.HTTP_422_UNPROCESSABLE_CONTENT)


def create_router_app(
    *,
    stable_urls: list[str],
    canary_urls: list[str],
    admin_token: str,
    canary_weight: float = 0.0,
    holdback_urls: list[str] | None = None,
    holdback_share: float = 0.0,
    max_body_bytes: int = 64 * 1024,
    timeout_s: float = 60.0,
    body_timeout_s: float = 30.0,
) -> FastAPI:
    """The router app; its httpx client lives for the app's lifespan. ``holdback_share`` of users
    go to ``holdback_urls`` (none: nobody is held back). Bodies over
    ``max_body_bytes`` are a 413 and bodies not complete ``body_timeout_s`` after their headers a
    408 (deploy/replica/http_limits.py, OpenAI's error shape)."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
            app.state.client = client
            yield

    app = FastAPI(title="ratchet router", lifespan=lifespan)
    app.add_middleware(
        RequestLimits, max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s
    )
    app.add_exception_handler(RequestValidationError, _on_validation)
    if not 0.0 <= holdback_share <= 0.5:
        raise ValueError(f"holdback_share must be in [0, 0.5], got {holdback_share}")
    app.state.router = _State(stable_urls, canary_urls, canary_weight, admin_token,
                              list(holdback_urls or []), holdback_share)
    app.include_router(public)
    app.include_router(admin)
    return app


class RouterSettings(BaseSettings):
    """Settings of the router process (env prefix ``RATCHET_ROUTER_``; lists as JSON)."""

    model_config = SettingsConfigDict(env_prefix="RATCHET_ROUTER_", extra="forbid", frozen=True)

    stable_urls: list[ReplicaUrl] = Field(
        min_length=1, description="Replica URLs of the stable group."
    )
    canary_urls: list[ReplicaUrl] = Field(
        default_factory=list, description="Replica URLs of the canary."
    )
    canary_weight: CanaryWeight = Field(default=0.0, description="Initial canary share.")
    holdback_urls: list[ReplicaUrl] = Field(
        default_factory=list,
        description="Replica URLs of the holdback, serving the anchor version (none: no "
        "holdback).",
    )
    holdback_share: HoldbackShare = Field(
        default=0.05,
        description="Share of users (by the OpenAI user field, else the API key) kept on the "
        "holdback for the model's life; keep it fixed, or users move between arms.",
    )
    admin_token: SecretStr = Field(
        default=SecretStr(DEFAULT_ADMIN_TOKEN), description="Bearer token for /admin/*."
    )
    local_mode: bool = Field(default=False, description="Allows the default admin token.")
    host: str = Field(default="127.0.0.1", description="Interface to bind.")
    port: int = Field(default=8080, ge=1, le=65535, description="TCP port to bind.")
    max_body_bytes: int = Field(default=64 * 1024, ge=256, description="Largest request body.")
    header_timeout_s: float = Field(
        default=10.0, gt=0.0, le=600.0,
        description="Deadline for a request's line and headers (then the connection closes).",
    )
    body_timeout_s: float = Field(
        default=30.0, gt=0.0, le=600.0, description="Deadline for a request's body (then 408).",
    )

    @model_validator(mode="after")
    def _refuse_default_token(self) -> RouterSettings:
        token = self.admin_token.get_secret_value()
        if token == DEFAULT_ADMIN_TOKEN and not self.local_mode:
            raise ValueError("admin_token is the default; set RATCHET_ROUTER_ADMIN_TOKEN")
        reason = None if is_loopback(self.host) else weak_token_reason(token)
        if reason is not None:
            raise ValueError(
                f"admin_token is too weak when host={self.host!r} is not loopback: {reason}"
            )
        return self


class RouterClient:
    """The rollout controller's handle on a router: weights and per-window serving stats."""

    def __init__(self, url: str, admin_token: str) -> None:
        self.url = url
        self._headers = {"Authorization": f"Bearer {admin_token}"}

    def set_canary_weight(self, weight: float) -> None:
        httpx.put(
            f"{self.url}/admin/weights",
            json={"canary_weight": weight},
            headers=self._headers,
            timeout=10,
        ).raise_for_status()

    def canary_weight(self) -> float:
        resp = httpx.get(f"{self.url}/admin/weights", headers=self._headers, timeout=10)
        resp.raise_for_status()
        return float(resp.json()["canary_weight"])

    def groups(self) -> dict[Arm, list[str]]:
        """Replica URLs of the stable, canary and holdback groups."""
        resp = httpx.get(f"{self.url}/admin/groups", headers=self._headers, timeout=10)
        resp.raise_for_status()
        body = resp.json()
        return {"stable": body["stable_urls"], "canary": body["canary_urls"],
                "holdback": body.get("holdback_urls") or []}

    def serving(self, start: datetime, end: datetime) -> dict[Arm, ArmSamples]:
        resp = httpx.get(
            f"{self.url}/admin/stats",
            headers=self._headers,
            timeout=30,
            params={"start": start.isoformat(), "end": end.isoformat()},
        )
        resp.raise_for_status()
        return {arm: ArmSamples(**v) for arm, v in resp.json().items()}


def main() -> None:
    settings = RouterSettings()  # type: ignore[call-arg]  # fields come from the environment
    import uvicorn

    app = create_router_app(
        stable_urls=settings.stable_urls,
        canary_urls=settings.canary_urls,
        admin_token=settings.admin_token.get_secret_value(),
        canary_weight=settings.canary_weight,
        holdback_urls=settings.holdback_urls,
        holdback_share=settings.holdback_share,
        max_body_bytes=settings.max_body_bytes,
        body_timeout_s=settings.body_timeout_s,
    )
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", access_log=False,
                http=header_timeout_protocol(settings.header_timeout_s))


if __name__ == "__main__":
    main()
