"""Record which authenticated pilot claimed a job; index Matched leases.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("matched_by", sa.String(length=255), nullable=True))
    op.create_index("ix_jobs_status_lease", "jobs", ["status", "lease_expires_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_status_lease", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("matched_by")
