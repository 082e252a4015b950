"""The account of each task queue: task_queues.account.

A job's account is part of its task queue's definition, and the queue's fair-share
factor is that account's association's (with an imported tree, as Slurm does), not
its owner group's. Queues made before keep their hash and take their owner group as
their account. The waiting jobs charged to another account move to a queue of their
account (the same requirements otherwise, its priority until the next priority run
that of the queue they left), keeping their ids and their user priorities; both
queues' per-level counts are counted again.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS, Requirements, stored_levels

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def _rebuilding_task_queues():
    """SQLite rebuilds the table to change a column: keep AUTOINCREMENT (reflection does not
    carry it) and the counter, which may stand above the largest id left."""
    bind = op.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    seq = None
    if sqlite:
        seq = bind.exec_driver_sql("SELECT seq FROM sqlite_sequence WHERE name = 'task_queues'").scalar()
    kwargs = {"sqlite_autoincrement": True} if sqlite else {}
    return sqlite, seq, op.batch_alter_table("task_queues", table_kwargs=kwargs)


def _restore_counter(sqlite: bool, seq: int | None) -> None:
    if sqlite and seq is not None:
        op.execute(
            sa.text("UPDATE sqlite_sequence SET seq = max(seq, :seq) WHERE name = 'task_queues'").bindparams(seq=seq)
        )


def upgrade() -> None:
    op.add_column("task_queues", sa.Column("account", sa.String(255), nullable=True))
    op.execute("UPDATE task_queues SET account = owner_group")
    sqlite, seq, rebuild = _rebuilding_task_queues()
    with rebuild as batch:
        batch.alter_column("account", existing_type=sa.String(255), nullable=False)
    _restore_counter(sqlite, seq)
    _move_jobs_charged_elsewhere()


# the columns a queue of another account copies from the queue its jobs leave
_COPIED = ("owner", "owner_group", "vo", "cpu_time", "priority_class", "job_class", "min_ram_mb", "max_ram_mb",
           "priority", "shareless", *MULTI_VALUE_FIELDS)  # fmt: skip


def _move_jobs_charged_elsewhere() -> None:
    bind = op.get_bind()
    meta = sa.MetaData()
    tqs = sa.Table("task_queues", meta, autoload_with=bind)
    jobs = sa.Table("jobs", meta, autoload_with=bind)
    queued = sa.Table("tq_jobs", meta, autoload_with=bind)
    moving = bind.execute(
        sa.select(queued.c.job_id, queued.c.tq_id, jobs.c.account)
        .join(jobs, jobs.c.id == queued.c.job_id)
        .join(tqs, tqs.c.id == queued.c.tq_id)
        .where(jobs.c.account != tqs.c.owner_group)
    ).all()
    by_queue: dict[tuple[int, str], list[int]] = {}
    for job_id, tq_id, account in moving:
        by_queue.setdefault((tq_id, account), []).append(job_id)
    now = datetime.now(UTC)
    for (tq_id, account), job_ids in sorted(by_queue.items()):
        left = bind.execute(sa.select(tqs).where(tqs.c.id == tq_id)).one()._mapping
        wanted = Requirements.from_json({
            "account": account,
            **{name: tuple(left[name] or ()) if name in MULTI_VALUE_FIELDS else left[name] for name in _COPIED
               if name not in ("priority", "shareless")},
        })  # fmt: skip
        new_id = bind.execute(sa.select(tqs.c.id).where(tqs.c.requirements_hash == wanted.hash)).scalar()
        if new_id is None:
            values = {name: left[name] for name in _COPIED}
            new_id = bind.execute(
                tqs.insert()
                .values(**values, account=account, requirements_hash=wanted.hash, levels=[], created_at=now,
                        changed_at=now)
                .returning(tqs.c.id)
            ).scalar_one()  # fmt: skip
        for part in range(0, len(job_ids), 500):
            ids = job_ids[part : part + 500]
            bind.execute(sa.update(queued).where(queued.c.job_id.in_(ids)).values(tq_id=new_id))
            bind.execute(sa.update(jobs).where(jobs.c.id.in_(ids)).values(task_queue_id=new_id))
        for counted in (tq_id, new_id):
            levels = Counter(dict(bind.execute(
                sa.select(queued.c.real_priority, sa.func.count()).where(queued.c.tq_id == counted)
                .group_by(queued.c.real_priority)
            ).all()))  # fmt: skip
            bind.execute(sa.update(tqs).where(tqs.c.id == counted).values(levels=stored_levels(levels), changed_at=now))


def downgrade() -> None:
    sqlite, seq, rebuild = _rebuilding_task_queues()
    with rebuild as batch:
        batch.drop_column("account")
    _restore_counter(sqlite, seq)
