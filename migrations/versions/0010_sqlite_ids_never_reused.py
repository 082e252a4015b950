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
    for table, references in ID_TABLES.items():
        # SQLite's max() of several values: the highest, each read as 0 when its table is empty
        highest = ", ".join(
            [f"coalesce((SELECT max(id) FROM {table}), 0)"]
            + [f"coalesce((SELECT max({column}) FROM {owner}), 0)"
               for owner, column in (reference.split(".") for reference in references)]
            + ["0"]
        )  # fmt: skip
        op.execute(f"DELETE FROM sqlite_sequence WHERE name = '{table}'")
        op.execute(f"INSERT INTO sqlite_sequence (name, seq) VALUES ('{table}', max({highest}))")

def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _rebuild(autoincrement=False)
