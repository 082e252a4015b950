"""Every eligibility rule (docs/explanation/matching.md) as a table: a job's requirements, the
resources that may take its queue and those that may not.

The job goes through the submission's own rules (fairmatch/jobs/submission.py: CPU
bucket, default VO, `any` among sites) into a catalog of one queue; each resource is
read as /match and the dry run read it (ResourceDescription, derived tags, text forms)
and asked `eligible`. tests/api/test_eligibility.py checks that both doors apply them.
"""

from __future__ import annotations

from typing import Any

import pytest

from fairmatch.jobs.models import JobSpec
from fairmatch.jobs.settings import JobSettings
from fairmatch.jobs.submission import requirements_of
from fairmatch.matching.eligibility import analysis, eligible
from fairmatch.matching.resource import ResourceDescription
from fairmatch.matching.settings import MatchingSettings
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS
from fairmatch.taskqueues.settings import DIRAC_CPU_BUCKETS
from tests.unit.catalogs import catalog_of, tq_row

BIG = 10**6  # CPU seconds that take every default bucket up to 864000


def queue_row(tq_id: int, **spec: Any) -> dict[str, Any]:
    """The task_queues row a job of `spec` (defaults filled in) is queued in."""
    job = JobSpec(**{"owner": "alice", "owner_group": "users", "cpu_time": 3600, "priority_class": 0, **spec})
    found = requirements_of(job, JobSettings(), DIRAC_CPU_BUCKETS)
    return tq_row(
        tq_id, owner=found.owner, owner_group=found.owner_group, vo=found.vo, cpu_time=found.cpu_time,
        **dict(found.amounts),
        **{field: list(found.values(field)) for field in MULTI_VALUE_FIELDS},
    )  # fmt: skip


def resource(**fields: Any) -> dict[str, Any]:
    """A DIRAC resource description; a field given as None is left out."""
    base = {"Site": "S1", "CPUTime": BIG, **fields}
    return {k: v for k, v in base.items() if v is not None}


def takes(catalog, body: dict[str, Any], unstated_fields: str = "dirac") -> set[int]:
    query = ResourceDescription.model_validate(body).to_query(MatchingSettings(unstated_fields=unstated_fields))
    found = set(catalog.tq_ids(eligible(catalog, query)))
    assert analysis(catalog, query)["eligible"] == len(found)  # the analysis agrees
    return found


def rule(id: str, spec: dict[str, Any], accepts: list[dict[str, Any]], refuses: list[dict[str, Any]]):
    return pytest.param(spec, accepts, refuses, id=id)


def value_rules():
    """The same rules for grid_ce, platform and job_type (resource key -> TQ field)."""
    for field, key in (("grid_ces", "GridCE"), ("platforms", "Platform"), ("job_types", "JobType")):

        def given(value, key=key, **rule_fields):
            return resource(**{key: value}, **rule_fields)

        yield rule(
            f"{key}-tq-without-values-accepts-anything",
            {field: []},
            accepts=[given("X"), given(["X", "Y"]), given(None), given([]), given("any")],
            refuses=[],
        )
        yield rule(
            f"{key}-one-resource-value-must-be-in-the-tq-set",
            {field: ["X", "Y"]},
            accepts=[given("Y"), given(["Z", "X"]), given(["X"])],
            refuses=[given("Z"), given(["Z", "W"]), given("x")],
        )
        yield rule(
            f"{key}-no-resource-value-is-no-condition-by-default",
            {field: ["X"]},
            accepts=[given("X"), given(None), given([])],
            refuses=[given("Z")],
        )
        yield rule(
            f"{key}-strict-no-resource-value-only-gets-tqs-without-values",
            {field: ["X"]},
            accepts=[given("X", unstated_fields="strict")],
            refuses=[given(None, unstated_fields="strict"), given([], unstated_fields="strict")],
        )
        yield rule(
            f"{key}-any-lifts-the-condition",
            {field: ["X"]},
            accepts=[given("any"), given("ANY"), given(["Z", "Any"])],
            refuses=[given(["Z"])],
        )
        yield rule(
            f"{key}-job-value-any-is-no-restriction",
            {field: ["any"]},
            accepts=[given("Z"), given(None)],
            refuses=[],
        )


