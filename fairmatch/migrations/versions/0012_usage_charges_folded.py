"""Charges are folded into usage_totals after the fact: `usage_charges.folded_at`.

A finished job's report only appends its charge; the totals are folded from
the log by one writer at a time. Charges logged before this revision were
already added to the totals, so they count as folded when they were made.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

PENDING = sa.text("folded_at IS NULL")


def upgrade() -> None:
    op.add_column("usage_charges", sa.Column("folded_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE usage_charges SET folded_at = charged_at")
    op.create_index("ix_usage_charges_pending", "usage_charges", ["id"], postgresql_where=PENDING, sqlite_where=PENDING)
    if op.get_bind().dialect.name == "postgresql":
        # every charge is updated once when folded: vacuum before the dead rows pile up
        op.execute("ALTER TABLE usage_charges SET (autovacuum_vacuum_scale_factor = 0.02)")


def downgrade() -> None:
    op.drop_index("ix_usage_charges_pending", table_name="usage_charges")
    op.drop_column("usage_charges", "folded_at")  # SQLite drops an unindexed column in place
