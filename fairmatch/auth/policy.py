"""What each role may do (docs/how-to/tokens.md). Pure logic: routers and stores call these.

admin     everything
operator  every job, any priority class, kill, explain matching
user      submits and sees only jobs with owner = sub and owner_group in groups,
          priority class <= 0 (fairmatch/jobs/priority_classes.py); may kill them and
          lower their class
pilot     /match and its dry run, pinned to its `site`/`groups`/`vo` claims
          (fairmatch/matching/pinning.py); sees and reports the status of the jobs it matched
Jobs a caller may not see are reported missing (404), not forbidden.

Which roles may call a route at all is declared in the route's signature with
the role sets below (fairmatch/api/deps.py); what a caller then sees of the data is
its `job_scope`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fairmatch.auth.tokens import Principal, Role

# The role sets routes admit, in the order a refusal names them.
ADMINS = (Role.admin,)
OPERATORS = (Role.admin, Role.operator)
SUBMITTERS = (Role.admin, Role.operator, Role.user)
PILOTS = (Role.admin, Role.pilot)
PILOTS_AND_OPERATORS = (Role.admin, Role.operator, Role.pilot)
ANYONE = tuple(Role)


def refusal(role: Role, allowed: tuple[Role, ...]) -> str | None:
    """Why `role` may not call a route open to `allowed`; None when it may."""
    if role in allowed:
        return None
    return f"role {role.value} may not do this (allowed: {', '.join(r.value for r in allowed)})"


@dataclass(frozen=True, slots=True)
class JobScope:
    """The part of the jobs table a caller sees; None means unrestricted."""

    owner: str | None = None
    owner_groups: frozenset[str] | None = None
    matched_by: str | None = None

    def restrictions(self) -> dict[str, frozenset[str]]:
        """Per jobs column, the values a job the caller sees may have there (none: every job).
        The data layer renders them in SQL (fairmatch/db/jobs.py, `visible`)."""
        allowed: dict[str, frozenset[str]] = {}
        if self.owner is not None:
            allowed["owner"] = frozenset({self.owner})
        if self.owner_groups is not None:
            allowed["owner_group"] = self.owner_groups
        if self.matched_by is not None:
            allowed["matched_by"] = frozenset({self.matched_by})
        return allowed

    def sees(self, job: Any) -> bool:
        """Whether the caller sees a job read without the scope's SQL (the same restrictions)."""
        return all(getattr(job, column) in values for column, values in self.restrictions().items())


def job_scope(caller: Principal) -> JobScope:
    if caller.privileged:
        return JobScope()
    if caller.role is Role.user:
        return JobScope(owner=caller.sub, owner_groups=caller.groups)
    return JobScope(matched_by=caller.sub)


# the columns a task queue shares with its jobs, by which a caller's job scope restricts queues too
QUEUE_COLUMNS = ("owner", "owner_group")


def queue_restrictions(caller: Principal) -> dict[str, frozenset[str]]:
    """Per task_queues column, the values a queue the caller sees has there (none: every
    queue): users see the queues of their own jobs. Pilots ask the dry run instead and see
    no queue here."""
    if caller.role is Role.pilot:
        return {"owner": frozenset()}
    return {column: values for column, values in job_scope(caller).restrictions().items() if column in QUEUE_COLUMNS}


def sees_queue(restrictions: dict[str, frozenset[str]], tq: object) -> bool:
    """Whether a queue read without the restrictions' SQL passes them (`tq` has the columns as attributes)."""
    return all(getattr(tq, column) in values for column, values in restrictions.items())


def return_counts(caller: Principal) -> bool:
    """Whether a return to Waiting that `caller` reports counts in the job's reschedules
    (bounded by `jobs.max_reschedules`): a pilot handing its job back does, so that a
    broken pilot cannot bounce one job forever; an operator's or admin's own does not."""
    return not caller.privileged
