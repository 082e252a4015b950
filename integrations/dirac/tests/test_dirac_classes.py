"""DIRAC 9's own classes, run in this process, with fairmatch behind their TaskQueueDB.

Nothing is mocked: DIRAC's JobDB, JobLoggingDB, PilotAgentsDB and SandboxMetadataDB are on
MariaDB, the task queues are in the real fairmatch service, and the sites' status comes from
DIRAC's own ResourceStatus service (`dirac-service ResourceStatus/ResourceStatus`, started here
on plain dip:// with its ResourceStatusDB): in DIRAC 9, SiteStatus, which the Matcher and the
JobScheduling executor ask, has no fallback on the configuration.

- Submission: JobDB.insertNewJobIntoDB (as JobManagerHandler calls it), then DIRAC's optimizer
  chain JobPath -> JobSanity -> JobScheduling, each executor's processTask in turn, with
  OptimizationMindHandler's own dispatch and commit (exec_dispatch, exec_taskProcessed:
  CachedJobState.commitChanges -> JobState.insertIntoTQ -> TaskQueueDB.insertJob), as the
  OptimizationMind service does between them; no service runs for it.
- Matching: Matcher.selectJob, and MatcherHandler's export_requestJob after its initializeHandler
  (DISET's transport stands aside: the handler is given the pilot's credentials directly).
- Kill and delete: StatusUtils.kill_delete_jobs.
- Concurrency and shares: Matcher.selectJob from threads sharing one TaskQueueDB.
"""

from __future__ import annotations

import math
import random
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import MYSQL, RSS_PORT, WORKDIR

SITE_A = "DIRAC.SiteA.ch"
SITE_B = "DIRAC.SiteB.ch"
LIMITED = "DIRAC.Limited.ch"  # dirac.cfg.in: RunningLimit JobType/MCSimulation = 2
BANNED = "DIRAC.Banned.ch"
SITE_STATUS = {SITE_A: "Active", SITE_B: "Active", LIMITED: "Active", BANNED: "Banned"}

PILOT_CREDENTIALS = {
    "DN": "/DC=org/DC=fairmatch/CN=pilot",
    "username": "pilotuser",
    "group": "pilot",
    "properties": ["GenericPilot", "LimitedDelegation"],
}
OWNERS = {"user": "alice", "prod": "carol"}
OPTIMIZERS = ("JobPath", "JobSanity", "JobScheduling")
# the shares test: waiting jobs per group, matches (prod's share of them: 800 +- 16.3)
SHARE_JOBS = 1000
SHARE_MATCHES = 1200


# ---------------------------------------------------------------------------------- fixtures


def _create_database(name: str, sql_file: str | None = None) -> None:
    """A new, empty database (from one of DIRAC's .sql files if named), as ci/mariadb.py does."""
    statements = f"DROP DATABASE IF EXISTS `{MYSQL.name(name)}`; CREATE DATABASE `{MYSQL.name(name)}`;\n"
    if sql_file:
        import DIRAC

        schema = (Path(DIRAC.__file__).parent / "WorkloadManagementSystem" / "DB" / sql_file).read_text()
        statements += schema.replace(f"USE {name};", f"USE `{MYSQL.name(name)}`;")
    MYSQL.run(statements)


def _drop_database(name: str) -> None:
    MYSQL.run(f"DROP DATABASE IF EXISTS `{MYSQL.name(name)}`;")


@pytest.fixture(scope="module")
def resource_status(dirac):
    """DIRAC's ResourceStatus service on RSS_PORT, knowing SITE_STATUS, for this module."""
    from DIRAC.ResourceStatusSystem.Client.ResourceStatusClient import ResourceStatusClient
    from DIRAC.ResourceStatusSystem.Client.SiteStatus import SiteStatus

    _create_database("ResourceStatusDB")  # its tables are made by the service (SQLAlchemy)
    log_path = WORKDIR / "resource-status.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "dirac-service"), "ResourceStatus/ResourceStatus"],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=WORKDIR,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", RSS_PORT), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"ResourceStatus service did not start:\n{log_path.read_text()[-5000:]}")
                time.sleep(0.2)
        client = ResourceStatusClient()
        for site, status in SITE_STATUS.items():
            result = client.addOrModifyStatusElement(
                "Site", "Status", name=site, statusType="all", status=status, elementType="Site",
                reason="test_dirac_classes", tokenOwner="rs_svc",
            )  # fmt: skip
            assert result["OK"], result
        # SiteStatus is a singleton with a cache: it must see these, whatever asked it before
        assert SiteStatus().rssCache.refreshCache()["OK"]
        assert sorted(SiteStatus().getUsableSites(list(SITE_STATUS))["Value"]) == sorted(
            site for site, status in SITE_STATUS.items() if status == "Active"
        )
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        _drop_database("ResourceStatusDB")


