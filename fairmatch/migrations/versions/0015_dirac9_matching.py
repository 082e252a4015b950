"""DIRAC 9's matching: RAM ranges on task queues, a site mask, pilots on record, limits per CE.

- task_queues gains `min_ram_mb` and `max_ram_mb` (0: none), part of a queue's definition.
- jobs gains `grid_ce`, the computing element a job was matched through; the index of
  the jobs holding a slot covers it, so a limit per CE counts from the index as a
  limit per site does. A partial index finds the jobs a pilot took.
- site_mask: the banned sites, with why, when and by whom.
- pilots: every pilot that asked for a job, with its site, CE, benchmark and counts.
- site_limits and site_limit_matches gain `grid_ce` ('' for a limit on the whole site)
  in their keys.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

NAME = 255
HOLDING_A_SLOT = sa.text("status IN ('Matched', 'Running')")
WITH_PILOT = sa.text("pilot_reference IS NOT NULL")
LIMIT_TABLES = ("site_limits", "site_limit_matches")


def upgrade() -> None:
    with op.batch_alter_table("task_queues") as batch:
        batch.add_column(sa.Column("min_ram_mb", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("max_ram_mb", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("jobs", sa.Column("grid_ce", sa.String(NAME), nullable=True))
    op.drop_index("ix_jobs_holding_site", table_name="jobs")
    op.create_index("ix_jobs_holding_site", "jobs", ["site", "grid_ce"], postgresql_where=HOLDING_A_SLOT,
                    sqlite_where=HOLDING_A_SLOT)  # fmt: skip
    op.create_index("ix_jobs_pilot_reference", "jobs", ["pilot_reference"], postgresql_where=WITH_PILOT,
                    sqlite_where=WITH_PILOT)  # fmt: skip
    op.create_table(
        "site_mask",
        sa.Column("site", sa.String(NAME), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("banned_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("banned_by", sa.String(NAME), nullable=False),
        sa.PrimaryKeyConstraint("site", name="pk_site_mask"),
    )
    op.create_table(
        "pilots",
        sa.Column("reference", sa.String(NAME), nullable=False),
        sa.Column("requester", sa.String(NAME), nullable=False),
        sa.Column("site", sa.String(NAME), nullable=False),
        sa.Column("grid_ce", sa.String(NAME), nullable=True),
        sa.Column("benchmark", sa.Float(), nullable=True),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("matches", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("empty_matches", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("current_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.PrimaryKeyConstraint("reference", name="pk_pilots"),
    )
    op.create_index("ix_pilots_first_seen", "pilots", ["first_seen", "reference"])
    for table in LIMIT_TABLES:
        with op.batch_alter_table(table, recreate="always") as batch:
            batch.add_column(sa.Column("grid_ce", sa.String(NAME), nullable=False, server_default=""))
            batch.drop_constraint(f"pk_{table}", type_="primary")
            batch.create_primary_key(f"pk_{table}", ["site", "grid_ce", "attribute", "value"])


def downgrade() -> None:
    # limits per CE have no place in the older key
    op.execute("DELETE FROM site_limits WHERE grid_ce <> ''")
    op.execute("DELETE FROM site_limit_matches WHERE grid_ce <> ''")
    for table in LIMIT_TABLES:
        with op.batch_alter_table(table, recreate="always") as batch:
            batch.drop_constraint(f"pk_{table}", type_="primary")
            batch.drop_column("grid_ce")
            batch.create_primary_key(f"pk_{table}", ["site", "attribute", "value"])
    op.drop_index("ix_pilots_first_seen", table_name="pilots")
    op.drop_table("pilots")
    op.drop_table("site_mask")
    op.drop_index("ix_jobs_pilot_reference", table_name="jobs")
    op.drop_index("ix_jobs_holding_site", table_name="jobs")
    op.create_index("ix_jobs_holding_site", "jobs", ["site"], postgresql_where=HOLDING_A_SLOT,
                    sqlite_where=HOLDING_A_SLOT)  # fmt: skip
    op.drop_column("jobs", "grid_ce")
    with op.batch_alter_table("task_queues") as batch:
        batch.drop_column("max_ram_mb")
        batch.drop_column("min_ram_mb")
