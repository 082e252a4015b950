"""Initial schema: task queues, their value tables, waiting jobs, jobs, events, groups.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# SQLite only auto-increments an INTEGER PRIMARY KEY.
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Name = sa.String(length=255)
When = sa.DateTime(timezone=True)

TQ_VALUE_TABLES = ("sites", "banned_sites", "grid_ces", "platforms", "job_types", "tags")


def upgrade() -> None:
    op.create_table(
        "groups",
        sa.Column("name", Name, nullable=False),
        sa.Column("job_share", sa.Float(), nullable=False),
        sa.Column("job_sharing", sa.Boolean(), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("allow_background_tqs", sa.Boolean(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_groups"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("minor_status", Name, nullable=True),
        sa.Column("owner", Name, nullable=False),
        sa.Column("owner_group", Name, nullable=False),
        sa.Column("vo", Name, nullable=False),
        sa.Column("cpu_time", sa.BigInteger(), nullable=False),
        sa.Column("requirements", sa.JSON(), nullable=False),
        sa.Column("user_priority", sa.Integer(), nullable=False),
        sa.Column("priority_class", sa.Integer(), nullable=False),
        sa.Column("job_class", Name, nullable=True),
        sa.Column("payload", sa.JSON(), nullable=True),
        sa.Column("task_queue_id", sa.BigInteger(), nullable=True),
        sa.Column("submitted_at", When, nullable=False),
        sa.Column("matched_at", When, nullable=True),
        sa.Column("lease_expires_at", When, nullable=True),
        sa.Column("started_at", When, nullable=True),
        sa.Column("heartbeat_at", When, nullable=True),
        sa.Column("finished_at", When, nullable=True),
        sa.Column("pilot_reference", Name, nullable=True),
        sa.Column("site", Name, nullable=True),
        sa.Column("cpu_seconds", sa.Float(), nullable=True),
        sa.Column("wall_seconds", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
    )
    op.create_index("ix_jobs_status_id", "jobs", ["status", "id"])
    op.create_index("ix_jobs_owner_id", "jobs", ["owner", "id"])
    op.create_index("ix_jobs_owner_group_id", "jobs", ["owner_group", "id"])

    op.create_table(
        "task_queues",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("requirements_hash", sa.String(length=64), nullable=False),
        sa.Column("owner", Name, nullable=False),
        sa.Column("owner_group", Name, nullable=False),
        sa.Column("vo", Name, nullable=False),
        sa.Column("cpu_time", sa.BigInteger(), nullable=False),
        sa.Column("priority_class", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Float(), nullable=False),
        sa.Column("created_at", When, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_task_queues"),
        sa.UniqueConstraint("requirements_hash", name="uq_task_queues_requirements_hash"),
    )
    for field in TQ_VALUE_TABLES:
        table = f"tq_{field}"
        op.create_table(
            table,
            sa.Column("tq_id", Id, nullable=False),
            sa.Column("value", Name, nullable=False),
            sa.ForeignKeyConstraint(
                ["tq_id"], ["task_queues.id"], name=f"fk_{table}_tq_id_task_queues", ondelete="CASCADE"
            ),
            sa.PrimaryKeyConstraint("tq_id", "value", name=f"pk_{table}"),
        )
        op.create_index(f"ix_{table}_value", table, ["value"])

    op.create_table(
        "tq_jobs",
        sa.Column("job_id", Id, autoincrement=False, nullable=False),
        sa.Column("tq_id", Id, nullable=False),
        sa.Column("user_priority", sa.Integer(), nullable=False),
        sa.Column("real_priority", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_tq_jobs_job_id_jobs", ondelete="CASCADE"),
        # deliberately no cascade: an empty-TQ delete racing a new job must fail
        sa.ForeignKeyConstraint(["tq_id"], ["task_queues.id"], name="fk_tq_jobs_tq_id_task_queues"),
        sa.PrimaryKeyConstraint("job_id", name="pk_tq_jobs"),
    )
    op.create_index("ix_tq_jobs_tq_level_job", "tq_jobs", ["tq_id", "real_priority", "job_id"])

    op.create_table(
        "job_events",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("job_id", Id, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("minor_status", Name, nullable=True),
        sa.Column("at", When, nullable=False),
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name="fk_job_events_job_id_jobs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_job_events"),
    )
    op.create_index("ix_job_events_job_id", "job_events", ["job_id", "id"])

    op.create_table(
        "match_requests",
        sa.Column("request_id", Name, nullable=False),
        sa.Column("job_id", Id, nullable=False),
        sa.Column("created_at", When, nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_match_requests_job_id_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("request_id", name="pk_match_requests"),
    )


def downgrade() -> None:
    op.drop_table("match_requests")
    op.drop_table("job_events")
    op.drop_table("tq_jobs")
    for field in TQ_VALUE_TABLES:
        op.drop_table(f"tq_{field}")
    op.drop_table("task_queues")
    op.drop_table("jobs")
    op.drop_table("groups")
