"""The vocabulary both fair-share modules share: the site, the jobs, the pilot, and keys that
single out a task queue or a job (tests/db/test_fair_share.py in process, tests/api/test_fair_share.py over HTTP)."""

from __future__ import annotations

from typing import Any

SITE = "LCG.Test.org"
CPU = 100  # every job's cpu_time
PILOT = {"Site": SITE, "CPUTime": 86400}  # a generic pilot: no OwnerGroup, no Owner
# one corrector over the groups, with a 3 s history slice: the closed loop's corrections
CORRECTIONS = {
    "instances": {
        "groups": {"max_global_correction": 5, "slices": {"recent": {"time_span": 3, "weight": 1, "max_correction": 5}}}
    }
}


def job(owner: str, group: str, user_priority: int = 1, **requirements: Any) -> dict[str, Any]:
    return {"owner": owner, "owner_group": group, "cpu_time": CPU, "user_priority": user_priority,
            "sites": [SITE], **requirements}  # fmt: skip


def priorities_by(tqs: list[dict[str, Any]], key) -> dict[Any, float]:
    found = {key(tq): tq["priority"] for tq in tqs}
    assert len(found) == len(tqs), f"key does not single out the TQs: {tqs}"
    return found


def by_group(tq_or_job: dict[str, Any]) -> str:
    return tq_or_job["owner_group"]


def by_owner(tq_or_job: dict[str, Any]) -> str:
    return tq_or_job["owner"]


def by_platforms(tq: dict[str, Any]) -> tuple[str, ...]:
    return tuple(tq["platforms"])


def by_user_priority(job: dict[str, Any]) -> int:
    return job["user_priority"]
