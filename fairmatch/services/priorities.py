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
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.accounting.associations import Association
from fairmatch.accounting.usage import Node, WindowedUsage
from fairmatch.auth.policy import JobScope
from fairmatch.clock import as_utc, utcnow
from fairmatch.db.accounting import AccountingDB
from fairmatch.db.engine import read_transaction
from fairmatch.db.groups import GroupDB
from fairmatch.db.job_classes import JobClassDB
from fairmatch.db.loads import LoadDB
from fairmatch.db.priority_runs import PRIORITY_LOCK, PriorityRunDB
from fairmatch.db.running_samples import RunningSampleDB
from fairmatch.metrics import RECOMPUTE_DURATION
from fairmatch.priority import corrector, dirac, dirac_cfg, fairshare, multifactor, rank
from fairmatch.priority.corrections import UNCORRECTED, ShareCorrections
from fairmatch.priority.facts import TqFacts
from fairmatch.priority.groups import DEFAULT_JOB_SHARE
from fairmatch.priority.rank import RankGroup
from fairmatch.priority.settings import CorrectionsConfig, PrioritySettings
from fairmatch.services import accounting, audit
from fairmatch.services.process import Process, changing
from fairmatch.settings import Settings
from fairmatch.taskqueues.requirements import levels_of, stored_levels

NO_CORRECTIONS = CorrectionsConfig()
KEEP_RUNS = 100  # the run history kept for GET /shares and for operators
# A submission's provisional refresh rewrites a TQ only when its priority moves by more
# than this fraction: shares stay within 1 % until the loop's exact run, and a submission
# that adds one TQ does not rewrite every other TQ of its group for a slight move (each
# rewrite is a row version, and every process's matcher reads it again).
PROVISIONAL_TOLERANCE = 0.01


class PolicyInputs(Protocol):
    """What the policies read besides the TQs: the database's (`DatabaseInputs`), or a
    simulated world's (`fairmatch.simulation`), so that both run the very same deciders."""

    async def group_policies(self) -> dict[str, dirac.GroupPolicy]: ...
    async def average_running(self, group: str | None, since: datetime) -> dict[str, float]: ...
    async def rank_groups(self) -> dict[str, RankGroup]: ...
    async def windowed_usage(self, since: datetime) -> list[WindowedUsage]: ...
    async def associations(self) -> list[Association]: ...
    async def group_shares(self) -> dict[str, float]: ...
    async def usage(self, now: datetime) -> dict[Node, float]: ...
    async def group_levels(self) -> dict[str, int]: ...
    async def class_priorities(self) -> dict[str, int]: ...


class DatabaseInputs:
    """The policies' inputs read inside the caller's transaction."""

    def __init__(self, conn: AsyncConnection, settings: Settings) -> None:
        self.groups = GroupDB.of(conn)
        self.samples = RunningSampleDB.of(conn)
        self.accounting = AccountingDB.of(conn)
        self.job_classes = JobClassDB.of(conn)
        self.conn, self.settings = conn, settings

    async def group_policies(self) -> dict[str, dirac.GroupPolicy]:
        return await self.groups.group_policies()

    async def average_running(self, group: str | None, since: datetime) -> dict[str, float]:
        return await self.samples.average_running(group, since)

    async def rank_groups(self) -> dict[str, RankGroup]:
        return await self.groups.rank_groups()

    async def windowed_usage(self, since: datetime) -> list[WindowedUsage]:
        return await self.accounting.windowed_usage(since)

    async def associations(self) -> list[Association]:
        return await self.accounting.associations()

    async def group_shares(self) -> dict[str, float]:
        return await self.groups.group_shares()

    async def usage(self, now: datetime) -> dict[Node, float]:
        return await accounting.read_usage(self.conn, now, self.settings)

    async def group_levels(self) -> dict[str, int]:
        return await self.groups.group_levels()

    async def class_priorities(self) -> dict[str, int]:
        return {job_class.name: job_class.priority for job_class in await self.job_classes.all()}


def configured_corrections(priority: PrioritySettings) -> CorrectionsConfig:
    """The corrector instances of the corrections file, then those given inline (which win)."""
    instances = {}
    if priority.corrections_file is not None:
        instances.update(dirac_cfg.load_corrections(priority.corrections_file).instances)
    instances.update(priority.corrections.instances)
    return CorrectionsConfig(instances=instances)


def _facts(rows: list[dict]) -> list[TqFacts]:
    return [
        TqFacts(
            tq_id=r["id"],
            owner=r["owner"],
            owner_group=r["owner_group"],
            account=r["account"],
            vo=r["vo"],
            cpu_time=r["cpu_time"],
            priority_class=r["priority_class"],
            job_class=r["job_class"],
            jobs=r["jobs"],
            avg_real_priority=float(r["avg_rp"]),
            sum_real_priority=float(r["sum_rp"]),
            oldest_submitted_at=as_utc(r["submitted_at"]),
        )
        for r in rows
    ]


