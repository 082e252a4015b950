"""Benchmark workloads: the LHCb snapshot's marginals, the DiracX shape, hashes
the service agrees with, pilots that find work, and a load a real server serves.

Tolerance for the LHCb marginals: every value's TQ count is exact, and its
job total is within 1 % of the published one or 50 jobs, whichever is
larger (the per-TQ file and the marginal files were read at slightly
different moments: their totals differ by tens of jobs).
"""

from __future__ import annotations

import random
from collections import Counter

import psycopg
import pytest

from app.auth.policy import check_submission
from app.auth.tokens import ANONYMOUS_ADMIN
from app.db import migrate
from app.jobs.models import JobSpec
from app.jobs.store import requirements_of
from app.settings import load_settings
from bench.workload_fit import apportion, choose_subset, partition
from bench.workload_lhcb import SNAPSHOT, read_csv
from bench.workload_load import _text
from bench.workload_model import requirements_hash, requirements_json
from bench.workloads import diracx, eligible, eligible_fraction, lhcb, load, pilots, top_up
from tests import conftest as harness  # its TestDatabase, imported by name, would be collected as a test class

RELATIVE, ABSOLUTE = 0.01, 50


def close(got: int, published: int) -> bool:
    return abs(got - published) <= max(RELATIVE * published, ABSOLUTE)


@pytest.fixture(scope="module")
def snapshot():
    return lhcb(1.0, 0)


@pytest.fixture(scope="module")
def target():
    return diracx(200_000, 0)


def check_marginal(workload, field: str, csv_name: str, key: str) -> None:
    got = workload.marginal(field)
    rows = read_csv(SNAPSHOT, csv_name)
    assert set(got) == {r[key] for r in rows}
    for r in rows:
        n_tqs, jobs = got[r[key]]
        assert n_tqs == int(r["n_tqs"]), r
        assert close(jobs, int(r["total_jobs"])), (r, jobs)


def test_lhcb_keeps_every_tq_row_and_the_exact_job_total(snapshot):
    rows = read_csv(SNAPSHOT, "jobs_per_tq.csv")
    assert len(snapshot.requirements) == len(rows)
    assert snapshot.jobs == tuple(int(r["n_jobs"]) for r in rows)
    assert snapshot.total_jobs == sum(int(r["n_jobs"]) for r in rows)
    assert [(r.cpu_time, r.owner_group) for r in snapshot.requirements] == [
        (int(r["CPUTime"]), r["OwnerGroup"]) for r in rows
    ]
    assert len(set(snapshot.hashes)) == len(rows)


@pytest.mark.parametrize(
    ("field", "csv_name", "key"),
    [("sites", "site_distribution.csv", "site"),
     ("banned_sites", "banned_sites.csv", "banned_site"),
     ("platforms", "platform_distribution.csv", "platform"),
     ("job_types", "jobtype_distribution.csv", "job_type")],
)  # fmt: skip
def test_lhcb_value_marginals_match_the_snapshot(snapshot, field, csv_name, key):
    check_marginal(snapshot, field, csv_name, key)


def test_lhcb_owners_site_any_and_shape(snapshot):
    owners = Counter()
    jobs = Counter()
    for req, n in zip(snapshot.requirements, snapshot.jobs):
        owners[req.owner, req.owner_group] += 1
        jobs[req.owner, req.owner_group] += n
    for r in read_csv(SNAPSHOT, "owner_distribution.csv"):
        assert owners[r["Owner"], r["OwnerGroup"]] == int(r["n_tqs"])
        assert close(jobs[r["Owner"], r["OwnerGroup"]], int(r["total_jobs"])), r
    (open_site,) = read_csv(SNAPSHOT, "site_any.csv")
    anywhere = [n for req, n in zip(snapshot.requirements, snapshot.jobs) if not req.sites]
    assert len(anywhere) == int(open_site["tqs_any_site"])
    assert close(sum(anywhere), int(open_site["jobs_any_site"]))
    assert all(req.platforms and len(req.job_types) == 1 for req in snapshot.requirements)
    # several sites and several platforms per TQ, never a banned site that is also asked for
    assert sum(len(r.sites) > 1 for r in snapshot.requirements) > len(snapshot.requirements) / 2
    assert sum(len(r.platforms) > 1 for r in snapshot.requirements) > len(snapshot.requirements) / 2
    assert not any(set(r.sites) & set(r.banned_sites) for r in snapshot.requirements)


