"""Retention: what the purge of finished jobs, old request ids and old pilots needs.

- ix_jobs_finished: finished jobs by status and finish time (only final jobs have one).
- ix_match_requests_created_at: request ids past their replay time.
- purge_runs: one row per purge run.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

NAME = 255
FINISHED = sa.text("finished_at IS NOT NULL")


def upgrade() -> None:
    op.create_index("ix_jobs_finished", "jobs", ["status", "finished_at"], postgresql_where=FINISHED,
                    sqlite_where=FINISHED)  # fmt: skip
    op.create_index("ix_match_requests_created_at", "match_requests", ["created_at"])
    op.create_table(
        "purge_runs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("runner", sa.String(NAME), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("jobs", sa.JSON(), nullable=False),
        sa.Column("events", sa.Integer(), nullable=False),
        sa.Column("request_ids", sa.Integer(), nullable=False),
        sa.Column("pilots", sa.Integer(), nullable=False),
        sa.Column("archived", sa.Integer(), nullable=False),
        sa.Column("events_before", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_purge_runs"),
        sqlite_autoincrement=True,
    )


def downgrade() -> None:
    op.drop_table("purge_runs")
    op.drop_index("ix_match_requests_created_at", table_name="match_requests")
    op.drop_index("ix_jobs_finished", table_name="jobs")
