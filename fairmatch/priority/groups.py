"""Groups: configured in TOML, persisted in the database, edited over the API.

The `job_sharing` column is what matching reads; it is derived here, from
"JOB_SHARING" (or DIRAC's own spelling, "JobSharing") in the properties, on every
write, so the two never disagree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict

from fairmatch.fields import Int, Name

# The only property with an effect, in fairmatch's spelling and in DIRAC's registry's
# (Properties.JOB_SHARING); others (DIRAC's NormalUser, ...) are kept as given.
JOB_SHARING = "JOB_SHARING"
JOB_SHARING_SPELLINGS = frozenset({JOB_SHARING, "JobSharing"})

DEFAULT_JOB_SHARE = 1000.0  # DIRAC's JobShare of a group given none
MAX_JOB_SHARE = 1e12
MAX_PROPERTIES = 100
PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
MAX_DESCRIPTION = 1000

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _plain_text(value: str) -> str:
    # one line of text: newlines and other control characters would garble listings
    if _CONTROL.search(value):
        raise ValueError("control characters are not allowed")
    return value


Description = Annotated[str, Field(max_length=MAX_DESCRIPTION), AfterValidator(_plain_text)]


class GroupUpdate(BaseModel):
    """A group's full definition (PUT replaces it; an omitted field takes its default).

    `properties` may name anything (DIRAC groups carry NormalUser, GenericPilot, ...):
    names are kept, de-duplicated and sorted, but only JOB_SHARING (DIRAC: JobSharing) has an effect —
    the group's jobs are then matched by group alone, whoever the pilot's Owner is.
    """

    model_config = ConfigDict(extra="forbid")

    job_share: Annotated[float, Strict()] = Field(
        DEFAULT_JOB_SHARE, ge=0, le=MAX_JOB_SHARE, allow_inf_nan=False,
        description="The group's share (DIRAC JobShare).",
    )  # fmt: skip
    properties: list[Name] = Field(default_factory=list, max_length=MAX_PROPERTIES, description='e.g. ["JOB_SHARING"].')
    allow_background_tqs: Annotated[bool, Strict()] = Field(
        False,
        description="A queue of background jobs (average real priority <= 0.1) gets the minimum priority.",
    )
    priority: Int = Field(0, ge=PRIORITY_MIN, le=PRIORITY_MAX, description="The group's priority level.")
    description: Description | None = None


def stored_values(
    job_share: float,
    properties: Iterable[str],
    allow_background_tqs: bool,
    priority: int,
    description: str | None = None,
) -> dict[str, Any]:
    """A group's columns but its name: the one place job_sharing is derived from the properties."""
    properties = sorted(set(properties))
    return {
        "job_share": job_share,
        "job_sharing": not JOB_SHARING_SPELLINGS.isdisjoint(properties),
        "properties": properties,
        "allow_background_tqs": allow_background_tqs,
        "priority": priority,
        "description": description,
    }


def target_shares(job_shares: Mapping[str, float], active: Iterable[str]) -> dict[str, float]:
    """Each active group's configured share over the sum of the active groups'
    (a group unknown to the groups table has the default share)."""
    configured = {g: float(job_shares.get(g, DEFAULT_JOB_SHARE)) for g in active}
    total = sum(configured.values())
    return {g: (s / total if total else 0.0) for g, s in configured.items()}
