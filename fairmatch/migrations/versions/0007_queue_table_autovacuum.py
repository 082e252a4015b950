"""Autovacuum settings for the tables every match rewrites (PostgreSQL only).

tq_jobs loses a row per match and jobs updates one: with the default scale
factors (20 % of the table) a 10M-job queue would pile up two million dead
rows before a vacuum. Here a vacuum starts after 1 % (tq_jobs) or 2 % (jobs),
and runs without the cost-based sleeps.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-21
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TUNED = (
    "ALTER TABLE tq_jobs SET (autovacuum_vacuum_scale_factor = 0.01, "
    "autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0)",
    "ALTER TABLE jobs SET (autovacuum_vacuum_scale_factor = 0.02, "
    "autovacuum_analyze_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0)",
)
DEFAULTS = (
    "ALTER TABLE tq_jobs RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor, "
    "autovacuum_vacuum_cost_delay)",
    "ALTER TABLE jobs RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor, "
    "autovacuum_vacuum_cost_delay)",
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in TUNED:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in DEFAULTS:
            op.execute(statement)
