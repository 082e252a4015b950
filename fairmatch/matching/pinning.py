"""A pilot's token claims bound what it may match for (docs/how-to/tokens.md). Pure logic."""

from __future__ import annotations

from typing import Any, TypeVar

from fairmatch.auth.tokens import Principal, Role
from fairmatch.errors import Forbidden
from fairmatch.matching.resource import ResourceDescription

Resource = TypeVar("Resource", bound=ResourceDescription)


def pin_resource(caller: Principal, resource: Resource) -> Resource:
    """Hold a pilot to its claims: its site, its groups (a private pilot), its VO.

    Other callers (admins, operators on the dry run) describe any resource."""
    if caller.role is not Role.pilot:
        return resource
    update: dict[str, Any] = {}
    if caller.site is not None and set(resource.sites) != {caller.site}:
        raise Forbidden(f"this pilot may only match for site {caller.site!r}, not {resource.site!r}")
    if caller.groups:
        asked = set(resource.owner_group or ())
        if not asked <= caller.groups:
            raise Forbidden(f"this pilot serves only the groups {sorted(caller.groups)}")
        update["owner_group"] = sorted(asked or caller.groups)
    if caller.vo is not None:
        if resource.vo not in (None, caller.vo):
            raise Forbidden(f"this pilot serves only VO {caller.vo!r}")
        update["vo"] = caller.vo
    return resource.model_copy(update=update)
