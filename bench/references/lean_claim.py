"""The leanest Python claim service: the reference for fairmatch's HTTP and Python cost.

    python bench/references/lean_claim.py --url postgresql://... --port 8001 --workers 2

A raw ASGI app (no framework) on uvicorn with httptools and uvloop, a psycopg
async connection pool per worker, and per POST /api/v1/match: read the JSON
body, claim the lowest waiting job nobody holds and mark it Matched at the
pilot's site, in one prepared, autocommitted statement, and answer it as JSON
(204 when none waits). No matching, priorities, events or request ids.
POST /api/v1/jobs/{id}/status sets the job's status (and CPU) and, on Done or
Failed, logs its charge, in one statement too: no transition check, no event.
GET /readyz answers 200 once the pool is open.
"""

import argparse
import json
import os
import re
from pathlib import Path

import uvicorn
from psycopg_pool import AsyncConnectionPool

APPLICATION_NAME = "fairmatch-bench-lean"
CLAIM = """
WITH claimed AS (
    DELETE FROM tq_jobs
    WHERE job_id = (SELECT job_id FROM tq_jobs ORDER BY job_id LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING job_id, tq_id
)
UPDATE jobs SET status = 'Matched', site = %s, matched_at = now()
FROM claimed WHERE jobs.id = claimed.job_id
RETURNING jobs.id, claimed.tq_id, jobs.owner, jobs.owner_group"""
pool: AsyncConnectionPool | None = None


# a status report: the job's state, and on Done or Failed its charge, in one autocommitted statement
REPORT = """
WITH reported AS (
    UPDATE jobs SET status = %(status)s, heartbeat_at = now(),
                    cpu_seconds = COALESCE(%(cpu)s, cpu_seconds), wall_seconds = COALESCE(%(wall)s, wall_seconds)
    WHERE id = %(id)s
    RETURNING id, vo, owner_group, owner, account, cpu_seconds
)
INSERT INTO usage_charges (charged_at, job_id, vo, owner_group, owner, account, charge)
SELECT now(), id, vo, owner_group, owner, account, cpu_seconds FROM reported
WHERE %(status)s IN ('Done', 'Failed') AND cpu_seconds > 0"""
STATUS_PATH = re.compile(r"^/api/v1/jobs/(\d+)/status$")


async def answer(send, status: int, body: bytes = b"") -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers if status != 204 else []})
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send) -> None:
    global pool
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                size = int(os.environ.get("LEAN_CLAIM_POOL", "10"))  # fairmatch gives requests 10 per process
                pool = AsyncConnectionPool(os.environ["LEAN_CLAIM_URL"], min_size=size, max_size=2 * size,
                                           kwargs={"autocommit": True, "application_name": APPLICATION_NAME},
                                           open=False)  # fmt: skip
                await pool.open(wait=True)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await pool.close()
                await send({"type": "lifespan.shutdown.complete"})
                return
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    if scope["path"] == "/readyz":
        return await answer(send, 200, b'{"ready":true}')
    reporting = STATUS_PATH.match(scope["path"])
    if scope["method"] == "POST" and reporting:
        return await report(send, int(reporting.group(1)), body)
    if scope["method"] != "POST" or scope["path"] != "/api/v1/match":
        return await answer(send, 404, b'{"detail":"not found"}')
    try:
        site = str(json.loads(body)["Site"])
    except (ValueError, KeyError, TypeError):
        return await answer(send, 422, b'{"detail":"a JSON object with Site"}')
    async with pool.connection() as conn:
        row = await (await conn.execute(CLAIM, (site,), prepare=True)).fetchone()
    if row is None:
        return await answer(send, 204)
    job = {"job_id": row[0], "task_queue_id": row[1], "owner": row[2], "owner_group": row[3], "site": site}
    await answer(send, 200, json.dumps(job).encode())


async def report(send, job_id: int, body: bytes) -> None:
    try:
        sent = json.loads(body)
        values = {"id": job_id, "status": str(sent["status"]), "cpu": sent.get("cpu_seconds"),
                  "wall": sent.get("wall_seconds")}  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError):
        return await answer(send, 422, b'{"detail":"a JSON object with status"}')
    async with pool.connection() as conn:
        await conn.execute(REPORT, values, prepare=True)
    await answer(send, 200, json.dumps({"job_id": job_id, "status": values["status"]}).encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="postgresql://user@host:port/database")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pool", type=int, default=10, help="connections per worker (twice as many at most)")
    args = parser.parse_args()
    os.environ.update(LEAN_CLAIM_URL=args.url, LEAN_CLAIM_POOL=str(args.pool))  # the workers read them
    uvicorn.run("lean_claim:app", app_dir=str(Path(__file__).parent), host=args.host, port=args.port,
                workers=args.workers, http="httptools", loop="uvloop", lifespan="on", access_log=False,
                log_level="warning")  # fmt: skip


if __name__ == "__main__":
    main()