RULES = [
    # --- CPU time
    rule(
        "5000s-job-is-in-the-21600-bucket",
        {"cpu_time": 5000},
        accepts=[resource(CPUTime=21600), resource(CPUTime=BIG)],
        refuses=[resource(CPUTime=20000), resource(CPUTime=21599), resource(CPUTime=5000)],
    ),
    rule(
        "zero-cpu-job-is-in-the-first-bucket",
        {"cpu_time": 0},
        accepts=[resource(CPUTime=360)],
        refuses=[resource(CPUTime=359), resource(CPUTime=0)],
    ),
    rule(
        "huge-job-is-capped-at-the-last-bucket",
        {"cpu_time": 10**8},
        accepts=[resource(CPUTime=1080000)],
        refuses=[resource(CPUTime=1079999)],
    ),
    # --- sites
    rule(
        "tq-without-sites-accepts-any-site",
        {},
        accepts=[resource(Site="Anywhere"), resource(Site="S1"), resource(Site="any")],
        refuses=[],
    ),
    rule(
        "tq-with-sites-needs-the-resource-site",
        {"sites": ["S1", "S2"]},
        accepts=[resource(Site="S2"), resource(Site="S1")],
        refuses=[resource(Site="S3"), resource(Site="s1")],
    ),
    rule(
        "resource-site-any-lifts-the-site-condition",
        {"sites": ["S1"]},
        accepts=[resource(Site="any"), resource(Site="ANY"), resource(Site="Any")],
        refuses=[resource(Site="S2")],
    ),
    rule("job-site-any-is-no-restriction", {"sites": ["ANY"]}, accepts=[resource(Site="S9")], refuses=[]),
    rule(
        "banned-site-is-excluded",
        {"banned_sites": ["S1"]},
        accepts=[resource(Site="S2")],
        refuses=[resource(Site="S1")],
    ),
    rule(
        "banned-wins-over-allowed",
        {"sites": ["S1", "S2"], "banned_sites": ["S2"]},
        accepts=[resource(Site="S1")],
        refuses=[resource(Site="S2"), resource(Site="S3")],
    ),
    # --- grid CE, platform, job type
    *value_rules(),
    # --- tags
    rule(
        "untagged-tq-goes-to-any-resource-without-required-tags",
        {},
        accepts=[resource(), resource(Tag=["GPU"]), resource(Tag="any")],
        refuses=[resource(Tag=["GPU"], RequiredTag=["GPU"]), resource(Tag="any", RequiredTag="GPU")],
    ),
    rule(
        "tq-tags-must-be-a-subset-of-the-resource-tags",
        {"tags": ["GPU"]},
        accepts=[resource(Tag=["GPU", "SSD"]), resource(Tag="GPU")],
        refuses=[resource(), resource(Tag=["SSD"]), resource(Tag=["gpu"])],
    ),
    rule(
        "every-tq-tag-must-be-offered",
        {"tags": ["GPU", "SSD"]},
        accepts=[resource(Tag=["SSD", "GPU", "X"])],
        refuses=[resource(Tag=["GPU"]), resource(Tag="SSD")],
    ),
    rule(
        "any-in-resource-tags-lifts-the-condition",
        {"tags": ["GPU", "SSD"]},
        accepts=[resource(Tag="any"), resource(Tag=["SSD", "ANY"]), resource(tags=["Any"])],
        refuses=[resource(Tag=["SSD"])],
    ),
    rule(
        "every-required-tag-must-be-a-tq-tag",
        {"tags": ["GPU"]},
        accepts=[resource(Tag=["GPU", "SSD"], RequiredTag=["GPU"]), resource(Tag="any", RequiredTag="GPU")],
        refuses=[
            resource(Tag=["GPU", "SSD"], RequiredTag=["SSD"]),
            resource(Tag=["GPU", "SSD"], RequiredTag=["GPU", "SSD"]),
            resource(Tag="any", RequiredTag="SSD"),
        ],
    ),
    rule(
        "all-required-tags-carried",
        {"tags": ["GPU", "SSD"]},
        accepts=[resource(Tag=["GPU", "SSD"], RequiredTag=["GPU", "SSD"])],
        refuses=[resource(Tag=["GPU", "SSD", "X"], RequiredTag=["GPU", "X"])],
    ),
    rule(
        "tags-keep-their-rule-whatever-unstated-fields-says",
        {"tags": ["GPU"]},
        accepts=[resource(Tag=["GPU"]), resource(Tag=["GPU"], unstated_fields="strict")],
        refuses=[resource(), resource(unstated_fields="strict")],
    ),
    # --- tags as DIRAC's Matcher sends them: one string, in any of its list spellings
    *[
        rule(
            f"tags-as-one-string-{i}",
            {"tags": ["GPU", "SSD"]},
            accepts=[
                resource(Tag=sent),
                resource(tags=sent, required_tags=sent),
                resource(Tag=sent, RequiredTag="GPU"),
                resource(Tag=sent, RequiredTag=f"[{sent.strip()}]"),
            ],
            refuses=[resource(Tag="GPU")],
        )
        for i, sent in enumerate(["GPU, SSD", "[GPU, SSD]", "['GPU', \"SSD\"]", " [ SSD ,GPU ] ", "SSD,GPU,"])
    ],
    rule(
        "an-empty-tag-string-is-no-tag",
        {},
        accepts=[resource(Tag=""), resource(Tag="", RequiredTag=""), resource(Tag="[]"), resource(tags=" ")],
        refuses=[],
    ),
    rule(
        "an-empty-tag-string-offers-nothing",
        {"tags": ["GPU"]},
        accepts=[],
        refuses=[resource(Tag=""), resource(Tag="[]"), resource(tags=" ")],
    ),
    *[
        rule(
            f"any-among-tags-{i}",
            {"tags": ["GPU"]},
            accepts=[
                resource(Tag=f"SSD, {spelling}"),
                resource(Tag=["SSD", spelling]),
                resource(Tag="GPU", RequiredTag=spelling),
            ],
            refuses=[resource(Tag="SSD, anything")],  # a word is not `any`
        )
        for i, spelling in enumerate(["any", "ANY", "'Any'", "[any]", "any.", '"aNy"'])
    ],
    # --- tags derived from the slot
    rule(
        "maxram-yields-no-GB-tags",
        {"tags": ["4GB"]},
        accepts=[resource(Tag="4GB"), resource(Tag="4GB", MaxRAM=2000)],
        refuses=[resource(MaxRAM=4000), resource(MaxRAM=64000), resource(max_ram_mb=4999)],
    ),
    rule(
        "processors-give-2Processors-to-NProcessors",
        {"tags": ["4Processors"]},
        accepts=[resource(NumberOfProcessors=4), resource(NumberOfProcessors=8)],
        refuses=[resource(NumberOfProcessors=3), resource(NumberOfProcessors=1), resource()],
    ),
    rule(
        "4-processors-not-8Processors",
        {"tags": ["8Processors"]},
        accepts=[resource(number_of_processors=8)],
        refuses=[resource(NumberOfProcessors=4)],
    ),
    rule(
        "more-than-one-processor-gives-MultiProcessor-and-2Processors",
        {"tags": ["MultiProcessor", "2Processors"]},
        accepts=[resource(NumberOfProcessors=2), resource(NumberOfProcessors=4)],
        refuses=[resource(NumberOfProcessors=1), resource()],
    ),
    rule(
        "one-processor-gives-no-processor-tag",
        {"tags": ["1Processors"]},
        accepts=[resource(Tag="1Processors")],
        refuses=[resource(NumberOfProcessors=1)],
    ),
    rule(
        "whole-node-gives-WholeNode",
        {"tags": ["WholeNode"]},
        accepts=[
            resource(WholeNode=True),
            resource(WholeNode=True, RequiredTag="WholeNode"),
            # DIRAC's Matcher adds the tag for the key's presence, whatever its value
            resource(WholeNode=False),
            resource(WholeNode=""),
            resource(whole_node="no"),
            resource(WholeNode=0),
        ],
        refuses=[resource()],
    ),
    rule(
        "derived-tags-do-not-restrict-untagged-tqs",
        {},
        accepts=[resource(NumberOfProcessors=1), resource(MaxRAM=4000, NumberOfProcessors=4, WholeNode=True)],
        refuses=[resource(WholeNode=True, RequiredTag="WholeNode")],
    ),
    rule(
        "derived-and-given-tags-combine",
        {"tags": ["GPU", "MultiProcessor", "2Processors", "WholeNode"]},
        accepts=[resource(Tag="GPU", MaxRAM=8000, NumberOfProcessors=2, WholeNode=True)],
        refuses=[
            resource(MaxRAM=8000, NumberOfProcessors=2, WholeNode=True),
            resource(Tag="GPU", MaxRAM=8000, NumberOfProcessors=2),
        ],
    ),
    # --- owner, group, VO
    rule(
        "owner-group-restricts-to-those-groups",
        {"owner": "alice", "owner_group": "users"},
        accepts=[resource(OwnerGroup="users"), resource(OwnerGroup=["admins", "users"])],
        refuses=[resource(OwnerGroup="admins"), resource(OwnerGroup=["admins", "prod"])],
    ),
    rule(
        "owner-restricts-to-that-owner-in-a-non-sharing-group",
        {"owner": "alice", "owner_group": "users"},
        accepts=[resource(Owner="alice"), resource(Owner="alice", OwnerGroup="users")],
        refuses=[
            resource(Owner="bob"),
            resource(Owner="bob", OwnerGroup="users"),
            resource(Owner="alice", OwnerGroup="admins"),
        ],
    ),
    rule(
        "vo-must-be-equal-when-given",
        {"vo": "lhcb"},
        accepts=[resource(VirtualOrganization="lhcb"), resource()],
        refuses=[resource(VirtualOrganization="cms"), resource(VirtualOrganization="LHCb")],
    ),
    rule(
        "job-without-vo-has-the-default-vo",
        {},
        accepts=[resource(VirtualOrganization="default")],
        refuses=[resource(VirtualOrganization="lhcb")],
    ),
    # --- RAM ranges
    rule(
        "min-ram-needs-a-slot-reaching-it",
        {"min_ram_mb": 4000, "max_ram_mb": 8000},
        accepts=[resource(MaxRAM=4000), resource(MaxRAM=64000), resource(max_ram_mb="4000")],
        refuses=[resource(MaxRAM=3999), resource(MaxRAM=0), resource(max_ram_mb=2000)],
    ),
    rule(
        "no-maxram-puts-no-ram-condition",
        {"min_ram_mb": 16000},
        accepts=[resource(), resource(Site="any")],
        refuses=[resource(MaxRAM=8000)],
    ),
    rule(
        "a-queue-without-ram-goes-to-any-slot",
        {},
        accepts=[resource(MaxRAM=0), resource(MaxRAM=1), resource()],
        refuses=[],
    ),
    rule(
        "a-maximum-alone-puts-no-condition-on-the-slot",
        {"max_ram_mb": 1000},
        accepts=[resource(MaxRAM=500), resource(MaxRAM=64000)],
        refuses=[],
    ),
    # --- GPUs
    rule(
        "gpus-need-a-slot-offering-as-many",
        {"number_of_gpus": 2},
        accepts=[resource(NumberOfGPUs=2), resource(NumberOfGPUs=8), resource(number_of_gpus="2")],
        refuses=[resource(NumberOfGPUs=1), resource(NumberOfGPUs=0), resource()],
    ),
    rule(
        "a-queue-without-gpus-goes-to-any-slot",
        {},
        accepts=[resource(), resource(NumberOfGPUs=0), resource(NumberOfGPUs=4)],
        refuses=[],
    ),
    # --- numbers sent as text are numbers
    rule(
        "numbers-as-text",
        {"cpu_time": 80000, "min_ram_mb": 4000, "tags": ["4Processors"]},
        accepts=[
            {"Site": "S1", "CPUTime": "86400", "MaxRAM": " 4000 ", "NumberOfProcessors": "4", "PilotBenchmark": "12.5"},
            {
                "site": "S1",
                "cpu_time": "86400",
                "max_ram_mb": "4000",
                "number_of_processors": "4",
                "pilot_benchmark": "2.5e3",
            },
        ],
        refuses=[
            {"Site": "S1", "CPUTime": "86399", "MaxRAM": "4000", "NumberOfProcessors": "4"},
            {"Site": "S1", "CPUTime": "86400", "MaxRAM": "3999", "NumberOfProcessors": "4"},
            {"Site": "S1", "CPUTime": "86400", "MaxRAM": "4000", "NumberOfProcessors": "3"},
        ],
    ),
]


