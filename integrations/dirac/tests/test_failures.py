# SPDX-License-Identifier: GPL-3.0-or-later
"""What DIRAC sees when fairmatch fails: down during a submission, down during a match, a
match answer lost on the way back, an error answer. Through DIRAC's own classes (JobState,
CachedJobState, Matcher) where there is one for the step, with the real service stopped
and started again on the same database (`fairmatch.halt()` / `resume()`), a TCP proxy that
drops one answer, and a tiny HTTP server standing in for a failing fairmatch.

The Matcher's site client is the one stand-in on DIRAC's side: it calls every site usable,
so that DIRAC's ResourceStatus service (test_dirac_classes.py runs it) is not needed here.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
import time

import pytest

pytestmark = pytest.mark.usefixtures("dirac")

SITE = "DIRAC.SiteA.ch"
PILOT_CREDENTIALS = {
    "DN": "/DC=org/DC=fairmatch/CN=pilot",
    "username": "pilotuser",
    "group": "pilot",
    "properties": ["GenericPilot", "LimitedDelegation"],
}
RESOURCE = {"Site": SITE, "CPUTime": 86400, "GridCE": "ce1.sitea.ch", "ReleaseVersion": "v9.1.22"}
JDL = '[ Executable = "/bin/true"; JobType = "User"; CPUTime = 3600; Priority = 3; ]'
# DIRAC's calls, each with the extension's retries, against a service that is down: well within
BOUND_SECONDS = 15


def ok(result):
    assert result["OK"], result.get("Message")
    return result["Value"]


# ---------------------------------------------------------------------------------- helpers


def submit() -> int:
    """A job in DIRAC's JobDB and JobLoggingDB, as JobManagerHandler.export_submitJob puts it."""
    from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB
    from DIRAC.WorkloadManagementSystem.DB.JobLoggingDB import JobLoggingDB

    result = JobDB().insertNewJobIntoDB(
        JDL, "alice", "user", initialStatus="Received", initialMinorStatus="Job accepted", vo="vo"
    )
    assert result["OK"], result
    ok(JobLoggingDB().addLoggingRecord(result["JobID"], result["Status"], result["MinorStatus"], source="JobManager"))
    return result["JobID"]


def job_attributes(jid: int) -> dict:
    from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB

    return ok(JobDB().getJobAttributes(jid, ["Status", "MinorStatus", "ApplicationStatus", "RescheduleCounter"]))


def waiting_job() -> int:
    """A job as the optimizers leave it: Waiting in the JobDB, inserted into the task queues by
    JobState.insertIntoTQ (what the OptimizationMind's commit calls)."""
    from DIRAC.WorkloadManagementSystem.Client.JobState.JobState import JobState
    from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB

    jid = submit()
    ok(JobDB().setJobAttributes(jid, ["Status", "MinorStatus"], ["Waiting", "Pilot Agent Submission"]))
    ok(JobState(jid).insertIntoTQ())
    return jid


class _EverySiteUsable:
    """Stands in for DIRAC's SiteStatus in the Matcher (its ResourceStatus is not tested here)."""

    def getUsableSites(self, siteNames):
        from DIRAC import S_OK

        return S_OK([siteNames] if isinstance(siteNames, str) else list(siteNames))


def matcher(tqDB=None):
    from DIRAC.WorkloadManagementSystem.Client.Matcher import Matcher

    m = Matcher(tqDB=tqDB)
    m.siteClient = _EverySiteUsable()
    return m


def fm_job(fairmatch, jid: int) -> dict:
    return fairmatch.request("GET", f"/jobs/by-external-id/{jid}")


def match_events(fairmatch, jid: int) -> list[dict]:
    history = fairmatch.request("GET", f"/jobs/{fm_job(fairmatch, jid)['job_id']}/history")
    return [event for event in history["events"] if event["source"] == "match"]


def extension_tqdb(url: str, monkeypatch):
    """The extension's TaskQueueDB talking to `url` (FAIRMATCH_URL is read on its first call)."""
    from FairmatchDIRAC.WorkloadManagementSystem.DB.TaskQueueDB import TaskQueueDB

    monkeypatch.setenv("FAIRMATCH_URL", url)
    return TaskQueueDB()