@pytest.fixture(scope="module")
def sandbox_db(dirac):
    """The JobSanity executor's SandboxMetadataDB."""
    _create_database("SandboxMetadataDB", "SandboxMetadataDB.sql")
    yield
    _drop_database("SandboxMetadataDB")


@pytest.fixture(scope="module", autouse=True)
def forget_this_module(fairmatch):
    """The session's service on an empty database again once this module is done: DIRAC's job
    ids start at 1 in every test, and the modules after this one read external ids 1, 2, ...
    as their own (a HandedOff job left here would answer for them)."""
    yield
    fairmatch.reset()


@pytest.fixture
def wms(dirac, dirac_databases, fairmatch_clean, resource_status, sandbox_db):
    """Empty DIRAC databases and a fairmatch with no unfinished job. DIRAC's job ids start at 1
    again: fairmatch gives an external id to a new job once its holder has finished."""
    return fairmatch_clean


@pytest.fixture
def wms_fresh(dirac, dirac_databases, fairmatch_fresh, resource_status, sandbox_db):
    """Empty DIRAC databases, a fairmatch with no job and no history at all."""
    return fairmatch_fresh


# ---------------------------------------------------------------------------------- building blocks


def make_jdl(**attrs) -> str:
    """A JDL from keyword attributes: str -> string, int -> number, list -> {strings}."""
    attrs = {"Executable": "/bin/true", "JobType": "User", "CPUTime": 3600, **attrs}
    lines = []
    for name, value in attrs.items():
        if isinstance(value, (list, tuple)):
            text = "{" + ", ".join(f'"{v}"' for v in value) + "}"
        elif isinstance(value, int):
            text = str(value)
        else:
            text = f'"{value}"'
        lines.append(f"  {name} = {text};")
    return "[\n" + "\n".join(lines) + "\n]"


def submit(jdl: str, group: str = "user", owner: str | None = None) -> int:
    """A job into DIRAC's JobDB and JobLoggingDB, as JobManagerHandler.export_submitJob puts it."""
    from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB
    from DIRAC.WorkloadManagementSystem.DB.JobLoggingDB import JobLoggingDB

    owner = owner or OWNERS[group]
    result = JobDB().insertNewJobIntoDB(
        jdl, owner, group, initialStatus="Received", initialMinorStatus="Job accepted", vo="vo"
    )
    assert result["OK"], result
    jid, record = result["JobID"], (result["Status"], result["MinorStatus"], result["TimeStamp"])
    # From concurrent threads, MariaDB can refuse JobLoggingDB's insert with a deadlock (1213):
    # retried, as DIRAC's JobState retries its own logging records (commitCache, 5 times).
    for _ in range(5):
        result = JobLoggingDB().addLoggingRecord(jid, record[0], record[1], date=record[2], source="JobManager")
        if result["OK"]:
            break
    assert result["OK"], result
    return jid


