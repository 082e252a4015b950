"""The priority loop: read the queues, apply share corrections, set every TQ's priority.

One process at a time recomputes (a transaction-scoped advisory lock on
PostgreSQL); scheduled runs also skip when another process ran less than an
interval ago, so N replicas still recompute once per interval.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, delete, exists, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from app.accounting import usage
from app.clock import as_utc, utcnow
from app.db.advisory import lock, try_lock
from app.db.dialect import change_time
from app.db.tables import (
    associations,
    groups,
    job_classes,
    jobs,
    priority_runs,
    task_queues,
    tq_jobs,
)
from app.metrics import RECOMPUTE_DURATION
from app.priority import (
    corrector,
    dirac,
    dirac_cfg,
    fairshare,
    history,
    multifactor,
    rank,
)
from app.priority.corrections_config import CorrectionsConfig
from app.priority.facts import TqFacts
from app.settings import PrioritySettings, Settings
from app.taskqueues import changes as change_signal
from app.taskqueues import store as tq_store
from app.taskqueues.requirements import levels_of, stored_levels

PRIORITY_LOCK = 7_100_001
NO_CORRECTIONS = CorrectionsConfig()
KEEP_RUNS = 100  # the run history kept for GET /shares and for operators


def configured_corrections(priority: PrioritySettings) -> CorrectionsConfig:
    """The corrector instances of the corrections file, then those given inline (which win)."""
    instances = {}
    if priority.corrections_file is not None:
        instances.update(dirac_cfg.load_corrections(priority.corrections_file).instances)
    instances.update(priority.corrections.instances)
    return CorrectionsConfig(instances=instances)


async def _loads(conn: AsyncConnection, only_groups: Collection[str] | None = None) -> list[dict]:
    """Every TQ with waiting jobs: keys, current priority and levels, and its jobs per level.

    One pass over the waiting jobs, grouped by (TQ, level): the averages and
    sums the policies weigh with, and the level counts matching draws from.
    The TQ rows and the oldest jobs are then read by key (a join would have
    the planner repeat the pass in every parallel worker).
    """
    tq = task_queues
    per_level = select(
        tq_jobs.c.tq_id,
        tq_jobs.c.real_priority,
        func.count(),
        # ids grow with submission: the lowest is the oldest waiting job
        func.min(tq_jobs.c.job_id),
    ).group_by(tq_jobs.c.tq_id, tq_jobs.c.real_priority)
    if only_groups is not None:
        # filter before aggregating: the planner cannot push it through the GROUP BY
        in_groups = select(tq.c.id).where(tq.c.owner_group.in_(sorted(only_groups)))
        per_level = per_level.where(tq_jobs.c.tq_id.in_(in_groups))
    levels: dict[int, dict[float, int]] = {}
    oldest: dict[int, int] = {}
    for tq_id, level, jobs_at_level, first in await conn.execute(per_level):
        levels.setdefault(tq_id, {})[float(level)] = int(jobs_at_level)
        oldest[tq_id] = min(first, oldest.get(tq_id, first))
    loads = []
    for part in tq_store.chunks(sorted(levels)):
        submitted = dict(
            (await conn.execute(select(jobs.c.id, jobs.c.submitted_at).where(jobs.c.id.in_([oldest[i] for i in part])))).all()
        )
        rows = await conn.execute(
            select(
                tq.c.id, tq.c.owner, tq.c.owner_group, tq.c.vo, tq.c.cpu_time, tq.c.priority_class,
                tq.c.job_class, tq.c.priority, tq.c.priority_origin, tq.c.levels.label("stored_levels"),
            ).where(tq.c.id.in_(part))
        )  # fmt: skip
        for row in rows:
            counts = levels[row.id]
            weighted = sum(p * n for p, n in counts.items())
            jobs_waiting = sum(counts.values())
            loads.append({
                **row._asdict(), "levels": counts, "jobs": jobs_waiting, "sum_rp": weighted,
                "avg_rp": weighted / jobs_waiting, "submitted_at": submitted[oldest[row.id]],
            })  # fmt: skip
    return loads


async def _group_policies(conn: AsyncConnection) -> dict[str, dirac.GroupPolicy]:
    rows = await conn.execute(
        select(groups.c.name, groups.c.job_share, groups.c.job_sharing, groups.c.allow_background_tqs)
    )
    return {name: dirac.GroupPolicy(share, sharing, background) for name, share, sharing, background in rows}


def _facts(rows: list[dict]) -> list[TqFacts]:
    return [
        TqFacts(
            tq_id=r["id"], owner=r["owner"], owner_group=r["owner_group"], vo=r["vo"], cpu_time=r["cpu_time"],
            priority_class=r["priority_class"], job_class=r["job_class"], jobs=r["jobs"],
            avg_real_priority=float(r["avg_rp"]), sum_real_priority=float(r["sum_rp"]),
            oldest_submitted_at=as_utc(r["submitted_at"]),
        )  # fmt: skip
        for r in rows
    ]


def _tq_loads(rows: list[dict]) -> list[dirac.TqLoad]:
    return [
        dirac.TqLoad(r["id"], r["owner"], r["owner_group"], r["jobs"], float(r["avg_rp"]), float(r["sum_rp"]))
        for r in rows
    ]


async def _corrections(
    conn: AsyncConnection,
    config: CorrectionsConfig,
    loads: list[dirac.TqLoad],
    policies: dict[str, dirac.GroupPolicy],
    now: datetime,
) -> tuple[dict[str, float], dict[tuple[str, str], float], dict[str, Any]]:
    """Group corrections, per-owner corrections, and each instance's explanation."""
    owners: dict[str, set[str]] = {}
    for load in loads:
        owners.setdefault(load.owner_group, set()).add(load.owner)
    group_factors: dict[str, float] = {}
    user_factors: dict[tuple[str, str], float] = {}
    explained: dict[str, Any] = {}
    for name, instance in sorted(config.instances.items()):
        if instance.group is None:
            shares = {g: policies.get(g, dirac.GroupPolicy()).job_share for g in owners}
        elif instance.group in owners and not policies.get(instance.group, dirac.GroupPolicy()).job_sharing:
            members = owners[instance.group]
            shares = {o: 1.0 / len(members) for o in members}  # owners share their group equally
        else:
            continue  # nothing waiting in that group, or one entity: nothing to correct between
        usage = {
            slice_name: await history.average_running(conn, instance.group, now - timedelta(seconds=s.time_span))
            for slice_name, s in instance.slices.items()
        }
        result = corrector.correct(instance, shares, usage)
        for entity, corrected in result.entities.items():
            if instance.group is None:
                group_factors[entity] = corrected.correction
            else:
                user_factors[(instance.group, entity)] = corrected.correction
        explained[name] = {"group": instance.group, **result.to_json()}
    return group_factors, user_factors, explained


