"""Resource descriptions: DIRAC keys, aliases, derived tags, the query they become."""

from typing import Any

import pytest
from pydantic import ValidationError

from fairmatch.errors import BadRequest
from fairmatch.matching.resource import ClaimingResource, ResourceDescription, ResourceQuery, derived_tags
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
def test_a_claim_needs_a_site_and_cpu_time(missing):
    data = {"Site": "S", "CPUTime": 1}
    del data[missing]
    with pytest.raises(ValidationError):
        ClaimingResource.model_validate(data)


def test_the_dry_run_and_a_hand_off_need_no_site_but_cpu_time():
    assert ResourceDescription.model_validate({"CPUTime": 1}).to_query(MatchingSettings()).values["sites"] is None
    assert ClaimingResource.model_validate({"CPUTime": 1, "handoff": True}).site is None
    with pytest.raises(ValidationError):
        ResourceDescription.model_validate({"Site": "S"})


def test_derived_tags_follow_dirac():
    assert derived_tags(4, False) == {"MultiProcessor", "2Processors", "3Processors", "4Processors"}
    assert derived_tags(1, False) == set()
    assert derived_tags(None, True) == {"WholeNode"}


def query(**given: Any) -> ResourceQuery:
    return ResourceDescription.model_validate({"Site": "S", "CPUTime": 1, **given}).to_query(MatchingSettings())


@pytest.mark.parametrize("ram", [999, 4500, 64000])
def test_max_ram_is_a_condition_of_its_own_and_no_gb_tags(ram):
    q = query(MaxRAM=ram)
    assert q.offers["min_ram_mb"] == ram
    assert q.tags == frozenset()
    assert "min_ram_mb" not in query().offers


@pytest.mark.parametrize(
    ("sent", "tags"),
    [
        ("GPU, 8Processors", {"GPU", "8Processors"}),
        ("[A, B]", {"A", "B"}),
        ("['A', \"B\"]", {"A", "B"}),
        (" [ A ,B ] ", {"A", "B"}),
        ("GPU", {"GPU"}),
        ("", set()),
        ("[]", set()),
        ("A,,B,", {"A", "B"}),
        (["GPU", "8Processors"], {"GPU", "8Processors"}),
        ([], set()),
    ],
)
@pytest.mark.parametrize("key", ["Tag", "tags"])
def test_tags_as_a_list_or_a_string_as_dirac_sends_them(key, sent, tags):
    assert query(**{key: sent}).tags == tags


@pytest.mark.parametrize("key", ["RequiredTag", "required_tags"])
def test_required_tags_as_a_string_too(key):
    assert query(Tag="A, B, C", **{key: "[A, 'C']"}).required_tags == {"A", "C"}
    assert query(Tag="A", **{key: ""}).required_tags == frozenset()


@pytest.mark.parametrize("spelling", ["any", "ANY", "Any", "'any'", "[any]", "any.", '"Any"', "a-n-y"])
def test_any_among_tags_in_any_case_and_punctuation_lifts_the_condition(spelling):
    assert query(Tag=["GPU", spelling]).tags is None
    assert query(Tag=f"GPU, {spelling}").tags is None
    # among required tags: no required-tag condition, as DIRAC's TaskQueueDB
    assert query(Tag="GPU", RequiredTag=spelling).required_tags == frozenset()
    assert query(Tag="GPU", RequiredTag=["GPU", spelling]).required_tags == frozenset()


def test_words_merely_containing_any_are_tags():
    assert query(Tag="many, anyway").tags == {"many", "anyway"}


@pytest.mark.parametrize("value", [True, False, None, "", "yes", 0, 1, [], {}])
@pytest.mark.parametrize("key", ["WholeNode", "whole_node"])
def test_whole_node_offers_its_tag_by_its_presence_whatever_its_value(key, value):
    assert query(**{key: value}).tags == {"WholeNode"}
    assert query().tags == frozenset()


