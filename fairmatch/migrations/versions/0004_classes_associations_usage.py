"""Job classes (and the TQ key part), the association tree, decayed usage totals and the charge log.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Name = sa.String(length=255)
When = sa.DateTime(timezone=True)


def upgrade() -> None:
    # jobs of different classes never share a TQ (the class sets their queue factor)
    with op.batch_alter_table("task_queues") as batch:
        batch.add_column(sa.Column("job_class", Name, nullable=True))
    op.create_table(
        "job_classes",
        sa.Column("name", Name, nullable=False),
        sa.Column("default_class", sa.Integer(), nullable=False),
        sa.Column("max_class", sa.Integer(), nullable=False),
        sa.Column("allowed_users", sa.JSON(), nullable=False),
        sa.Column("allowed_groups", sa.JSON(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_job_classes"),
    )
    op.create_table(
        "associations",
        sa.Column("position", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("account", Name, nullable=False),
        sa.Column("user", Name, nullable=False),
        sa.Column("parent", Name, nullable=False),
        sa.Column("shares", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("position", name="pk_associations"),
        sa.UniqueConstraint("account", "user", name="uq_associations_account_user"),
    )
    op.create_table(
        "usage_totals",
        sa.Column("account", Name, nullable=False),
        sa.Column("user", Name, nullable=False),
        sa.Column("usage", sa.Float(), nullable=False),
        sa.Column("updated_at", When, nullable=False),
        sa.Column("period_start", When, nullable=False),
        sa.PrimaryKeyConstraint("account", "user", name="pk_usage_totals"),
    )
    op.create_table(
        "usage_charges",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("charged_at", When, nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("vo", Name, nullable=False),
        sa.Column("owner_group", Name, nullable=False),
        sa.Column("owner", Name, nullable=False),
        sa.Column("account", Name, nullable=False),
        sa.Column("charge", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_usage_charges"),
    )
    op.create_index("ix_usage_charges_charged_at", "usage_charges", ["charged_at"])


def downgrade() -> None:
    op.drop_table("usage_charges")
    op.drop_table("usage_totals")
    op.drop_table("associations")
    op.drop_table("job_classes")
    with op.batch_alter_table("task_queues") as batch:
        batch.drop_column("job_class")
