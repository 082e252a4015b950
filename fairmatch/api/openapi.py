"""The OpenAPI description tells the truth about errors.

FastAPI documents only its own 422 (with a schema, HTTPValidationError, that
this service never sends). Every error here is an RFC 9457 problem
(`application/problem+json`, see fairmatch/api/problems.py); this post-processing
documents one for each status an operation can answer, by rule:

- every /api/v1 operation: 401 and 403 (authentication, roles) and 503
  (database unreachable);
- with a request body: 400 (malformed or too deeply nested JSON), 413 (body
  over the size limit) and 422;
- with parameters: 422; with a path parameter: 404 (unknown or not visible id);
- plus what handlers raise themselves (DOMAIN_ERRORS).

The routers stay as they are: the rules read the generated operations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from fastapi import FastAPI
from starlette.routing import BaseRoute, Route

API_PREFIX = "/api/v1"
PROBLEM_JSON = "application/problem+json"
PROBLEM_REF = "#/components/schemas/Problem"

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "description": "RFC 9457 problem details. Some problems carry more members "
    "(e.g. a 409 names the job's current_status).",
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {
            "type": "string",
            "description": "`urn:fairmatch:problem:<kind>` (e.g. `invalid-input`, `json-too-deep`), or `about:blank`.",
        },
        "title": {"type": "string", "description": "Short summary of the kind of problem."},
        "status": {"type": "integer", "minimum": 400, "maximum": 599, "description": "The HTTP status."},
        "detail": {"type": "string", "description": "What went wrong with this request."},
        "errors": {
            "type": "array",
            "description": "Field-level errors (422, and 400 for malformed JSON).",
            "items": {"$ref": "#/components/schemas/ProblemFieldError"},
        },
    },
    "additionalProperties": True,
}

FIELD_ERROR_SCHEMA: dict[str, Any] = {
    "title": "ProblemFieldError",
    "type": "object",
    "required": ["loc", "msg", "type"],
    "properties": {
        "loc": {
            "type": "array",
            "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "description": "Where: `body`, `query`, `path` or `header`, then field names and list indices.",
        },
        "msg": {"type": "string"},
        "type": {"type": "string", "description": "Error code, e.g. `string_too_long`, `missing`."},
    },
    "additionalProperties": True,
}

DESCRIPTIONS = {
    400: "Malformed JSON, JSON nested deeper than `server.max_json_depth`, or a request that contradicts itself.",
    401: "No valid bearer token.",
    403: "The caller's role may not do this.",
    404: "No such resource (or not one the caller may see).",
    409: "The job's current state does not allow this change.",
    413: "The request body is larger than `server.max_body_bytes`.",
    422: "A field is missing, of the wrong type, or out of range; `errors` names each one.",
    503: "The database cannot be reached; retry after `Retry-After` seconds.",
}

HEADERS = {
    401: {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "`Bearer` challenge."}},
    503: {"Retry-After": {"schema": {"type": "string"}, "description": "Seconds to wait."}},
}

# Errors a handler raises itself, beyond what the shape of the request implies.
DOMAIN_ERRORS: dict[tuple[str, str], set[int]] = {
    ("get", f"{API_PREFIX}/jobs"): {400},  # a cursor this service did not give out
    ("get", f"{API_PREFIX}/pilots"): {400},  # a cursor this service did not give out
    ("delete", f"{API_PREFIX}/jobs/{{job_id}}"): {409},  # the job is already final
    ("post", f"{API_PREFIX}/jobs/{{job_id}}/status"): {409},  # an illegal transition
}


def _problem_response(status: int) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": DESCRIPTIONS[status],
        "content": {PROBLEM_JSON: {"schema": {"$ref": PROBLEM_REF}}},
    }
    if status in HEADERS:
        response["headers"] = HEADERS[status]
    return response


def error_statuses(method: str, path: str, operation: dict[str, Any]) -> set[int]:
    """The problem statuses this operation can answer."""
    statuses = set(DOMAIN_ERRORS.get((method, path), ()))
    parameters = operation.get("parameters", [])
    if path.startswith(f"{API_PREFIX}/"):
        statuses |= {401, 403, 503}
    if "requestBody" in operation:
        statuses |= {400, 413, 422}
    if parameters:
        statuses.add(422)
    if any(p.get("in") == "path" for p in parameters):
        statuses.add(404)
    return statuses


def document_problems(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the problem responses to every operation of `schema` (in place) and return it."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["Problem"] = PROBLEM_SCHEMA
    components["ProblemFieldError"] = FIELD_ERROR_SCHEMA
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            for status in error_statuses(method, path, operation):
                responses[str(status)] = _problem_response(status)
            operation["responses"] = dict(sorted(responses.items()))
    _document_readiness(schema)
    # FastAPI's own 422 schema is replaced everywhere: drop it
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    return schema


def _document_readiness(schema: dict[str, Any]) -> None:
    # /readyz answers 503 with its ordinary body, not a problem
    readyz = schema.get("paths", {}).get("/readyz", {}).get("get")
    if readyz and "503" in readyz.get("responses", {}):
        readyz["responses"]["503"]["content"] = {
            "application/json": {"schema": {"$ref": "#/components/schemas/Health"}}
        }


def in_order(schema: dict[str, Any], paths: Iterable[str]) -> dict[str, Any]:
    """`schema` with its paths in the order of `paths` (in place), whatever order the
    application routes them in; paths not named keep theirs, after the named ones."""
    rank: dict[str, int] = {}
    for path in paths:
        rank.setdefault(path, len(rank))
    ordered = sorted(schema.get("paths", {}).items(), key=lambda item: rank.get(item[0], len(rank)))
    schema["paths"] = dict(ordered)
    return schema


def install(app: FastAPI, documented_order: Iterable[tuple[str, Iterable[BaseRoute]]] = ()) -> None:
    """`documented_order`: (prefix, routes) in the order the document lists them."""
    generate: Callable[[], dict[str, Any]] = app.openapi
    paths = [prefix + r.path_format for prefix, routes in documented_order for r in routes if isinstance(r, Route)]

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = in_order(document_problems(generate()), paths)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
