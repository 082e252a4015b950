"""The GPUs a task queue's jobs ask for (task_queues.number_of_gpus, 0: none), part of a
queue's definition; a pilot's NumberOfGPUs must reach it.

The queues there are ask for none: their hash, which leaves a 0 out, stays as it was.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("task_queues") as batch:
        batch.add_column(sa.Column("number_of_gpus", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("task_queues") as batch:
        batch.drop_column("number_of_gpus")