class _Mind:
    """What the OptimizationMind service does between the executors, without a service: its own
    handler's dispatch, (de)serialisation and commit, around each executor's processTask."""

    _lock = threading.Lock()
    _executors: dict | None = None

    @classmethod
    def executors(cls) -> dict:
        with cls._lock:
            if cls._executors is None:
                from DIRAC.WorkloadManagementSystem.Executor.JobPath import JobPath
                from DIRAC.WorkloadManagementSystem.Executor.JobSanity import JobSanity
                from DIRAC.WorkloadManagementSystem.Executor.JobScheduling import JobScheduling

                executors = {}
                for klass in (JobPath, JobSanity, JobScheduling):
                    name = f"WorkloadManagement/{klass.__name__}"
                    result = klass._ex_initialize(name, name)
                    assert result["OK"], result
                    executors[name] = klass()
                cls._executors = executors
            return cls._executors

    @staticmethod
    def handler():
        from DIRAC import gLogger
        from DIRAC.WorkloadManagementSystem.Service.OptimizationMindHandler import OptimizationMindHandler

        class Handler(OptimizationMindHandler):
            log = gLogger.getSubLogger("OptimizationMind")

        return Handler

    @classmethod
    def optimize(cls, jid: int) -> list[str]:
        """The job through the chain until the mind dispatches it nowhere; the executors that ran."""
        from DIRAC.WorkloadManagementSystem.Client.JobState.CachedJobState import CachedJobState

        mind = cls.handler()
        executors = cls.executors()
        ran = []
        job_state = CachedJobState(jid)
        while True:
            result = mind.exec_dispatch(jid, job_state, ran)
            assert result["OK"], result
            if not result["Value"]:
                return ran
            name = result["Value"]
            assert mind.exec_prepareToSend(jid, job_state, name)["OK"]
            stub = mind.exec_serializeTask(job_state)["Value"]
            result = executors[name]._ex_processTask(jid, stub)
            assert result["OK"], result
            task_stub, freeze_time, _fast_track = result["Value"]
            assert not freeze_time, f"job {jid} held by {name}"
            result = mind.exec_deserializeTask(task_stub)
            assert result["OK"], result
            job_state = result["Value"]
            result = mind.exec_taskProcessed(jid, job_state, name)
            assert result["OK"], result
            ran.append(name.split("/")[1])
            job_state = CachedJobState(jid)  # the mind's next round starts from the database


def submit_and_queue(jdl: str, group: str = "user") -> int:
    jid = submit(jdl, group)
    assert _Mind.optimize(jid) == list(OPTIMIZERS)
    return jid


def pilot(site: str, cpu: int = 86400, **extra) -> dict:
    """A pilot's resource description, as it sends it to requestJob."""
    return {"Site": site, "CPUTime": cpu, "GridCE": f"ce.{site.lower()}", "ReleaseVersion": "v9.1.22", **extra}


def new_matcher(tqDB=None):
    from DIRAC.WorkloadManagementSystem.Client.Matcher import Matcher

    return Matcher(tqDB=tqDB)


def select(matcher, description: dict) -> dict:
    return matcher.selectJob(dict(description), dict(PILOT_CREDENTIALS))


def job_status(jid: int) -> str:
    from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB

    return JobDB().getJobAttribute(jid, "Status")["Value"]


def fm_job(fairmatch, jid: int) -> dict:
    return fairmatch.request("GET", f"/jobs/by-external-id/{jid}")


# ---------------------------------------------------------------------------------- 1. submission


