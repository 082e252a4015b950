"""Which task queues a resource may take (DIRAC's rules), as SQL conditions.

The conditions depend only on the resource's shape (which fields it gives,
which of them are empty); its values are bound parameters. So a statement
is built once per shape and reused: building SQLAlchemy expressions per
request costs more than the database's work on the hot path.

PostgreSQL tests the TQ row's own value arrays (`sites && :sites`, one
parameter whatever the length, so the driver can prepare the statement);
SQLite probes the value tables with EXISTS and expanding IN lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Select,
    String,
    and_,
    bindparam,
    exists,
    func,
    not_,
    or_,
    select,
    literal_column,
    true,
    type_coerce,
)
from sqlalchemy.dialects.postgresql import ARRAY

from app.db.tables import groups, task_queues, tq_jobs, tq_values
from app.matching.resource import ResourceQuery

# short aliases keep the statements' text short (psycopg caches the parsing of short ones)
tq = task_queues.alias("tq")
waiting = tq_jobs.alias("w")

ANY_VALUE, NO_VALUE, SOME_VALUES = "any", "none", "some"


def _state(values: frozenset[str] | None) -> str:
    if values is None:
        return ANY_VALUE
    return SOME_VALUES if values else NO_VALUE


@dataclass(frozen=True, slots=True)
class Shape:
    """What a resource description gives, without its values."""

    fields: tuple[tuple[str, str], ...]  # (multi-valued field, any|none|some)
    site: bool
    tags: str  # any|none|some
    required_tags: int
    owner_groups: bool
    owner: bool
    vo: bool
    job_id: bool
    banned_job_types: bool
    banned_owner_groups: bool
    banned_owners: bool


def shape_of(q: ResourceQuery) -> Shape:
    return Shape(
        fields=tuple((field, _state(values)) for field, values in q.values.items()),
        site=q.site is not None,
        tags=_state(q.tags),
        required_tags=len(q.required_tags),
        owner_groups=q.owner_groups is not None,
        owner=q.owner is not None,
        vo=q.vo is not None,
        job_id=q.job_id is not None,
        banned_job_types=bool(q.banned_job_types),
        banned_owner_groups=bool(q.banned_owner_groups),
        banned_owners=bool(q.banned_owners),
    )


def parameters(q: ResourceQuery) -> dict[str, Any]:
    """The values the conditions of `shape_of(q)` are bound to."""
    params: dict[str, Any] = {"cpu_time": q.cpu_time, "site": q.site, "owner": q.owner, "vo": q.vo, "job_id": q.job_id}
    for field, values in q.values.items():
        params[f"{field}_values"] = sorted(values or ())
    params["tags"] = sorted(q.tags or ())
    params["required_tags"] = sorted(q.required_tags)
    for i, tag in enumerate(params["required_tags"]):
        params[f"required_tag_{i}"] = tag
    params["owner_groups"] = sorted(q.owner_groups or ())
    params["banned_job_types"] = sorted(q.banned_job_types)
    params["banned_owner_groups"] = sorted(q.banned_owner_groups)
    params["banned_owners"] = sorted(q.banned_owners)
    return params


def one_of(column: ColumnElement, name: str, postgresql: bool, *, integers: bool = False) -> ColumnElement[bool]:
    """`column` is among the values bound to `name`."""
    if postgresql:
        return column == func.any(bindparam(name, type_=ARRAY(BigInteger if integers else String)))
    return column.in_(bindparam(name, expanding=True))


def _has_values(field: str) -> ColumnElement[bool]:
    table = tq_values[field]
    return exists().where(table.c.tq_id == tq.c.id)


def _has_one_of(field: str, name: str, postgresql: bool) -> ColumnElement[bool]:
    table = tq_values[field]
    return exists().where(table.c.tq_id == tq.c.id, one_of(table.c.value, name, postgresql))


def _accepts(field: str, state: str, postgresql: bool) -> ColumnElement[bool]:
    """A TQ without values for the field accepts anything; else one value must be shared."""
    if state == ANY_VALUE:
        return true()
    if state == NO_VALUE:
        return not_(_has_values(field))
    return or_(not_(_has_values(field)), _has_one_of(field, f"{field}_values", postgresql))


def _empty(field: str) -> ColumnElement[bool]:
    return func.cardinality(_array(field)) == literal_column("0")


def _array(field: str) -> ColumnElement:
    return type_coerce(tq.c[field], ARRAY(String))


def _bound_array(name: str) -> ColumnElement:
    return bindparam(name, type_=ARRAY(String))


def _array_conditions(shape: Shape) -> list[ColumnElement[bool]]:
    """PostgreSQL: the value lists of the TQ row itself (task_queues' array columns)."""
    where: list[ColumnElement[bool]] = []
    for field, state in shape.fields:
        if state == NO_VALUE:
            where.append(_empty(field))
        elif state == SOME_VALUES:
            where.append(or_(_empty(field), _array(field).overlap(_bound_array(f"{field}_values"))))
    if shape.site:
        where.append(not_(bindparam("site", type_=String) == func.any(_array("banned_sites"))))
    if shape.tags == NO_VALUE:
        where.append(_empty("tags"))
    elif shape.tags == SOME_VALUES:
        where.append(_array("tags").contained_by(_bound_array("tags")))
    if shape.required_tags:
        where.append(_array("tags").contains(_bound_array("required_tags")))
    if shape.banned_job_types:
        where.append(not_(_array("job_types").overlap(_bound_array("banned_job_types"))))
    return where


def _value_table_conditions(shape: Shape) -> list[ColumnElement[bool]]:
    """SQLite: EXISTS probes of the value tables."""
    tags = tq_values["tags"]
    where = [_accepts(field, state, False) for field, state in shape.fields]
    if shape.site:
        banned = tq_values["banned_sites"]
        where.append(not_(exists().where(banned.c.tq_id == tq.c.id, banned.c.value == bindparam("site"))))
    if shape.tags != ANY_VALUE:
        # the TQ's tags must all be offered
        foreign = not_(one_of(tags.c.value, "tags", False)) if shape.tags == SOME_VALUES else true()
        where.append(not_(exists().where(tags.c.tq_id == tq.c.id, foreign)))
    for i in range(shape.required_tags):
        where.append(exists().where(tags.c.tq_id == tq.c.id, tags.c.value == bindparam(f"required_tag_{i}")))
    if shape.banned_job_types:
        where.append(not_(_has_one_of("job_types", "banned_job_types", False)))
    return where


@lru_cache(maxsize=512)
def conditions(shape: Shape, postgresql: bool) -> tuple[ColumnElement[bool], ...]:
    # "has a waiting job" as a LIMIT 1 probe per TQ: as a plain EXISTS, PostgreSQL
    # plans a semi-join that reads every waiting job (cost growing with the queue)
    one_waiting = select(waiting.c.tq_id).where(waiting.c.tq_id == tq.c.id).limit(1).scalar_subquery()
    where: list[ColumnElement[bool]] = [
        tq.c.cpu_time <= bindparam("cpu_time", type_=BigInteger),
        one_waiting.is_not(None),
    ]
    where += _array_conditions(shape) if postgresql else _value_table_conditions(shape)
    if shape.owner_groups:
        where.append(one_of(tq.c.owner_group, "owner_groups", postgresql))
    if shape.owner:
        # JOB_SHARING groups are matched by group alone
        sharing = select(groups.c.name).where(groups.c.job_sharing.is_(True))
        where.append(or_(tq.c.owner == bindparam("owner"), tq.c.owner_group.in_(sharing)))
    if shape.vo:
        where.append(tq.c.vo == bindparam("vo"))
    if shape.banned_owner_groups:
        where.append(not_(one_of(tq.c.owner_group, "banned_owner_groups", postgresql)))
    if shape.banned_owners:
        where.append(not_(one_of(tq.c.owner, "banned_owners", postgresql)))
    if shape.job_id:
        where.append(exists().where(waiting.c.tq_id == tq.c.id, waiting.c.job_id == bindparam("job_id")))
    return tuple(where)


@lru_cache(maxsize=512)
def _eligible_statement(shape: Shape, postgresql: bool) -> Select:
    return select(tq.c.id, tq.c.priority_class, tq.c.cpu_time, tq.c.priority).where(
        and_(*conditions(shape, postgresql))
    )


def eligible_task_queues(q: ResourceQuery, postgresql: bool) -> tuple[Select, dict[str, Any]]:
    """The statement and its parameters."""
    return _eligible_statement(shape_of(q), postgresql), parameters(q)