def _tq_loads(rows: list[dict]) -> list[dirac.TqLoad]:
    return [
        dirac.TqLoad(r["id"], r["owner"], r["owner_group"], r["jobs"], float(r["avg_rp"]), float(r["sum_rp"]),
                     dirac.workflow_of(r))
        for r in rows
    ]  # fmt: skip


async def _corrections(
    inputs: PolicyInputs,
    config: CorrectionsConfig,
    loads: list[dirac.TqLoad],
    policies: dict[str, dirac.GroupPolicy],
    now: datetime,
) -> ShareCorrections:
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
            slice_name: await inputs.average_running(instance.group, now - timedelta(seconds=s.time_span))
            for slice_name, s in instance.slices.items()
        }
        result = corrector.correct(instance, shares, usage)
        for entity, corrected in result.entities.items():
            if instance.group is None:
                group_factors[entity] = corrected.correction
            else:
                user_factors[(instance.group, entity)] = corrected.correction
        explained[name] = {"group": instance.group, **result.to_json()}
    return ShareCorrections(enabled=True, groups=group_factors, owners=user_factors, explained=explained)


@dataclass(frozen=True, slots=True)
class Outcome:
    """A policy's decision: priority and explanation per TQ, what the run report adds, and the
    share corrections it applied."""

    priorities: dict[int, float]
    origins: dict[int, dict[str, Any]]
    report: dict[str, Any]
    corrections: ShareCorrections = UNCORRECTED


async def _apply(db: LoadDB, rows: list[dict], outcome: Outcome, *, exact: Collection[int] | None = None) -> int:
    """Write the priorities and level counts that changed, in id order (a stable lock
    order). Returns how many priorities changed.

    With `exact` (a provisional refresh), only the TQs it names are written whenever
    anything changed; any other is written only when its priority moves by more than
    PROVISIONAL_TOLERANCE, or when it is new, and a move of its origin or level
    counts alone waits for the loop."""
    changes = []
    changed_priorities = 0
    for r in sorted(rows, key=lambda r: r["id"]):
        priority, origin = outcome.priorities[r["id"]], outcome.origins[r["id"]]
        levels = stored_levels(r["levels"])
        provisional = exact is not None and r["id"] not in exact
        if provisional:
            moved = abs(priority - r["priority"]) > PROVISIONAL_TOLERANCE * max(priority, r["priority"])
            new_priority = moved or r["priority_origin"] is None  # None: a TQ no policy has decided yet
        else:
            new_priority = r["priority"] != priority or r["priority_origin"] != origin
        if new_priority or (not provisional and stored_levels(levels_of(r["stored_levels"])) != levels):
            changed_priorities += new_priority
            changes.append({"tq": r["id"], "priority": priority, "origin": origin, "shareless": rank.shareless(origin),
                            "levels": levels, "levels_as_of": r["levels_as_of"]})  # fmt: skip
    if changes:
        await db.set_priorities(changes)
    return changed_priorities


def _dirac_report(decision: dirac.Decision) -> dict[str, Any]:
    total = sum(e.share for e in decision.entities) or 1.0
    return {
        "entities": [
            {
                "group": e.group,
                "owner": e.owner,
                "configured_share": e.configured_share,
                "group_correction": e.group_correction,
                "user_correction": e.user_correction,
                "share": e.share,
                "normalised_share": e.share / total,
                "task_queues": [{"task_queue_id": i, "priority": decision.priorities[i]} for i in sorted(e.tq_ids)],
            }
            for e in decision.entities
        ],
    }


async def _decide_dirac(
    inputs: PolicyInputs, settings: Settings, corrections: CorrectionsConfig, rows: list[dict], now: datetime
) -> Outcome:
    loads = _tq_loads(rows)
    policies = await inputs.group_policies()
    corrections_on = settings.priority.corrections_enabled and bool(corrections.instances)
    applied = await _corrections(inputs, corrections, loads, policies, now) if corrections_on else UNCORRECTED
    decision = dirac.decide(loads, policies, settings.priority.tq_weight, applied.groups, applied.owners,
                            settings.priority.sum_site_variants)  # fmt: skip
    return Outcome(decision.priorities, decision.origins, _dirac_report(decision), applied)


async def _decide_rank(
    inputs: PolicyInputs, settings: Settings, corrections: CorrectionsConfig, rows: list[dict], now: datetime
) -> Outcome:
    window = settings.priority.rank.window_days
    groups_by_name = await inputs.rank_groups()
    used = await inputs.windowed_usage(now - timedelta(days=window))
    decided = rank.decide(_facts(rows), groups_by_name, used, settings.priority.rank)
    return Outcome(
        {tq: p for tq, (p, _) in decided.items()},
        {tq: origin for tq, (_, origin) in decided.items()},
        {"window_days": window},
    )


