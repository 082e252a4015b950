"""Who may set which priority class, and who may use which job class (Grid Engine).

Pure logic, called by the routers with the caller their role dependency
admitted (fairmatch/api/deps.py: only submitters reach these).

- a job that gives no priority class gets its job class's default, else 0;
- a job class's access lists concern the job's owner and group, so they hold
  for every caller: an admin cannot submit bob's job in a class bob may not use;
- users may ask for at most min(0, max_class) (the stricter of the two rules),
  or the class default when an admin made that higher: users only ever lower;
- admins and operators may set any class, beyond max_class too;
- after submission users may only lower a job's class (PATCH), privileged
  callers change it either way;
- users see the job classes their own jobs may use, privileged callers every one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fairmatch.auth.tokens import Principal
from fairmatch.errors import Forbidden, InvalidInput
from fairmatch.jobs.classes import JobClass
from fairmatch.jobs.models import JobSpec


def check_submission(
    caller: Principal, specs: Sequence[JobSpec], classes: Mapping[str, JobClass] | None = None
) -> list[JobSpec]:
    """Refuse the batch if any job may not be submitted; settle every job's priority class.

    `caller` is a submitter (admin, operator or user: the route admits no other).
    `classes` holds the existing job classes the jobs name. A user's token VO
    becomes the jobs' default VO.
    """
    classes = classes or {}
    check_classes_exist(specs, classes)
    return [
        _checked_job(caller, spec, classes.get(spec.job_class) if spec.job_class else None, i)
        for i, spec in enumerate(specs)
    ]


def check_classes_exist(specs: Sequence[JobSpec], classes: Mapping[str, JobClass]) -> None:
    """A misspelt class is bad input (422 at the field), not a permission problem."""
    errors: list[dict[str, Any]] = [
        {
            "loc": ["body", "jobs", i, "job_class"],
            "msg": f"job class {spec.job_class!r} does not exist",
            "type": "unknown_job_class",
        }
        for i, spec in enumerate(specs)
        if spec.job_class is not None and spec.job_class not in classes
    ]
    if errors:
        unknown = sorted({e["msg"] for e in errors})
        shown = "; ".join(unknown[:5]) + (f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else "")
        raise InvalidInput(f"{len(errors)} job(s) name an unknown job class: {shown}", errors)


def _checked_job(caller: Principal, spec: JobSpec, job_class: JobClass | None, index: int) -> JobSpec:
    where = f"jobs[{index}]"
    update: dict[str, Any] = {}
    if not caller.privileged:
        _check_own_job(caller, spec, where)
        update["vo"] = spec.vo or caller.vo
    if job_class is not None and not job_class.admits(spec.owner, spec.owner_group):
        # the job could never be queued: bad input at the field, whoever submits it
        message = f"job class {job_class.name!r} is not open to owner {spec.owner!r} in group {spec.owner_group!r}"
        raise InvalidInput(f"{where}: {message}", [
            {"loc": ["body", "jobs", index, "job_class"], "msg": message, "type": "job_class_not_open"}
        ])  # fmt: skip
    requested = requested_class(spec)
    update["priority_class"] = resolve_priority_class(caller.privileged, requested, job_class, where)
    if all(getattr(spec, k) == v for k, v in update.items()):
        return spec  # a copy per job is a large part of a 10,000-job submission
    return spec.model_copy(update=update)


def _check_own_job(caller: Principal, spec: JobSpec, where: str) -> None:
    if spec.owner != caller.sub:
        raise Forbidden(f"{where}: a user may only submit jobs owned by {caller.sub!r}")
    if spec.owner_group not in caller.groups:
        raise Forbidden(f"{where}: {caller.sub!r} is not in group {spec.owner_group!r}")
    if caller.vo is not None and spec.vo not in (None, caller.vo):
        raise Forbidden(f"{where}: {caller.sub!r} belongs to VO {caller.vo!r}")


def requested_class(spec: JobSpec) -> int | None:
    """The priority class the job asks for; None when it leaves it to its job class.

    An omitted field counts as "not given" (and so does null, once JobSpec allows it).
    """
    if "priority_class" not in spec.model_fields_set:
        return None
    return spec.priority_class


def default_priority_class(job_class: JobClass | None) -> int:
    return job_class.default_class if job_class is not None else 0


def user_class_ceiling(job_class: JobClass | None) -> int:
    """The highest priority class a user may ask for.

    Users may only lower (<= 0) and may not exceed the class maximum: the
    stricter wins, min(0, max_class). A class default above 0 was the admin's
    choice for the class, so a user may still ask for that (and lower).
    """
    if job_class is None:
        return 0
    return max(min(0, job_class.max_class), job_class.default_class)


def resolve_priority_class(
    privileged: bool, requested: int | None, job_class: JobClass | None, where: str = "job"
) -> int:
    """The job's priority class: the one asked for, or the class default; 403 when a user asks too much."""
    if requested is None:
        return default_priority_class(job_class)
    ceiling = user_class_ceiling(job_class)
    if not privileged and requested > ceiling:
        within = f" in job class {job_class.name!r}" if job_class is not None else ""
        raise Forbidden(f"{where}: a user may ask for priority class <= {ceiling}{within}, not {requested}")
    return requested


def check_class_change(caller: Principal, current: int, requested: int | None) -> None:
    """A user may only lower a job's priority class; admins and operators set any value."""
    if caller.privileged or requested is None or requested <= current:
        return
    raise Forbidden(f"a user may only lower a job's priority class: it is {current}, {requested} is higher")


def job_class_usable(caller: Principal, job_class: JobClass) -> bool:
    """Could the caller submit its own jobs in this class? Privileged callers see every class."""
    if caller.privileged:
        return True
    users_ok = not job_class.allowed_users or caller.sub in job_class.allowed_users
    groups_ok = not job_class.allowed_groups or bool(caller.groups & job_class.allowed_groups)
    return users_ok and groups_ok