def test_submission_through_the_optimizers_queues_the_job_in_fairmatch(wms) -> None:
    from DIRAC.ConfigurationSystem.Client.Helpers.Resources import getDIRACPlatform
    from DIRAC.WorkloadManagementSystem.Client.JobState.JobState import JobState
    from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB
    from FairmatchDIRAC.WorkloadManagementSystem.DB.TaskQueueDB import TaskQueueDB as FairmatchTaskQueueDB

    jid = submit(
        make_jdl(
            JobName="submission", CPUTime=5000, Site=[SITE_A, SITE_B], BannedSites=[LIMITED],
            Platform="x86_64-el9", Priority=3, Tags=["GPU"],
        )
    )  # fmt: skip
    assert job_status(jid) == "Received"
    ran = _Mind.optimize(jid)
    assert ran == list(OPTIMIZERS)
    # JobState's TaskQueueDB, the one that took the job, is fairmatch's
    assert isinstance(JobState._JobState__db.tqDB, FairmatchTaskQueueDB)

    attrs = JobDB().getJobAttributes(jid, ["Status", "MinorStatus", "Site"])["Value"]
    assert (attrs["Status"], attrs["MinorStatus"], attrs["Site"]) == ("Waiting", "Pilot Agent Submission", "Multiple")

    job = fm_job(wms, jid)
    assert job["external_id"] == str(jid)
    assert job["status"] == "Waiting"
    assert (job["owner"], job["owner_group"], job["vo"]) == ("alice", "user", "vo")
    assert sorted(job["sites"]) == [SITE_A, SITE_B]
    assert job["banned_sites"] == [LIMITED]
    assert job["cpu_time"] == 5000
    assert job["user_priority"] == 3
    assert job["job_types"] == ["User"]
    assert job["tags"] == ["GPU"]

    tq = wms.request("GET", f"/taskqueues/{job['task_queue_id']}")
    assert (tq["owner"], tq["owner_group"], tq["jobs"]) == ("alice", "user", 1)
    assert sorted(tq["sites"]) == [SITE_A, SITE_B]
    assert tq["banned_sites"] == [LIMITED]
    # the platforms DIRAC's submission made of the JDL's (Resources/Computing/OSCompatibility)
    platforms = getDIRACPlatform(["x86_64-el9"])["Value"]
    assert sorted(job["platforms"]) == sorted(tq["platforms"]) == sorted(platforms)
    # the task queue's CPU time is the JDL's, fitted to DIRAC's segments
    assert tq["cpu_time"] == JobState._JobState__db.tqDB.fitCPUTimeToSegments(5000)
    assert tq["tags"] == ["GPU"] and tq["job_types"] == ["User"]
    # and DIRAC, asking its TaskQueueDB, finds it there
    assert JobState._JobState__db.tqDB.getTaskQueueForJob(jid) == {"OK": True, "Value": job["task_queue_id"]}


# ---------------------------------------------------------------------------------- 2. matching


def test_matcher_selects_the_job_its_jdl_allows_and_takes_it_out_for_good(wms) -> None:
    from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB
    from DIRAC.WorkloadManagementSystem.DB.JobLoggingDB import JobLoggingDB
    from DIRAC.WorkloadManagementSystem.DB.TaskQueueDB import TaskQueueDB

    at_a = submit_and_queue(make_jdl(JobName="at-a", CPUTime=5000, Site=SITE_A, Platform="x86_64-el9"))
    at_b = submit_and_queue(make_jdl(JobName="at-b", CPUTime=5000, Site=SITE_B))
    matcher = new_matcher()

    assert select(matcher, pilot(LIMITED)) == {}  # a site neither JDL allows
    assert select(matcher, pilot(SITE_A, cpu=1000)) == {}  # too little CPU time
    assert select(matcher, pilot(SITE_A, Platform="x86_64-el7")) == {}  # another platform
    assert select(matcher, pilot(BANNED)) == {}  # a banned site takes Test jobs only
    assert [fm_job(wms, jid)["status"] for jid in (at_a, at_b)] == ["Waiting", "Waiting"]

    answer = select(matcher, pilot(SITE_A, Platform="x86_64-el9", PilotReference="https://ce.sitea/pilot-1"))
    assert answer["JobID"] == at_a
    assert answer["JDL"] == JobDB().getJobJDL(at_a)["Value"]
    assert 'JobName = "at-a"' in answer["JDL"] or "JobName = at-a" in answer["JDL"]
    assert (answer["Owner"], answer["Group"]) == ("alice", "user")

    # out of the queues for good: fairmatch handed it off, DIRAC's TaskQueueDB has it nowhere
    job = fm_job(wms, at_a)
    assert job["status"] == "HandedOff"
    assert job["site"] == SITE_A
    result = TaskQueueDB().getTaskQueueForJob(at_a)
    assert not result["OK"] and result["Message"] == "Not in TaskQueues"
    attrs = JobDB().getJobAttributes(at_a, ["Status", "MinorStatus", "Site"])["Value"]
    assert (attrs["Status"], attrs["MinorStatus"], attrs["Site"]) == ("Matched", "Assigned", SITE_A)
    logged = JobLoggingDB().getJobLoggingInfo(at_a)["Value"]
    assert [(row[0], row[1], row[4]) for row in logged][-1] == ("Matched", "Assigned", "Matcher")
    assert select(matcher, pilot(SITE_A)) == {}  # nothing left there
    assert fm_job(wms, at_b)["status"] == "Waiting"


