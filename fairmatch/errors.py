"""Domain errors. The API turns them into problem details; logic never imports FastAPI."""

from __future__ import annotations

from typing import Any, ClassVar


class FairmatchError(Exception):
    status = 500
    title = "Internal error"
    kind = "internal"  # the problem type is urn:fairmatch:problem:<kind>

    headers: ClassVar[dict[str, str] | None] = None

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class Unauthorized(FairmatchError):
    status = 401
    title = "Unauthorized"
    kind = "unauthorized"
    headers: ClassVar[dict[str, str]] = {"WWW-Authenticate": 'Bearer error="invalid_token"'}


class Forbidden(FairmatchError):
    status = 403
    title = "Forbidden"
    kind = "forbidden"


class NotFound(FairmatchError):
    status = 404
    title = "Not found"
    kind = "not-found"


class Conflict(FairmatchError):
    status = 409
    title = "Conflict"
    kind = "conflict"


class BadRequest(FairmatchError):
    status = 400
    title = "Bad request"
    kind = "bad-request"


class InvalidInput(FairmatchError):
    """A field-level error found after parsing (e.g. a size limit from settings)."""

    status = 422
    title = "Invalid input"
    kind = "invalid-input"

    def __init__(self, detail: str, errors: list[dict[str, Any]]) -> None:
        super().__init__(detail, errors=errors)
