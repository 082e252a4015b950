"""The application factory: `uvicorn fairmatch.main:create_app --factory`."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator

from fastapi import APIRouter, FastAPI

import fairmatch as package
from fairmatch.api import associations as associations_api
from fairmatch.api import (
    audit,
    body_limits,
    bulk,
    docs,
    health,
    job_classes,
    jobs,
    matching,
    observe,
    openapi,
    pilots,
    priorities,
    problems,
    running,
    site_limits,
    site_mask,
)
from fairmatch.api import groups as groups_api
from fairmatch.api import status as status_api
from fairmatch.auth.settings import AuthMode
from fairmatch.auth.tokens import TokenVerifier
from fairmatch.console import router as console
from fairmatch.db.engine import create_engine
from fairmatch.services import background
from fairmatch.services.priorities import configured_corrections
from fairmatch.services.process import Process
from fairmatch.services.startup import prepare_database
from fairmatch.settings import Settings, get_settings

API_PREFIX = "/api/v1"
# connections beyond database.pool_size for the process's background work (the task-queue
# poll, watchdogs, the priority loop, the purge, which holds one through its batches), which
# never waits behind requests
BACKGROUND_CONNECTIONS = 5

log = logging.getLogger("fairmatch")

# The routers in the order the OpenAPI document lists their operations.
ROUTERS: list[tuple[APIRouter, str]] = [
    (jobs.router, API_PREFIX),
    (bulk.router, API_PREFIX),
    (jobs.reports, API_PREFIX),
    (groups_api.router, API_PREFIX),
    (associations_api.router, API_PREFIX),
    (job_classes.router, API_PREFIX),
    (matching.router, API_PREFIX),
    (priorities.router, API_PREFIX),
    (running.router, API_PREFIX),
    (status_api.router, API_PREFIX),
    (site_limits.router, API_PREFIX),
    (site_mask.router, API_PREFIX),
    (pilots.router, API_PREFIX),
    (audit.router, API_PREFIX),
    (health.router, ""),
]
# What pilots call thousands of times a second: POST /match and their status reports.
ROUTED_FIRST = (matching.router, jobs.reports)


def _settle_garbage_collection() -> None:
    """What start-up built lives as long as the process: keep the collector off it
    (gc.freeze), and collect young objects less often. Each match makes a few
    thousand short-lived objects; with the default threshold the collector ran
    every few requests and its pauses showed in the latency tail (bench/README.md)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    # read the verification key now: a missing key file stops start-up with its name
    verifier = TokenVerifier(settings.auth) if settings.auth.mode is AuthMode.token else None
    corrections = configured_corrections(settings.priority)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(
            settings.database_url,
            pool_size=settings.database.pool_size + BACKGROUND_CONNECTIONS,
            prepared_statements=settings.database.prepared_statements,
        )
        process = Process.start(engine, settings)
        try:
            await prepare_database(engine, settings)
        except BaseException:
            await engine.dispose()
            raise
        # what the app was configured with, and what its process keeps in memory
        app.state.settings = settings
        app.state.verifier = verifier
        app.state.corrections = corrections
        app.state.process = process
        _settle_garbage_collection()
        tasks = background.start(process, settings, corrections)
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await engine.dispose()

    app = FastAPI(
        title="fairmatch",
        version=package.__version__,
        summary="Fair-share job matcher: SQL task queues, DIRAC matching rules.",
        lifespan=lifespan,
        # /docs is served from the package's own files (fairmatch/api/docs.py)
        docs_url=None,
        redoc_url=None,
        # the service exports its own Prometheus metrics; FastAPI's OpenTelemetry hooks
        # would only cost a check per request
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    problems.install(app)
    body_limits.install(app, settings)
    observe.install(app, settings.server.access_log)
    openapi.install(app, documented_order=[(prefix, router.routes) for router, prefix in ROUTERS])
    # FastAPI tries the routers one after the other and each of their routes in turn (a few
    # microseconds each): the pilots' calls are routed first
    for router, prefix in sorted(ROUTERS, key=lambda entry: entry[0] not in ROUTED_FIRST):
        app.include_router(router, prefix=prefix)
    docs.install(app)
    if settings.console.enabled:
        console.install(app)
    return app
