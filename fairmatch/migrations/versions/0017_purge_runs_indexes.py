"""The indexes a purge run rebuilt: purge_runs.indexes_rebuilt.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("purge_runs") as batch:
        batch.add_column(sa.Column("indexes_rebuilt", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("purge_runs") as batch:
        batch.drop_column("indexes_rebuilt")
