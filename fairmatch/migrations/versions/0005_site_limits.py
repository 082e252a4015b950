"""Site limits (RunningLimit, MatchingDelay) and their match times; indexes for them and for recent matches.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Name = sa.String(length=255)
Attribute = sa.String(length=16)


def upgrade() -> None:
    op.create_table(
        "site_limits",
        sa.Column("site", Name, nullable=False),
        sa.Column("attribute", Attribute, nullable=False),
        sa.Column("value", Name, nullable=False),
        sa.Column("running_limit", sa.Integer(), nullable=True),
        sa.Column("matching_delay", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("site", "attribute", "value", name="pk_site_limits"),
    )
    op.create_table(
        "site_limit_matches",
        sa.Column("site", Name, nullable=False),
        sa.Column("attribute", Attribute, nullable=False),
        sa.Column("value", Name, nullable=False),
        sa.Column("last_match_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("site", "attribute", "value", name="pk_site_limit_matches"),
    )
    op.create_index("ix_jobs_site_status", "jobs", ["site", "status"])
    op.create_index("ix_job_events_status_at", "job_events", ["status", "at"])


def downgrade() -> None:
    op.drop_index("ix_job_events_status_at", table_name="job_events")
    op.drop_index("ix_jobs_site_status", table_name="jobs")
    op.drop_table("site_limit_matches")
    op.drop_table("site_limits")
