"""/groups: the fair-share groups (share, properties, priority level)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, Field

from fairmatch.api.deps import Admin, Connection, Submitters
from fairmatch.auth import policy
from fairmatch.auth.tokens import Principal
from fairmatch.fields import Name
from fairmatch.priority.groups import GroupUpdate
from fairmatch.services import audit
from fairmatch.services import groups as group_service

router = APIRouter(prefix="/groups", tags=["groups"])

GroupName = Annotated[Name, Path(description="The group's name.")]


class Group(BaseModel):
    name: str
    job_share: float
    properties: list[str] = Field(description="Sorted; only JOB_SHARING has an effect.")
    job_sharing: bool = Field(description='"JOB_SHARING" in properties: jobs matched by group alone.')
    allow_background_tqs: bool
    priority: int
    description: str | None
    configured: bool = Field(
        description="false for a group with waiting jobs but no configuration: the values shown are "
        "the defaults the policies give it."
    )


class GroupList(BaseModel):
    groups: list[Group]


def _visible_groups(caller: Principal) -> frozenset[str] | None:
    """None for every group (admin, operator); a user sees the groups of its token,
    the same ones its jobs are scoped to. Pilots may not read groups (the routes admit Submitters)."""
    return policy.job_scope(caller).owner_groups


@router.get("", response_model=GroupList, summary="All groups (a user: its own), by name")
async def list_groups(caller: Submitters, conn: Connection) -> dict:
    """The configured groups, and those with waiting jobs but no configuration (`configured`
    false, shown with the defaults they get)."""
    return {"groups": await group_service.list_groups(conn, _visible_groups(caller))}


@router.get("/{name}", response_model=Group, summary="One group")
async def get_group(name: GroupName, caller: Submitters, conn: Connection) -> dict:
    return await group_service.get_group(conn, name, _visible_groups(caller))


@router.put(
    "/{name}",
    response_model=Group,
    responses={201: {"model": Group, "description": "The group was created."}},
    summary="Create or replace a group (admin)",
)
async def put_group(name: GroupName, body: GroupUpdate, caller: Admin, conn: Connection, response: Response) -> dict:
    """The body is the whole definition: an omitted field takes its default.
    200 with the stored group when it existed, 201 when it was created."""
    group, created = await group_service.put_group(conn, name, body)
    await audit.record(conn, caller.sub, "group.put", name, {"asked": body.model_dump(mode="json"), "created": created})
    if created:
        response.status_code = 201
    return group


@router.delete("/{name}", status_code=204, summary="Delete a group's configuration (admin)")
async def delete_group(name: GroupName, caller: Admin, conn: Connection) -> Response:
    """The group's jobs stay and get the defaults (share 1000, no property) from the next
    priority run. A group named in the configuration file comes back at the next start."""
    await group_service.delete_group(conn, name)
    await audit.record(conn, caller.sub, "group.delete", name)
    return Response(status_code=204)
