"""``/metrics`` in the Prometheus text format."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from deploy.replica.deps import MetricsDep

router = APIRouter(tags=["metrics"])


@router.get("/metrics")
def metrics(m: MetricsDep) -> Response:
    return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)
