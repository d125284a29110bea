"""FastAPI dependencies as ``Annotated`` aliases: settings, model host, engine, logger, metrics,
admin.

Everything lives on ``app.state`` (set by deploy.server.create_app), so nothing is global and two
apps in one process do not share state.

Deliberately left out: the route logic itself (deploy/routes/).
"""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from deploy.behaviour_log import BehaviourLogger
from deploy.engines.base import Engine
from deploy.metrics import ServerMetrics
from deploy.model_host import ModelHost
from deploy.settings import ServerSettings

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


SettingsDep = Annotated[ServerSettings, Depends(get_settings)]
HostDep = Annotated[ModelHost, Depends(get_host)]
LoggerDep = Annotated[BehaviourLogger | None, Depends(get_logger)]
MetricsDep = Annotated[ServerMetrics, Depends(get_metrics)]
AdminDep = Annotated[None, Depends(require_admin)]
EngineDep = Annotated[Engine, Depends(get_engine)]
