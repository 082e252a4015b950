"""Record which authenticated pilot claimed a job; per-requester match keys; lease index.

match_requests only holds idempotency keys of recent matches, so it is
re-created rather than altered (SQLite cannot change a primary key in place).

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
    op.drop_table("match_requests")
    _create_match_requests(with_requester=True)


def _create_match_requests(*, with_requester: bool) -> None:
    key = ["requester", "request_id"] if with_requester else ["request_id"]
    op.create_table(
        "match_requests",
        *([sa.Column("requester", sa.String(length=255), nullable=False)] if with_requester else []),
        sa.Column("request_id", sa.String(length=255), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_match_requests_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint(*key, name="pk_match_requests"),
    )


def downgrade() -> None:
    op.drop_table("match_requests")
    _create_match_requests(with_requester=False)
    op.drop_index("ix_jobs_status_lease", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("matched_by")