async def _association_tree(inputs: PolicyInputs, members: Collection[tuple[str, str]]) -> dict:
    """The imported association tree, or, without one, root -> the accounts of the queues
    with waiting jobs -> their owners (`members`, (account, owner) pairs), an account having
    the job share of the group of its name (the default share if none)."""
    rows = await inputs.associations()
    if rows:
        return fairshare.tree_from_associations([(r.account, r.user, r.parent, r.shares) for r in rows])
    shares = await inputs.group_shares()
    return fairshare.implicit_tree({a: shares.get(a, DEFAULT_JOB_SHARE) for a, _ in members}, set(members))


async def _shares(
    inputs: PolicyInputs, settings: Settings, members: Collection[tuple[str, str]], now: datetime
) -> dict:
    """Every association's sshare row: the tree, its decayed usage, the configured algorithm."""
    tree = await _association_tree(inputs, members)
    usage = await inputs.usage(now)
    return fairshare.compute(tree, usage, settings.priority.multifactor.fairshare)


async def association_usage(conn: AsyncConnection, settings: Settings) -> list[dict[str, Any]]:
    """Slurm's `sshare -a`, whatever the policy: shares, usage and fair-share factor of each
    association (the imported tree, or groups and the owners with waiting jobs)."""
    async with read_transaction(conn):
        members = await LoadDB.of(conn).waiting_members()
        shares = await _shares(DatabaseInputs(conn, settings), settings, members, utcnow())
    return [
        {"account": row.account, "user": row.user or None, "parent": _parent_account(row),
         "shares": "parent" if row.raw_shares is None else row.raw_shares, "norm_shares": row.norm_shares,
         "raw_usage": row.raw_usage, "effective_usage": row.effective_usage, "fairshare": row.factor}
        for row in shares.values()
    ]  # fmt: skip


def _parent_account(row: fairshare.ShareRow) -> str | None:
    """A user's parent is its account; an account's, the account above it (None at the root)."""
    if row.user:
        return row.account
    return None if row.parent is None else row.parent[0]


