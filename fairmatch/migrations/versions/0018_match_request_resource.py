"""What a request id's first match was asked with: match_requests.resource.

A replay of the id with other matching fields is refused instead of answered with
the first job. Rows from before this revision hold none and are replayed as before.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("match_requests") as batch:
        batch.add_column(sa.Column("resource", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("match_requests") as batch:
        batch.drop_column("resource")