@pytest.mark.parametrize(
    ("key", "sent", "value"),
    [
        ("CPUTime", "86400", 86400),
        ("CPUTime", " 4 ", 4),
        ("cpu_time", "+7", 7),
        ("MaxRAM", "4000", 4000),
        ("max_ram_mb", " 2000", 2000),
        ("NumberOfProcessors", "8", 8),
        ("number_of_processors", "1", 1),
        ("PilotBenchmark", "12.5", 12.5),
        ("PilotBenchmark", "2.5e3", 2500.0),
        ("PilotBenchmark", " 7 ", 7.0),
        ("PilotBenchmark", 19.25, 19.25),
        ("pilot_benchmark", 3, 3.0),
    ],
)
def test_numbers_may_be_sent_as_text(key, sent, value):
    base = {"Site": "S", "CPUTime": 1} if key not in ("CPUTime", "cpu_time") else {"Site": "S"}
    r = ResourceDescription.model_validate({**base, key: sent})
    field = {"CPUTime": "cpu_time", "MaxRAM": "max_ram_mb", "NumberOfProcessors": "number_of_processors",
             "PilotBenchmark": "pilot_benchmark"}.get(key, key)  # fmt: skip
    assert getattr(r, field) == value and type(getattr(r, field)) is type(value)


@pytest.mark.parametrize(
    ("key", "sent"),
    [
        ("CPUTime", "lots"), ("CPUTime", "1.5"), ("CPUTime", "2.5e3"), ("CPUTime", ""), ("CPUTime", "-1"),
        ("CPUTime", True), ("CPUTime", "1" * 40), ("MaxRAM", "4GB"), ("MaxRAM", "-5"), ("MaxRAM", 4000.5),
        ("NumberOfProcessors", "0"), ("NumberOfProcessors", "eight"), ("NumberOfProcessors", "4.0"),
        ("PilotBenchmark", "fast"), ("PilotBenchmark", "-1"), ("PilotBenchmark", "nan"), ("PilotBenchmark", "inf"),
        ("PilotBenchmark", "1e999"), ("PilotBenchmark", True), ("PilotBenchmark", [1]),
    ],
)  # fmt: skip
def test_other_text_for_numbers_is_refused_at_the_key_sent(key, sent):
    with pytest.raises(ValidationError) as caught:
        ResourceDescription.model_validate({"Site": "S", "CPUTime": 1, key: sent})
    assert [e["loc"][0] for e in caught.value.errors()] == [key]


def test_the_dry_run_takes_a_list_of_sites_and_a_claim_one_site():
    q = query(Site=["S1", "S2"])
    assert q.values["sites"] == {"S1", "S2"} and q.site is None
    one = query(Site=["S1"])
    assert one.values["sites"] == {"S1"} and one.site == "S1"
    assert query(Site=["S1", "any"]).values["sites"] is None
    with pytest.raises(ValidationError) as caught:
        ClaimingResource.model_validate({"Site": ["S1", "S2"], "CPUTime": 1})
    assert [e["loc"][0] for e in caught.value.errors()] == ["Site"]
    for bad in ([], ["S1", ""], [7], "", 7):
        with pytest.raises(ValidationError):
            ResourceDescription.model_validate({"Site": bad, "CPUTime": 1})


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


def test_absent_values_restrict_to_unrestricted_queues_under_the_strict_rule():
    strict = MatchingSettings(unstated_fields="strict")
    q = ResourceDescription.model_validate({"Site": "S", "CPUTime": 1}).to_query(strict)
    assert q.values == {"sites": {"S"}, "grid_ces": set(), "platforms": set(), "job_types": set()}


def test_absent_values_are_no_condition_by_default_as_in_dirac():
    q = ResourceDescription.model_validate({"Site": "S", "CPUTime": 1}).to_query(MatchingSettings())
    assert q.values == {"sites": {"S"}, "grid_ces": None, "platforms": None, "job_types": None}


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
