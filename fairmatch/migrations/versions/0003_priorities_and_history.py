"""Priority origin per TQ, running-job history, priority-loop runs.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
When = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("task_queues") as batch:
        batch.add_column(sa.Column("priority_origin", sa.JSON(), nullable=True))
    op.create_table(
        "history_samples",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("sampled_at", When, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_history_samples"),
    )
    op.create_index("ix_history_samples_sampled_at", "history_samples", ["sampled_at"])
    op.create_table(
        "running_samples",
        sa.Column("sample_id", Id, nullable=False),
        sa.Column("owner_group", sa.String(length=255), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["sample_id"], ["history_samples.id"],
            name="fk_running_samples_sample_id_history_samples", ondelete="CASCADE",
        ),  # fmt: skip
        sa.PrimaryKeyConstraint("sample_id", "owner_group", "owner", name="pk_running_samples"),
    )
    op.create_table(
        "priority_runs",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("runner", sa.String(length=255), nullable=False),
        sa.Column("started_at", When, nullable=False),
        sa.Column("finished_at", When, nullable=False),
        sa.Column("policy", sa.String(length=32), nullable=False),
        sa.Column("task_queues", sa.Integer(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_priority_runs"),
    )
    op.create_index("ix_priority_runs_finished_at", "priority_runs", ["finished_at"])


def downgrade() -> None:
    op.drop_table("priority_runs")
    op.drop_table("running_samples")
    op.drop_table("history_samples")
    with op.batch_alter_table("task_queues") as batch:
        batch.drop_column("priority_origin")
