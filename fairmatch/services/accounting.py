"""Accounting: charging finished jobs, reading usage, the association tree of the API."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.accounting.associations import Association
from fairmatch.accounting.settings import AccountingSettings
from fairmatch.accounting.usage import Node, charge_for, charge_row, current_usage, field_of, fold
from fairmatch.clock import utcnow
from fairmatch.db.accounting import AccountingDB
from fairmatch.db.engine import read_transaction
from fairmatch.settings import Settings


def _accounting(settings: Settings | AccountingSettings) -> AccountingSettings:
    return settings if isinstance(settings, AccountingSettings) else settings.accounting


async def charge(conn: AsyncConnection, job_row: Any, now: datetime, settings: Settings | AccountingSettings) -> float:
    """Log a finished job's charge; returns it.

    Call inside the transaction that made the job Done or Failed, so the
    charge commits (or rolls back) with the transition: a job is charged
    exactly once. Only a row is appended: the totals are folded from the log
    later (`fold_charges`). A job (a row or a mapping) without `cpu_seconds`,
    or in another state, charges nothing.
    """
    status, cpu_seconds = field_of(job_row, "status"), field_of(job_row, "cpu_seconds")
    amount = charge_for(status, cpu_seconds, _accounting(settings))
    if amount is None:
        return 0.0
    await AccountingDB.of(conn).log_charge(charge_row(job_row, amount, now))
    return amount


async def fold_charges(conn: AsyncConnection, settings: Settings | AccountingSettings, *, wait: bool) -> int | None:
    """Fold the charges logged since the last fold into the usage totals, in one transaction.

    One writer at a time: without `wait`, None when another process is
    folding (it takes what is there). Returns how many charges were folded.
    """
    async with conn.begin():
        return await _fold(AccountingDB.of(conn), _accounting(settings), wait=wait)


async def _fold(db: AccountingDB, accounting: AccountingSettings, *, wait: bool) -> int | None:
    if not await db.lock_totals(wait):
        return None
    pending = await db.take_pending(utcnow())
    if pending:
        totals = await db.totals()
        changed = fold(totals, pending, await db.account_parents(), accounting)
        await db.write_totals({node: totals[node] for node in changed})
    return len(pending)


async def read_usage(
    conn: AsyncConnection, now: datetime, settings: Settings | AccountingSettings
) -> dict[Node, float]:
    """Every node's folded usage as of `now`: {(account, user): usage}, user '' for accounts.
    Inside the caller's transaction."""
    return current_usage(await AccountingDB.of(conn).totals(), now, _accounting(settings))


async def prune_charges(conn: AsyncConnection, before: datetime) -> int:
    """Forget folded charges older than any window that reads them (totals keep their decayed sums)."""
    async with conn.begin():
        return await AccountingDB.of(conn).prune_charges(before)


async def replace_associations(
    conn: AsyncConnection, rows: Sequence[Association], settings: Settings | AccountingSettings
) -> int:
    """Make `rows` (already validated) the whole tree, in one transaction; returns their number.

    Readers see the old tree or the new one, never a mix; concurrent
    replacements are serialised. Charges logged before are folded first,
    up the tree they were made under.
    """
    async with conn.begin():
        db = AccountingDB.of(conn)
        await _fold(db, _accounting(settings), wait=True)
        return await db.replace_associations(rows)


async def reset_usage(
    conn: AsyncConnection, account: str | None, user: str | None, settings: Settings | AccountingSettings
) -> int:
    """Zero the raw usage of an account, a user, one association or everything (sacctmgr's
    RawUsage=0), in one transaction; charges logged before are folded first, so that none of
    them comes back at the next fold. How many nodes were reset."""
    async with conn.begin():
        db = AccountingDB.of(conn)
        await _fold(db, _accounting(settings), wait=True)
        return await db.reset_usage(account, user, utcnow())


async def load_associations(conn: AsyncConnection) -> list[Association]:
    """The stored rows in the dump's order (reading them back in `position` order
    gives the imported text back byte for byte)."""
    async with read_transaction(conn):
        return await AccountingDB.of(conn).associations()
