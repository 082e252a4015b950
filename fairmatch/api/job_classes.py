"""/job-classes: Grid Engine job classes (default and maximum priority class, access lists)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, Field

from fairmatch.api.deps import Admin, Connection, Reading, Submitters
from fairmatch.db.job_classes import JobClassDB
from fairmatch.errors import NotFound
from fairmatch.fields import Name
from fairmatch.jobs.classes import JobClassSpec
from fairmatch.jobs.priority_classes import job_class_usable
from fairmatch.services import job_classes as class_service

router = APIRouter(prefix="/job-classes", tags=["job classes"])

# `:path`: a job may name any class (even one with a "/"), so every name must be addressable
# (percent-encoded in the URL).
ClassName = Annotated[Name, Path(description="The job class's name.")]
NAME_PATH = "/{name:path}"


class JobClassOut(BaseModel):
    name: str
    default_class: int = Field(description="Given to a job of this class that names no priority class.")
    max_class: int = Field(description="Users may ask for at most min(0, max_class), or default_class if higher.")
    allowed_users: list[str] = Field(description="Sorted; [] = everybody.")
    allowed_groups: list[str] = Field(description="Sorted; [] = every group.")
    priority: int = Field(description="The multifactor policy's queue factor.")
    description: str | None


class JobClassList(BaseModel):
    job_classes: list[JobClassOut]


@router.get("", response_model=JobClassList, summary="All job classes (a user: those it may use), by name")
async def list_job_classes(caller: Submitters, conn: Reading) -> dict:
    """Admins and operators read every class, users those their own jobs may use; pilots none."""
    usable = [c for c in await JobClassDB.of(conn).all() if job_class_usable(caller, c)]
    return {"job_classes": [c.as_dict() for c in usable]}


@router.get(NAME_PATH, response_model=JobClassOut, summary="One job class")
async def get_job_class(name: ClassName, caller: Submitters, conn: Connection) -> dict:
    job_class = await class_service.get_class(conn, name)
    if not job_class_usable(caller, job_class):
        # a class the user may not use is as missing as one that does not exist (as for jobs)
        raise NotFound(f"job class {name!r} does not exist")
    return job_class.as_dict()


@router.put(
    NAME_PATH,
    response_model=JobClassOut,
    responses={201: {"model": JobClassOut, "description": "The job class was created."}},
    summary="Create or replace a job class (admin)",
)
async def put_job_class(
    name: ClassName, body: JobClassSpec, caller: Admin, conn: Connection, response: Response
) -> dict:
    """The body is the whole definition: an omitted field takes its default.
    200 with the stored class when it existed, 201 when it was created.
    Jobs already submitted keep the priority class they were given."""
    job_class, created = await class_service.put_class(conn, name, body, by=caller.sub)
    if created:
        response.status_code = 201
    return job_class.as_dict()


@router.delete(
    NAME_PATH,
    status_code=204,
    responses={409: {"description": "Waiting jobs are queued in the class."}},
    summary="Delete a job class no waiting job uses (admin)",
)
async def delete_job_class(name: ClassName, caller: Admin, conn: Connection) -> Response:
    """Refused with a 409 while waiting jobs use the class: kill, reschedule or change their class
    first. Jobs that run or finished keep its name."""
    await class_service.delete_class(conn, name, by=caller.sub)
    return Response(status_code=204)
