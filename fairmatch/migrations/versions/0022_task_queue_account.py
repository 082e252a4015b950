"""The account of each task queue: task_queues.account.

A job's account is part of its task queue's definition, and the queue's fair-share
factor is that account's association's (with an imported tree, as Slurm does), not
its owner group's. Queues made before keep their hash and take their owner group as
their account: what their jobs were looked up by until now. A waiting job charged to
another account moves to its own queue when it is next queued (released, rescheduled,
its priority changed).

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def _rebuilding_task_queues():
    """SQLite rebuilds the table to change a column: keep AUTOINCREMENT (reflection does not
    carry it) and the counter, which may stand above the largest id left."""
    bind = op.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    seq = None
    if sqlite:
        seq = bind.exec_driver_sql("SELECT seq FROM sqlite_sequence WHERE name = 'task_queues'").scalar()
    kwargs = {"sqlite_autoincrement": True} if sqlite else {}
    return sqlite, seq, op.batch_alter_table("task_queues", table_kwargs=kwargs)


def _restore_counter(sqlite: bool, seq: int | None) -> None:
    if sqlite and seq is not None:
        op.execute(
            sa.text("UPDATE sqlite_sequence SET seq = max(seq, :seq) WHERE name = 'task_queues'").bindparams(seq=seq)
        )


def upgrade() -> None:
    op.add_column("task_queues", sa.Column("account", sa.String(255), nullable=True))
    op.execute("UPDATE task_queues SET account = owner_group")
    sqlite, seq, rebuild = _rebuilding_task_queues()
    with rebuild as batch:
        batch.alter_column("account", existing_type=sa.String(255), nullable=False)
    _restore_counter(sqlite, seq)


def downgrade() -> None:
    sqlite, seq, rebuild = _rebuilding_task_queues()
    with rebuild as batch:
        batch.drop_column("account")
    _restore_counter(sqlite, seq)