@dataclass(frozen=True, slots=True)
class Outcome:
    """A policy's decision: priority and explanation per TQ, and what the run report adds."""

    priorities: dict[int, float]
    origins: dict[int, dict[str, Any]]
    report: dict[str, Any]


async def _apply(conn: AsyncConnection, rows: list[dict], outcome: Outcome) -> int:
    """Write the priorities and level counts that changed, in id order (a stable lock
    order). Returns how many priorities changed."""
    changes = []
    changed_priorities = 0
    for r in sorted(rows, key=lambda r: r["id"]):
        priority, origin = outcome.priorities[r["id"]], outcome.origins[r["id"]]
        levels = stored_levels(r["levels"])
        new_priority = r["priority"] != priority or r["priority_origin"] != origin
        if new_priority or stored_levels(levels_of(r["stored_levels"])) != levels:
            changed_priorities += new_priority
            changes.append({"tq": r["id"], "priority": priority, "origin": origin, "levels": levels})
    if changes:
        await conn.execute(
            update(task_queues)
            .where(task_queues.c.id == bindparam("tq"))
            .values(
                priority=bindparam("priority"),
                priority_origin=bindparam("origin"),
                levels=bindparam("levels"),
                changed_at=change_time(conn),
            ),
            changes,
        )
        change_signal.bump()
    return changed_priorities


async def _forget_drained_levels(conn: AsyncConnection) -> None:
    """TQs whose last job left still list levels (claims do not subtract): empty them,
    so that no matcher draws from them again."""
    result = await conn.execute(
        update(task_queues)
        .where(
            func.json_array_length(task_queues.c.levels) > 0,
            ~exists().where(tq_jobs.c.tq_id == task_queues.c.id),
        )
        .values(levels=[], changed_at=change_time(conn))
    )
    if result.rowcount:
        change_signal.bump()


