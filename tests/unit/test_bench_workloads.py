"""Benchmark workloads: the LHCb snapshot's marginals, the DiracX shape, hashes
the service agrees with, pilots that find work, and a load a real server serves.

Tolerance for the LHCb marginals: every value's TQ count is exact, and its
job total is within 1 % of the published one or 50 jobs, whichever is
larger (the per-TQ file and the marginal files were read at slightly
different moments: their totals differ by tens of jobs).

The snapshot read here is the copy shipped in tests/data/workloads (checked
against shared/workloads beside the repository when that is there).
"""

from __future__ import annotations

import filecmp
import itertools
import os
import random
import time
from collections import Counter

import psycopg
import pytest

from bench import workload_lhcb
from bench.workload_fit import apportion, choose_subset, partition
from bench.workload_lhcb import SNAPSHOT_NAME, read_csv
from bench.workload_load import _runs, _text, top_up_mix
from bench.workload_model import (
    USER_PRIORITY_MIX,
    LevelSplit,
    parse_mix,
    priority_mix,
)  # fmt: skip
from bench.workloads import catalog_of, diracx, eligible_count, eligible_fraction, load, pilots, top_up
from fairmatch.auth.tokens import ANONYMOUS_ADMIN
from fairmatch.db import migrate
from fairmatch.jobs.models import JobSpec
from fairmatch.jobs.priority_classes import check_submission
from fairmatch.jobs.submission import requirements_of
from fairmatch.settings import load_settings
from fairmatch.taskqueues.requirements import real_priority
from tests import conftest as harness  # its TestDatabase, imported by name, would be collected as a test class

RELATIVE, ABSOLUTE = 0.01, 50
SNAPSHOT = harness.REPO / "tests" / "data" / "workloads" / SNAPSHOT_NAME


def lhcb(scale: float = 1.0, seed: int = 0, **options):
    """The LHCb workload built from the snapshot shipped with the tests."""
    return workload_lhcb.lhcb(scale, seed, directory=SNAPSHOT, **options)


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


def test_diracx_gives_a_fifth_of_its_queues_a_ram_minimum_and_its_pilots_a_max_ram(target, snapshot):
    """The selection benchmark measures the RAM condition at 10,000 TQs: a share of the
    TQs needs memory, every pilot states its MaxRAM, and the condition rejects queues."""
    minima = Counter(r.amount("min_ram_mb") for r in target.requirements)
    assert set(minima) == {0, 2000, 4000, 8000, 16000}
    assert 0.17 < 1 - minima[0] / len(target.requirements) < 0.23  # 20 % of 10,000: sigma 0.4 %
    assert all(r.amount("max_ram_mb") == 2 * r.amount("min_ram_mb") for r in target.requirements)
    resources = pilots(target, 300, 0)
    assert all(isinstance(r["MaxRAM"], int) for r in resources)
    assert {r["MaxRAM"] for r in resources} == {2000, 4000, 8000, 16000, 32000}
    # each pilot reaches the minimum of the TQ it was drawn for; smaller slots lose the bigger TQs
    catalog = catalog_of(target)
    with_ram = [count for r in resources if (count := eligible_count(catalog, r))]
    without_ram = [eligible_count(catalog, {k: v for k, v in r.items() if k != "MaxRAM"}) for r in resources]
    assert len(with_ram) >= 0.95 * len(resources)
    assert sum(with_ram) < sum(without_ram)
    # the LHCb snapshot has no RAM ranges: its pilots state no MaxRAM
    assert all(r.amount("min_ram_mb") == 0 for r in snapshot.requirements)
    assert all("MaxRAM" not in r for r in pilots(snapshot, 50, 0))


def test_hashes_are_what_the_service_computes(snapshot, target):
    settings = load_settings()
    for workload, step in ((snapshot, 1), (target, 97)):
        for i in range(0, len(workload.specs), step):
            spec = dict(workload.specs[i])
            spec.pop("priority_class")  # as a user would send it: the service settles it to 0
            (settled,) = check_submission(ANONYMOUS_ADMIN, [JobSpec(**spec)])
            req = requirements_of(settled, settings.jobs, settings.taskqueues.cpu_buckets)
            assert req == workload.requirements[i]
            assert req.hash == workload.hashes[i]


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


