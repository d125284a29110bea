"""``/healthz`` (the process answers) and ``/readyz`` (a model is loaded and served)."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from deploy.replica.api import ReadyResponse
from deploy.replica.deps import HostDep, SettingsDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=ReadyResponse)
def readyz(host: HostDep, settings: SettingsDep, response: Response) -> ReadyResponse:
    current = host.current
    if current is None:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return ReadyResponse(
        ready=current is not None,
        version=current.version if current else None,
        replica_id=settings.replica_id,
        error=host.load_error,
    )
