"""The TQ value lists as columns of task_queues (arrays on PostgreSQL), for one-row eligibility tests.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

FIELDS = ("sites", "banned_sites", "grid_ces", "platforms", "job_types", "tags")
ValueList = sa.JSON().with_variant(postgresql.ARRAY(sa.String(length=255)), "postgresql")

# one fixed statement per field (no SQL assembled from input): the lists the value tables hold
BACKFILL_POSTGRESQL = {
    field: f"UPDATE task_queues SET {field} = ARRAY(SELECT value FROM tq_{field} "
    f"WHERE tq_id = task_queues.id ORDER BY value)"
    for field in FIELDS
}
BACKFILL_SQLITE = {
    field: f"UPDATE task_queues SET {field} = (SELECT json_group_array(value) FROM "
    f"(SELECT value FROM tq_{field} WHERE tq_id = task_queues.id ORDER BY value))"
    for field in FIELDS
}


def upgrade() -> None:
    with op.batch_alter_table("task_queues") as batch:
        for field in FIELDS:
            batch.add_column(sa.Column(field, ValueList, nullable=True))
    backfill = BACKFILL_POSTGRESQL if op.get_bind().dialect.name == "postgresql" else BACKFILL_SQLITE
    for field in FIELDS:
        op.execute(backfill[field])


def downgrade() -> None:
    with op.batch_alter_table("task_queues") as batch:
        for field in FIELDS:
            batch.drop_column(field)
