"""What each role may do (DESIGN §7). Pure logic: routers and stores call these.

admin     everything
operator  every job, any priority class, kill, explain matching
user      submits and sees only jobs with owner = sub and owner_group in groups,
          priority class <= 0; may kill them
pilot     /match and its dry run, pinned to its `site`/`groups`/`vo` claims;
          sees and reports the status of the jobs it matched
Jobs a caller may not see are reported missing (404), not forbidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.auth.tokens import Principal, Role
from app.errors import Forbidden
from app.jobs.models import JobSpec
from app.matching.resource import ResourceDescription

ANYONE = frozenset(Role)


def require(caller: Principal, *roles: Role) -> None:
    if caller.role not in roles:
        allowed = ", ".join(r.value for r in roles)
        raise Forbidden(f"role {caller.role.value} may not do this (allowed: {allowed})")


@dataclass(frozen=True, slots=True)
class JobScope:
    """The part of the jobs table a caller sees; None means unrestricted."""

    owner: str | None = None
    owner_groups: frozenset[str] | None = None
    matched_by: str | None = None

    def sees(self, job: Any) -> bool:
        return (
            (self.owner is None or job.owner == self.owner)
            and (self.owner_groups is None or job.owner_group in self.owner_groups)
            and (self.matched_by is None or job.matched_by == self.matched_by)
        )


def job_scope(caller: Principal) -> JobScope:
    if caller.privileged:
        return JobScope()
    if caller.role is Role.user:
        return JobScope(owner=caller.sub, owner_groups=caller.groups)
    return JobScope(matched_by=caller.sub)


def check_submission(caller: Principal, specs: Sequence[JobSpec]) -> list[JobSpec]:
    """Refuse jobs a user may not submit; a user's token VO becomes the jobs' default VO."""
    require(caller, Role.admin, Role.operator, Role.user)
    if caller.privileged:
        return list(specs)
    checked = []
    for i, spec in enumerate(specs):
        where = f"jobs[{i}]"
        if spec.owner != caller.sub:
            raise Forbidden(f"{where}: a user may only submit jobs owned by {caller.sub!r}")
        if spec.owner_group not in caller.groups:
            raise Forbidden(f"{where}: {caller.sub!r} is not in group {spec.owner_group!r}")
        if spec.priority_class > 0:
            raise Forbidden(f"{where}: a user may only lower the priority class (<= 0)")
        if caller.vo is not None and spec.vo not in (None, caller.vo):
            raise Forbidden(f"{where}: {caller.sub!r} belongs to VO {caller.vo!r}")
        checked.append(spec.model_copy(update={"vo": spec.vo or caller.vo}))
    return checked


def check_kill(caller: Principal) -> None:
    require(caller, Role.admin, Role.operator, Role.user)


def check_status_report(caller: Principal) -> None:
    require(caller, Role.admin, Role.operator, Role.pilot)


def pin_resource(caller: Principal, resource: ResourceDescription) -> ResourceDescription:
    """Hold a pilot to its claims: its site, its groups (a private pilot), its VO."""
    if caller.role is not Role.pilot:
        return resource
    update: dict[str, Any] = {}
    if caller.site is not None and resource.site != caller.site:
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