def test_matcher_service_handler_serves_requestJob(wms) -> None:
    from DIRAC import gLogger
    from DIRAC.Core.Utilities import DErrno
    from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB
    from DIRAC.WorkloadManagementSystem.Service.MatcherHandler import MatcherHandlerMixin
    from FairmatchDIRAC.WorkloadManagementSystem.DB.TaskQueueDB import TaskQueueDB as FairmatchTaskQueueDB

    class Handler(MatcherHandlerMixin):
        """MatcherHandler without DISET's transport: the caller's credentials are given."""

        log = gLogger.getSubLogger("WorkloadManagement/Matcher")

        def getRemoteCredentials(self):
            return dict(PILOT_CREDENTIALS)

    assert Handler.initializeHandler({"serviceName": "WorkloadManagement/Matcher"})["OK"]
    # ObjectLoader gave the handler fairmatch's TaskQueueDB
    assert type(Handler.taskQueueDB) is FairmatchTaskQueueDB

    jid = submit_and_queue(make_jdl(JobName="served", Site=SITE_B))
    handler = Handler()
    result = handler.export_requestJob(pilot(SITE_A))
    assert not result["OK"] and result["Errno"] == DErrno.EWMSNOMATCH
    result = handler.export_requestJob(pilot(SITE_B))
    assert result["OK"], result
    assert result["Value"]["JobID"] == jid
    assert result["Value"]["JDL"] == JobDB().getJobJDL(jid)["Value"]
    assert fm_job(wms, jid)["status"] == "HandedOff"
    assert job_status(jid) == "Matched"
    queues = Handler.export_getActiveTaskQueues()
    assert queues == {"OK": True, "Value": {}}
    result = handler.export_requestJob(pilot(SITE_B))
    assert not result["OK"] and result["Errno"] == DErrno.EWMSNOMATCH


def test_a_job_type_at_its_running_limit_is_not_matched_another_is(wms) -> None:
    from DIRAC.WorkloadManagementSystem.Client.Limiter import Limiter
    from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB

    mc = [submit_and_queue(make_jdl(JobName=f"mc-{i}", JobType="MCSimulation", Site=LIMITED)) for i in range(3)]
    matcher = new_matcher()
    first = [select(matcher, pilot(LIMITED))["JobID"] for _ in range(2)]
    assert len(set(first)) == 2 and set(first) <= set(mc)
    # the limit (2 MCSimulation jobs at LIMITED) is reached: DIRAC's Limiter says so
    assert Limiter().getNegativeCondForSite(LIMITED) == {"JobType": ["MCSimulation"]}
    (held,) = set(mc) - set(first)
    assert select(matcher, pilot(LIMITED)) == {}
    assert fm_job(wms, held)["status"] == "Waiting"

    user = submit_and_queue(make_jdl(JobName="user", JobType="User", Site=LIMITED))
    assert select(matcher, pilot(LIMITED))["JobID"] == user
    assert select(matcher, pilot(LIMITED)) == {}
    assert fm_job(wms, held)["status"] == "Waiting"
    counts = JobDB().getCounters("Jobs", ["JobType", "Status"], {"Site": LIMITED})["Value"]
    assert {(a["JobType"], a["Status"]): n for a, n in counts} == {
        ("MCSimulation", "Matched"): 2,
        ("MCSimulation", "Waiting"): 1,
        ("User", "Matched"): 1,
    }


# ---------------------------------------------------------------------------------- 3. kill, delete