def check_levels(url: str, waiting: int) -> None:
    """The waiting jobs follow the default mix (within a job per level, a few
    for other writers), their real priority is the service's, jobs and tq_jobs
    agree, and the TQs hold several levels."""
    with psycopg.connect(url) as conn:
        by_level = dict(conn.execute(
            "SELECT q.user_priority, count(*) FROM tq_jobs q JOIN jobs j ON j.id = q.job_id"
            " WHERE j.user_priority = q.user_priority GROUP BY q.user_priority"
        ).fetchall())  # fmt: skip
        assert sum(by_level.values()) == count(conn, "tq_jobs") == waiting
        for p, share in USER_PRIORITY_MIX:
            assert abs(by_level[p] - share * waiting) <= 3, by_level
        pairs = conn.execute("SELECT DISTINCT user_priority, real_priority FROM tq_jobs").fetchall()
        assert sorted(pairs) == [(p, real_priority(p)) for p, _ in USER_PRIORITY_MIX]
        spread = conn.execute(
            "SELECT count(*) FILTER (WHERE levels >= 2), count(*) FROM"
            " (SELECT count(DISTINCT real_priority) AS levels FROM tq_jobs GROUP BY tq_id HAVING count(*) >= 10) s"
        ).fetchone()  # fmt: skip
        assert spread[0] == spread[1] > 0
        stored = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'task_queues'"
            " AND column_name = 'levels'"
        ).fetchone()  # fmt: skip
        if stored:  # the schema keeps per-level counts: at least the waiting jobs' levels are listed
            for tq, levels in conn.execute(
                "SELECT t.id, t.levels FROM task_queues t WHERE EXISTS (SELECT FROM tq_jobs q WHERE q.tq_id = t.id)"
            ).fetchall():  # fmt: skip
                held = dict(conn.execute(
                    "SELECT real_priority, count(*) FROM tq_jobs WHERE tq_id = %s GROUP BY 1", (tq,)
                ).fetchall())  # fmt: skip
                listed = {float(p): n for p, n in levels}
                assert set(held) <= set(listed) and all(listed[p] >= n for p, n in held.items()), (tq, levels)


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
        check_levels(url, workload.total_jobs)
        with pytest.raises(ValueError, match="empty"):
            load(url, workload, progress=None)
        database = harness.TestDatabase("postgresql", url, url.replace("://", "+psycopg://", 1))
        server = harness.start_server(database, tmp_path)
        with server.client() as client:
            # the server's first scheduled priority run recounts every level; what follows checks
            # the loader's bookkeeping against the submission's own counts, so it waits for that
            # run to be over (the next one is an interval away) instead of racing it
            deadline = time.monotonic() + 30
            while not (client.get("/status").json().get("last_priority_run") or {}).get("finished_at"):
                assert time.monotonic() < deadline, "no priority run within 30 s"
                time.sleep(0.1)
            resources = pilots(workload, 20, 0)
            catalog = catalog_of(workload)
            for resource in resources:  # the service, on the loaded database, lists what the workload's TQs give
                listed = client.post("/taskqueues/matching", json=resource).json()["task_queues"]
                assert len(listed) == eligible_count(catalog, resource)
            for resource in resources:
                r = client.post("/match", json=resource)
                assert r.status_code == 200, (resource, r.status_code, r.text)
            # a new job with a loaded TQ's requirements joins that TQ
            i = max(range(len(workload.jobs)), key=lambda k: workload.jobs[k])
            r = client.post("/jobs", json={"jobs": [workload.specs[i]]})
            assert r.status_code == 201, r.text
            (posted,) = r.json()["jobs"]
        # the loader's own bookkeeping is checked from here on: a priority run of the server
        # recounting levels while the top-up writes them would blur what is checked
        server.stop()
        server = None
        with psycopg.connect(url) as conn:
            tq_id = conn.execute(
                "SELECT id FROM task_queues WHERE requirements_hash = %s", (workload.hashes[i],)
            ).fetchone()[0]
            assert posted["task_queue_id"] == tq_id
            assert posted["job_id"] == workload.total_jobs + 1  # the sequence was moved past the load
            texts = conn.execute(
                "SELECT DISTINCT s.requirements::text FROM jobs j JOIN job_specs s ON s.job_id = j.id"
                " WHERE j.task_queue_id = %s",
                (tq_id,),
            ).fetchall()
            assert len(texts) == 1  # loaded and submitted jobs store the very same JSON
            assert count(conn, "tq_jobs") == workload.total_jobs + 1 - 20
            gone, digest = drop_smallest_task_queue(conn)
            waiting = count(conn, "tq_jobs")
            present = count(conn, "task_queues")  # pilots may have drained (and so removed) a TQ too
        added = top_up(url, workload, workload.total_jobs + 1000, progress=None)
        assert added["jobs"] == workload.total_jobs + 1000 - waiting
        assert added["task_queues"] == len(workload.specs) - present
        check_levels(url, workload.total_jobs + 1000)
        with psycopg.connect(url) as conn:
            assert count(conn, "tq_jobs") == workload.total_jobs + 1000
            back = conn.execute(
                "SELECT id, cardinality(sites) FROM task_queues WHERE requirements_hash = %s", (digest,)
            ).fetchone()
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


