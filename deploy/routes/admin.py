"""``POST /admin/reload``: load a version fully, then swap it in (bearer token required).

Requests keep being served by the old model while the new one downloads and builds.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, HTTPException, status

from deploy.api import ReloadRequest, ReloadResponse
from deploy.deps import AdminDep, HostDep, MetricsDep, SettingsDep

router = APIRouter(prefix="/admin", tags=["admin"])


@router.post("/reload", response_model=ReloadResponse)
def reload(
    body: ReloadRequest, _: AdminDep, host: HostDep, settings: SettingsDep, metrics: MetricsDep
) -> ReloadResponse:
    previous = host.current.version if host.current else None
    try:
        version = body.version or host.resolve(body.alias or settings.alias)
    except LookupError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    start = time.perf_counter()
    host.load(version)
    metrics.reloads.labels("ok").inc()
    return ReloadResponse(
        version=version, previous_version=previous, load_seconds=time.perf_counter() - start
    )
