"""Accounting: charging finished jobs, reading usage, the association tree of the API."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from app.accounting.associations import Association
from app.accounting.usage import CHARGED_STATUSES, Node, charge_of, current_usage, path_to_root
from app.db.accounting import AccountingDB
from app.db.engine import read_transaction
from app.settings import AccountingSettings, Settings


def _accounting(settings: Settings | AccountingSettings) -> AccountingSettings:
    return settings if isinstance(settings, AccountingSettings) else settings.accounting


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
    amount = charge_of(cpu_seconds, accounting)
    owner, group = _job_field(job_row, "owner"), _job_field(job_row, "owner_group")
    account = _job_field(job_row, "account") or group
    db = AccountingDB.of(conn)
    for node in sorted(set(path_to_root(account, owner, await db.account_parents()))):
        await db.add_usage(node, amount, now, accounting)
    await db.log_charge({
        "charged_at": now, "job_id": _job_field(job_row, "id"), "vo": _job_field(job_row, "vo"),
        "owner_group": group, "owner": owner, "account": account, "charge": amount,
    })  # fmt: skip
    return amount


async def read_usage(
    conn: AsyncConnection, now: datetime, settings: Settings | AccountingSettings
) -> dict[Node, float]:
    """Every node's usage as of `now`: {(account, user): usage}, user '' for accounts.
    Inside the caller's transaction."""
    return current_usage(await AccountingDB.of(conn).totals(), now, _accounting(settings))


async def prune_charges(conn: AsyncConnection, before: datetime) -> int:
    """Forget charges older than any window that reads them (totals keep their decayed sums)."""
    async with conn.begin():
        return await AccountingDB.of(conn).prune_charges(before)


async def replace_associations(conn: AsyncConnection, rows: Sequence[Association]) -> int:
    """Make `rows` (already validated) the whole tree, in one transaction; returns their number.

    Readers see the old tree or the new one, never a mix; concurrent
    replacements are serialised.
    """
    async with conn.begin():
        return await AccountingDB.of(conn).replace_associations(rows)


async def load_associations(conn: AsyncConnection) -> list[Association]:
    """The stored rows in the dump's order (reading them back in `position` order
    gives the imported text back byte for byte)."""
    async with read_transaction(conn):
        return await AccountingDB.of(conn).associations()
