"""SQLite: row ids are never reused (AUTOINCREMENT).

Without it SQLite gives a new row the largest id plus one, so the id of a
task queue deleted when it emptied went to the next new queue, and a replayed
match named another owner's queue. The tables with ids of their own are
rebuilt with AUTOINCREMENT, and each counter starts above every id in use or
referred to. PostgreSQL's sequences never go back: nothing to do there.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# each table with an id of its own, and where else its ids are written down
ID_TABLES = {
    "task_queues": ("jobs.task_queue_id", "tq_jobs.tq_id"),
    "jobs": ("job_events.job_id", "tq_jobs.job_id", "match_requests.job_id"),
    "job_events": (),
    "history_samples": ("running_samples.sample_id",),
    "priority_runs": (),
    "usage_charges": (),
}


def _rebuild(autoincrement: bool) -> None:
    for table in ID_TABLES:
        with op.batch_alter_table(table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}):
            pass


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _rebuild(autoincrement=True)
    bind = op.get_bind()
    for table, references in ID_TABLES.items():
        highest = max(0, _largest(bind, table, "id"), *(_largest(bind, *ref.split(".")) for ref in references))
        op.execute(sa.text("DELETE FROM sqlite_sequence WHERE name = :name").bindparams(name=table))
        op.execute(
            sa.text("INSERT INTO sqlite_sequence (name, seq) VALUES (:name, :seq)").bindparams(name=table, seq=highest)
        )


def _largest(bind, table: str, column: str) -> int:
    """The largest value of table.column, 0 when the table is empty."""
    return bind.execute(sa.select(sa.func.max(sa.column(column))).select_from(sa.table(table))).scalar() or 0

def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _rebuild(autoincrement=False)
