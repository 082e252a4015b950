"""PostgreSQL's hot path: a whole match in one statement, one round trip.

The statement does in SQL what the general path does in Python, step for step:

1. eligible TQs (the same conditions as `eligibility`), minus those passed
   over in this request;
2. the choice: highest priority class, then (with prefer_longest_cpu) the
   longest CPU bucket, then the lottery over TQ priorities, as an ORDER BY
   of the same keys `lottery.draw` uses (`exact`: Exp(1)/w, the exponential
   race; `dirac`: U/w; `highest`: w descending);
3. the user-priority level of that TQ: when all its jobs share one level,
   which two index probes (min, max) tell, that level; otherwise the same
   lottery over levels weighted by jobs × real priority;
4. the claim of `claim.py`: one of the lowest `candidates` job ids of that
   level, locked with FOR UPDATE SKIP LOCKED under LIMIT 1, removed from the
   queue, marked Matched, its event recorded.

The answer is always one row: whether the site has limits (then nothing was
claimed: limits take the general path, which checks them), the TQ chosen
(None: nothing eligible), and the job (None with a TQ: the pick was lost
to another matcher, or the TQ ran dry - try again).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

import psycopg
from sqlalchemy import (
    ColumnElement,
    DateTime,
    Float,
    Integer,
    String,
    and_,
    bindparam,
    case,
    cast,
    exists,
    false,
    func,
    insert,
    literal,
    literal_column,
    not_,
    select,
    true,
    update,
)
from sqlalchemy import delete as sql_delete
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.tables import job_events, jobs, match_requests, site_limits, tq_jobs
from app.jobs.lifecycle import JobStatus
from app.matching.eligibility import Shape, conditions, one_of, parameters, shape_of, tq
from app.matching.resource import ResourceQuery
from app.settings import Lottery, MatchingSettings

_DIALECT = PGDialect_psycopg()
j = tq_jobs.alias("j")  # short names: see eligibility


@dataclass(frozen=True, slots=True)
class Outcome:
    site_limited: bool
    tq_id: int | None
    job: Any | None  # the jobs row after the claim
    jobs_before: int  # waiting jobs of the chosen TQ before the claim (0: it ran dry)


def _lottery_order(weight: ColumnElement, multiplicity: ColumnElement | None, mode: Lottery) -> list:
    """ORDER BY terms whose first row is `lottery.draw`'s winner."""
    # constants written into the text, not bound: the statement stays short
    zero, one = literal_column("0"), literal_column("1")
    positive = weight > literal_column("0")
    non_positive_last = case((positive, zero), else_=one)
    if mode is Lottery.highest:
        return [non_positive_last, weight.desc(), func.random()]
    u = literal_column("1.0") - func.random()  # in (0, 1]
    if mode is Lottery.exact:
        key = -func.ln(u) / (weight if multiplicity is None else weight * cast(multiplicity, Float))
    else:
        n = literal_column("1.0") if multiplicity is None else cast(multiplicity, Float)
        key = (literal_column("1.0") - func.power(u, literal_column("1.0") / n)) / weight
    return [non_positive_last, case((positive, key), else_=func.random())]


