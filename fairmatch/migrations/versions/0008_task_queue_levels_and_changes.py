"""Per-level job counts on each task queue and the time it last changed.

Matchers keep the task-queue table in memory and poll `changed_at`; the
level lottery reads `levels` instead of grouping a queue's jobs per match.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

BACKFILL_POSTGRESQL = """
UPDATE task_queues SET levels = coalesce((
    SELECT json_agg(json_build_array(real_priority, n) ORDER BY real_priority)
    FROM (SELECT real_priority, count(*) AS n FROM tq_jobs
          WHERE tq_id = task_queues.id GROUP BY real_priority) AS l), '[]'::json),
    changed_at = clock_timestamp()"""
BACKFILL_SQLITE = """
UPDATE task_queues SET levels = coalesce((
    SELECT json_group_array(json_array(real_priority, n))
    FROM (SELECT real_priority, count(*) AS n FROM tq_jobs
          WHERE tq_id = task_queues.id GROUP BY real_priority ORDER BY real_priority)), '[]'),
    changed_at = strftime('%Y-%m-%d %H:%M:%f000', 'now')"""


def upgrade() -> None:
    with op.batch_alter_table("task_queues") as batch:
        batch.add_column(sa.Column("levels", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("changed_at", sa.DateTime(timezone=True), nullable=True))
    postgresql = op.get_bind().dialect.name == "postgresql"
    op.execute(BACKFILL_POSTGRESQL if postgresql else BACKFILL_SQLITE)
    with op.batch_alter_table("task_queues") as batch:
        batch.alter_column("levels", existing_type=sa.JSON(), nullable=False)
        batch.alter_column("changed_at", existing_type=sa.DateTime(timezone=True), nullable=False)
        batch.create_index("ix_task_queues_changed_at", ["changed_at"])


def downgrade() -> None:
    with op.batch_alter_table("task_queues") as batch:
        batch.drop_index("ix_task_queues_changed_at")
        batch.drop_column("changed_at")
        batch.drop_column("levels")
