"""Submission: a batch of jobs queued all at once, or not at all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.accounting.associations import unknown_association, user_associations
from fairmatch.clock import utcnow
from fairmatch.db.accounting import AccountingDB
from fairmatch.db.engine import read_transaction
from fairmatch.db.jobs import JobDB
from fairmatch.db.taskqueues import TaskQueueDB
from fairmatch.errors import Conflict, InvalidInput, UniqueViolation
from fairmatch.jobs.lifecycle import JobStatus
from fairmatch.jobs.models import JobSpec
from fairmatch.jobs.submission import check_payloads, requested_cpu_time, requirements_key, requirements_of
from fairmatch.services.queueing import arrivals_of, record_arrivals, refresh_priorities
from fairmatch.settings import Settings
from fairmatch.taskqueues.requirements import Requirements, real_priority


async def submit(
    conn: AsyncConnection, specs: Sequence[JobSpec], settings: Settings, *, by: str
) -> list[dict[str, Any]]:
    """Queue all jobs or none, submitted `by` a caller. Returns job_id, task_queue_id and
    status per job, in order."""
    check_payloads(specs, settings.jobs.max_payload_bytes)
    await _check_associations(conn, specs)
    now = utcnow()
    # jobs of one submission share a few requirement sets: build, hash and encode each once
    built: dict[tuple, Requirements] = {}
    for spec in specs:
        key = requirements_key(spec)
        if key not in built:
            built[key] = requirements_of(spec, settings.jobs, settings.taskqueues.cpu_buckets)
    reqs = [built[requirements_key(spec)] for spec in specs]
    distinct = dict.fromkeys(reqs)
    hashes = {r: r.hash for r in distinct}
    as_json = {r: r.to_json() for r in distinct}
    external_ids = [spec.external_id for spec in specs if spec.external_id is not None]
    async with conn.begin():
        if external_ids:
            busy = await JobDB.of(conn).replace_holders(external_ids, now, by=by)
            if busy:
                held = ", ".join(f"{h.external_id!r} by job {h.id} ({h.status})" for h in busy[:5])
                raise Conflict(f"external ids held by jobs that have not finished: {held}")
        tq_ids, created = await TaskQueueDB.of(conn).find_or_create(distinct, now)
        rows: list[dict[str, Any]] = [
            {
                "status": JobStatus.Waiting.value,
                "owner": r.owner,
                "owner_group": r.owner_group,
                "vo": r.vo,
                "account": spec.charged_account,
                "cpu_time": requested_cpu_time(spec, settings.jobs),
                "requirements": as_json[r],
                "user_priority": spec.user_priority,
                "real_priority": real_priority(spec.user_priority),
                "priority_class": spec.priority_class,
                "job_class": spec.job_class,
                "payload": spec.payload,
                "task_queue_id": tq_ids[hashes[r]],
                "submitted_at": now,
                "external_id": spec.external_id,
            }
            for spec, r in zip(specs, reqs)
        ]
        try:
            job_ids = await JobDB.of(conn).insert_waiting(rows, now, by=by)
        except UniqueViolation as exc:  # the only unique key a submission writes is an external id's holder
            raise Conflict("an external id of this submission was taken by a concurrent submission") from exc
    await record_arrivals(
        conn, arrivals_of((row["task_queue_id"], row["real_priority"]) for row in rows), new_jobs=True
    )
    await refresh_priorities(conn, settings, {r.owner_group for r in distinct if hashes[r] in created})
    return [
        {
            "job_id": job_id,
            "task_queue_id": row["task_queue_id"],
            "status": JobStatus.Waiting.value,
            "external_id": row["external_id"],
        }
        for job_id, row in zip(job_ids, rows)
    ]


async def _check_associations(conn: AsyncConnection, specs: Sequence[JobSpec]) -> None:
    """With an imported association tree, each job's (account, owner) must be one of its
    users' associations, as Slurm refuses a job of an unknown association."""
    async with read_transaction(conn):
        tree = await AccountingDB.of(conn).associations()
    if not tree:
        return  # no tree: any account is charged as given
    known = user_associations(tree)
    errors: list[dict[str, Any]] = []
    for i, spec in enumerate(specs):
        problem = unknown_association(known, spec.charged_account, spec.owner)
        if problem is not None:
            errors.append({"loc": ["body", "jobs", i, "account"], "type": "value_error", "msg": problem})
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise InvalidInput(errors[0]["msg"] + more, errors=errors)
