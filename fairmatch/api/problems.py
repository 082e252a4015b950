"""RFC 9457 problem details for every error, never a stack trace."""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.status import HTTP_400_BAD_REQUEST, HTTP_422_UNPROCESSABLE_CONTENT

from fairmatch.errors import FairmatchError

log = logging.getLogger("fairmatch.api")

PROBLEM_JSON = "application/problem+json"
RETRY_AFTER_SECONDS = 5


def problem(
    status: int, title: str, detail: str, *, kind: str | None = None, headers: dict | None = None, **extra: Any
) -> JSONResponse:
    body = {
        "type": f"urn:fairmatch:problem:{kind}" if kind else "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
        **extra,
    }
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _field_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    # only what is safe to echo: no input values, no exception objects
    return [
        {"loc": list(err.get("loc", ())), "msg": err.get("msg", ""), "type": err.get("type", "")}
        for err in exc.errors()
    ]


async def _on_validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    errors = _field_errors(exc)
    if any(e["type"] == "json_invalid" for e in errors):
        return problem(
            HTTP_400_BAD_REQUEST,
            "Malformed JSON",
            "the request body is not valid JSON",
            kind="malformed-json",
            errors=errors,
        )
    where = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors[:5])
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return problem(HTTP_422_UNPROCESSABLE_CONTENT, "Invalid input", where + more, kind="invalid-input", errors=errors)


async def _on_domain_error(_: Request, exc: FairmatchError) -> JSONResponse:
    return problem(exc.status, exc.title, exc.detail, kind=exc.kind, headers=exc.headers, **exc.extra)


async def _on_http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
    title = HTTPStatus(exc.status_code).phrase
    return problem(exc.status_code, title, str(exc.detail), headers=getattr(exc, "headers", None))


def database_unavailable(exc: Exception) -> bool:
    """The database is away or overloaded, not refusing this request: worth a retry.

    Covers refused and dropped connections (OperationalError), use of a connection
    the server closed (InterfaceError), any driver error SQLAlchemy saw as a
    disconnect, and an exhausted connection pool. A lost COMMIT lands here too: its
    outcome is unknown, and the retry with the same request_id settles it.
    """
    if isinstance(exc, PoolTimeout):
        return True
    return isinstance(exc, (OperationalError, InterfaceError)) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    )


async def _on_database_error(request: Request, exc: Exception) -> JSONResponse:
    if not database_unavailable(exc):
        return await _on_unexpected(request, exc)
    log.warning("database unavailable: %s: %s", exc.__class__.__name__, _first_line(exc))
    return problem(
        503,
        "Service unavailable",
        "the database cannot be reached; retry shortly",
        kind="database-unavailable",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def _first_line(exc: Exception) -> str:
    # the driver's message without SQLAlchemy's appended SQL and parameters
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().split("\n", 1)[0][:200]


async def _on_refused_value(_: Request, exc: DataError) -> JSONResponse:
    # a value validation let through but the database cannot store: the
    # request's fault, and worth a validation rule; nothing was written
    log.warning("database refused a value: %s", exc.orig)
    return problem(
        HTTP_422_UNPROCESSABLE_CONTENT,
        "Invalid input",
        "a value is out of the range the database can store",
        kind="invalid-input",
    )


async def _on_unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return problem(500, "Internal error", "the server failed; the error was logged", kind="internal")


def install(app: FastAPI) -> None:
    # Starlette types every handler as taking any Exception; it calls each with the class it is added for.
    app.add_exception_handler(RequestValidationError, _on_validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(FairmatchError, _on_domain_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _on_http_error)  # type: ignore[arg-type]
    # DBAPIError: the handler picks 503 for outages, 500 for the rest (e.g. IntegrityError)
    app.add_exception_handler(DBAPIError, _on_database_error)
    app.add_exception_handler(PoolTimeout, _on_database_error)
    app.add_exception_handler(DataError, _on_refused_value)
    app.add_exception_handler(Exception, _on_unexpected)