def _dirac_report(decision: dirac.Decision, explained: dict[str, Any], corrections_on: bool) -> dict[str, Any]:
    total = sum(e.share for e in decision.entities) or 1.0
    return {
        "corrections_enabled": corrections_on,
        "entities": [
            {
                "group": e.group,
                "owner": e.owner,
                "configured_share": e.configured_share,
                "group_correction": e.group_correction,
                "user_correction": e.user_correction,
                "share": e.share,
                "normalised_share": e.share / total,
                "task_queues": [
                    {"task_queue_id": i, "priority": decision.priorities[i]} for i in sorted(e.tq_ids)
                ],
            }
            for e in decision.entities
        ],
        "corrections": explained,
    }


async def _decide_dirac(
    conn: AsyncConnection, settings: Settings, corrections: CorrectionsConfig, rows: list[dict], now: datetime
) -> Outcome:
    loads = _tq_loads(rows)
    policies = await _group_policies(conn)
    corrections_on = settings.priority.corrections_enabled and bool(corrections.instances)
    group_factors, user_factors, explained = (
        await _corrections(conn, corrections, loads, policies, now) if corrections_on else ({}, {}, {})
    )
    decision = dirac.decide(loads, policies, settings.priority.tq_weight, group_factors, user_factors)
    return Outcome(decision.priorities, decision.origins, _dirac_report(decision, explained, corrections_on))


async def _decide_rank(
    conn: AsyncConnection, settings: Settings, corrections: CorrectionsConfig, rows: list[dict], now: datetime
) -> Outcome:
    window = settings.priority.rank.window_days
    groups_by_name = {
        name: rank.RankGroup(job_share=share, priority=level)
        for name, share, level in await conn.execute(select(groups.c.name, groups.c.job_share, groups.c.priority))
    }
    used = await usage.windowed_usage(conn, now - timedelta(days=window))
    decided = rank.decide(_facts(rows), groups_by_name, used, settings.priority.rank)
    return Outcome(
        {tq: p for tq, (p, _) in decided.items()},
        {tq: origin for tq, (_, origin) in decided.items()},
        {"window_days": window},
    )


async def _association_tree(conn: AsyncConnection, facts: list[TqFacts]) -> dict:
    """The imported association tree, or, without one, root -> groups (job_share) -> owners."""
    rows = (
        await conn.execute(
            select(associations.c.account, associations.c.user, associations.c.parent, associations.c.shares)
            .order_by(associations.c.position)
        )
    ).all()
    if rows:
        return fairshare.tree_from_associations([tuple(r) for r in rows])
    shares = dict((await conn.execute(select(groups.c.name, groups.c.job_share))).all())
    members = {(f.owner_group, f.owner) for f in facts}
    return fairshare.implicit_tree({g: shares.get(g, dirac.DEFAULT_SHARE) for g, _ in members}, members)


async def _decide_multifactor(
    conn: AsyncConnection, settings: Settings, corrections: CorrectionsConfig, rows: list[dict], now: datetime
) -> Outcome:
    options = settings.priority.multifactor
    facts = _facts(rows)
    tree = await _association_tree(conn, facts)
    shares = fairshare.compute(tree, await usage.read_usage(conn, now, settings), options.fairshare)
    levels = dict((await conn.execute(select(groups.c.name, groups.c.priority))).all())
    class_priority = dict((await conn.execute(select(job_classes.c.name, job_classes.c.priority))).all())
    decided = multifactor.decide(
        facts,
        now,
        options,
        lambda group, owner: fairshare.factor_of(shares, group, owner),
        lambda group: levels.get(group, 0),
        class_priority.get,
        settings.taskqueues.cpu_buckets,
    )
    return Outcome(
        {tq: p for tq, (p, _) in decided.items()},
        {tq: origin for tq, (_, origin) in decided.items()},
        {"associations": [row.as_dict() for row in shares.values()]},
    )


DECIDERS = {"dirac": _decide_dirac, "rank": _decide_rank, "multifactor": _decide_multifactor}


