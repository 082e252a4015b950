"""Which task queues a resource may take (DIRAC's rules), as one SQL statement."""

from __future__ import annotations

from sqlalchemy import ColumnElement, Select, and_, exists, not_, or_, select, true

from app.db.tables import groups, task_queues, tq_jobs, tq_values
from app.matching.resource import ResourceQuery

tq = task_queues


def _has_values(field: str) -> ColumnElement[bool]:
    table = tq_values[field]
    return exists().where(table.c.tq_id == tq.c.id)


def _has_one_of(field: str, values: frozenset[str]) -> ColumnElement[bool]:
    table = tq_values[field]
    return exists().where(table.c.tq_id == tq.c.id, table.c.value.in_(sorted(values)))


def _accepts(field: str, values: frozenset[str] | None) -> ColumnElement[bool]:
    """A TQ without values for the field accepts anything; else one value must be shared."""
    if values is None:
        return true()
    if not values:
        return not_(_has_values(field))
    return or_(not_(_has_values(field)), _has_one_of(field, values))


def conditions(q: ResourceQuery) -> list[ColumnElement[bool]]:
    tags = tq_values["tags"]
    where: list[ColumnElement[bool]] = [
        tq.c.cpu_time <= q.cpu_time,
        exists().where(tq_jobs.c.tq_id == tq.c.id),
    ]
    where += [_accepts(field, values) for field, values in q.values.items()]
    if q.site is not None:
        banned = tq_values["banned_sites"]
        where.append(not_(exists().where(banned.c.tq_id == tq.c.id, banned.c.value == q.site)))
    if q.tags is not None:
        # the TQ's tags must all be offered
        foreign = tags.c.value.not_in(sorted(q.tags)) if q.tags else true()
        where.append(not_(exists().where(tags.c.tq_id == tq.c.id, foreign)))
    for required in sorted(q.required_tags):
        where.append(exists().where(tags.c.tq_id == tq.c.id, tags.c.value == required))
    if q.owner_groups is not None:
        where.append(tq.c.owner_group.in_(sorted(q.owner_groups)))
    if q.owner is not None:
        # JOB_SHARING groups are matched by group alone
        sharing = select(groups.c.name).where(groups.c.job_sharing.is_(True))
        where.append(or_(tq.c.owner == q.owner, tq.c.owner_group.in_(sharing)))
    if q.vo is not None:
        where.append(tq.c.vo == q.vo)
    if q.banned_job_types:
        where.append(not_(_has_one_of("job_types", q.banned_job_types)))
    if q.banned_owner_groups:
        where.append(tq.c.owner_group.not_in(sorted(q.banned_owner_groups)))
    if q.banned_owners:
        where.append(tq.c.owner.not_in(sorted(q.banned_owners)))
    if q.job_id is not None:
        where.append(
            exists().where(tq_jobs.c.tq_id == tq.c.id, tq_jobs.c.job_id == q.job_id)
        )
    return where


def eligible_task_queues(q: ResourceQuery) -> Select:
    return select(tq.c.id, tq.c.priority_class, tq.c.cpu_time, tq.c.priority).where(
        and_(*conditions(q))
    )
