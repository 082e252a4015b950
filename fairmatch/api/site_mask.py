"""/site-mask: the banned sites (DIRAC's site mask), where pilots get only test jobs."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from fairmatch.api.deps import AnyRole, Connection, Operators, Reading
from fairmatch.db.site_mask import SiteMaskDB
from fairmatch.fields import Name
from fairmatch.priority.groups import Description
from fairmatch.services import site_mask as mask_service
from fairmatch.taskqueues.requirements import ANY

router = APIRouter(prefix="/site-mask", tags=["site mask"])


def _a_site(site: str) -> str:
    if site.lower() == ANY:
        raise ValueError(f"{site!r} stands for every site; ban the sites one by one")
    return site


def _said(reason: str) -> str:
    if not reason.strip():
        raise ValueError("must not be blank")
    return reason


# `:path`: a site name may hold any character, a "/" too (percent-encode it in the URL)
SiteName = Annotated[Name, AfterValidator(_a_site), Path(description="The site, e.g. LCG.CERN.cern.")]
SITE_PATH = "/{site:path}"


class Ban(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Annotated[Description, AfterValidator(_said)] = Field(
        description="Why the site is banned (one line of text)."
    )


class MaskedSite(BaseModel):
    site: str
    reason: str
    banned_at: datetime = Field(description="When the site was banned; a later ban with a new reason keeps it.")
    banned_by: str = Field(description="The token subject of the last ban (its reason's author).")


class Sighting(BaseModel):
    reported: bool = Field(
        description="Whether a pilot on record (those seen within `retention.pilots_days`) reported this site; "
        "a site no pilot reported is most often a misspelt one."
    )
    similar: list[str] = Field(
        description="When no pilot reported the site: the reported sites whose names are most like it, best first."
    )
    warning: str | None = Field(description="When no pilot reported the site: the warning a client shows.")


class BannedSite(MaskedSite, Sighting):
    pass


class SiteCheck(Sighting):
    site: str
    banned: bool = Field(description="Whether the site is in the mask.")


class SiteMask(BaseModel):
    sites: list[MaskedSite] = Field(description="Every banned site, by name.")


@router.get("", response_model=SiteMask, summary="The banned sites")
async def list_site_mask(caller: AnyRole, conn: Reading) -> dict:
    """Every role may read the mask: a pilot may learn why its site gets only test jobs."""
    return {"sites": await SiteMaskDB.of(conn).all()}


@router.get("/check" + SITE_PATH, response_model=SiteCheck, summary="Whether a pilot reported a site, before a ban")
async def check_site(site: SiteName, caller: Operators, conn: Connection) -> dict:
    """What a client shows before banning: a site no pilot reported is banned all the same,
    but the command line and the console ask first, offering the similar sites."""
    return await mask_service.sighting(conn, site)


@router.put(
    SITE_PATH,
    response_model=BannedSite,
    responses={201: {"model": BannedSite, "description": "The site was banned."}},
    summary="Ban a site, or change a banned site's reason",
)
async def ban_site(site: SiteName, body: Ban, caller: Operators, conn: Connection, response: Response) -> dict:
    """201 when the site is newly banned, 200 when it was banned already (its reason and
    banned_by are replaced, banned_at is kept). From then on a pilot at the site is matched
    only jobs of the job types `matching.masked_site_job_types` names. A site no pilot
    reported is banned too; `reported` and `similar` say so (`GET /site-mask/check/{site}`
    tells it before)."""
    entry, created = await mask_service.ban(conn, site, body.reason, caller.sub)
    if created:
        response.status_code = 201
    return entry


@router.delete(
    SITE_PATH,
    status_code=204,
    response_class=Response,
    responses={404: {"description": "The site is not in the mask (a misspelt name allows nothing)."}},
    summary="Allow a banned site again",
)
async def allow_site(site: SiteName, caller: Operators, conn: Connection) -> Response:
    await mask_service.allow(conn, site, caller.sub)
    return Response(status_code=204)
