# SPDX-License-Identifier: GPL-3.0-or-later
"""The extension's TaskQueueDB keeps DIRAC's contract, against a real fairmatch.

The cases are those DIRAC's own integration test of its TaskQueueDB walks through
(tests/Integration/WorkloadManagementSystem/Test_TaskQueueDB.py in DIRAC's
repository: put and remove, sites, banned sites, platforms, tags, the lone queue's
priority), written here as this project's tests. `test_dirac_integration_file`
runs DIRAC's own file as well when a DIRAC source tree is named by DIRAC_SOURCE.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("dirac")

OWNER = {"Owner": "userName", "OwnerGroup": "myGroup"}


@pytest.fixture
def tqdb(fairmatch_fresh):
    """DIRAC's TaskQueueDB name, which the extension rebinds, on an empty service."""
    import FairmatchDIRAC
    from DIRAC.WorkloadManagementSystem.DB import TaskQueueDB as module

    FairmatchDIRAC.extension_metadata()
    return module.TaskQueueDB()


def ok(result):
    assert result["OK"], result.get("Message")
    return result["Value"]


def tq_of(tqdb, job_id: int) -> int:
    return ok(tqdb.getTaskQueueForJob(job_id))


def matched(tqdb, match: dict, n: int = 0) -> set[int]:
    return {int(row[0]) for row in ok(tqdb.matchAndGetTaskQueue({"CPUTime": 50000, **match}, numQueuesToGet=n))}


def test_the_class_is_the_extension_s(tqdb):
    from FairmatchDIRAC.WorkloadManagementSystem.DB.TaskQueueDB import TaskQueueDB

    assert isinstance(tqdb, TaskQueueDB)


def test_put_and_remove(tqdb):
    ok(tqdb.insertJob(123, {**OWNER, "CPUTime": 50000}, 10))
    tq = tq_of(tqdb, 123)
    ok(tqdb.insertJob(125, {**OWNER, "CPUTime": 50000}, 10))
    assert tq_of(tqdb, 125) == tq
    assert ok(tqdb.deleteTaskQueueIfEmpty(tq)) is False  # two jobs in it
    [info] = ok(tqdb.retrieveTaskQueues()).values()
    assert info == {**OWNER, "CPUTime": 86400, "Jobs": 2, "Priority": 1000.0}
    assert ok(tqdb.deleteJob(123)) is True
    assert ok(tqdb.deleteJob(123)) is False
    assert not tqdb.getTaskQueueForJob(123)["OK"]
    assert ok(tqdb.deleteJob(125)) is True
    tqdb.deleteTaskQueueIfEmpty(tq)
    ok(tqdb.cleanOrphanedTaskQueues())
    assert ok(tqdb.retrieveTaskQueues()) == {}
    assert ok(tqdb.findOrphanJobs()) == []
    ok(tqdb.enableAllTaskQueues())


def test_sites_and_a_job_inserted_again_moves(tqdb):
    cern, in2p3, both = ["LCG.CERN.ch"], ["CLOUD.IN2P3.fr"], ["LCG.CERN.ch", "CLOUD.IN2P3.fr"]
    ok(tqdb.insertJob(201, {**OWNER, "CPUTime": 5000, "Sites": cern}, 10))
    ok(tqdb.insertJob(2011, {**OWNER, "CPUTime": 5000, "Sites": cern}, 10))
    ok(tqdb.insertJob(203, {**OWNER, "CPUTime": 5000, "Sites": in2p3}, 10))
    tq_cern, tq_in2p3 = tq_of(tqdb, 201), tq_of(tqdb, 203)
    assert tq_of(tqdb, 2011) == tq_cern
    ok(tqdb.insertJob(203, {**OWNER, "CPUTime": 5000, "Sites": both}, 10))  # moves to a queue of its new requirements
    tq_both = tq_of(tqdb, 203)
    assert tq_both == tq_in2p3 + 1
    # the queue 203 left exists until deleted, and DIRAC's queue matching still lists it
    assert matched(tqdb, {}) == {tq_cern, tq_in2p3, tq_both}
    assert matched(tqdb, {"Site": "LCG.CERN.ch"}) == {tq_cern, tq_both}
    assert matched(tqdb, {"Site": "CLOUD.IN2P3.fr"}) == {tq_in2p3, tq_both}
    assert set(ok(tqdb.getMatchingTaskQueues({"CPUTime": 50000, "Site": "CLOUD.IN2P3.fr"}))) == {tq_both}
    assert set(ok(tqdb.retrieveTaskQueues([tq_cern, tq_in2p3]))) == {tq_cern}