@lru_cache(maxsize=512)
def compiled(shape: Shape, lottery: Lottery, prefer_longest_cpu: bool, passing_over: bool, with_request: bool) -> tuple[str, dict[str, Any]]:
    """The statement for one resource shape as PostgreSQL text, and its constant parameters.

    Built and compiled once per shape; each match only binds its values, and
    psycopg prepares the statement on the server after a few executions.
    """
    limited = (
        select(exists().where(site_limits.c.site == bindparam("site"))).scalar_subquery()
        if shape.site
        else false()
    )
    order = [tq.c.priority_class.desc()]
    if prefer_longest_cpu:
        order.append(tq.c.cpu_time.desc())
    order += _lottery_order(tq.c.priority, None, lottery)
    where = list(conditions(shape, True))
    if passing_over:
        where.append(not_(one_of(tq.c.id, "passed_over", True, integers=True)))
    chosen = (
        select(tq.c.id.label("tq_id"))
        .where(and_(*where), not_(limited))
        .order_by(*order)
        .limit(1)
        .cte("chosen")
        .prefix_with("MATERIALIZED")
    )
    in_chosen = j.c.tq_id == select(chosen.c.tq_id).scalar_subquery()
    bounds = select(
        func.min(j.c.real_priority).label("lowest"), func.max(j.c.real_priority).label("highest")
    ).where(in_chosen).cte("bounds")
    drawn = (
        select(j.c.real_priority)
        .where(in_chosen)
        .group_by(j.c.real_priority)
        .order_by(*_lottery_order(j.c.real_priority, func.count(), lottery))
        .limit(1)
        .scalar_subquery()
    )
    level = select(
        case((bounds.c.lowest == bounds.c.highest, bounds.c.lowest), else_=drawn).label("level")
    ).cte("level")
    window = (
        select(j.c.job_id)
        .where(in_chosen, j.c.real_priority == select(level.c.level).scalar_subquery())
        .order_by(j.c.job_id)
        .limit(bindparam("candidates", type_=Integer))
    )
    picked_row = tq_jobs.alias("t")
    picked = (
        select(picked_row.c.job_id)
        .where(picked_row.c.job_id.in_(window))
        .order_by(func.random())
        .limit(1)
        .with_for_update(of=picked_row, skip_locked=True)
        .cte("picked")
        .prefix_with("MATERIALIZED")
    )
    removed = (
        sql_delete(tq_jobs)
        .where(tq_jobs.c.job_id == picked.c.job_id)
        .returning(tq_jobs.c.job_id, tq_jobs.c.tq_id)
        .cte("removed")
    )
    now = bindparam("now", type_=DateTime(timezone=True))
    matched = (
        update(jobs)
        .where(jobs.c.id == removed.c.job_id, jobs.c.status == JobStatus.Waiting.value)
        .values(
            status=JobStatus.Matched.value,
            site=bindparam("pilot_site", type_=String),
            pilot_reference=bindparam("pilot_reference", type_=String),
            matched_by=bindparam("requester", type_=String),
            matched_at=now,
            lease_expires_at=bindparam("lease_until", type_=DateTime(timezone=True)),
            task_queue_id=removed.c.tq_id,
        )
        .returning(*jobs.c)
        .cte("matched")
    )
    event = (
        insert(job_events)
        .from_select(
            ["job_id", "status", "at", "source"],
            select(matched.c.id, literal(JobStatus.Matched.value), now, literal("match")),
        )
        .cte("event")
    )
    # jobs in the TQ before this claim (the statement cannot see its own delete)
    before = (
        select(func.count())
        .select_from(select(literal(1)).where(in_chosen).limit(2).subquery())
        .scalar_subquery()
    )
    flags = select(
        limited.label("site_limited"),
        select(chosen.c.tq_id).scalar_subquery().label("chosen_tq"),
        before.label("jobs_before"),
    ).cte("flags")
    answer = (
        select(flags, literal_column("matched.*"))  # the job's columns under their own names
        .select_from(flags.outerjoin(matched, true()))
        .add_cte(event)
    )
    if with_request:
        request = (
            insert(match_requests)
            .from_select(
                ["requester", "request_id", "job_id", "created_at"],
                select(bindparam("requester", type_=String), bindparam("request_id", type_=String), matched.c.id, now),
            )
            .cte("request")
        )
        answer = answer.add_cte(request)
    compiled_answer = answer.compile(dialect=_DIALECT)
    constants = {k: v for k, v in compiled_answer.params.items() if v is not None}
    return compiled_answer.string, constants


async def _execute(conn: AsyncConnection, sql: str, params: dict[str, Any]) -> Any:
    """Run the statement on the driver's own connection, in its own transaction.

    SQLAlchemy's execution layer costs as much as the database here; the
    statement is already compiled, so psycopg takes it directly. Driver errors
    are turned into SQLAlchemy's, so that outages answer 503 as elsewhere, and
    a broken connection is dropped from the pool.
    """
    raw = (await conn.get_raw_connection()).driver_connection
    try:
        async with raw.transaction():
            cursor = await raw.execute(sql, params)
            row = await cursor.fetchone()
    except psycopg.Error as exc:
        broken = raw.broken or raw.closed
        if broken:
            await conn.invalidate()
        raise DBAPIError.instance(None, None, exc, psycopg.Error, connection_invalidated=broken) from exc
    return _Row(dict(zip((c.name for c in cursor.description), row)))


class _Row:
    """Attribute access to a result row by column name."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def _job_of(row: Any) -> Any | None:
    return None if row.id is None else row


async def match_once(
    conn: AsyncConnection,
    q: ResourceQuery,
    options: MatchingSettings,
    *,
    passed_over: list[int],
    candidates: int,
    pilot_site: str,
    pilot_reference: str | None,
    requester: str,
    request_id: str | None,
    now: datetime,
    lease_until: datetime,
) -> Outcome:
    sql, constants = compiled(
        shape_of(q), options.lottery, options.prefer_longest_cpu, bool(passed_over), request_id is not None
    )
    params = {
        **constants,
        **parameters(q),
        "passed_over": passed_over,
        "candidates": candidates,
        "pilot_site": pilot_site,
        "pilot_reference": pilot_reference,
        "requester": requester,
        "request_id": request_id,
        "now": now,
        "lease_until": lease_until,
    }
    row = await _execute(conn, sql, params)
    job = _job_of(row)
    return Outcome(
        site_limited=bool(row.site_limited),
        tq_id=row.chosen_tq,
        job=job,
        jobs_before=row.jobs_before or 0,
    )