def test_lhcb_scales_the_sizes_only(snapshot):
    small = lhcb(0.01, 0)
    assert small.hashes == snapshot.hashes
    assert min(small.jobs) == 1
    assert small.jobs == tuple(max(1, round(n * 0.01)) for n in snapshot.jobs)
    assert lhcb(2.5, 0).total_jobs == sum(round(n * 2.5) for n in snapshot.jobs)


def test_workloads_are_deterministic_per_seed(snapshot):
    again = lhcb(1.0, 0)
    assert again.hashes == snapshot.hashes and again.jobs == snapshot.jobs
    assert lhcb(1.0, 1).hashes != snapshot.hashes
    one, two = diracx(20_000, 3, n_tqs=1000), diracx(20_000, 3, n_tqs=1000)
    assert one.specs == two.specs and one.jobs == two.jobs
    assert diracx(20_000, 4, n_tqs=1000).specs != one.specs
    assert pilots(snapshot, 50, 1) == pilots(again, 50, 1) != pilots(snapshot, 50, 2)


def test_diracx_shape(target):
    reqs = target.requirements
    assert len(reqs) == 10_000 and len(set(target.hashes)) == 10_000
    assert target.total_jobs == 200_000 and min(target.jobs) >= 1
    assert len(target.marginal("sites")) == 1000
    assert len(target.marginal("tags")) == 300
    # long tail: 1 % of the TQs hold over a third of the jobs, half of them hold a few each
    ranked = sorted(target.jobs, reverse=True)
    assert sum(ranked[:100]) > target.total_jobs / 3
    assert ranked[5000] <= 10
    site_counts = Counter(len(r.sites) for r in reqs)
    assert sum(site_counts[k] for k in (1, 2, 3)) > 0.8 * len(reqs)
    assert 0.05 * len(reqs) < site_counts[0] < 0.2 * len(reqs)
    assert all(len(r.tags) <= 4 for r in reqs) and sum(len(r.tags) <= 3 for r in reqs) > 0.99 * len(reqs)
    assert 3 <= len(target.marginal("platforms")) <= 10 and 3 <= len(target.marginal("job_types")) <= 10
    assert len(target.marginal("owner_group")) >= 3 and len(target.marginal("owner")) >= 20


def test_hashes_are_what_the_service_computes(snapshot, target):
    settings = load_settings()
    for workload, step in ((snapshot, 1), (target, 97)):
        for i in range(0, len(workload.specs), step):
            spec = dict(workload.specs[i])
            spec.pop("priority_class")  # as a user would send it: the service settles it to 0
            (settled,) = check_submission(ANONYMOUS_ADMIN, [JobSpec(**spec)])
            req = requirements_of(settled, settings)
            assert req == workload.requirements[i]
            assert req.hash == workload.hashes[i] == requirements_hash(req)
            assert requirements_json(req) == req.to_json()


@pytest.mark.parametrize("which", ["snapshot", "target"])
def test_pilots_find_eligible_task_queues(request, which, capsys):
    workload = request.getfixturevalue(which)
    resources = pilots(workload, 300, 0)
    assert all({"Site", "CPUTime", "Platform", "JobType"} <= set(r) for r in resources)
    assert all(r["JobType"] == list(workload.job_types) for r in resources)
    assert all(("Tag" in r) == bool(workload.tags) for r in resources)
    fraction = eligible_fraction(workload, resources)
    with capsys.disabled():
        print(f"\n{workload.name}: {fraction:.1%} of pilots have an eligible TQ")
    assert fraction >= 0.95


def count(conn: psycopg.Connection, table: str) -> int:
    return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def drop_smallest_task_queue(conn: psycopg.Connection) -> tuple[int, str]:
    """Remove the TQ with the fewest waiting jobs, as if drained; its id and hash."""
    gone, digest = conn.execute(
        "SELECT t.id, t.requirements_hash FROM task_queues t JOIN tq_jobs q ON q.tq_id = t.id"
        " GROUP BY t.id ORDER BY count(*), t.id LIMIT 1"
    ).fetchone()  # fmt: skip
    conn.execute("DELETE FROM tq_jobs WHERE tq_id = %s", (gone,))
    conn.execute("DELETE FROM jobs WHERE task_queue_id = %s", (gone,))
    conn.execute("DELETE FROM task_queues WHERE id = %s", (gone,))
    conn.commit()
    return gone, digest


