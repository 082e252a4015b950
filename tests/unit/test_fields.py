"""The one rule for names and lists of names (fairmatch/fields.py), and that jobs and
resources read them by it alike."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from fairmatch.fields import MAX_NAMES_TEXT, ListedName, Name, NameList, clean_name, names_from_text
from fairmatch.jobs.models import JobSpec
from fairmatch.matching.resource import ClaimingResource, DryRunResource

NAMES = TypeAdapter(NameList)


@pytest.mark.parametrize(
    ("written", "names"),
    [
        ("A", ["A"]),
        ("A, B", ["A", "B"]),
        ("A,B", ["A", "B"]),
        (" [ A ,B ] ", ["A", "B"]),
        ("['A', \"B\"]", ["A", "B"]),
        ("A,,B,", ["A", "B"]),
        ("", []),
        (" , ", []),
        (["A", " B "], ["A", "B"]),
    ],
)
def test_a_list_of_names_is_a_list_or_one_string_of_them(written, names):
    assert NAMES.validate_python(written) == names


def test_a_string_longer_than_any_list_is_left_to_fail_as_not_a_list():
    too_long = "a" * (MAX_NAMES_TEXT + 1)
    assert names_from_text(too_long) == too_long
    with pytest.raises(ValidationError):
        NAMES.validate_python(too_long)


@pytest.mark.parametrize("written", [["A, B"], ["A", "B,"]])
def test_no_listed_name_holds_a_comma(written):
    with pytest.raises(ValidationError, match="holds no ','"):
        NAMES.validate_python(written)
    with pytest.raises(ValidationError, match="holds no ','"):
        TypeAdapter(ListedName).validate_python(written[-1])


@pytest.mark.parametrize(("given", "stored"), [("  alice  ", "alice"), ("alice", "alice"), ("a b", "a b"),
                                               ("\u00a0alice\u2003", "alice")])  # fmt: skip
def test_a_name_is_stored_without_the_spaces_around_it(given, stored):
    assert clean_name(given) == stored
    assert TypeAdapter(Name).validate_python(given) == stored


@pytest.mark.parametrize("given", ["", "   ", "a\tb", " alice\n", "a\x00", "\ud800"])
def test_a_blank_name_or_one_with_control_characters_is_refused(given):
    with pytest.raises(ValidationError):
        TypeAdapter(Name).validate_python(given)


@pytest.mark.parametrize(
    ("job_field", "resource_key"),
    [("grid_ces", "GridCE"), ("platforms", "Platform"), ("job_types", "JobType"), ("tags", "Tag")],
)
@pytest.mark.parametrize("written", ["X, Y", "['X', 'Y']", " X ,Y", "Y"])
def test_a_job_and_a_pilot_read_one_string_alike(job_field, resource_key, written):
    job = JobSpec.model_validate({"owner": "o", "owner_group": "g", job_field: written})
    resource = DryRunResource.model_validate({"CPUTime": 1, resource_key: written})
    read = getattr(resource, {"GridCE": "grid_ce", "Platform": "platform", "JobType": "job_type",
                              "Tag": "tags"}[resource_key])  # fmt: skip
    assert getattr(job, job_field) == read


def test_a_claim_names_one_site_and_a_dry_run_reads_several():
    with pytest.raises(ValidationError, match="holds no ','"):
        ClaimingResource.model_validate({"Site": "S1, S2", "CPUTime": 1})
    assert ClaimingResource.model_validate({"Site": " S1 ", "CPUTime": 1}).site == "S1"
    assert DryRunResource.model_validate({"Site": "S1, S2", "CPUTime": 1}).sites == ["S1", "S2"]
    assert DryRunResource.model_validate({"Site": "S1", "CPUTime": 1}).sites == ["S1"]


def test_spaces_around_names_are_dropped_before_a_job_s_sites_are_compared():
    with pytest.raises(ValidationError, match="could never run"):
        JobSpec.model_validate({"owner": "o", "owner_group": "g", "sites": [" S1"], "banned_sites": "S1 "})
