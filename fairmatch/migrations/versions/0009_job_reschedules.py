"""How often each job went back to Waiting without its owner asking.

A Matched lease that ran out and a stalled job's reschedule count; after
`jobs.max_reschedules` the job fails instead (DIRAC's MaxRescheduling).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("reschedules", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("reschedules")
