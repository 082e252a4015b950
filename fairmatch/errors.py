"""Domain errors. The API turns them into problem details; logic never imports FastAPI."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


class DatabaseError(FairmatchError):
    """A statement failed for a reason none of the subclasses names: a defect, answered 500."""

    def __init__(self, cause: str, detail: str = "the server failed; the error was logged") -> None:
        super().__init__(detail)
        self.cause = cause  # the driver's first line, for the log; never echoed to clients


class DatabaseUnavailable(DatabaseError):
    """The database is away or overloaded, not refusing this request: worth a retry."""

    status = 503
    title = "Service unavailable"
    kind = "database-unavailable"
    headers: ClassVar[dict[str, str]] = {"Retry-After": "5"}

    def __init__(self, cause: str) -> None:
        super().__init__(cause, "the database cannot be reached; retry shortly")


class ValueRefused(DatabaseError):
    """A value validation let through but the database cannot store: nothing was written."""

    status = 422
    title = "Invalid input"
    kind = "invalid-input"

    def __init__(self, cause: str) -> None:
        super().__init__(cause, "a value is out of the range the database can store")


class ConstraintViolation(DatabaseError):
    """A write broke a constraint (a foreign key, a unique key). Callers that expect one
    give it a meaning; one that reaches a client is a defect, answered 500."""


class UniqueViolation(ConstraintViolation):
    """A row's unique key is already taken."""


class DuplicateRequest(FairmatchError):
    """The request id was used by a claim that committed first (a concurrent retry)."""

    status = 409
    title = "Conflict"
    kind = "conflict"


class ArchiveUnavailable(FairmatchError):
    """Jobs to purge cannot be archived (retention.archive_dir unwritable): none is deleted."""

    status = 503
    title = "Archive unavailable"
    kind = "archive-unavailable"


def invalid_fields(errors: Sequence[Mapping[str, Any]], shown: int = 5) -> str:
    """Validation errors in one line, each where it is and what is wrong: `loc: msg; ...`,
    the first `shown` of them."""
    where = "; ".join(
        f"{'.'.join(str(p) for p in error.get('loc', ())) or 'input'}: {error.get('msg', '')}"
        for error in errors[:shown]
    )
    return where + (f" (and {len(errors) - shown} more)" if len(errors) > shown else "")
