"""Resource descriptions: DIRAC keys, aliases, derived tags, the query they become."""

import pytest
from pydantic import ValidationError

from fairmatch.errors import BadRequest
from fairmatch.matching.resource import ResourceDescription, derived_tags
from fairmatch.matching.settings import MatchingSettings


def test_dirac_keys_and_snake_case_aliases_are_the_same_resource():
    dirac = ResourceDescription.model_validate(
        {"Site": "S", "CPUTime": 100, "GridCE": "ce", "Platform": ["p1", "p2"], "JobType": "User",
         "Tag": ["t"], "RequiredTag": "t", "OwnerGroup": "g", "Owner": "o", "VirtualOrganization": "vo",
         "MaxRAM": 2000, "NumberOfProcessors": 2, "WholeNode": True, "PilotReference": "ref", "JobID": 5}
    )  # fmt: skip
    snake = ResourceDescription.model_validate(
        {"site": "S", "cpu_time": 100, "grid_ce": "ce", "platform": ["p1", "p2"], "job_type": "User",
         "tags": ["t"], "required_tags": "t", "owner_group": "g", "owner": "o", "vo": "vo",
         "max_ram_mb": 2000, "number_of_processors": 2, "whole_node": True, "pilot_reference": "ref",
         "job_id": 5}
    )  # fmt: skip
    assert dirac == snake
    assert dirac.to_query(MatchingSettings()) == snake.to_query(MatchingSettings())


def test_unknown_keys_are_ignored():
    r = ResourceDescription.model_validate({"Site": "S", "CPUTime": 1, "DIRACVersion": "v9", "Setup": "x"})
    assert r.site == "S"


@pytest.mark.parametrize("missing", ["Site", "CPUTime"])
def test_site_and_cpu_time_are_required(missing):
    data = {"Site": "S", "CPUTime": 1}
    del data[missing]
    with pytest.raises(ValidationError):
        ResourceDescription.model_validate(data)


def test_derived_tags_follow_dirac():
    assert derived_tags(4500, None, None) == {"1GB", "2GB", "3GB", "4GB"}
    assert derived_tags(999, None, None) == set()
    assert derived_tags(None, 4, None) == {"MultiProcessor", "2Processors", "3Processors", "4Processors"}
    assert derived_tags(None, 1, None) == set()
    assert derived_tags(None, None, True) == {"WholeNode"}


def test_query_carries_derived_and_given_tags():
    q = ResourceDescription.model_validate(
        {"Site": "S", "CPUTime": 1, "Tag": ["GPU"], "NumberOfProcessors": 2}
    ).to_query(MatchingSettings())
    assert q.tags == {"GPU", "MultiProcessor", "2Processors"}


def test_untagged_resource_offers_no_tags():
    assert (
        ResourceDescription.model_validate({"Site": "S", "CPUTime": 1}).to_query(MatchingSettings()).tags == frozenset()
    )


def test_any_lifts_conditions():
    q = ResourceDescription.model_validate(
        {"Site": "ANY", "CPUTime": 1, "Platform": ["x", "Any"], "Tag": ["any"]}
    ).to_query(MatchingSettings())
    assert q.site is None
    assert q.values["sites"] is None
    assert q.values["platforms"] is None
    assert q.tags is None


def test_absent_values_restrict_to_unrestricted_queues():
    q = ResourceDescription.model_validate({"Site": "S", "CPUTime": 1}).to_query(MatchingSettings())
    assert q.values == {"sites": {"S"}, "grid_ces": set(), "platforms": set(), "job_types": set()}


def test_required_tags_must_be_offered():
    with pytest.raises(BadRequest, match="not offered: B"):
        ResourceDescription.model_validate(
            {"Site": "S", "CPUTime": 1, "Tag": ["A"], "RequiredTag": ["A", "B"]}
        ).to_query(MatchingSettings())


def test_required_tags_may_be_derived():
    q = ResourceDescription.model_validate(
        {"Site": "S", "CPUTime": 1, "NumberOfProcessors": 8, "RequiredTag": "MultiProcessor"}
    ).to_query(MatchingSettings())
    assert q.required_tags == {"MultiProcessor"}


@pytest.mark.parametrize(
    "bad",
    [{"CPUTime": -1}, {"NumberOfProcessors": 0}, {"NumberOfProcessors": 1025}, {"MaxRAM": -5},
     {"JobID": 0}, {"Site": ""}, {"Site": "a\x00b"}, {"Site": "x" * 256}, {"Platform": [1]}],
)  # fmt: skip
def test_out_of_range_values_are_refused(bad):
    with pytest.raises(ValidationError):
        ResourceDescription.model_validate({"Site": "S", "CPUTime": 1, **bad})