# ------------------------------------------------------------- where the data is


def test_the_shipped_snapshot_is_the_shared_one():
    shared = workload_lhcb.workloads_dir() / SNAPSHOT_NAME
    if not shared.is_dir():
        pytest.skip(f"{shared} is not there")
    names = sorted(p.name for p in shared.iterdir())
    assert names == sorted(p.name for p in SNAPSHOT.iterdir())
    _, mismatch, errors = filecmp.cmpfiles(shared, SNAPSHOT, names, shallow=False)
    assert mismatch == errors == []


def test_the_workloads_are_found_beside_the_repository_or_where_the_variable_says(monkeypatch, tmp_path):
    monkeypatch.delenv("FAIRMATCH_WORKLOADS_DIR", raising=False)
    assert workload_lhcb.workloads_dir() == harness.REPO.parent / "shared" / "workloads"
    monkeypatch.setenv("FAIRMATCH_WORKLOADS_DIR", str(tmp_path))
    assert workload_lhcb.workloads_dir() == tmp_path
    with pytest.raises(FileNotFoundError, match="FAIRMATCH_WORKLOADS_DIR"):
        workload_lhcb.snapshot_dir()
    os.symlink(SNAPSHOT, tmp_path / SNAPSHOT_NAME)
    assert workload_lhcb.snapshot_dir() == tmp_path / SNAPSHOT_NAME
    assert workload_lhcb.lhcb(0.01).hashes == lhcb(0.01).hashes


# ------------------------------------------------------------ user-priority levels


def test_a_mix_is_checked_and_normalised():
    assert priority_mix({3: 15, 1: 60, 2: 25}) == ((1, 0.6), (2, 0.25), (3, 0.15))
    assert parse_mix("1:60,2:25,3:15") == priority_mix(USER_PRIORITY_MIX)
    assert parse_mix("5:1") == ((5, 1.0),)
    for bad in ("", "1:60,1:40", "11:1", "1:0", "1=60", "a:1"):
        with pytest.raises(ValueError):
            parse_mix(bad)


def test_levels_split_every_run_and_keep_the_mix_overall():
    split = LevelSplit(USER_PRIORITY_MIX)
    rng = random.Random(3)
    total = Counter()
    for _ in range(20_000):
        n = rng.choice([1, 2, 3, 7, 40, 1000, rng.randint(1, 200)])
        got = dict(split.split(n))
        assert sum(got.values()) == n and all(k > 0 for k in got.values())
        for p, share in USER_PRIORITY_MIX:
            assert abs(got.get(p, 0) - share * n) < 2
        total.update(got)
    for p, share in USER_PRIORITY_MIX:
        assert abs(total[p] - share * split.total) <= 1
    # one job at a time: the levels take turns, in the mix's proportions
    ones = LevelSplit(USER_PRIORITY_MIX)
    assert Counter(p for _ in range(100) for p, _ in ones.split(1)) == {1: 60, 2: 25, 3: 15}


