"""A status report's transition, stated once as a table: from the status the job is in and
what the report says, the columns it sets, whether it is an event, what it charges."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fairmatch.accounting.settings import AccountingSettings
from fairmatch.accounting.usage import charge_row, charged_account
from fairmatch.jobs.lifecycle import JobStatus
from fairmatch.jobs.models import JobSpec
from fairmatch.jobs.transition import REPORTED_COLUMNS, report_transition

AT = datetime(2026, 11, 28, 4, tzinfo=UTC)
WEIGHT = 2.5
ACCOUNTING = AccountingSettings(cpu_weight=WEIGHT)
M, R, S, D, F = (JobStatus.Matched, JobStatus.Running, JobStatus.Stalled, JobStatus.Done, JobStatus.Failed)

# before, reported (status, minor status, cpu, wall) -> columns set, with their values; event; charge
# (None: none; "stored": the CPU seconds the job stored before decide it)
TABLE = [
    (M, (R, None, None, None), {"status": "Running", "minor_status": None, "heartbeat_at": AT, "started_at": AT,
                                "lease_expires_at": None}, True, None),
    (M, (R, "Starting", 1.0, 2.0), {"status": "Running", "minor_status": "Starting", "heartbeat_at": AT,
                                    "cpu_seconds": 1.0, "wall_seconds": 2.0, "started_at": AT,
                                    "lease_expires_at": None}, True, None),
    (M, (F, "Cannot start", None, None), {"status": "Failed", "minor_status": "Cannot start", "heartbeat_at": AT,
                                          "lease_expires_at": None, "finished_at": AT}, True, "stored"),
    # a heartbeat: no event, and the minor status kept unless it states one
    (R, (R, None, None, None), {"status": "Running", "heartbeat_at": AT}, False, None),
    (R, (R, None, 5.0, None), {"status": "Running", "heartbeat_at": AT, "cpu_seconds": 5.0}, False, None),
    (R, (R, "Step 2", None, 7.0), {"status": "Running", "minor_status": "Step 2", "heartbeat_at": AT,
                                   "wall_seconds": 7.0}, False, None),
    (R, (S, None, None, None), {"status": "Stalled", "minor_status": None, "heartbeat_at": AT}, True, None),
    (R, (D, None, 10.0, 20.0), {"status": "Done", "minor_status": None, "heartbeat_at": AT, "cpu_seconds": 10.0,
                                "wall_seconds": 20.0, "finished_at": AT}, True, 10.0 * WEIGHT),
    (R, (D, "Finished", None, None), {"status": "Done", "minor_status": "Finished", "heartbeat_at": AT,
                                      "finished_at": AT}, True, "stored"),
    (R, (F, None, 0.0, None), {"status": "Failed", "minor_status": None, "heartbeat_at": AT, "cpu_seconds": 0.0,
                               "finished_at": AT}, True, None),  # no CPU used: nothing charged
    # a stalled job's pilot reports again: it had started before, and had no lease
    (S, (R, None, None, None), {"status": "Running", "minor_status": None, "heartbeat_at": AT}, True, None),
    (S, (D, None, 3.0, None), {"status": "Done", "minor_status": None, "heartbeat_at": AT, "cpu_seconds": 3.0,
                               "finished_at": AT}, True, 3.0 * WEIGHT),
    (S, (F, None, None, None), {"status": "Failed", "minor_status": None, "heartbeat_at": AT, "finished_at": AT},
     True, "stored"),
]  # fmt: skip

REFUSED = [
    (JobStatus.Waiting, R), (JobStatus.Held, R), (M, D), (M, S), (S, S), (D, R), (D, D), (F, F),
    (JobStatus.Killed, R), (JobStatus.HandedOff, D),
]  # fmt: skip


@pytest.mark.parametrize(("before", "reported", "columns", "event", "charge"), TABLE)
def test_a_report_sets_the_columns_its_transition_states(before, reported, columns, event, charge):
    status, minor_status, cpu_seconds, wall_seconds = reported
    transition = report_transition(status, minor_status, cpu_seconds, wall_seconds, AT, ACCOUNTING)
    assert before in transition.taken_from
    assert transition.values(before) == columns
    assert transition.writes_event(before) is event
    assert transition.needs_stored_cpu_seconds is (charge == "stored")
    if charge == "stored":
        assert transition.charge(4.0) == 4.0 * WEIGHT
        assert transition.charge(None) is None
    else:
        assert transition.charge(cpu_seconds) == charge


@pytest.mark.parametrize(("before", "status"), REFUSED)
def test_a_report_the_status_before_does_not_allow_is_refused(before, status):
    transition = report_transition(status, None, 1.0, None, AT, ACCOUNTING)
    assert before not in transition.taken_from
    assert transition.values(before) == {}  # nothing is set where it is refused
    assert not transition.writes_event(before)


@pytest.mark.parametrize("status", [R, S, D, F])
def test_every_reported_column_is_stated_and_set_only_where_the_report_is_taken(status):
    transition = report_transition(status, "m", 1.0, 1.0, AT, ACCOUNTING)
    assert tuple(transition.columns) == REPORTED_COLUMNS
    assert all(change.when <= transition.taken_from for change in transition.columns.values())
    assert transition.event_from <= transition.taken_from


def test_a_charge_row_is_the_job_s_and_its_account_defaults_to_its_owner_group():
    job = {"id": 7, "vo": "hep", "owner_group": "theory", "owner": "alice", "account": "physics", "status": "Done"}
    assert charge_row(job, 12.5, AT) == {"charged_at": AT, "job_id": 7, "vo": "hep", "owner_group": "theory",
                                         "owner": "alice", "account": "physics", "charge": 12.5}  # fmt: skip
    for unset in ({"account": None}, {"account": ""}, {}):
        without = {k: v for k, v in job.items() if k != "account"} | unset
        assert charge_row(without, 1.0, AT)["account"] == "theory"
    spec = JobSpec(owner="alice", owner_group="theory", priority_class=0)
    assert spec.charged_account == charged_account(spec) == "theory"
    assert JobSpec(owner="alice", owner_group="theory", account="physics").charged_account == "physics"
