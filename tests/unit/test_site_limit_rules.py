"""Site limits as pure logic: reasons, bans on the resource query, settings."""

from __future__ import annotations

import tomllib
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
        {
            "rule": "running_limit",
            "site": SITE,
            "grid_ce": "",
            "attribute": "job_type",
            "value": "MC",
            "limit": 2,
            "running": 2,
        }
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


# --- limits per CE -------------------------------------------------------------------------

CE_1, CE_2 = "ce1.a.ch", "ce2.a.ch"


def test_a_pilot_is_held_to_its_sites_limits_and_its_ces_only():
    whole = Limit(SITE, Attribute.job_type, "MC", running_limit=1)
    ce1 = Limit(SITE, Attribute.job_type, "MC", running_limit=1, grid_ce=CE_1)
    assert whole.grid_ce == "" and whole.key == (SITE, "", "job_type", "MC")
    assert ce1.key == (SITE, CE_1, "job_type", "MC")
    assert [whole.applies_to(SITE, ce) for ce in (CE_1, CE_2, None)] == [True, True, True]
    assert [ce1.applies_to(SITE, ce) for ce in (CE_1, CE_2, None)] == [True, False, False]
    assert not whole.applies_to("LCG.B.de", CE_1) and not ce1.applies_to("LCG.B.de", CE_1)


def test_a_ce_limit_counts_its_ces_jobs_and_a_site_limit_every_ces():
    per_ce = {(CE_1, "MC"): 2, (CE_2, "MC"): 3, (None, "MC"): 4, (CE_1, "User"): 7}
    assert Limit(SITE, Attribute.job_type, "MC", running_limit=9).counted(per_ce) == 9
    assert Limit(SITE, Attribute.job_type, "MC", running_limit=9, grid_ce=CE_1).counted(per_ce) == 2
    assert Limit(SITE, Attribute.job_type, "MC", running_limit=9, grid_ce="ce3").counted(per_ce) == 0
    assert Limit(SITE, Attribute.job_type, "Merge", running_limit=9).counted(per_ce) == 0


def test_reasons_name_the_ce_and_site_and_ce_limits_merge():
    site_full = LimitState(Limit(SITE, Attribute.job_type, "MC", running_limit=5), running=5)
    ce_full = LimitState(Limit(SITE, Attribute.job_type, "MC", running_limit=1, grid_ce=CE_1), running=1)
    ce_delay = LimitState(
        Limit(SITE, Attribute.owner, "bob", matching_delay=60, grid_ce=CE_1), last_match_at=NOW - timedelta(seconds=1)
    )
    limits = SiteLimits((site_full, ce_full, ce_delay), NOW)
    blocked = limits.blocked()
    assert [r["grid_ce"] for r in blocked[(Attribute.job_type, "MC")]] == ["", CE_1]
    assert blocked[(Attribute.owner, "bob")][0] == {
        "rule": "matching_delay", "site": SITE, "grid_ce": CE_1, "attribute": "owner", "value": "bob",
        "delay_seconds": 60, "next_match_at": NOW + timedelta(seconds=59),
    }  # fmt: skip
    query = limits.restrict(ResourceDescription(site=SITE, cpu_time=100).to_query(MatchingSettings()))
    assert query.banned_job_types == {"MC"} and query.banned_owners == {"bob"}
    assert [lim.grid_ce for lim in limits.applicable("alice", "g", ["MC"])] == ["", CE_1]


def test_an_empty_set_bans_nothing():
    limits = SiteLimits((), NOW)
    query = ResourceDescription(site=SITE, cpu_time=100).to_query(MatchingSettings())
    assert limits.restrict(query) == query and limits.applicable("alice", "g", ["MC"]) == []


CE_SETTINGS = f"""
[site_limits."{SITE}".running_limit.JobType]
MCSimulation = 10
[site_limits."{SITE}".CEs."{CE_1}".running_limit.JobType]
MCSimulation = 2
[site_limits."{SITE}".CEs."{CE_1}".matching_delay]
OwnerGroup = {{lhcb_user = 30}}
[site_limits."{SITE}".CEs."{CE_2}".running_limit]
owner = {{bob = 1}}
"""


def test_ce_limits_in_the_settings_nest_under_ces_as_in_dirac():
    settings = Settings(**tomllib.loads(CE_SETTINGS))
    assert from_settings(settings.site_limits) == [
        Limit(SITE, Attribute.job_type, "MCSimulation", running_limit=10),
        Limit(SITE, Attribute.job_type, "MCSimulation", running_limit=2, grid_ce=CE_1),
        Limit(SITE, Attribute.owner_group, "lhcb_user", matching_delay=30.0, grid_ce=CE_1),
        Limit(SITE, Attribute.owner, "bob", running_limit=1, grid_ce=CE_2),
    ]
    lower = Settings(site_limits={SITE: {"ces": {CE_1: {"running_limit": {"owner": {"bob": 1}}}}}})
    assert from_settings(lower.site_limits) == [Limit(SITE, Attribute.owner, "bob", running_limit=1, grid_ce=CE_1)]


@pytest.mark.parametrize(
    "bad",
    [
        {"CEs": {CE_1: {"running_limit": {"Site": {"x": 1}}}}},
        {"CEs": {CE_1: {"running_limit": {"job_type": {"x": -1}}}}},
        {"CEs": {CE_1: {"CEs": {}}}},  # CEs do not nest
        {"CEs": {CE_1: {"runing_limit": {}}}},
        {"CEs": [CE_1]},
    ],
)
def test_bad_ce_limit_settings_are_refused(bad):
    with pytest.raises(ValueError):
        Settings(site_limits={SITE: bad})
