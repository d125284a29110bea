"""``POST /admin/reload``: load a version fully, then swap it in (bearer token required).

Requests keep being served by the old model while the new one downloads and builds. A version
that does not exist is 404; one whose weights fail the load checks (deploy/replica/model_host.py)
is 422,
and the old model keeps serving. An engine that owns its own server (a managed vLLM child) is
restarted on the new version after the host loaded it; if that fails the answer is 422 and the
old child keeps serving.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, HTTPException, status

from deploy.replica.api import ReloadRequest, ReloadResponse
from deploy.replica.deps import AdminDep, EngineDep, HostDep, MetricsDep, SettingsDep
from deploy.replica.model_host import ModelLoadError

router = APIRouter(prefix="/admin", tags=["admin"])


@router.post("/reload", response_model=ReloadResponse)
def reload(
    body: ReloadRequest, _: AdminDep, host: HostDep, settings: SettingsDep, metrics: MetricsDep,
    engine: EngineDep,
) -> ReloadResponse:
    previous = host.current.version if host.current else None
    try:
        version = body.version or host.resolve(body.alias or settings.alias)
    except LookupError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    start = time.perf_counter()
    try:
        host.load(version)
    except LookupError as exc:
        metrics.reloads.labels("not_found").inc()
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"version: {exc}") from exc
    except ModelLoadError as exc:
        metrics.reloads.labels("refused").inc()
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"version: {version} refused, still serving {previous}: {exc}",
        ) from exc
    server = getattr(engine, "server", None)  # a managed engine follows the host's version
    if server is not None:
        try:
            server.reload()
        except Exception as exc:
            metrics.reloads.labels("refused").inc()
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                f"version: {version} loaded but the engine did not start on it: {exc}",
            ) from exc
    metrics.reloads.labels("ok").inc()
    return ReloadResponse(
        version=version, previous_version=previous, load_seconds=time.perf_counter() - start
    )