@pytest.fixture
def service(dirac_databases, fairmatch_clean):
    """Empty DIRAC databases; fairmatch up, with no unfinished job; and up again after the test,
    whatever the test did to it."""
    yield fairmatch_clean
    if fairmatch_clean.process is None or fairmatch_clean.process.poll() is not None:
        fairmatch_clean.resume()


@pytest.fixture
def down(service):
    """fairmatch stopped (its database kept) for the test's `with down:` block."""

    class Down:
        def __enter__(self):
            service.halt()
            return service

        def __exit__(self, *exc):
            service.resume()

    return Down()


# ---------------------------------------------------------------------------------- (a) submission


def test_a_submission_while_fairmatch_is_down_fails_naming_it_and_the_job_stays_in_dirac(service, down):
    """JobState.insertIntoTQ answers S_ERROR naming fairmatch in bounded time. What DIRAC then
    does, as the OptimizationMind commits the last optimizer's work (CachedJobState.commitChanges
    after JobScheduling's setNextOptimizer: Waiting/Pilot Agent Submission, insertIntoTQ): the
    insertion fails, DIRAC tries JobState.rescheduleJob five times, which needs the task queues
    too (TaskQueueDB.deleteJob) and fails as well; the job stays in the JobDB, Waiting, in no
    task queue, until it is rescheduled (an operator's dirac-admin-reschedule-jobs) once
    fairmatch is back. DIRAC's MySQL TaskQueueDB down does the same."""
    from DIRAC.WorkloadManagementSystem.Client.JobState.CachedJobState import CachedJobState
    from DIRAC.WorkloadManagementSystem.Client.JobState.JobState import JobState
    from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB

    jid = submit()
    ok(JobDB().setJobAttributes(jid, ["Status", "MinorStatus"], ["Checking", "JobScheduling"]))
    with down as fairmatch:
        started = time.monotonic()
        result = JobState(jid).insertIntoTQ()
        elapsed = time.monotonic() - started
        assert not result["OK"]
        assert result["Message"].startswith("Cannot insert in task queue: fairmatch: POST /api/v1/jobs failed")
        assert "connection refused" in result["Message"] and fairmatch.url in result["Message"]
        assert elapsed < BOUND_SECONDS, elapsed
        assert job_attributes(jid)["Status"] == "Checking"  # untouched

        # the OptimizationMind's commit of JobScheduling's last step
        state = CachedJobState(jid)
        ok(state.setStatus("Waiting", "Pilot Agent Submission", "Unknown", source="JobScheduling"))
        ok(state.insertIntoTQ())
        started = time.monotonic()
        result = state.commitChanges()
        elapsed = time.monotonic() - started
        assert not result["OK"] and "fairmatch" in result["Message"], result
        assert elapsed < 3 * BOUND_SECONDS, elapsed
        attrs = job_attributes(jid)
        assert (attrs["Status"], attrs["MinorStatus"], attrs["RescheduleCounter"]) == (
            "Waiting",
            "Pilot Agent Submission",
            0,
        )
        # rescheduling, as DIRAC tried it, fails while fairmatch is down
        result = JobState(jid).rescheduleJob()
        assert not result["OK"] and "Cannot remove from TQ" in result["Message"] and "fairmatch" in result["Message"]

    # fairmatch is back: the job is in no task queue (JobState.insertIntoTQ removed what it might
    # have left), so no pilot will get it ...
    from FairmatchDIRAC.WorkloadManagementSystem.DB.TaskQueueDB import TaskQueueDB

    result = TaskQueueDB().getTaskQueueForJob(jid)
    assert not result["OK"] and result["Message"] == "Not in TaskQueues"
    # ... until DIRAC reschedules it. JobDB.rescheduleJob itself needs DIRAC's JobParametersDB
    # (OpenSearch), which this harness does not run; its task-queue half works again
    assert ok(TaskQueueDB().deleteJob(jid)) is False
    # and the optimizers' commit, run again, now queues the job
    state = CachedJobState(jid)
    ok(state.setStatus("Waiting", "Pilot Agent Submission", "Unknown", source="JobScheduling"))
    ok(state.insertIntoTQ())
    ok(state.commitChanges())
    job = fm_job(service, jid)
    assert (job["status"], job["user_priority"], job["owner"], job["cpu_time"]) == ("Waiting", 3, "alice", 3600)


