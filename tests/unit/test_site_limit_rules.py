"""Site limits as pure logic: reasons, bans on the resource query, settings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fairmatch.limits.rules import Attribute, Limit, LimitState, SiteLimits, from_settings, with_banned
from fairmatch.matching.resource import ResourceDescription
from fairmatch.matching.settings import MatchingSettings
from fairmatch.settings import Settings

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
SITE = "LCG.A.ch"


def state(attribute: str, value: str, running: int = 0, last: datetime | None = None, **amounts) -> LimitState:
    return LimitState(Limit(SITE, Attribute(attribute), value, **amounts), running, last)


def test_running_limit_bans_the_value_at_its_limit_only():
    below = state("job_type", "MC", running=1, running_limit=2)
    at = state("job_type", "MC", running=2, running_limit=2)
    assert below.reasons(NOW) == []
    assert at.reasons(NOW) == [
        {"rule": "running_limit", "site": SITE, "grid_ce": "", "attribute": "job_type", "value": "MC",
         "limit": 2, "running": 2}
    ]


def test_matching_delay_bans_until_it_has_passed():
    never = state("owner", "bob", matching_delay=30)
    recent = state("owner", "bob", last=NOW - timedelta(seconds=10), matching_delay=30)
    passed = state("owner", "bob", last=NOW - timedelta(seconds=30), matching_delay=30)
    assert never.reasons(NOW) == [] and passed.reasons(NOW) == []
    (reason,) = recent.reasons(NOW)
    assert reason["rule"] == "matching_delay"
    assert reason["next_match_at"] == NOW + timedelta(seconds=20)


def test_restrict_bans_each_attribute_on_the_query():
    limits = SiteLimits(
        (
            state("job_type", "MC", running=1, running_limit=1),
            state("job_type", "User", running=0, running_limit=1),
            state("owner_group", "lhcb_mc", running=5, running_limit=5),
            state("owner", "bob", last=NOW, matching_delay=60),
        ),
        NOW,
    )
    query = limits.restrict(ResourceDescription(site=SITE, cpu_time=100).to_query(MatchingSettings()))
    assert query.banned_job_types == {"MC"}
    assert query.banned_owner_groups == {"lhcb_mc"}
    assert query.banned_owners == {"bob"}
    more = with_banned(query, [{"attribute": "job_type", "value": "Merge"}])
    assert more.banned_job_types == {"MC", "Merge"} and more.banned_owners == {"bob"}


def test_reasons_for_a_task_queue_and_applicable_limits():
    limits = SiteLimits(
        (state("job_type", "MC", running=3, running_limit=3), state("owner", "alice", running_limit=9)), NOW
    )
    tq = {"owner": "alice", "owner_group": "g", "job_types": ["MC", "User"]}
    assert [r["value"] for r in limits.reasons_for(tq)] == ["MC"]
    assert limits.reasons_for({**tq, "job_types": ["User"]}) == []
    assert [lim.value for lim in limits.applicable("alice", "g", ["User"])] == ["alice"]
    assert [lim.value for lim in limits.applicable("bob", "g", ["MC"])] == ["MC"]


def test_settings_in_dirac_shape_become_limits():
    settings = Settings(
        site_limits={
            SITE: {
                "running_limit": {"JobType": {"MCSimulation": 2}, "owner": {"bob": 1}},
                "matching_delay": {"JobType": {"MCSimulation": 30}},
            }
        }
    )
    assert from_settings(settings.site_limits) == [
        Limit(SITE, Attribute.job_type, "MCSimulation", running_limit=2, matching_delay=30.0),
        Limit(SITE, Attribute.owner, "bob", running_limit=1),
    ]


@pytest.mark.parametrize(
    "bad",
    [
        {"running_limit": {"Site": {"x": 1}}},
        {"running_limit": {"job_type": {"x": -1}}},
        {"matching_delay": {"owner": {"x": "soon"}}},
        {"runing_limit": {}},
    ],
)
def test_bad_limit_settings_are_refused(bad):
    with pytest.raises(ValueError):
        Settings(site_limits={SITE: bad})
