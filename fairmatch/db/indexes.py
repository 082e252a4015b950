"""The B-tree indexes' sizes against what their entries need, and their rebuild (PostgreSQL).

A B-tree page is reused only once every entry on it is gone. The job tables'
indexes are ordered by job id, and a job that waits for days keeps the page of
its entry, and of its events' entries, among the entries of thousands of jobs
long purged: such an index grows with every job ever submitted while its heap
(whose free space any new row takes) stays flat. Rebuilding it (`REINDEX INDEX
CONCURRENTLY`) writes only the live entries; it takes no lock that stops a
claim or a status report, and a rebuild cut short leaves an invalid copy named
`<index>_ccnew` (or `_ccold`), which the next upkeep drops.

An index's need is estimated from the planner's statistics (its entry count,
its columns' average widths) and B-tree's page layout, as the bloat estimates
DBAs use do: an index without statistics yet is left alone. SQLite has no
such indexes to rebuild (its free pages are reused by any table): nothing is
listed there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from psycopg import sql
from sqlalchemy import text

from fairmatch.db.base import AreaDB
from fairmatch.db.raw import autocommitted

PAGE = 8192
# a page's own header and B-tree's special space: what is left holds entries
USABLE = PAGE - 24 - 16
ENTRY_HEADER = 8  # an index entry's heap pointer and flags
LINE_POINTER = 4
DEFAULT_FILLFACTOR = 90
ALIGNMENT = {"c": 1, "s": 2, "i": 4, "d": 8}
INNER_FANOUT = 200  # leaf pages per inner page, counted low: the estimate errs on the large side


@dataclass(frozen=True)
class IndexSize:
    """One B-tree index of fairmatch's schema: its size, and what its entries need."""

    name: str
    table: str
    bytes: int
    entries: float  # pg_class.reltuples: -1 before the first VACUUM or ANALYZE
    fillfactor: int
    # each key column's average width (None: no statistics yet) and alignment code
    columns: tuple[tuple[int | None, str], ...]

    @property
    def needed_bytes(self) -> int | None:
        """The size of this index freshly built with these entries; None without statistics."""
        if self.entries < 0 or any(width is None for width, _ in self.columns):
            return None
        data = 0
        for width, align in self.columns:
            assert width is not None
            data = _aligned(data, ALIGNMENT.get(align, 1)) + width
        entry = _aligned(ENTRY_HEADER + data, 8) + LINE_POINTER
        leaves = math.ceil(self.entries * entry / (USABLE * self.fillfactor / 100))
        return (1 + leaves + math.ceil(leaves / INNER_FANOUT)) * PAGE  # with the metapage

    def bloated(self, ratio: float, min_bytes: int) -> bool:
        """Whether the index is at least `ratio` times its need and wastes at least `min_bytes`."""
        needed = self.needed_bytes
        return needed is not None and self.bytes >= ratio * needed and self.bytes - needed >= min_bytes


def _aligned(offset: int, alignment: int) -> int:
    return -(-offset // alignment) * alignment


class IndexDB(AreaDB):
    """The catalog's view of fairmatch's indexes; nothing on SQLite."""

    async def sizes(self) -> list[IndexSize]:
        """Every valid B-tree index of the schema, largest first."""
        return []

    async def leftovers(self) -> list[str]:
        """Invalid copies left by a rebuild cut short, none being built now."""
        return []

    async def rebuild(self, name: str) -> int:
        """Rebuild the index without blocking writes; its size after. Outside any transaction."""
        raise NotImplementedError

    async def drop(self, name: str) -> None:
        """Drop an index without blocking writes. Outside any transaction."""
        raise NotImplementedError


# Average widths come from pg_stats (what ANALYZE saw in the table's column); a
# variable-length value of an index entry is stored unaligned with a short header.
_SIZES = text("""
SELECT i.relname AS name, t.relname AS "table", pg_relation_size(i.oid) AS bytes, i.reltuples AS entries,
       coalesce((SELECT o.option_value::int FROM pg_options_to_table(i.reloptions) o
                 WHERE o.option_name = 'fillfactor'), :fillfactor) AS fillfactor,
       ARRAY(SELECT CASE WHEN k.attnum > 0 THEN s.avg_width END
             FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
             LEFT JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
             LEFT JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = t.relname
                                 AND s.attname = a.attname
             ORDER BY k.n) AS widths,
       ARRAY(SELECT CASE WHEN a.attlen = -1 THEN 'c' ELSE coalesce(a.attalign::text, 'c') END
             FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
             LEFT JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
             ORDER BY k.n) AS aligns
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
JOIN pg_am am ON am.oid = i.relam
WHERE n.nspname = current_schema() AND am.amname = 'btree' AND x.indisvalid
ORDER BY pg_relation_size(i.oid) DESC, i.relname
""")

_LEFTOVERS = text("""
SELECT i.relname FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_namespace n ON n.oid = i.relnamespace
WHERE n.nspname = current_schema() AND NOT x.indisvalid AND i.relname ~ '_cc(new|old)[0-9]*$'
  AND NOT EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.relid = x.indrelid)
ORDER BY i.relname
""")


class PostgresIndexDB(IndexDB, dialect="postgresql"):
    async def sizes(self) -> list[IndexSize]:
        rows = await self.conn.execute(_SIZES, {"fillfactor": DEFAULT_FILLFACTOR})
        return [
            IndexSize(
                name=row.name, table=row.table, bytes=int(row.bytes), entries=float(row.entries),
                fillfactor=int(row.fillfactor), columns=tuple(zip(row.widths, row.aligns, strict=True)),
            )
            for row in rows
        ]  # fmt: skip

    async def leftovers(self) -> list[str]:
        return list((await self.conn.execute(_LEFTOVERS)).scalars())

    async def rebuild(self, name: str) -> int:
        async with autocommitted(self.conn) as driver:
            await driver.execute(_command("REINDEX INDEX CONCURRENTLY {}", name))
            size = await (await driver.execute(_SIZE_OF, (name,))).fetchone()
        return int(size[0] or 0) if size else 0

    async def drop(self, name: str) -> None:
        async with autocommitted(self.conn) as driver:
            await driver.execute(_command("DROP INDEX CONCURRENTLY IF EXISTS {}", name))


_SIZE_OF = "SELECT pg_relation_size(to_regclass(%s))"


def _command(template: str, index: str) -> sql.Composed:
    """A command on one index (no bound parameter can name it): the name quoted by the driver."""
    return sql.SQL(template).format(sql.Identifier(index))


class SQLiteIndexDB(IndexDB, dialect="sqlite"):
    pass