# ---------------------------------------------------------------------------------- (b) match


def test_a_match_while_fairmatch_is_down_fails_and_loses_no_job(service, down):
    jid = waiting_job()
    assert fm_job(service, jid)["status"] == "Waiting"
    m = matcher()
    with down:
        started = time.monotonic()
        with pytest.raises(RuntimeError) as failure:
            m.selectJob(dict(RESOURCE), dict(PILOT_CREDENTIALS))
        assert time.monotonic() - started < BOUND_SECONDS
        assert "fairmatch: POST /api/v1/match failed: connection refused" in str(failure.value)
        assert job_attributes(jid)["Status"] == "Waiting"
    # the job is still waiting in fairmatch (same database), matched by nobody
    assert fm_job(service, jid)["status"] == "Waiting"
    assert match_events(service, jid) == []
    # matching resumes, with the same Matcher: the job is matched, once
    answer = m.selectJob(dict(RESOURCE), dict(PILOT_CREDENTIALS))
    assert answer["JobID"] == jid
    assert job_attributes(jid)["Status"] == "Matched"
    assert m.selectJob(dict(RESOURCE), dict(PILOT_CREDENTIALS)) == {}
    assert fm_job(service, jid)["status"] == "HandedOff"
    assert len(match_events(service, jid)) == 1


# ---------------------------------------------------------------------------------- (c) lost answer