def _task_queue_report(rows: list[dict], outcome: Outcome) -> list[dict[str, Any]]:
    return [
        {"task_queue_id": r["id"], "owner": r["owner"], "owner_group": r["owner_group"],
         "priority_class": r["priority_class"], "priority": outcome.priorities[r["id"]],
         "origin": outcome.origins[r["id"]]}
        for r in sorted(rows, key=lambda r: r["id"])
    ]  # fmt: skip


async def recompute(
    conn: AsyncConnection,
    settings: Settings,
    corrections: CorrectionsConfig,
    *,
    runner: str,
    scheduled: bool,
) -> dict[str, Any] | None:
    """Recompute every TQ's priority. Scheduled runs give way to a concurrent or recent
    run (None); a forced run waits for the lock and always runs."""
    async with conn.begin():
        if scheduled:
            if not await try_lock(conn, PRIORITY_LOCK) or await _ran_recently(conn, utcnow(), settings):
                return None
        else:
            await lock(conn, PRIORITY_LOCK)
        started = utcnow()  # the run starts once it holds the lock
        clock = time.perf_counter()
        rows = await _loads(conn)
        outcome = await DECIDERS[settings.priority.policy](conn, settings, corrections, rows, started)
        changed = await _apply(conn, rows, outcome)
        await _forget_drained_levels(conn)
        finished = utcnow()
        report = {
            "policy": settings.priority.policy,
            "tq_weight": settings.priority.tq_weight,
            "corrections_enabled": False,
            "entities": [],
            "corrections": {},
            **outcome.report,
            "task_queue_priorities": _task_queue_report(rows, outcome),
        }
        run_id = (
            await conn.execute(
                insert(priority_runs).values(
                    runner=runner, started_at=started, finished_at=finished, policy=settings.priority.policy,
                    task_queues=len(rows), report=report,
                ).returning(priority_runs.c.id)
            )
        ).scalar_one()  # fmt: skip
        await conn.execute(delete(priority_runs).where(priority_runs.c.id <= run_id - KEEP_RUNS))
    RECOMPUTE_DURATION.observe(time.perf_counter() - clock)
    return {
        "runner": runner,
        "started_at": started,
        "finished_at": finished,
        "task_queues": len(rows),
        "changed": changed,
        **report,
    }


async def _ran_recently(conn: AsyncConnection, now: datetime, settings: Settings) -> bool:
    last = (await conn.execute(select(func.max(priority_runs.c.finished_at)))).scalar()
    return last is not None and as_utc(last) > now - timedelta(seconds=0.9 * settings.priority.interval_seconds)


async def refresh_groups(conn: AsyncConnection, settings: Settings, group_names: Collection[str]) -> None:
    """Provisional priorities for groups that just got new TQs.

    dirac: the policy over those groups with the last full run's corrections.
    rank and multifactor place every TQ relative to all others, so they
    decide over everything (without recording a run). The loop refines both.
    """
    async with conn.begin():
        await lock(conn, PRIORITY_LOCK)
        now = utcnow()
        if settings.priority.policy != "dirac":
            rows = await _loads(conn)
            if rows:
                await _apply(conn, rows, await DECIDERS[settings.priority.policy](conn, settings, NO_CORRECTIONS, rows, now))
            return
        rows = await _loads(conn, group_names)
        if not rows:
            return
        last = await latest_run(conn)
        group_factors, user_factors = _factors_of(last["report"] if last else None)
        policies = await _group_policies(conn)
        decision = dirac.decide(_tq_loads(rows), policies, settings.priority.tq_weight, group_factors, user_factors)
        await _apply(conn, rows, Outcome(decision.priorities, decision.origins, {}))


def _factors_of(report: dict | None) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
    group_factors: dict[str, float] = {}
    user_factors: dict[tuple[str, str], float] = {}
    for entity in (report or {}).get("entities", []):
        group_factors[entity["group"]] = entity["group_correction"]
        if entity["owner"] is not None:
            user_factors[(entity["group"], entity["owner"])] = entity["user_correction"]
    return group_factors, user_factors


async def latest_run(conn: AsyncConnection) -> dict[str, Any] | None:
    row = (
        await conn.execute(select(priority_runs).order_by(priority_runs.c.id.desc()).limit(1))
    ).first()
    if row is None:
        return None
    return {
        "runner": row.runner,
        "started_at": as_utc(row.started_at),
        "finished_at": as_utc(row.finished_at),
        "task_queues": row.task_queues,
        "report": row.report,
    }
