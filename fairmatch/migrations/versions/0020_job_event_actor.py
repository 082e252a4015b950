"""Who acted on a job: job_events.by.

The caller's identity (its token's subject) for what came through the API or the
command line, `system` for the service's own watchdogs. Events recorded before
this revision keep none.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job_events") as batch:
        batch.add_column(sa.Column("by", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_events") as batch:
        batch.drop_column("by")
