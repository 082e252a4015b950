"""/associations: the Slurm association tree, in and out in sacctmgr's own format.

PUT takes the text of `sacctmgr -n -p show assoc format=account,share,parentn,user`
(text/plain, or JSON {"sacctmgr": "..."}) and replaces the whole tree; GET
gives the same text back, or with `Accept: application/json` the rows with
their normalised shares.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fairmatch.accounting.associations import (
    Association,
    AssociationError,
    export_sacctmgr,
    parse_sacctmgr,
    tree_of,
)
from fairmatch.api.deps import Admin, Connection, CurrentSettings, Operators
from fairmatch.api.schemas import AssociationUsageList
from fairmatch.errors import InvalidInput
from fairmatch.fields import Name
from fairmatch.services import accounting, audit, priorities

router = APIRouter(prefix="/associations", tags=["associations"])

TEXT_PLAIN = "text/plain"
# ~200 000 associations: far beyond any site, and bounded below the body limit's default
MAX_DUMP_CHARS = 8 * 1024 * 1024
EXAMPLE = "root|1|||\nroot|1||root|\nlhcb|60|root||\nlhcb|1||alice|\n"


class DumpBody(BaseModel):
    """The JSON form of the PUT body."""

    model_config = ConfigDict(extra="forbid")

    sacctmgr: str = Field(max_length=MAX_DUMP_CHARS, description="The dump's text, exactly as sacctmgr printed it.")


class ImportResult(BaseModel):
    associations: int = Field(description="How many associations the tree now has.")


class UsageReset(BaseModel):
    """Whose usage to zero: an account (its own node and its users'), a user (in every account),
    both (that association), or neither (everything)."""

    model_config = ConfigDict(extra="forbid")

    account: Name | None = None
    user: Name | None = None


class UsageResetResult(BaseModel):
    reset: int = Field(description="How many associations had their usage set to zero.")


class AssociationRow(BaseModel):
    line: int = Field(description="The row's line in the dump, from 1.")
    account: str
    user: str = Field(description="'' for an account row.")
    parent: str = Field(description="As written: the parent account of an account row, '' for the root and users.")
    shares: str = Field(description='As written: a whole number or "parent".')
    normalised_share: float = Field(description="The node's fraction of the machine (Slurm's classic formula).")


class AssociationList(BaseModel):
    associations: list[AssociationRow]


PUT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The sacctmgr dump: one `account|shares|parent|user|` line per association.",
        "content": {
            TEXT_PLAIN: {"schema": {"type": "string", "maxLength": MAX_DUMP_CHARS}, "example": EXAMPLE},
            "application/json": {"schema": DumpBody.model_json_schema()},
        },
    }
}

GET_CONTENT: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The dump as imported (text/plain, the default), or the rows as JSON.",
        "model": AssociationList,
        "content": {TEXT_PLAIN: {"schema": {"type": "string"}, "example": EXAMPLE}},
    }
}


@router.put(
    "",
    response_model=ImportResult,
    openapi_extra=PUT_BODY,
    summary="Replace the association tree with a sacctmgr dump (admin)",
)
async def put_associations(request: Request, caller: Admin, conn: Connection, settings: CurrentSettings) -> dict:
    """The whole tree is replaced, or nothing changes: a dump with any wrong line is
    refused with 422, naming each offending line."""
    text = _dump_text(await request.body(), request.headers.get("content-type"))
    try:
        # tens of thousands of lines take a while: off the event loop
        rows = await run_in_threadpool(parse_sacctmgr, text)
    except AssociationError as exc:
        raise InvalidInput(str(exc), errors=_line_errors(exc)) from None
    imported = await accounting.replace_associations(conn, rows, settings)
    await audit.record(conn, caller.sub, "associations.put", None, {"associations": imported})
    return {"associations": imported}


@router.delete("", status_code=204, summary="Remove the association tree (admin)")
async def delete_associations(caller: Admin, conn: Connection, settings: CurrentSettings) -> Response:
    """As if none had been imported: any account is accepted again, and fair shares come from the
    groups and their owners. Charges logged before are folded first, up the tree they were made under."""
    await accounting.replace_associations(conn, [], settings)
    await audit.record(conn, caller.sub, "associations.delete")
    return Response(status_code=204)


@router.get(
    "",
    response_model=None,  # the answer is built here: text by default, JSON when asked
    responses=GET_CONTENT,
    summary="The association tree as a sacctmgr dump (admin, operator)",
)
async def get_associations(request: Request, caller: Operators, conn: Connection) -> Response:
    """Byte for byte the text last imported (empty before any import). With
    `Accept: application/json` (and no text/plain), the rows and their normalised shares."""
    rows = await accounting.load_associations(conn)
    if _wants_json(request.headers.get("accept", "")):
        return JSONResponse(await run_in_threadpool(_as_json, rows))
    return PlainTextResponse(export_sacctmgr(rows))


@router.post(
    "/usage/reset", response_model=UsageResetResult, summary="Set raw usage to zero (admin): sacctmgr's RawUsage=0"
)
async def reset_usage(body: UsageReset, caller: Admin, conn: Connection, settings: CurrentSettings) -> dict:
    """Charges logged before are folded first, then the matching associations' usage is set to
    zero and their folded charges are dropped (the rank policy's window reads them). Priorities
    follow at the next priority run. The ancestors of a reset association keep what it was charged."""
    reset = await accounting.reset_usage(conn, body.account, body.user, settings)
    target = "/".join(part for part in (body.account, body.user) if part is not None) or None
    await audit.record(conn, caller.sub, "usage.reset", target, {"asked": body.model_dump(mode="json"), "reset": reset})
    return {"reset": reset}


@router.get(
    "/usage",
    response_model=AssociationUsageList,
    summary="Shares, usage and fair-share factor of every association, whatever the policy (admin, operator)",
)
async def association_usage(caller: Operators, conn: Connection, settings: CurrentSettings) -> dict:
    """Slurm's `sshare -a`: the imported tree, or without one the groups and the owners with waiting jobs."""
    return {"associations": await priorities.association_usage(conn, settings)}


# --- reading the body ------------------------------------------------------------------


def _is_json(content_type: str | None) -> bool:
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    return media_type == "application/json" or (media_type.startswith("application/") and media_type.endswith("+json"))


def _dump_text(body: bytes, content_type: str | None) -> str:
    """The dump from a JSON body, or the body itself: any other content type is the text,
    so that `curl --data-binary @dump.txt` works whatever it claims."""
    if _is_json(content_type):
        return _from_json(body)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _body_error(f"the body is not UTF-8 text (byte {exc.start})", "unicode_decode") from None
    if len(text) > MAX_DUMP_CHARS:
        raise _body_error(f"the dump has {len(text)} characters, more than {MAX_DUMP_CHARS}", "string_too_long")
    return text


def _body_error(message: str, kind: str) -> InvalidInput:
    return InvalidInput(message, errors=[{"loc": ["body"], "msg": message, "type": kind}])


def _from_json(body: bytes) -> str:
    # the same errors FastAPI gives for a JSON body it parses itself (400, then 422)
    try:
        document = json.loads(body)
    except ValueError:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body",), "msg": "JSON decode error"}]) from None
    try:
        return DumpBody.model_validate(document).sacctmgr
    except ValidationError as exc:
        raise RequestValidationError(
            [{"type": e["type"], "loc": ("body", *e["loc"]), "msg": e["msg"]} for e in exc.errors()]
        ) from None


def _line_errors(exc: AssociationError) -> list[dict[str, Any]]:
    return [
        {"loc": ["body", "line", e.line], "msg": e.problem, "type": "invalid_association",
         "line": e.line, "content": e.content}
        for e in exc.errors
    ]  # fmt: skip


# --- answering -------------------------------------------------------------------------


def _wants_json(accept: str) -> bool:
    media_types = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    return "application/json" in media_types and TEXT_PLAIN not in media_types


def _as_json(rows: list[Association]) -> dict[str, Any]:
    tree = tree_of(rows) if rows else None
    return {
        "associations": [
            {"line": i, "account": r.account, "user": r.user, "parent": r.parent, "shares": r.shares,
             "normalised_share": tree.normalised_share(r.node) if tree else 0.0}
            for i, r in enumerate(rows, start=1)
        ]
    }  # fmt: skip
