"""The rank policy's lower band on each task queue: task_queues.shareless.

Matching draws a queue of a group without a share only when no share-holder's
queue of the same priority class is eligible for the pilot, before it prefers the
longest CPU bucket. Existing queues start in the upper band; the next priority run
under `rank` sets the flag.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("task_queues") as batch:
        batch.add_column(sa.Column("shareless", sa.Boolean(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("task_queues") as batch:
        batch.drop_column("shareless")
