"""Accounting SQL: usage totals per association node, the charge log, the association tree."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, text, update

from app.accounting.associations import Association
from app.accounting.usage import Node, WindowedUsage, after_charge
from app.clock import as_utc
from app.db.base import AreaDB, PostgresStatements, SQLiteStatements
from app.db.tables import associations, usage_charges, usage_totals
from app.settings import AccountingSettings


class AccountingDB(AreaDB):
    """Charged usage (decayed totals and the log of charges) and the imported association tree."""

    async def account_parents(self) -> dict[str, str]:
        """Every account of the tree and its parent ('' at the root)."""
        rows = await self.conn.execute(
            select(associations.c.account, associations.c.parent).where(associations.c.user == "")
        )
        return {account: parent for account, parent in rows}

    async def add_usage(self, node: Node, amount: float, now: datetime, accounting: AccountingSettings) -> None:
        """Add `amount` to one node's usage, decaying (or resetting) what was there."""
        # The row is created if missing, then locked and rewritten: a lock, not an
        # arithmetic upsert, because the new value depends on the old row's age.
        # Callers take nodes in sorted order, so concurrent charges never deadlock.
        account, user = node
        await self.conn.execute(
            self.insert_ignoring_conflicts(usage_totals, "account", "user").values(
                account=account, user=user, usage=0.0, updated_at=now, period_start=now
            )
        )
        key = (usage_totals.c.account == account, usage_totals.c.user == user)
        row = (
            await self.conn.execute(
                select(usage_totals.c.usage, usage_totals.c.updated_at, usage_totals.c.period_start)
                .where(*key)
                .with_for_update()
            )
        ).one()
        usage, updated_at, started = after_charge(
            row.usage, as_utc(row.updated_at), as_utc(row.period_start), amount, now, accounting
        )
        await self.conn.execute(
            update(usage_totals).where(*key).values(usage=usage, updated_at=updated_at, period_start=started)
        )

    async def log_charge(self, charge: dict[str, Any]) -> None:
        """One row of the charge log (usage_charges columns)."""
        await self.conn.execute(insert(usage_charges).values(**charge))

    async def totals(self) -> list[Any]:
        """Every usage_totals row, as stored (undecayed)."""
        return (await self.conn.execute(select(usage_totals))).all()

    async def windowed_usage(self, since: datetime) -> list[WindowedUsage]:
        """Undecayed charges since `since`, summed per (vo, owner_group, owner)."""
        c = usage_charges.c
        rows = await self.conn.execute(
            select(c.vo, c.owner_group, c.owner, func.sum(c.charge))
            .where(c.charged_at >= since)
            .group_by(c.vo, c.owner_group, c.owner)
            .order_by(c.vo, c.owner_group, c.owner)
        )
        return [WindowedUsage(vo, group, owner, float(total)) for vo, group, owner, total in rows]

    async def prune_charges(self, before: datetime) -> int:
        """Delete charges logged before `before`; how many went."""
        result = await self.conn.execute(delete(usage_charges).where(usage_charges.c.charged_at < before))
        return result.rowcount

    async def replace_associations(self, rows: Sequence[Association]) -> int:
        """Make `rows` the whole tree, `position` their order; returns their number."""
        values = [
            {"position": i, "account": r.account, "user": r.user, "parent": r.parent, "shares": r.shares}
            for i, r in enumerate(rows)
        ]
        await self._lock_associations()
        await self.conn.execute(delete(associations))
        if values:
            await self.conn.execute(insert(associations), values)
        return len(values)

    async def _lock_associations(self) -> None:
        """Serialise replacements (SQLite: BEGIN IMMEDIATE already does)."""

    async def associations(self) -> list[Association]:
        """The stored rows in the dump's order."""
        c = associations.c
        result = await self.conn.execute(select(c.account, c.shares, c.parent, c.user).order_by(c.position))
        return [Association(account=r.account, shares=r.shares, parent=r.parent, user=r.user) for r in result]


class PostgresAccountingDB(PostgresStatements, AccountingDB, dialect="postgresql"):
    async def _lock_associations(self) -> None:
        """A table lock that still lets readers in."""
        # under READ COMMITTED a second DELETE would not see the first one's fresh
        # rows, and its INSERT would then collide with them
        await self.conn.execute(text("LOCK TABLE associations IN EXCLUSIVE MODE"))


class SQLiteAccountingDB(SQLiteStatements, AccountingDB, dialect="sqlite"):
    pass