@pytest.mark.parametrize("spec, accepts, refuses", RULES)
def test_a_queue_is_taken_by_exactly_the_resources_its_rules_admit(spec, accepts, refuses):
    """The job's queue alone in the catalog: each resource of `accepts` may take it, none of `refuses`."""
    catalog = catalog_of([queue_row(1, **spec)])
    for body in accepts:
        assert takes(catalog, body) == {1}, f"not taken by {body}"
    for body in refuses:
        assert takes(catalog, body) == set(), f"taken by {body}"


@pytest.mark.parametrize(
    "other_value",
    [{"GridCE": "ce2.s1"}, {"Platform": ["el8"]}, {"JobType": "User"}],
    ids=["grid_ce", "platform", "job_type"],
)
def test_matching_unstated_fields_decides_what_a_field_left_out_means(other_value):
    """The setting, not the request: dirac (the default) puts no condition on a value the pilot
    does not state, strict gives it only queues listing none; a stated value that differs is
    refused in both modes."""
    [key] = other_value
    field = {"GridCE": "grid_ces", "Platform": "platforms", "JobType": "job_types"}[key]
    catalog = catalog_of([queue_row(1, **{field: ["listed"]})])
    for mode in ("strict", "dirac"):
        assert takes(catalog, resource(**other_value), mode) == set()
    assert takes(catalog, resource(), "strict") == set()
    assert takes(catalog, resource(), "dirac") == {1}