async def _decide_multifactor(
    inputs: PolicyInputs, settings: Settings, corrections: CorrectionsConfig, rows: list[dict], now: datetime
) -> Outcome:
    options = settings.priority.multifactor
    facts = _facts(rows)
    shares = await _shares(inputs, settings, {(f.account, f.owner) for f in facts}, now)
    levels = await inputs.group_levels()
    class_priority = await inputs.class_priorities()
    decided = multifactor.decide(
        facts,
        now,
        options,
        lambda account, owner: fairshare.factor_of(shares, account, owner),
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


async def decide(
    inputs: PolicyInputs, settings: Settings, corrections: CorrectionsConfig, rows: list[dict], now: datetime
) -> Outcome:
    """The configured policy's priorities for `rows` (waiting_loads rows)."""
    return await DECIDERS[settings.priority.policy](inputs, settings, corrections, rows, now)


def _task_queue_report(rows: list[dict], outcome: Outcome) -> list[dict[str, Any]]:
    return [
        {"task_queue_id": r["id"], "owner": r["owner"], "owner_group": r["owner_group"], "account": r["account"],
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
    """Fold the charges logged since the last run into the usage totals, then recompute
    every TQ's priority. Scheduled runs give way to a concurrent or recent run (None) but
    fold all the same, so usage lags its charges by at most an interval; a forced run
    waits for the locks and always runs."""
    await accounting.fold_charges(conn, settings, wait=not scheduled)
    async with changing(conn):
        runs, loads = PriorityRunDB.of(conn), LoadDB.of(conn)
        if scheduled:
            if not await runs.try_leader_lock(PRIORITY_LOCK) or await _ran_recently(runs, utcnow(), settings):
                return None
        else:
            await runs.leader_lock(PRIORITY_LOCK)
        started = utcnow()  # the run starts once it holds the lock
        clock = time.perf_counter()
        rows = await loads.waiting_loads()
        outcome = await decide(DatabaseInputs(conn, settings), settings, corrections, rows, started)
        changed = await _apply(loads, rows, outcome)
        finished = utcnow()
        report = {
            "policy": settings.priority.policy,
            "tq_weight": settings.priority.tq_weight,
            **outcome.report,
            "task_queue_priorities": _task_queue_report(rows, outcome),
        }
        run_id, report = await runs.record_run({
            "runner": runner, "started_at": started, "finished_at": finished, "policy": settings.priority.policy,
            "task_queues": len(rows), "report": report,
        }, outcome.corrections)  # fmt: skip
        await runs.prune_runs(run_id, KEEP_RUNS)
    # TQs whose last job left still list levels (claims do not subtract): no matcher draws from them again
    async with changing(conn):
        await LoadDB.of(conn).forget_drained_levels()
    RECOMPUTE_DURATION.observe(time.perf_counter() - clock)
    return {
        "runner": runner,
        "started_at": started,
        "finished_at": finished,
        "task_queues": len(rows),
        "changed": changed,
        **report,
    }


async def recompute_now(
    conn: AsyncConnection, settings: Settings, corrections: CorrectionsConfig, *, runner: str, by: str
) -> dict[str, Any]:
    """An operator's run: waits for a run in progress, always runs, and is audited."""
    run = await recompute(conn, settings, corrections, runner=runner, scheduled=False)
    assert run is not None  # a forced run waits for the lock and always runs
    await audit.record(conn, by, "priorities.recompute", None, {"task_queues": run["task_queues"]})
    return run


async def _ran_recently(runs: PriorityRunDB, now: datetime, settings: Settings) -> bool:
    last = await runs.last_run_finished()
    return last is not None and last > now - timedelta(seconds=0.9 * settings.priority.interval_seconds)


async def refresh_groups(
    conn: AsyncConnection, settings: Settings, group_names: Collection[str], exact: Collection[int] = ()
) -> None:
    """Provisional priorities for groups that just got new TQs, or whose TQs in `exact`
    changed their jobs' real priorities (those are written exactly).

    dirac: the policy over those groups with the last full run's corrections.
    rank and multifactor place every TQ relative to all others, so they
    decide over everything (without recording a run). Only the TQs whose
    priority moves by more than PROVISIONAL_TOLERANCE are written, new ones
    always. The loop refines both.
    """
    async with changing(conn):
        runs, loads = PriorityRunDB.of(conn), LoadDB.of(conn)
        await runs.leader_lock(PRIORITY_LOCK)
        now = utcnow()
        if settings.priority.policy != "dirac":
            rows = await loads.waiting_loads()
            if rows:
                outcome = await decide(DatabaseInputs(conn, settings), settings, NO_CORRECTIONS, rows, now)
                await _apply(loads, rows, outcome, exact=exact)
            return
        rows = await loads.waiting_loads(group_names)
        if not rows:
            return
        last = await runs.latest_corrections()
        policies = await GroupDB.of(conn).group_policies()
        decision = dirac.decide(_tq_loads(rows), policies, settings.priority.tq_weight, last.groups, last.owners,
                                settings.priority.sum_site_variants)  # fmt: skip
        await _apply(loads, rows, Outcome(decision.priorities, decision.origins, {}), exact=exact)


async def shares(conn: AsyncConnection, settings: Settings, corrections: CorrectionsConfig, *, runner: str) -> dict:
    """The last priority run's decision (sshare); one run is made first if there was none."""
    async with read_transaction(conn):
        last = await PriorityRunDB.of(conn).latest_run()
    if last is None:
        made = await recompute(conn, settings, corrections, runner=runner, scheduled=False)
        assert made is not None  # a forced run always runs
        return made
    return {**{k: v for k, v in last.items() if k != "report"}, **last["report"]}


async def explain_priorities(
    conn: AsyncConnection, settings: Settings, scope: JobScope, *, task_queue_id: int | None, jobs_limit: int
) -> dict:
    """Every TQ's priority class, priority and its terms or factors (within `scope`); then
    waiting jobs (lowest ids first) with their user priority and the TQ values they inherit."""
    async with read_transaction(conn):
        loads = LoadDB.of(conn)
        queues = await loads.queue_priorities(task_queue_id, scope)
        waiting = await loads.waiting_jobs(queues, jobs_limit) if queues and jobs_limit else []
    return {
        "policy": settings.priority.policy,
        "lottery": settings.effective_matching.lottery.value,
        "task_queues": [
            {"task_queue_id": q.id, "owner": q.owner, "owner_group": q.owner_group, "account": q.account,
             "priority_class": q.priority_class, "priority": q.priority, "origin": q.priority_origin}
            for q in queues.values()
        ],
        "jobs": [
            {"job_id": j.job_id, "task_queue_id": j.tq_id, "user_priority": j.user_priority,
             "real_priority": j.real_priority, "priority_class": queues[j.tq_id].priority_class,
             "task_queue_priority": queues[j.tq_id].priority}
            for j in waiting
        ],
    }  # fmt: skip


async def refresh_drained(conn: AsyncConnection, settings: Settings) -> int:
    """The background loop's step: provisional priorities for the groups whose queue one of
    this process's matches ran dry."""
    groups = Process.of(conn).drained_groups.take()
    if groups:
        await refresh_groups(conn, settings, groups)
    return len(groups)
