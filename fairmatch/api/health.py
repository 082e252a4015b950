"""Liveness, readiness and the Prometheus scrape endpoint."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from fairmatch.api.deps import process_of
from fairmatch.api.schemas import Health
from fairmatch.db.engine import ping
from fairmatch.metrics import process_metrics

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="The process is alive")
async def healthz() -> dict:
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=Health,
    responses={503: {"description": "The database cannot be reached."}},
    summary="The database answers",
)
async def readyz(request: Request) -> dict | JSONResponse:
    try:
        await ping(process_of(request).engine)
    except Exception:  # any failure to reach the database means not ready
        return JSONResponse({"status": "unavailable"}, status_code=503, headers={"Retry-After": "5"})
    return {"status": "ready"}


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
    summary="Prometheus metrics (text exposition format)",
)
async def metrics(request: Request) -> Response:
    process = process_of(request)
    gauges = process.gauges
    await gauges.refresh(process.engine)
    return Response(process_metrics() + gauges.exposition(), media_type=CONTENT_TYPE_LATEST)
