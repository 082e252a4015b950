"""Charged usage per association node: CPU seconds, decayed lazily, optionally reset on a period.

A finished job (Done or Failed) that reports `cpu_seconds` is charged
`cpu_seconds * accounting.cpu_weight` to its association, (account, user)
with the account defaulting to the job's owner group, and to every ancestor
account up to the root, so that each node of the tree holds the usage of its
whole subtree (what the fair-share formulas compare). Each charge is also
logged in `usage_charges` for windowed usage (the rank policy) and audits.

Stored usage is never rewritten by a timer. A row holds the value it had at
`updated_at`; whoever reads or charges it applies the decay
`usage * 2^(-elapsed / half_life)` for the time since. Changing the
half-life therefore keeps every stored value and only changes how it decays
from then on.

`period_start` is when the stored usage began to accumulate. With a reset
period (daily, weekly, monthly; UTC, Slurm's boundaries) a row that began
before the current period counts as zero, and the next charge starts it
afresh.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from app.clock import as_utc
from app.db.dialect import insert_ignoring_conflicts
from app.db.tables import associations, usage_charges, usage_totals
from app.settings import AccountingSettings, Settings

Node = tuple[str, str]  # (account, user); user '' is the account itself

CHARGED_STATUSES = frozenset({"Done", "Failed"})
SECONDS_PER_DAY = 86400.0


class WindowedUsage(NamedTuple):
    vo: str
    owner_group: str
    owner: str
    charge: float


# --- pure: decay and reset periods -------------------------------------------------------


def decay_factor(elapsed_seconds: float, half_life_days: float) -> float:
    """2^(-elapsed/half_life); 1 without decay (half-life 0) or when the clock ran backwards."""
    if half_life_days <= 0 or elapsed_seconds <= 0:
        return 1.0
    return 2.0 ** (-elapsed_seconds / (half_life_days * SECONDS_PER_DAY))


def period_start(now: datetime, reset: str) -> datetime | None:
    """Start (UTC) of the reset period containing `now`; None when usage is never reset.

    Boundaries follow Slurm's PriorityUsageResetPeriod: midnight, Sunday
    midnight, the first of the month at midnight.
    """
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if reset == "daily":
        return midnight
    if reset == "weekly":
        days_since_sunday = (midnight.weekday() + 1) % 7  # Monday is 0
        return midnight - timedelta(days=days_since_sunday)
    if reset == "monthly":
        return midnight.replace(day=1)
    return None


def is_reset(started: datetime, now: datetime, reset: str) -> bool:
    """Whether usage that began accumulating at `started` belongs to an earlier period."""
    start = period_start(now, reset)
    return start is not None and started < start


def value_at(
    usage: float, updated_at: datetime, started: datetime, now: datetime, accounting: AccountingSettings
) -> float:
    """A stored row's usage as of `now`: zero if reset since, otherwise decayed."""
    if is_reset(started, now, accounting.reset):
        return 0.0
    elapsed = (now - updated_at).total_seconds()
    return usage * decay_factor(elapsed, accounting.half_life_days)


def _accounting(settings: Settings | AccountingSettings) -> AccountingSettings:
    return settings if isinstance(settings, AccountingSettings) else settings.accounting


# --- which nodes a job charges -----------------------------------------------------------


def path_to_root(account: str, user: str, parents: dict[str, str]) -> list[Node]:
    """The user's node, then its account and each ancestor account up to the root.

    `parents` maps every account of the tree to its parent ('' at the root).
    An account outside the tree gives just (account, user) and (account, '').
    A parent named but without a row of its own is still charged; a cycle in
    a hand-edited tree stops the walk instead of looping.
    """
    path: list[Node] = [(account, user)] if user else []
    if account not in parents:
        return path + [(account, "")]
    seen: set[str] = set()
    current = account
    while current and current not in seen:
        seen.add(current)
        path.append((current, ""))
        current = parents.get(current, "")
    return path


async def _account_parents(conn: AsyncConnection) -> dict[str, str]:
    rows = await conn.execute(
        select(associations.c.account, associations.c.parent).where(associations.c.user == "")
    )
    return {account: parent for account, parent in rows}


async def charged_nodes(conn: AsyncConnection, account: str, user: str) -> list[Node]:
    return path_to_root(account, user, await _account_parents(conn))


# --- writing -----------------------------------------------------------------------------