def test_banned_sites(tqdb):
    ok(tqdb.insertJob(1, {**OWNER, "CPUTime": 5000, "BannedSites": ["LCG.CERN.ch", "CLOUD.IN2P3.fr"]}, 10))
    ok(tqdb.insertJob(2, {**OWNER, "CPUTime": 5000, "BannedSites": ["CLOUD.IN2P3.fr"]}, 10))
    ok(tqdb.insertJob(3, {**OWNER, "CPUTime": 5000}, 10))
    tq1, tq2, tq3 = (tq_of(tqdb, j) for j in (1, 2, 3))
    assert matched(tqdb, {"Site": "LCG.CERN.ch"}) == {tq2, tq3}
    assert matched(tqdb, {"Site": "CLOUD.IN2P3.fr"}) == {tq3}
    assert matched(tqdb, {"Site": "LCG.RAL.uk"}) == {tq1, tq2, tq3}
    [info] = [v for k, v in ok(tqdb.retrieveTaskQueues()).items() if k == tq1]
    assert sorted(info["BannedSites"]) == ["CLOUD.IN2P3.fr", "LCG.CERN.ch"]


def test_platforms(tqdb):
    platforms = {1: ["centos7"], 2: ["centos7"], 3: ["ubuntu"], 4: ["centos7", "slc6"], 5: ["debian", "ubuntu"]}
    for job, listed in platforms.items():
        ok(tqdb.insertJob(job, {**OWNER, "CPUTime": 5000, "Platforms": listed}, 10))
    tq = {job: tq_of(tqdb, job) for job in platforms}
    assert tq[1] == tq[2] and [tq[3], tq[4], tq[5]] == [tq[1] + 1, tq[1] + 2, tq[1] + 3]
    assert matched(tqdb, {"Platform": "centos7"}) == {tq[1], tq[4]}
    assert matched(tqdb, {"Platform": "ubuntu"}) == {tq[3], tq[5]}
    assert matched(tqdb, {"Platform": "slc6"}) == {tq[4]}
    assert matched(tqdb, {"Platform": "slc5"}) == set()
    for unstated in ({"Platform": ""}, {"Platform": []}, {}, {"Platform": "ANY"}):
        assert matched(tqdb, unstated) == set(tq.values()), unstated
    assert len(ok(tqdb.matchAndGetTaskQueue({"CPUTime": 50000}, numQueuesToGet=2))) == 2
    ok(tqdb.insertJob(6, {**OWNER, "CPUTime": 5000}, 10))
    ok(tqdb.insertJob(7, {**OWNER, "CPUTime": 5000, "Platform": ""}, 10))  # not a definition key: ignored
    assert tq_of(tqdb, 6) == tq_of(tqdb, 7) == tq[1] + 4
    assert matched(tqdb, {"Platform": "slc5"}) == {tq_of(tqdb, 6)}
    assert matched(tqdb, {"Platform": ["slc5", "slc6", "ubuntu"]}) == {tq[3], tq[4], tq[5], tq_of(tqdb, 6)}


def test_tags(tqdb):
    tags = {1: ["MultiProcessor"], 2: ["SingleProcessor"], 3: ["SingleProcessor", "MultiProcessor"],
            4: ["MultiProcessor", "GPU"], 5: []}  # fmt: skip
    for job, listed in tags.items():
        ok(tqdb.insertJob(job, {**OWNER, "CPUTime": 5000, "Tags": listed}, 10))
    tq = {job: tq_of(tqdb, job) for job in tags}
    assert tq[1] < tq[2] < tq[3] < tq[4] < tq[5]
    for untagged in ({}, {"Tag": ""}, {"Tag": []}):
        assert matched(tqdb, untagged) == {tq[5]}, untagged
    assert matched(tqdb, {"Tag": "MultiProcessor"}) == {tq[1], tq[5]}
    assert matched(tqdb, {"Tag": ["MultiProcessor", "SingleProcessor"]}) == {tq[1], tq[2], tq[3], tq[5]}
    assert matched(tqdb, {"Tag": ["MultiProcessor", "GPU"], "RequiredTag": "GPU"}) == {tq[4]}
    assert matched(tqdb, {"Tag": "ANY"}) == set(tq.values())
    assert not tqdb.matchAndGetTaskQueue({"CPUTime": 50000, "RequiredTag": "GPU"})["OK"]  # a required tag not offered
    assert matched(tqdb, {"Tag": ["MultiProcessor"], "Platform": "centos7"}) == {tq[1], tq[5]}