@pytest.mark.parametrize("which", ["snapshot", "target"])
def test_loaded_runs_give_every_tq_several_levels(request, which):
    workload = request.getfixturevalue(which)
    assert workload.user_priorities == USER_PRIORITY_MIX
    runs = _runs(workload.jobs, 101, workload.user_priorities)
    # job ids follow on without a gap, and every TQ gets exactly its jobs
    ids = sorted((start, n) for _, start, n, _ in runs)
    assert ids[0][0] == 101 and all(a + n == b for (a, n), (b, _) in itertools.pairwise(ids))
    per_tq: dict[int, Counter] = {}
    for i, _, n, p in runs:
        per_tq.setdefault(i, Counter())[p] += n
    assert [sum(per_tq[i].values()) for i in range(len(workload.jobs))] == list(workload.jobs)
    overall = Counter()
    for i, levels in per_tq.items():
        overall.update(levels)
        n = workload.jobs[i]
        if n >= 10:
            assert len(levels) >= 2, (i, n, levels)
        if n >= 30:
            assert set(levels) == {1, 2, 3}, (i, n, levels)
            assert abs(levels[1] / n - 0.6) < 0.1
    for p, share in USER_PRIORITY_MIX:
        assert abs(overall[p] - share * workload.total_jobs) <= 1


def test_a_mix_is_configurable_per_workload():
    mix = ((0, 0.1), (1, 0.5), (5, 0.4))
    workload = diracx(20_000, 0, n_tqs=1000, user_priorities=mix)
    assert workload.user_priorities == mix
    assert lhcb(0.01, user_priorities={1: 1, 2: 1}).user_priorities == ((1, 0.5), (2, 0.5))
    with pytest.raises(ValueError):
        diracx(20_000, 0, n_tqs=1000, user_priorities={})


def test_a_top_up_restores_the_mix():
    # matching took more jobs of the higher levels: the top-up gives them more
    mix = top_up_mix(USER_PRIORITY_MIX, {1: 5_900, 2: 2_300, 3: 1_300}, 10_000)
    assert dict(mix) == pytest.approx({1: 100 / 500, 2: 200 / 500, 3: 200 / 500})
    # nothing lacking (or a level outside the mix): the mix itself
    assert top_up_mix(USER_PRIORITY_MIX, {1: 6_000, 2: 2_500, 3: 1_500}, 10_000) == USER_PRIORITY_MIX
    mix = top_up_mix(USER_PRIORITY_MIX, {7: 50, 1: 5_990, 2: 2_500, 3: 1_500}, 10_050)
    assert dict(mix) == pytest.approx({1: 40 / 60, 2: 12.5 / 60, 3: 7.5 / 60})


@pytest.mark.e2e
@pytest.mark.skipif("postgresql" not in harness.BACKENDS, reason="FAIRMATCH_TEST_BACKENDS has no postgresql")
def test_a_loaded_diracx_workload_keeps_its_ram_ranges(tmp_path):
    """The loader writes the RAM ranges as the service does: the catalog a server reads gives
    each pilot the queues the workload's own catalog gives, and a job with a loaded TQ's RAM
    range joins it."""
    workload = diracx(3_000, 0, n_tqs=300)
    assert any(r.amount("min_ram_mb") for r in workload.requirements)
    name = harness.create_pg_database()
    url = harness.pg_url(name)
    server = None
    try:
        migrate.upgrade(url)
        load(url, workload, progress=None)
        with psycopg.connect(url) as conn:
            stored = dict(conn.execute("SELECT requirements_hash, min_ram_mb FROM task_queues").fetchall())
        assert stored == {h: r.amount("min_ram_mb") for h, r in zip(workload.hashes, workload.requirements)}
        database = harness.TestDatabase("postgresql", url, url.replace("://", "+psycopg://", 1))
        server = harness.start_server(database, tmp_path)
        with server.client() as client:
            catalog = catalog_of(workload)
            for resource in pilots(workload, 30, 0):
                listed = client.post("/taskqueues/matching", json=resource).json()["task_queues"]
                assert len(listed) == eligible_count(catalog, resource)
            i = next(k for k, r in enumerate(workload.requirements) if r.amount("min_ram_mb"))
            r = client.post("/jobs", json={"jobs": [workload.specs[i]]})
            assert r.status_code == 201, r.text
            shown = client.get(f"/taskqueues/{r.json()['jobs'][0]['task_queue_id']}").json()
            assert shown["min_ram_mb"] == workload.requirements[i].amount("min_ram_mb")
            with psycopg.connect(url) as conn:
                (digest,) = conn.execute(
                    "SELECT requirements_hash FROM task_queues WHERE id = %s", (shown["task_queue_id"],)
                ).fetchone()
            assert digest == workload.hashes[i]
    finally:
        if server is not None:
            server.stop()
        harness.drop_pg_database(name)
