"""FastAPI dependencies as ``Annotated`` aliases: settings, model host, engine, logger, metrics,
admin, client keys.

``ClientDep`` (signals) needs a valid client key. ``InferenceClientDep`` (completions, chat) needs
one when the replica requires keys (``ServerSettings.keys_required``); otherwise a request without
a key, or with a placeholder that is not a ratchet key (OpenAI clients insist on sending some
``api_key``, e.g. ``EMPTY``), is served anonymously, while a ratchet key (``rk_...``) is still
checked, so a wrong one is a 401 and a right one owns the response. Every 401 is OpenAI's:
``code`` ``invalid_api_key``.

Everything lives on ``app.state`` (set by deploy.replica.server.create_app), so nothing is global
and two
apps in one process do not share state.

Deliberately left out: the route logic itself (deploy/replica/routes/).
"""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from deploy.replica.api_keys import ApiClient, InvalidApiKey
from deploy.replica.behaviour_log import BehaviourLogger
from deploy.replica.engines.base import Engine
from deploy.replica.errors import APIError
from deploy.replica.metrics import ServerMetrics
from deploy.replica.model_host import ModelHost
from deploy.replica.settings import ServerSettings

_bearer = HTTPBearer(auto_error=False)


def get_settings(request: Request) -> ServerSettings:
    return request.app.state.settings


def get_host(request: Request) -> ModelHost:
    return request.app.state.host


def get_logger(request: Request) -> BehaviourLogger | None:
    return request.app.state.behaviour_logger


def get_metrics(request: Request) -> ServerMetrics:
    return request.app.state.metrics


def get_engine(request: Request) -> Engine:
    return request.app.state.engine


def require_admin(
    settings: Annotated[ServerSettings, Depends(get_settings)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """401 without a bearer token, 403 with a wrong one."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "admin bearer token required",
            headers={"WWW-Authenticate": "Bearer"},
        )
    expected = settings.admin_token.get_secret_value().encode()
    if not secrets.compare_digest(credentials.credentials.encode(), expected):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "wrong admin token")


_KEY_PREFIX = "rk_"


def _unauthorized(message: str) -> APIError:
    return APIError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


def _bearer_token(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    if credentials is None or credentials.scheme.lower() != "bearer":
        return None
    return credentials.credentials


def _verify(request: Request, token: str) -> ApiClient:
    try:
        return request.app.state.api_keys.verify(token)
    except InvalidApiKey as exc:
        raise _unauthorized(str(exc)) from None


def require_client(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiClient:
    """The caller's client; 401 without a valid, unrevoked client key."""
    token = _bearer_token(credentials)
    if token is None:
        raise _unauthorized("API key required (Authorization: Bearer rk_...)")
    return _verify(request, token)


def inference_client(
    request: Request,
    settings: Annotated[ServerSettings, Depends(get_settings)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiClient | None:
    """The client a completion is served to; None for an anonymous one (keys not required)."""
    token = _bearer_token(credentials)
    if settings.keys_required:
        if token is None:
            raise _unauthorized("API key required (Authorization: Bearer rk_...)")
        return _verify(request, token)
    if token is None or not token.startswith(_KEY_PREFIX):
        return None
    return _verify(request, token)


SettingsDep = Annotated[ServerSettings, Depends(get_settings)]
HostDep = Annotated[ModelHost, Depends(get_host)]
LoggerDep = Annotated[BehaviourLogger | None, Depends(get_logger)]
MetricsDep = Annotated[ServerMetrics, Depends(get_metrics)]
AdminDep = Annotated[None, Depends(require_admin)]
EngineDep = Annotated[Engine, Depends(get_engine)]
ClientDep = Annotated[ApiClient, Depends(require_client)]
InferenceClientDep = Annotated[ApiClient | None, Depends(inference_client)]