def test_cpu_time_owner_and_negative_conditions(tqdb):
    ok(tqdb.insertJob(1, {**OWNER, "CPUTime": 5000, "JobTypes": ["Merge"]}, 10))
    ok(tqdb.insertJob(2, {**OWNER, "CPUTime": 200000, "JobTypes": ["User"]}, 10))
    ok(tqdb.insertJob(3, {"Owner": "other", "OwnerGroup": "myGroup", "CPUTime": 5000}, 10))
    tq1, tq2, tq3 = (tq_of(tqdb, j) for j in (1, 2, 3))
    assert matched(tqdb, {}) == {tq1, tq3}  # 200,000 s need a longer slot than 50,000 s
    assert matched(tqdb, {"CPUTime": 300000}) == {tq1, tq2, tq3}
    assert matched(tqdb, {"Owner": "other"}) == {tq3}
    assert matched(tqdb, {"Owner": "userName", "OwnerGroup": "myGroup"}) == {tq1}
    m = {"CPUTime": 300000}
    assert {int(r[0]) for r in ok(tqdb.matchAndGetTaskQueue(m, 0, negativeCond={"JobType": ["Merge"]}))} == {tq2, tq3}
    excluded = [{"JobType": "Merge"}, {"Owner": ["other"]}]
    assert {int(r[0]) for r in ok(tqdb.matchAndGetTaskQueue(m, 0, negativeCond=excluded))} == {tq2}
    assert {int(r[0]) for r in ok(tqdb.matchAndGetTaskQueue({**m, "BannedJobType": "User"}, 0))} == {tq1, tq3}


def test_match_and_get_job_hands_the_job_off(tqdb, fairmatch):
    ok(tqdb.insertJob(123, {**OWNER, "CPUTime": 50000}, 10))
    ok(tqdb.recalculateTQSharesForAll())
    [(tq, info)] = ok(tqdb.retrieveTaskQueues()).items()
    assert info["Priority"] == 1000.0
    found = ok(tqdb.matchAndGetJob({"CPUTime": 300000}))
    assert found["matchFound"] is True and found["jobId"] == 123 and found["taskQueueId"] == tq
    assert fairmatch.request("GET", "/jobs/by-external-id/123")["status"] == "HandedOff"
    assert ok(tqdb.matchAndGetJob({"CPUTime": 300000})) == {"matchFound": False, "tqMatch": {"CPUTime": 300000}}
    assert ok(tqdb.deleteJob(123)) is False
    ok(tqdb.insertJob(123, {**OWNER, "CPUTime": 50000}, 10))  # DIRAC's reschedule
    assert ok(tqdb.matchAndGetJob({"CPUTime": 300000, "Site": "LCG.CERN.ch", "JobID": 123}))["jobId"] == 123


def test_sixteen_identical_inserts_make_one_queue_and_the_next_takes_the_next_id(tqdb):
    definition = {**OWNER, "CPUTime": 5000, "Sites": ["LCG.RAL.uk"]}
    with ThreadPoolExecutor(16) as pool:
        assert all(r["OK"] for r in pool.map(lambda j: tqdb.insertJob(j, definition, 5), range(1, 17)))
    assert len({tq_of(tqdb, j) for j in range(1, 17)}) == 1
    ok(tqdb.insertJob(17, {**definition, "Sites": ["LCG.PIC.es"]}, 5))
    assert tq_of(tqdb, 17) == tq_of(tqdb, 1) + 1


def test_an_unreachable_service_is_an_error_naming_it_in_bounded_time(tqdb, monkeypatch):
    import time

    monkeypatch.setenv("FAIRMATCH_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    from DIRAC.WorkloadManagementSystem.DB import TaskQueueDB as module

    cut_off = module.TaskQueueDB()
    started = time.monotonic()
    for result in (cut_off.insertJob(1, {**OWNER, "CPUTime": 5}, 1), cut_off.matchAndGetJob({"CPUTime": 5}),
                   cut_off.retrieveTaskQueues(), cut_off.deleteJob(1)):  # fmt: skip
        assert not result["OK"] and "fairmatch: " in result["Message"] and "refused" in result["Message"]
    assert time.monotonic() - started < 30


@pytest.mark.skipif(not os.environ.get("DIRAC_SOURCE"), reason="DIRAC_SOURCE names no DIRAC source tree")
def test_dirac_integration_file(fairmatch_fresh, tmp_path):
    """DIRAC's own integration test of its TaskQueueDB, from the DIRAC source tree DIRAC_SOURCE
    names (it is not in DIRAC's packages), run with the extension in place of DIRAC's class and
    the local configuration in place of a Configuration Server. Its one change: a lone queue's
    priority on DIRAC 9.1's scale (1000.0, not 1.0)."""
    source = Path(os.environ["DIRAC_SOURCE"]) / "tests/Integration/WorkloadManagementSystem/Test_TaskQueueDB.py"
    text = source.read_text().replace('"Priority": 1.0,', '"Priority": 1000.0,')
    copy = tmp_path / "test_dirac_taskqueuedb_integration.py"
    copy.write_text(text)
    # what a DIRAC process does first: load its extensions. The file's own DIRAC.initialize()
    # asks a Configuration Server, of which these tests run none: the local one stands for it.
    (tmp_path / "conftest.py").write_text(
        "import DIRAC\nimport FairmatchDIRAC\n\nFairmatchDIRAC.extension_metadata()\n"
        "DIRAC.initialize(require_auth=False)\nDIRAC.initialize = lambda *args, **kwargs: None\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", str(copy), "-q", "-p", "no:cacheprovider", "-c", os.devnull],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