def test_killed_and_deleted_jobs_leave_the_queues(wms) -> None:
    from DIRAC.WorkloadManagementSystem.DB.StatusUtils import kill_delete_jobs
    from DIRAC.WorkloadManagementSystem.DB.TaskQueueDB import TaskQueueDB
    from DIRAC.WorkloadManagementSystem.Service.JobPolicy import RIGHT_DELETE, RIGHT_KILL

    killed, deleted, kept = (submit_and_queue(make_jdl(JobName=f"j{i}", Site=SITE_A)) for i in range(3))
    tq_id = fm_job(wms, kept)["task_queue_id"]
    assert wms.request("GET", f"/taskqueues/{tq_id}")["jobs"] == 3

    assert kill_delete_jobs(RIGHT_KILL, [killed]) == {"OK": True, "Value": [killed]}
    result = kill_delete_jobs(RIGHT_DELETE, [deleted])
    assert result["OK"], result
    assert deleted in result["Value"]

    assert job_status(killed) == "Killed"
    assert job_status(deleted) == "Deleted"
    tqDB = TaskQueueDB()
    for jid in (killed, deleted):
        assert fm_job(wms, jid)["status"] not in ("Waiting", "Held", "Matched", "Running")
        result = tqDB.getTaskQueueForJob(jid)
        assert not result["OK"] and result["Message"] == "Not in TaskQueues"
    assert tqDB.getTaskQueueForJob(kept) == {"OK": True, "Value": tq_id}
    assert wms.request("GET", f"/taskqueues/{tq_id}")["jobs"] == 1
    assert select(new_matcher(), pilot(SITE_A))["JobID"] == kept
    assert select(new_matcher(), pilot(SITE_A)) == {}


# ---------------------------------------------------------------------------------- 4. concurrency


def queue_many(jdls: list[tuple[str, str]], threads: int = 8) -> list[int]:
    """(jdl, group) pairs submitted and optimised from a few threads, as several JobManager and
    executor processes would; the job ids in the order given."""
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda item: submit_and_queue(*item), jdls))


def test_concurrent_matchers_match_every_job_once_where_its_jdl_allows(wms) -> None:
    from DIRAC.WorkloadManagementSystem.Client.Matcher import Matcher
    from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB
    from DIRAC.WorkloadManagementSystem.DB.JobLoggingDB import JobLoggingDB
    from DIRAC.WorkloadManagementSystem.DB.PilotAgentsDB import PilotAgentsDB
    from DIRAC.WorkloadManagementSystem.DB.TaskQueueDB import TaskQueueDB

    started = time.monotonic()
    sites = [SITE_A, SITE_B] * 100
    jids = queue_many([(make_jdl(JobName=f"c{i}", Site=site), "user") for i, site in enumerate(sites)])
    allowed = dict(zip(jids, sites))
    submitted = time.monotonic() - started

    # one set of DB objects for all threads, as MatcherHandler's class attributes
    shared = {"tqDB": TaskQueueDB(), "jobDB": JobDB(), "jlDB": JobLoggingDB(), "pilotAgentsDB": PilotAgentsDB()}
    matched: list[tuple[int, str]] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        rng = random.Random(index)
        empty = set()
        while len(empty) < 2:
            site = rng.choice([SITE_A, SITE_B])
            answer = Matcher(**shared).selectJob(pilot(site), dict(PILOT_CREDENTIALS))
            if answer:
                empty.clear()
                with lock:
                    matched.append((answer["JobID"], site))
            else:
                empty.add(site)

    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(worker, range(8)))
    elapsed = time.monotonic() - started
    print(f"200 jobs queued in {submitted:.1f} s, matched by 8 threads in {elapsed:.1f} s")

    counts = Counter(jid for jid, _ in matched)
    assert max(counts.values()) == 1, [jid for jid, n in counts.items() if n > 1]
    assert sorted(counts) == sorted(jids)
    assert all(allowed[jid] == site for jid, site in matched)
    statuses = {fm_job(wms, jid)["status"] for jid in jids}
    assert statuses == {"HandedOff"}
    db_counts = JobDB().getCounters("Jobs", ["Status", "Site"], {})["Value"]
    assert {(a["Status"], a["Site"]): n for a, n in db_counts} == {("Matched", SITE_A): 100, ("Matched", SITE_B): 100}


# ---------------------------------------------------------------------------------- 5. shares


