"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.api.schemas import Health

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
        async with request.app.state.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception:  # any failure to reach the database means not ready
        return JSONResponse({"status": "unavailable"}, status_code=503, headers={"Retry-After": "5"})
    return {"status": "ready"}
