"""Accounting SQL: usage totals per association node, the charge log, the association tree."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, delete, func, insert, select, text, update

from fairmatch.accounting.associations import Association
from fairmatch.accounting.usage import CHARGED_FROM_JOB, Charge, Node, Total, WindowedUsage
from fairmatch.clock import as_utc
from fairmatch.db.base import AreaDB, PostgresStatements, SQLiteStatements
from fairmatch.db.tables import associations, usage_charges, usage_totals

FOLD_LOCK = 7_100_003  # beside the priority loop's and the sampler's advisory locks


def charge_insert(jobs_rows: str, at: str, amount: str) -> str:
    """`charge_row` in SQL: the INSERT … SELECT that logs the charge of each row of `jobs_rows` (a
    relation of jobs rows), `amount` charged at `at` (SQL expressions). Each column is copied
    from the first of its job fields that is set (CHARGED_FROM_JOB), as `charge_row` copies it."""

    def first_set(fields: tuple[str, ...]) -> str:
        *before_last, last = (f"{jobs_rows}.{field}" for field in fields)
        if not before_last:
            return last
        unless_empty = [f"NULLIF({field}, '')" for field in before_last]
        return f"COALESCE({', '.join(unless_empty)}, {last})"

    columns = ", ".join(["charged_at", *CHARGED_FROM_JOB, "charge"])
    values = ", ".join([at, *map(first_set, CHARGED_FROM_JOB.values()), amount])
    return f"INSERT INTO usage_charges ({columns})\n    SELECT {values}\n    FROM {jobs_rows}"


class AccountingDB(AreaDB):
    """Charged usage (the log of charges and the totals folded from it) and the imported association tree."""

    async def account_parents(self) -> dict[str, str]:
        """Every account of the tree and its parent ('' at the root)."""
        rows = await self.conn.execute(
            select(associations.c.account, associations.c.parent).where(associations.c.user == "")
        )
        return {account: parent for account, parent in rows}

    async def log_charge(self, charge: dict[str, Any]) -> None:
        """Append one charge (usage_charges columns): a plain insert, no lock on anything shared."""
        await self.conn.execute(insert(usage_charges).values(**charge))

    async def lock_totals(self, wait: bool) -> bool:
        """The right to fold, one writer at a time, until the transaction ends; without
        `wait`, False when another transaction holds it."""
        if wait:
            await self.leader_lock(FOLD_LOCK)
            return True
        return await self.try_leader_lock(FOLD_LOCK)

    async def take_pending(self, now: datetime) -> list[Charge]:
        """Mark every committed charge not yet folded as folded at `now`; return them.

        A charge whose transaction commits meanwhile is not seen, and stays for the next fold."""
        c = usage_charges.c
        rows = await self.conn.execute(
            update(usage_charges)
            .where(c.folded_at.is_(None))
            .values(folded_at=now)
            .returning(c.charged_at, c.account, c.owner, c.charge)
        )
        return [Charge(as_utc(at), account, owner, amount) for at, account, owner, amount in rows]

    async def totals(self) -> dict[Node, Total]:
        """Every usage_totals row, as stored (undecayed)."""
        rows = await self.conn.execute(select(usage_totals))
        return {(r.account, r.user): Total(r.usage, as_utc(r.updated_at), as_utc(r.period_start)) for r in rows}

    async def write_totals(self, totals: dict[Node, Total]) -> None:
        """Insert or replace these nodes' rows."""
        if not totals:
            return
        stmt = self.insert_module.insert(usage_totals)
        stmt = stmt.on_conflict_do_update(
            index_elements=["account", "user"],
            set_={"usage": stmt.excluded.usage, "updated_at": stmt.excluded.updated_at,
                  "period_start": stmt.excluded.period_start},
        )  # fmt: skip
        values = [
            {"account": account, "user": user, "usage": t.usage, "updated_at": t.updated_at,
             "period_start": t.period_start}
            for (account, user), t in sorted(totals.items())
        ]  # fmt: skip
        await self.conn.execute(stmt, values)

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
        """Delete folded charges logged before `before`; how many went."""
        c = usage_charges.c
        result = await self.conn.execute(delete(usage_charges).where(c.charged_at < before, c.folded_at.isnot(None)))
        return result.rowcount

    async def reset_usage(self, account: str | None, user: str | None, now: datetime) -> int:
        """Zero the usage of the nodes of `account` (its own and its users') and of `user` (in every
        account), both given: that one association; neither: every node. Their folded charges go
        too (the rank policy's window reads them). How many nodes were reset."""
        t, c = usage_totals.c, usage_charges.c
        nodes: list[ColumnElement[bool]] = []
        charged: list[ColumnElement[bool]] = [c.folded_at.isnot(None)]
        if account is not None:
            nodes.append(t.account == account)
            charged.append(c.account == account)
        if user is not None:
            nodes.append(t.user == user)
            charged.append(c.owner == user)
        await self.conn.execute(delete(usage_charges).where(*charged))
        result = await self.conn.execute(update(usage_totals).where(*nodes).values(usage=0.0, updated_at=now))
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
