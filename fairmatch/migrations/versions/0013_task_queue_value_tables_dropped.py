"""A task queue's value lists live in its own row only: the six tq_<field> tables go.

Since 0006 the lists were written twice, as task_queues columns (read by
matching) and as one table per field (read by the listing alone). A column
left NULL (a row written past the service) takes its list from its table
before the tables are dropped; a downgrade rebuilds the tables from the columns.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

FIELDS = ("sites", "banned_sites", "grid_ces", "platforms", "job_types", "tags")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

# one fixed statement per field and backend (no SQL assembled from input)
FILL_POSTGRESQL = {
    field: f"UPDATE task_queues SET {field} = ARRAY(SELECT value FROM tq_{field} "
    f"WHERE tq_id = task_queues.id ORDER BY value) WHERE {field} IS NULL"
    for field in FIELDS
}
FILL_SQLITE = {
    field: f"UPDATE task_queues SET {field} = (SELECT json_group_array(value) FROM "
    f"(SELECT value FROM tq_{field} WHERE tq_id = task_queues.id ORDER BY value)) WHERE {field} IS NULL"
    for field in FIELDS
}
REBUILD_POSTGRESQL = {
    field: f"INSERT INTO tq_{field} (tq_id, value) SELECT DISTINCT id, unnest({field}) FROM task_queues"
    for field in FIELDS
}
REBUILD_SQLITE = {
    field: f"INSERT INTO tq_{field} (tq_id, value) SELECT DISTINCT task_queues.id, listed.value "
    f"FROM task_queues, json_each(task_queues.{field}) AS listed"
    for field in FIELDS
}


def _postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    fill = FILL_POSTGRESQL if _postgresql() else FILL_SQLITE
    for field in FIELDS:
        op.execute(fill[field])
        op.drop_index(f"ix_tq_{field}_value", table_name=f"tq_{field}")
        op.drop_table(f"tq_{field}")


def downgrade() -> None:
    rebuild = REBUILD_POSTGRESQL if _postgresql() else REBUILD_SQLITE
    for field in FIELDS:
        table = f"tq_{field}"
        op.create_table(
            table,
            sa.Column("tq_id", Id, nullable=False),
            sa.Column("value", sa.String(length=255), nullable=False),
            sa.ForeignKeyConstraint(
                ["tq_id"], ["task_queues.id"], name=f"fk_{table}_tq_id_task_queues", ondelete="CASCADE"
            ),
            sa.PrimaryKeyConstraint("tq_id", "value", name=f"pk_{table}"),
        )
        op.create_index(f"ix_{table}_value", table, ["value"])
        op.execute(rebuild[field])
