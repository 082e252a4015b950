"""A job's requirements and payload move to job_specs; jobs keeps what changes.

Every claim and status report rewrites its jobs row: without the two JSON
columns (most of its bytes) that row is a few dozen bytes. The lease sweep's
and the site limits' indexes become partial (Matched jobs by lease; jobs
holding a slot by site), so most state changes write neither, and on
PostgreSQL jobs pages keep room (fillfactor 90) for heartbeats to update in
place. A dropped column's bytes stay in each row until it is written again,
which a finished job never is: PostgreSQL rewrites the table once here.

A downgrade puts the columns and the former indexes back, filled from job_specs.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
MATCHED = sa.text("status IN ('Matched')")
HOLDING_A_SLOT = sa.text("status IN ('Matched', 'Running')")

COPY_SPECS = "INSERT INTO job_specs (job_id, requirements, payload) SELECT id, requirements, payload FROM jobs"
RESTORE_SPECS = (
    "UPDATE jobs SET requirements = (SELECT requirements FROM job_specs WHERE job_id = jobs.id), "
    "payload = (SELECT payload FROM job_specs WHERE job_id = jobs.id)"
)


def _postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    op.create_table(
        "job_specs",
        sa.Column("job_id", Id, autoincrement=False, nullable=False),
        sa.Column("requirements", sa.JSON(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_job_specs_job_id_jobs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", name="pk_job_specs"),
    )
    op.execute(COPY_SPECS)
    op.drop_index("ix_jobs_status_lease", table_name="jobs")
    op.drop_index("ix_jobs_site_status", table_name="jobs")
    op.drop_column("jobs", "requirements")  # SQLite drops an unindexed column in place
    op.drop_column("jobs", "payload")
    op.create_index("ix_jobs_matched_lease", "jobs", ["lease_expires_at"], postgresql_where=MATCHED,
                    sqlite_where=MATCHED)  # fmt: skip
    op.create_index("ix_jobs_holding_site", "jobs", ["site"], postgresql_where=HOLDING_A_SLOT,
                    sqlite_where=HOLDING_A_SLOT)  # fmt: skip
    if _postgresql():
        op.execute("ALTER TABLE jobs SET (fillfactor = 90)")
        # the one rewrite, in id order: rows without the dropped columns' bytes, pages with room
        op.execute("CLUSTER jobs USING pk_jobs")
        op.execute("ALTER TABLE jobs SET WITHOUT CLUSTER")


def downgrade() -> None:
    postgresql = _postgresql()
    if postgresql:
        op.execute("ALTER TABLE jobs RESET (fillfactor)")
    op.drop_index("ix_jobs_holding_site", table_name="jobs")
    op.drop_index("ix_jobs_matched_lease", table_name="jobs")
    op.add_column("jobs", sa.Column("requirements", sa.JSON(), nullable=True))
    op.add_column("jobs", sa.Column("payload", sa.JSON(), nullable=True))
    op.execute(RESTORE_SPECS)
    if postgresql:
        op.alter_column("jobs", "requirements", existing_type=sa.JSON(), nullable=False)
    else:
        # SQLite rebuilds the table: keep AUTOINCREMENT (reflection does not carry it) and the
        # counter, which may stand above the largest id left
        seq = op.get_bind().exec_driver_sql("SELECT seq FROM sqlite_sequence WHERE name = 'jobs'").scalar()
        with op.batch_alter_table("jobs", table_kwargs={"sqlite_autoincrement": True}) as batch:
            batch.alter_column("requirements", existing_type=sa.JSON(), nullable=False)
        if seq is not None:
            op.execute(
                sa.text("UPDATE sqlite_sequence SET seq = max(seq, :seq) WHERE name = 'jobs'").bindparams(seq=seq)
            )
    op.create_index("ix_jobs_status_lease", "jobs", ["status", "lease_expires_at"])
    op.create_index("ix_jobs_site_status", "jobs", ["site", "status"])
    op.drop_table("job_specs")
