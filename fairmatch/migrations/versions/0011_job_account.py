"""The Slurm account each job is charged to (default: its owner group).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def _rebuilding_jobs():
    """SQLite rebuilds the table: keep AUTOINCREMENT (reflection does not carry it) and the
    counter, which may stand above the largest id left."""
    sqlite = op.get_bind().dialect.name == "sqlite"
    seq = None
    if sqlite:
        seq = op.get_bind().exec_driver_sql("SELECT seq FROM sqlite_sequence WHERE name = 'jobs'").scalar()
    return sqlite, seq, op.batch_alter_table("jobs", table_kwargs={"sqlite_autoincrement": True} if sqlite else {})


def _restore_counter(sqlite: bool, seq: int | None) -> None:
    if sqlite and seq is not None:
        op.execute(sa.text("UPDATE sqlite_sequence SET seq = max(seq, :seq) WHERE name = 'jobs'").bindparams(seq=seq))


def upgrade() -> None:
    op.add_column("jobs", sa.Column("account", sa.String(255), nullable=True))
    op.execute("UPDATE jobs SET account = owner_group")  # what usage was charged to until now
    sqlite, seq, rebuild = _rebuilding_jobs()
    with rebuild as batch:
        batch.alter_column("account", existing_type=sa.String(255), nullable=False)
    _restore_counter(sqlite, seq)


def downgrade() -> None:
    sqlite, seq, rebuild = _rebuilding_jobs()
    with rebuild as batch:
        batch.drop_column("account")
    _restore_counter(sqlite, seq)