@pytest.mark.e2e
@pytest.mark.skipif("postgresql" not in harness.BACKENDS, reason="FAIRMATCH_TEST_BACKENDS has no postgresql")
def test_a_loaded_workload_is_served(tmp_path):
    """Pilots get jobs, a submission joins its loaded TQ, top-up refills and re-creates TQs."""
    workload = lhcb(0.01, 0)
    name = harness.create_pg_database()
    url = harness.pg_url(name)
    server = None
    try:
        migrate.upgrade(url)
        report = load(url, workload, progress=None)
        assert (report["task_queues"], report["jobs"]) == (len(workload.specs), workload.total_jobs)
        with pytest.raises(ValueError, match="empty"):
            load(url, workload, progress=None)
        database = harness.TestDatabase("postgresql", url, url.replace("://", "+psycopg://", 1))
        server = harness.start_server(database, tmp_path)
        with server.client() as client:
            resources = pilots(workload, 20, 0)
            for resource in resources:  # the service sees the same eligible TQs as eligible() does
                listed = client.post("/taskqueues/matching", json=resource).json()["task_queues"]
                assert len(listed) == sum(eligible(resource, req) for req in workload.requirements)
            for resource in resources:
                r = client.post("/match", json=resource)
                assert r.status_code == 200, (resource, r.status_code, r.text)
            # a new job with a loaded TQ's requirements joins that TQ
            i = max(range(len(workload.jobs)), key=lambda k: workload.jobs[k])
            r = client.post("/jobs", json={"jobs": [workload.specs[i]]})
            assert r.status_code == 201, r.text
            (posted,) = r.json()["jobs"]
        with psycopg.connect(url) as conn:
            tq_id = conn.execute(
                "SELECT id FROM task_queues WHERE requirements_hash = %s", (workload.hashes[i],)
            ).fetchone()[0]
            assert posted["task_queue_id"] == tq_id
            assert posted["job_id"] == workload.total_jobs + 1  # the sequence was moved past the load
            texts = conn.execute(
                "SELECT DISTINCT requirements::text FROM jobs WHERE task_queue_id = %s", (tq_id,)
            ).fetchall()
            assert len(texts) == 1  # loaded and submitted jobs store the very same JSON
            assert count(conn, "tq_jobs") == workload.total_jobs + 1 - 20
            gone, digest = drop_smallest_task_queue(conn)
            waiting = count(conn, "tq_jobs")
            present = count(conn, "task_queues")  # pilots may have drained (and so removed) a TQ too
        added = top_up(url, workload, workload.total_jobs + 1000, progress=None)
        assert added["jobs"] == workload.total_jobs + 1000 - waiting
        assert added["task_queues"] == len(workload.specs) - present
        with psycopg.connect(url) as conn:
            assert count(conn, "tq_jobs") == workload.total_jobs + 1000
            back = conn.execute(
                "SELECT t.id, count(s.value) FROM task_queues t LEFT JOIN tq_sites s ON s.tq_id = t.id"
                " WHERE t.requirements_hash = %s GROUP BY t.id", (digest,)
            ).fetchone()  # fmt: skip
            assert back[0] > gone
            assert back[1] == len(workload.requirements[workload.hashes.index(digest)].sites)
    finally:
        if server is not None:
            server.stop()
        harness.drop_pg_database(name)


def test_fitting_helpers_keep_counts_exact():
    assert apportion([5, 3, 2], 7) == [4, 2, 1] and sum(apportion([1] * 9, 100, minimum=3)) == 100
    rng = random.Random(1)
    sizes = [rng.randint(1, 5000) for _ in range(400)]
    chosen = choose_subset(sizes, 150, 300_000, rng, range(400))
    assert len(set(chosen)) == 150 and abs(sum(sizes[i] for i in chosen) - 300_000) <= 300
    labels = partition(sizes, [(100, 100_000), (300, sum(sizes) - 100_000)], rng)
    assert labels.count(0) == 100 and abs(sum(s for s, q in zip(sizes, labels) if q == 0) - 100_000) < 1000


def test_copy_text_fields_are_escaped():
    assert _text(None) == r"\N"
    assert _text("a\tb\\c\nd") == "a\\tb\\\\c\\nd"