async def _add(
    conn: AsyncConnection, node: Node, amount: float, now: datetime, accounting: AccountingSettings
) -> None:
    """Add `amount` to one node's usage, decaying (or resetting) what was there.

    The row is created if missing, then locked and rewritten: a lock, not an
    arithmetic upsert, because the new value depends on the old row's age.
    Callers take nodes in sorted order, so concurrent charges never deadlock.
    """
    account, user = node
    await conn.execute(
        insert_ignoring_conflicts(conn, usage_totals, "account", "user").values(
            account=account, user=user, usage=0.0, updated_at=now, period_start=now
        )
    )
    key = (usage_totals.c.account == account, usage_totals.c.user == user)
    row = (
        await conn.execute(
            select(usage_totals.c.usage, usage_totals.c.updated_at, usage_totals.c.period_start)
            .where(*key)
            .with_for_update()
        )
    ).one()
    updated_at, started = as_utc(row.updated_at), as_utc(row.period_start)
    current = value_at(row.usage, updated_at, started, now, accounting)
    if is_reset(started, now, accounting.reset):
        started = now  # what was there belonged to an earlier period: accumulate afresh
    await conn.execute(
        update(usage_totals)
        .where(*key)
        # a clock behind the last writer's must not make the stored age go backwards
        .values(usage=current + amount, updated_at=max(updated_at, now), period_start=started)
    )


def _job_field(job_row: Any, name: str) -> Any:
    return job_row.get(name) if isinstance(job_row, dict) else getattr(job_row, name, None)


async def charge(
    conn: AsyncConnection, job_row: Any, now: datetime, settings: Settings | AccountingSettings
) -> float:
    """Charge a finished job's CPU to its association and all ancestors; returns the charge.

    Call inside the transaction that made the job Done or Failed, so the
    charge commits (or rolls back) with the transition. A job without
    `cpu_seconds`, or in another state, charges nothing.
    """
    accounting = _accounting(settings)
    cpu_seconds = _job_field(job_row, "cpu_seconds")
    if _job_field(job_row, "status") not in CHARGED_STATUSES or not cpu_seconds or cpu_seconds <= 0:
        return 0.0
    amount = float(cpu_seconds) * accounting.cpu_weight
    owner, group = _job_field(job_row, "owner"), _job_field(job_row, "owner_group")
    account = _job_field(job_row, "account") or group
    for node in sorted(set(await charged_nodes(conn, account, owner))):
        await _add(conn, node, amount, now, accounting)
    await conn.execute(
        insert(usage_charges).values(
            charged_at=now,
            job_id=_job_field(job_row, "id"),
            vo=_job_field(job_row, "vo"),
            owner_group=group,
            owner=owner,
            account=account,
            charge=amount,
        )
    )
    return amount


# --- reading -----------------------------------------------------------------------------


def current_usage(rows: Iterable[Any], now: datetime, accounting: AccountingSettings) -> dict[Node, float]:
    """usage_totals rows as of `now` (decayed, reset-aware)."""
    return {
        (r.account, r.user): value_at(r.usage, as_utc(r.updated_at), as_utc(r.period_start), now, accounting)
        for r in rows
    }


async def read_usage(
    conn: AsyncConnection, now: datetime, settings: Settings | AccountingSettings
) -> dict[Node, float]:
    """Every node's usage as of `now`: {(account, user): usage}, user '' for accounts."""
    rows = await conn.execute(select(usage_totals))
    return current_usage(rows, now, _accounting(settings))


async def windowed_usage(conn: AsyncConnection, since: datetime) -> list[WindowedUsage]:
    """Undecayed charges since `since`, summed per (vo, owner_group, owner)."""
    c = usage_charges.c
    rows = await conn.execute(
        select(c.vo, c.owner_group, c.owner, func.sum(c.charge))
        .where(c.charged_at >= since)
        .group_by(c.vo, c.owner_group, c.owner)
        .order_by(c.vo, c.owner_group, c.owner)
    )
    return [WindowedUsage(vo, group, owner, float(total)) for vo, group, owner, total in rows]


async def prune_charges(conn: AsyncConnection, before: datetime) -> int:
    """Forget charges older than any window that reads them (totals keep their decayed sums)."""
    async with conn.begin():
        result = await conn.execute(delete(usage_charges).where(usage_charges.c.charged_at < before))
    return result.rowcount
