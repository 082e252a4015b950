"""Claims and status reports of one process sharing a round trip (PostgreSQL): each request
still gets its own job, miss or report, a duplicate request id or any other refused
statement fails alone, an outage fails them all."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from fairmatch.db import batches as batches_module
from fairmatch.db.batches import Batches, _send, _Statement
from fairmatch.db.claims import CLAIM_LEVEL, Claimant, ClaimDB
from fairmatch.db.engine import read_transaction
from fairmatch.db.tables import job_events, jobs, pilots, tq_jobs
from fairmatch.errors import Conflict, DatabaseUnavailable, DuplicateRequest, UniqueViolation, ValueRefused
from fairmatch.jobs.models import JobSpec, StatusUpdate
from fairmatch.matching.matcher import Claimed, ClaimTarget, Missed
from fairmatch.services import jobs as job_service
from fairmatch.services import submission
from fairmatch.settings import Settings

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("template", ["postgresql"], indirect=True)]


async def _queue(engine: Any, settings: Any, jobs: int) -> int:
    specs = [JobSpec(owner="alice", owner_group="lhcb_user", priority_class=0, user_priority=1) for _ in range(jobs)]
    async with engine.connect() as conn:
        [tq_id] = {row["task_queue_id"] for row in await submission.submit(conn, specs, settings, by="alice")}
    return tq_id


async def _claim_at_once(
    engine: Any, targets: list[ClaimTarget], request_ids: list[str | None], pilots: list[str | None] | None = None
) -> tuple[list, list]:
    """One claim per target, all started in the same instant (as many requests of one process);
    the outcomes (or errors) and the sizes of the batches that carried them."""
    sizes: list[int] = []
    batches = Batches()  # one process's
    references = pilots or [None] * len(request_ids)
    async with engine.connect() as conn:
        claims = [
            ClaimDB.claiming(
                conn,
                Claimant("LCG.CERN.cern", reference, "ce1.cern.ch", "pilot", request_id, 600, benchmark=12.5),
                random.Random(seed),
                batches,
                sizes.append,
            )
            for seed, (request_id, reference) in enumerate(zip(request_ids, references))
        ]
        outcomes = await asyncio.gather(*(c.claim(t) for c, t in zip(claims, targets)), return_exceptions=True)
    return list(outcomes), sizes


async def _waiting(engine: Any, tq_id: int) -> int:
    async with engine.connect() as conn, read_transaction(conn):
        return (await conn.execute(select(func.count()).where(tq_jobs.c.tq_id == tq_id))).scalar_one()


async def test_concurrent_claims_share_round_trips_and_each_takes_its_own_job(engine, settings):
    tq_id = await _queue(engine, settings, 30)
    outcomes, sizes = await _claim_at_once(engine, [ClaimTarget(tq_id, 1.0)] * 20, [None] * 20)
    claimed = [o for o in outcomes if isinstance(o, Claimed)]
    assert len(claimed) + sum(isinstance(o, Missed) for o in outcomes) == 20
    assert len({o.job.id for o in claimed}) == len(claimed) >= 10  # never one job twice
    assert sum(sizes) == 20 and max(sizes) > 1
    assert await _waiting(engine, tq_id) == 30 - len(claimed)
    async with engine.connect() as conn, read_transaction(conn):
        events = (await conn.execute(select(func.count()).where(job_events.c.status == "Matched"))).scalar_one()
    assert events == len(claimed)


async def test_batched_claims_record_their_pilots_and_take_distinct_jobs(engine, settings):
    tq_id = await _queue(engine, settings, 30)
    references = [f"https://ce1.cern.ch:9619/{i % 8}.0" for i in range(20)]  # some pilots twice in a batch
    outcomes, sizes = await _claim_at_once(engine, [ClaimTarget(tq_id, 1.0)] * 20, [None] * 20, references)
    assert max(sizes) > 1
    taken: dict[str, list[int]] = {}
    for reference, outcome in zip(references, outcomes):
        assert isinstance(outcome, Claimed | Missed), outcome
        if isinstance(outcome, Claimed):
            assert (outcome.job.pilot_reference, outcome.job.grid_ce) == (reference, "ce1.cern.ch")
            assert outcome.job.minor_status == "Assigned"
            taken.setdefault(reference, []).append(outcome.job.id)
    job_ids = [job_id for ids in taken.values() for job_id in ids]
    assert len(set(job_ids)) == len(job_ids) >= 10
    async with engine.connect() as conn, read_transaction(conn):
        rows = {r.reference: r for r in await conn.execute(select(pilots))}
        holders = dict(
            (await conn.execute(select(jobs.c.id, jobs.c.pilot_reference).where(jobs.c.id.in_(job_ids)))).all()
        )
    assert set(rows) == set(taken)
    for reference, ids in taken.items():
        row = rows[reference]
        assert (row.matches, row.empty_matches, row.site, row.grid_ce, row.benchmark) == (
            len(ids),
            0,
            "LCG.CERN.cern",
            "ce1.cern.ch",
            12.5,
        )
        assert row.current_job_id in ids
    assert all(holders[job_id] == reference for reference, ids in taken.items() for job_id in ids)


async def test_a_claim_alone_is_sent_alone(engine, settings):
    tq_id = await _queue(engine, settings, 2)
    for _ in range(2):
        outcomes, sizes = await _claim_at_once(engine, [ClaimTarget(tq_id, 1.0)], [None])
        assert isinstance(outcomes[0], Claimed) and sizes == [1]


async def test_a_batch_takes_the_last_jobs_once_and_misses_the_rest(engine, settings):
    tq_id = await _queue(engine, settings, 3)
    outcomes, _ = await _claim_at_once(engine, [ClaimTarget(tq_id, 1.0)] * 8, [None] * 8)
    claimed = [o for o in outcomes if isinstance(o, Claimed)]
    assert len({o.job.id for o in claimed}) == len(claimed) == 3
    assert [o for o in outcomes if not isinstance(o, Claimed)] == [Missed(level_empty=True)] * 5
    assert sum(o.tq_now_empty for o in claimed) == 1


async def test_a_request_id_claimed_twice_in_one_batch_fails_alone(engine, settings):
    tq_id = await _queue(engine, settings, 10)
    request_ids = ["r-1", "r-2", "r-1", "r-3", "r-1"]
    outcomes, sizes = await _claim_at_once(engine, [ClaimTarget(tq_id, 1.0)] * 5, request_ids)
    assert max(sizes) > 1
    by_id: dict[str, list] = {}
    for request_id, outcome in zip(request_ids, outcomes):
        by_id.setdefault(request_id, []).append(outcome)
    assert [type(o) for o in by_id["r-2"] + by_id["r-3"]] == [Claimed, Claimed]
    assert sorted(type(o).__name__ for o in by_id["r-1"]) == ["Claimed", "DuplicateRequest", "DuplicateRequest"]
    assert all(isinstance(o, DuplicateRequest | Claimed) for o in outcomes)
    assert await _waiting(engine, tq_id) == 10 - 3  # the duplicates' claims were undone


async def test_claims_go_on_after_failed_batches_on_the_same_connection(engine, settings):
    """A failed pipeline must not leave the driver believing in statements the server never
    prepared: the claims after it, alone or batched, still run."""
    tq_id = await _queue(engine, settings, 40)
    for attempt in range(8):
        request_ids = [f"a{attempt}", f"a{attempt}", f"b{attempt}", f"c{attempt}"]
        outcomes, _ = await _claim_at_once(engine, [ClaimTarget(tq_id, 1.0)] * 4, request_ids)
        assert sorted(type(o).__name__ for o in outcomes) == ["Claimed"] * 3 + ["DuplicateRequest"]
    assert await _waiting(engine, tq_id) == 40 - 24


async def test_a_failing_statement_fails_alone_and_the_others_of_its_batch_are_sent_again(engine, settings):
    tq_id = await _queue(engine, settings, 5)
    batches = Batches()
    params = _claim_params(tq_id)
    sizes: list[int] = []
    async with engine.connect() as conn:
        outcomes = await asyncio.gather(
            batches.run(conn, CLAIM_LEVEL, params),  # sent at once, alone
            batches.run(conn, CLAIM_LEVEL, params, sizes.append),  # these three together, after it
            batches.run(conn, "SELECT 1 / 0", {}),
            batches.run(conn, CLAIM_LEVEL, params, sizes.append),
            return_exceptions=True,
        )
    assert sizes == [2, 1, 1]  # the claims of the batch of three, then each sent again alone
    assert [o.id is not None for o in (outcomes[0], outcomes[1], outcomes[3])] == [True] * 3
    assert isinstance(outcomes[2], ValueRefused)
    assert await _waiting(engine, tq_id) == 5 - 3


async def test_a_broken_connection_fails_its_batch_and_the_next_goes_on(engine, settings):
    tq_id = await _queue(engine, settings, 5)
    batches = Batches()
    async with engine.connect() as conn:
        backend = (await conn.exec_driver_sql("SELECT pg_backend_pid()")).scalar_one()
        await conn.commit()
        async with engine.connect() as other:
            await other.exec_driver_sql(f"SELECT pg_terminate_backend({backend})")
            await other.commit()
        params = _claim_params(tq_id)
        outcomes = await asyncio.gather(
            *(batches.run(conn, CLAIM_LEVEL, params) for _ in range(3)), return_exceptions=True
        )
    assert isinstance(outcomes[0], DatabaseUnavailable)  # sent alone on the dead connection
    assert all(o.id is not None for o in outcomes[1:])  # the next batch, on the connection renewed
    assert not batches._in_flight and not batches._waiting  # nothing left waiting for a lead
    assert await _waiting(engine, tq_id) == 3


def _claim_params(tq_id: int) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "tq_id": tq_id, "level": 1.0, "job_id": None, "candidates": 10, "site": "LCG.CERN.cern",
        "pilot_reference": None, "grid_ce": None, "benchmark": None, "requester": "pilot", "request_id": None, "request_resource": None, "now": now,
        "status": "Matched", "minor_status": "Assigned", "lease_until": now + timedelta(seconds=600),
        "finished_at": None, "guarded": False,
    }  # fmt: skip


async def test_a_batch_failing_where_the_driver_would_prepare_its_statement_leaves_none_taken_for_prepared(engine):
    """psycopg prepares a statement at its sixth run on a connection. When that run is in a
    pipeline after a failing claim, the server skips the preparation: the driver must not
    go on binding a statement that does not exist. The claims undone with the duplicate are
    sent again alone and take their jobs, and later claims on the connection run."""
    settings = Settings()
    tq_id = await _queue(engine, settings, 12)
    params = _claim_params(tq_id)
    async with engine.connect() as conn:
        for i in range(4):  # the statement's runs short of the threshold, on this connection
            await _send(conn, [_Statement(CLAIM_LEVEL, {**params, "request_id": f"r{i}"}, None)])
        batch = [_Statement(CLAIM_LEVEL, {**params, "request_id": rid}, None) for rid in ("r0", "x1", "x2")]
        await _send(conn, batch)
        assert isinstance(batch[0].answer.exception(), UniqueViolation)
        assert all(c.answer.result().id is not None for c in batch[1:])
        for i in range(6):
            after = _Statement(CLAIM_LEVEL, {**params, "request_id": f"y{i}"}, None)
            await _send(conn, [after])
            assert after.answer.result().id is not None
    assert await _waiting(engine, tq_id) == 12 - 4 - 2 - 6


async def test_a_failure_while_a_batch_is_sent_again_claim_by_claim_answers_every_claim(engine, monkeypatch):
    """The claims of a batch undone by a duplicate are sent again one by one; if the database
    fails meanwhile, the claims not yet sent fail with it instead of waiting forever."""
    settings = Settings()
    tq_id = await _queue(engine, settings, 5)
    params = _claim_params(tq_id)
    real = batches_module._pipelined
    calls = 0

    async def failing_on_the_second_resend(conn: Any, batch: list) -> list:
        nonlocal calls
        calls += 1
        if calls == 4:  # the setup's claim, the batch, "a" again alone, then "d" again alone
            raise DatabaseUnavailable("the database went away")
        return await real(conn, batch)

    monkeypatch.setattr(batches_module, "_pipelined", failing_on_the_second_resend)
    async with engine.connect() as conn:
        await _send(conn, [_Statement(CLAIM_LEVEL, {**params, "request_id": "d"}, None)])
        batch = [_Statement(CLAIM_LEVEL, {**params, "request_id": rid}, None) for rid in ("a", "d", "b")]
        with pytest.raises(DatabaseUnavailable):
            await _send(conn, batch)
    assert batch[0].answer.result().id is not None
    assert isinstance(batch[1].answer.exception(), DatabaseUnavailable)
    assert isinstance(batch[2].answer.exception(), DatabaseUnavailable)


async def test_status_reports_share_batches_with_claims_and_a_refused_one_changes_nothing_else(
    engine, settings, monkeypatch
):
    """Reports of concurrent requests ride in the same pipelines as claims: each job takes
    its own status and event; a report refused by its transition (409) is refused alone."""
    tq_id = await _queue(engine, settings, 12)
    outcomes, _ = await _claim_at_once(engine, [ClaimTarget(tq_id, 1.0)] * 6, [None] * 6)
    matched = [o.job.id for o in outcomes if isinstance(o, Claimed)]
    async with engine.connect() as conn:  # in a queue of its own, which the claims below leave alone
        [elsewhere] = await submission.submit(
            conn,
            [JobSpec(owner="bob", owner_group="lhcb_user", priority_class=0, user_priority=1)],
            settings,
            by="alice",
        )
    waiting = elsewhere["job_id"]
    sent: list[int] = []
    real = batches_module._pipelined

    async def recording(conn: Any, batch: list) -> list:
        sent.append(len(batch))
        return await real(conn, batch)

    monkeypatch.setattr(batches_module, "_pipelined", recording)

    async def report(job_id: int) -> Any:
        async with engine.connect() as conn:
            return await job_service.report_status(conn, job_id, StatusUpdate(status="Running"), settings, by="pilot")

    async def claim() -> Any:
        return (await _claim_at_once(engine, [ClaimTarget(tq_id, 1.0)], [None]))[0][0]

    answers = await asyncio.gather(*(report(i) for i in [*matched, waiting]), claim(), claim(), return_exceptions=True)
    assert max(sent) > 1
    assert [a.status for a in answers[: len(matched)]] == ["Running"] * len(matched)
    assert isinstance(answers[len(matched)], Conflict)  # Waiting -> Running is no transition
    assert all(isinstance(a, Claimed) for a in answers[-2:])
    async with engine.connect() as conn, read_transaction(conn):
        running = (await conn.execute(select(func.count()).where(job_events.c.status == "Running"))).scalar_one()
        status = (await conn.execute(select(jobs.c.status).where(jobs.c.id == waiting))).scalar_one()
    assert running == len(matched)
    assert status == "Waiting"  # untouched by the refused report
