"""Jobs known by their submitter's id (jobs.external_id), and running jobs reported by
another system (reported_running).

An external id is held by at most one unfinished job; finished and handed-off jobs keep
it for the record. Jobs without one enter neither index.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_EXTERNAL = "external_id IS NOT NULL"
# the statuses of fairmatch.jobs.lifecycle not in FINAL, as the model's index words them
_HOLDING = _EXTERNAL + " AND status IN ('Held', 'Matched', 'Running', 'Stalled', 'Waiting')"


def upgrade() -> None:
    op.add_column("jobs", sa.Column("external_id", sa.String(255), nullable=True))
    op.create_index(
        "ix_jobs_external_id",
        "jobs",
        ["external_id", "id"],
        postgresql_where=sa.text(_EXTERNAL),
        sqlite_where=sa.text(_EXTERNAL),
    )
    op.create_index(
        "uq_jobs_external_id_holder",
        "jobs",
        ["external_id"],
        unique=True,
        postgresql_where=sa.text(_HOLDING),
        sqlite_where=sa.text(_HOLDING),
    )
    op.create_table(
        "reported_running",
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("owner_group", sa.String(255), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("source", "owner_group", "owner", name="pk_reported_running"),
    )


def downgrade() -> None:
    op.drop_table("reported_running")
    op.drop_index("uq_jobs_external_id_holder", table_name="jobs")
    op.drop_index("ix_jobs_external_id", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("external_id")
