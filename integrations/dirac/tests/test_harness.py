"""The fixtures of conftest.py do what they say: the suites built on them rely on it."""

from __future__ import annotations

import os


def _submit(fairmatch) -> None:
    fairmatch.request("POST", "/jobs", {"jobs": [{"owner": "alice", "owner_group": "user"}]})


def _statuses(fairmatch) -> list[str]:
    return [job["status"] for job in fairmatch.request("GET", "/jobs?limit=1000")["jobs"]]


def test_the_service_is_where_dirac_is_told(fairmatch, dirac) -> None:
    from DIRAC import gConfig

    assert os.environ["FAIRMATCH_URL"] == fairmatch.url
    section = "/Systems/WorkloadManagement/Databases/TaskQueueDB"
    assert gConfig.getValue(f"{section}/FairmatchURL") == fairmatch.url


def test_clean_leaves_no_unfinished_job(fairmatch) -> None:
    _submit(fairmatch)
    fairmatch.kill_unfinished()  # what `fairmatch_clean` does
    unfinished = {"Waiting", "Held", "Matched", "Running", "Stalled"}
    assert not unfinished & set(_statuses(fairmatch))


def test_fresh_forgets_every_job(fairmatch) -> None:
    _submit(fairmatch)
    fairmatch.reset()
    assert _statuses(fairmatch) == []


def test_dirac_databases_are_empty_and_usable(dirac_databases, dirac) -> None:
    from DIRAC.WorkloadManagementSystem.DB.JobDB import JobDB
    from DIRAC.WorkloadManagementSystem.DB.JobLoggingDB import JobLoggingDB
    from DIRAC.WorkloadManagementSystem.DB.PilotAgentsDB import PilotAgentsDB

    assert JobDB()._query("SELECT COUNT(*) FROM Jobs") == {"OK": True, "Value": ((0,),)}
    assert JobLoggingDB()._query("SELECT COUNT(*) FROM LoggingInfo")["Value"] == ((0,),)
    assert PilotAgentsDB()._query("SELECT COUNT(*) FROM PilotAgents")["Value"] == ((0,),)