def queue_waiting(group: str, count: int, threads: int = 8) -> list[int]:
    """`count` jobs of a group put Waiting in DIRAC's JobDB and into the task queues by
    JobState.insertIntoTQ, the optimizers' last step, without the steps before it (no site:
    nothing for JobScheduling to add)."""
    from DIRAC.WorkloadManagementSystem.Client.JobState.JobState import JobState
    from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB

    jobDB = JobDB()
    jdl = make_jdl(JobName=f"share-{group}")

    def one(_: int) -> int:
        result = jobDB.insertNewJobIntoDB(
            jdl, OWNERS[group], group, initialStatus="Waiting", initialMinorStatus="Pilot Agent Submission", vo="vo"
        )
        assert result["OK"], result
        inserted = JobState(result["JobID"]).insertIntoTQ()
        assert inserted["OK"], inserted
        return result["JobID"]

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(count)))


def test_group_shares_from_dirac_registry_give_the_match_ratio(wms_fresh) -> None:
    from DIRAC.WorkloadManagementSystem.Client.Matcher import Matcher
    from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB
    from DIRAC.WorkloadManagementSystem.DB.JobLoggingDB import JobLoggingDB
    from DIRAC.WorkloadManagementSystem.DB.PilotAgentsDB import PilotAgentsDB
    from DIRAC.WorkloadManagementSystem.DB.TaskQueueDB import TaskQueueDB

    per_group, matches = SHARE_JOBS, SHARE_MATCHES
    started = time.monotonic()
    queued = {group: queue_waiting(group, per_group) for group in ("user", "prod")}
    submitted = time.monotonic() - started

    tqDB = TaskQueueDB()
    assert tqDB.recalculateTQSharesForAll() == {"OK": True, "Value": None}
    groups = {g["name"]: g for g in wms_fresh.request("GET", "/groups")["groups"]}
    assert float(groups["user"]["job_share"]) == 1000 and float(groups["prod"]["job_share"]) == 2000
    queues = tqDB.retrieveTaskQueues()["Value"]
    by_group = {tq["OwnerGroup"]: tq for tq in queues.values()}
    assert sorted(by_group) == ["prod", "user"] and len(queues) == 2
    assert {g: tq["Jobs"] for g, tq in by_group.items()} == {"prod": per_group, "user": per_group}
    assert by_group["prod"]["Priority"] == pytest.approx(2 * by_group["user"]["Priority"])

    shared = {"tqDB": tqDB, "jobDB": JobDB(), "jlDB": JobLoggingDB(), "pilotAgentsDB": PilotAgentsDB()}
    taken: list[tuple[str, int]] = []
    lock = threading.Lock()

    def worker(_: int) -> None:
        while True:
            with lock:
                if len(taken) + pending[0] >= matches:
                    return
                pending[0] += 1
            answer = Matcher(**shared).selectJob(pilot(SITE_A), dict(PILOT_CREDENTIALS))
            with lock:
                pending[0] -= 1
                assert answer, "no job matched while both groups have waiting ones"
                taken.append((answer["Group"], answer["JobID"]))

    pending = [0]
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(worker, range(8)))
    elapsed = time.monotonic() - started

    counts = Counter(group for group, _ in taken)
    assert sum(counts.values()) == matches
    assert all(jid in queued[group] for group, jid in taken)
    assert len({jid for _, jid in taken}) == matches
    # prod's matches ~ Binomial(matches, 2/3): within 4 standard deviations of 2/3 of them
    # (DIRAC's own SQL draw, ORDER BY RAND()/Priority, would give 3/4: 900 of 1200, far outside)
    expected = matches * 2 / 3
    tolerance = 4 * math.sqrt(matches * (2 / 3) * (1 / 3))
    print(
        f"{2 * per_group} jobs queued in {submitted:.1f} s; {matches} matches in {elapsed:.1f} s: {dict(counts)}, "
        f"prod:user = {counts['prod'] / max(counts['user'], 1):.3f}"
    )
    assert abs(counts["prod"] - expected) <= tolerance, (dict(counts), expected, tolerance)
    remaining = {
        g: tq["Jobs"] for g, tq in ((tq["OwnerGroup"], tq) for tq in tqDB.retrieveTaskQueues()["Value"].values())
    }
    assert remaining == {g: per_group - counts[g] for g in ("prod", "user")}