DIRAC_SPELLING = [
    {"Site": "S2", "CPUTime": BIG, "GridCE": "ce1", "Platform": ["el9", "el8"], "JobType": "User"},
    {"Site": "S1", "CPUTime": BIG, "Tag": ["GPU"], "RequiredTag": "GPU", "MaxRAM": 2000, "NumberOfProcessors": 2,
     "WholeNode": True},
    {"Site": "S1", "CPUTime": BIG, "OwnerGroup": ["users", "prod"], "Owner": "alice", "VirtualOrganization": "lhcb"},
]  # fmt: skip
SNAKE_CASE = {"Site": "site", "CPUTime": "cpu_time", "GridCE": "grid_ce", "Platform": "platform", "JobType": "job_type",
              "Tag": "tags", "RequiredTag": "required_tags", "MaxRAM": "max_ram_mb",
              "NumberOfProcessors": "number_of_processors", "WholeNode": "whole_node", "OwnerGroup": "owner_group",
              "Owner": "owner", "VirtualOrganization": "vo"}  # fmt: skip
UNKNOWN_KEYS = {"Setup": "LHCb-Production", "MaxCPUTime": 5, "LocalSE": ["CERN-DST"], "Nested": {"a": [1, {"b": None}]}}


@pytest.mark.parametrize("dirac", DIRAC_SPELLING, ids=["values", "tags", "owner-group-vo"])
def test_dirac_keys_snake_case_mixed_and_unknown_keys_take_the_same_queues(dirac):
    catalog = catalog_of([
        queue_row(i, **spec) for i, spec in enumerate([
            {}, {"cpu_time": 30000, "sites": ["S1"]}, {"cpu_time": 100000},
            {"sites": ["S2"], "grid_ces": ["ce1"], "platforms": ["el9"], "job_types": ["User"]},
            {"platforms": ["el7"]}, {"tags": ["GPU", "MultiProcessor"]}, {"tags": ["GPU", "WholeNode"]},
            {"tags": ["GPU"], "min_ram_mb": 2000}, {"min_ram_mb": 3000}, {"vo": "lhcb"},
            {"vo": "lhcb", "owner_group": "prod"}, {"vo": "lhcb", "owner": "bob"},
        ], start=1)
    ])  # fmt: skip
    expected = takes(catalog, dirac)
    assert expected, "the population should give this resource something"
    snake = {SNAKE_CASE[k]: v for k, v in dirac.items()}
    mixed = {(SNAKE_CASE[k] if i % 2 else k): v for i, (k, v) in enumerate(dirac.items())}
    for body in (snake, mixed, {**dirac, **UNKNOWN_KEYS}, {**snake, **UNKNOWN_KEYS}):
        assert takes(catalog, body) == expected, body