class AnswerDroppingProxy:
    """A TCP proxy to fairmatch that drops the answer to the first request it relays: it sends
    the request on, reads fairmatch's whole answer (kept in `dropped`), then closes the client's
    connection without a byte. Later connections are relayed as they are."""

    def __init__(self, upstream_port: int):
        self.upstream = ("127.0.0.1", upstream_port)
        self.dropped: list[bytes] = []
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self._stop = True
        self.listener.close()

    def _accept(self):
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            first = self.connections == 1
            threading.Thread(target=self._drop if first else self._relay, args=(client,), daemon=True).start()

    @staticmethod
    def _read_message(sock) -> bytes:
        """One HTTP message with a Content-Length (both ends here send one)."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return head + b"\r\n\r\n" + body

    def _drop(self, client):
        with client, socket.create_connection(self.upstream) as upstream:
            upstream.sendall(self._read_message(client))
            self.dropped.append(self._read_message(upstream))
        # the client's connection closes here, its answer never sent

    def _relay(self, client):
        upstream = socket.create_connection(self.upstream)

        def pipe(src, dst):
            try:
                while chunk := src.recv(65536):
                    dst.sendall(chunk)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)

        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        pipe(client, upstream)


def test_a_lost_match_answer_is_asked_again_and_gets_the_same_job(service, monkeypatch):
    """The extension's POST /match carries a request_id and is sent again when its answer is
    lost: fairmatch answers the retry with the job the first attempt took, so no job is taken
    and lost. Two jobs wait; after the match, one is handed off (the one the lost answer named)
    and the other still waits."""
    from conftest import PORT

    first, second = waiting_job(), waiting_job()
    proxy = AnswerDroppingProxy(PORT)
    try:
        tqdb = extension_tqdb(proxy.url, monkeypatch)
        answer = ok(tqdb.matchAndGetJob({"CPUTime": 86400, "Site": SITE, "OwnerGroup": ["user"]}))
    finally:
        proxy.close()
    assert len(proxy.dropped) == 1 and proxy.connections == 2
    lost = json.loads(proxy.dropped[0].partition(b"\r\n\r\n")[2])
    assert answer["matchFound"] and answer["jobId"] == int(lost["external_id"])
    taken = answer["jobId"]
    other = second if taken == first else first
    assert fm_job(service, taken)["status"] == "HandedOff"
    assert len(match_events(service, taken)) == 1
    assert fm_job(service, other)["status"] == "Waiting"


def test_the_same_request_id_twice_takes_one_job(service):
    """The same, at the API's level: the extension's FairmatchAPI sends one match twice."""
    from FairmatchDIRAC.api import Endpoint, FairmatchAPI

    jobs = {waiting_job(), waiting_job()}
    api = FairmatchAPI(Endpoint(url=service.url))
    body = {"CPUTime": 86400, "Site": SITE, "OwnerGroup": ["user"], "handoff": True, "unstated_fields": "dirac"}
    body["request_id"] = "dirac-test-same-request"
    one = ok(api.call("POST", "/match", json=body, expect=(200, 204)))
    two = ok(api.call("POST", "/match", json=body, expect=(200, 204)))
    assert one[0] == two[0] == 200
    assert one[1]["job_id"] == two[1]["job_id"] and int(one[1]["external_id"]) in jobs
    [other] = jobs - {int(one[1]["external_id"])}
    assert fm_job(service, other)["status"] == "Waiting"


# ---------------------------------------------------------------------------------- (d) error answers


class FailingService:
    """A tiny HTTP server standing in for fairmatch: every request answers `status`."""

    def __init__(self, status: int, body: bytes, content_type: str):
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                outer.requests.append(f"{self.command} {self.path}")
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def unavailable():
    stub = FailingService(
        503, json.dumps({"title": "Service Unavailable", "detail": "database unreachable"}).encode(), "application/json"
    )
    yield stub
    stub.close()


def test_a_503_answer_is_an_error_naming_fairmatch(dirac_databases, unavailable, monkeypatch):
    tqdb = extension_tqdb(unavailable.url, monkeypatch)
    started = time.monotonic()
    result = tqdb.insertJob(42, {"Owner": "alice", "OwnerGroup": "user", "CPUTime": 3600}, 1)
    assert time.monotonic() - started < BOUND_SECONDS
    assert not result["OK"]
    assert result["Message"] == (
        "fairmatch: POST /api/v1/jobs failed: 503 Service Unavailable: database unreachable, after 3 attempts "
        f"({unavailable.url})"
    )
    assert unavailable.requests == ["POST /api/v1/jobs"] * 3  # the retries of an idempotent call
    for call in (
        lambda: tqdb.matchAndGetJob({"CPUTime": 86400, "Site": SITE}),
        lambda: tqdb.deleteJob(42),
        lambda: tqdb.getTaskQueueForJob(42),
        lambda: tqdb.retrieveTaskQueues(),
        lambda: tqdb.recalculateTQSharesForAll(),
    ):
        result = call()
        assert not result["OK"] and "fairmatch" in result["Message"] and "503" in result["Message"], result

    # DIRAC's Matcher with that TaskQueueDB: the pilot's request fails, naming fairmatch
    jid = submit()
    with pytest.raises(RuntimeError, match=r"^fairmatch: POST /api/v1/match failed: 503 Service Unavailable"):
        matcher(tqdb).selectJob(dict(RESOURCE), dict(PILOT_CREDENTIALS))
    assert job_attributes(jid)["Status"] == "Received"


def test_another_server_s_404_page_is_not_taken_for_no_such_job(dirac, monkeypatch):
    """A 404 page that is not fairmatch's (a proxy's, a wrong URL) must not pass for "the job is
    in no task queue": deleteJob would then answer S_OK(False) and DIRAC go on as if it were."""
    stub = FailingService(404, b"<html><body>Not Found</body></html>", "text/html")
    try:
        tqdb = extension_tqdb(stub.url, monkeypatch)
        result = tqdb.deleteJob(42)
        assert not result["OK"] and "not an answer of fairmatch's" in result["Message"], result
        result = tqdb.getTaskQueueForJob(42)
        assert not result["OK"] and "not an answer of fairmatch's" in result["Message"], result
    finally:
        stub.close()
