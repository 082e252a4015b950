"""The GPU rule: a job asking for n GPUs goes only to a pilot offering at least n
(`NumberOfGPUs`); a job asking for none goes to any pilot; a pilot that states no
`NumberOfGPUs` offers none, whatever `matching.unstated_fields` says."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fairmatch.jobs.models import JobSpec
from fairmatch.matching.eligibility import CONDITION_NAMES, analysis, conditions, eligible
from fairmatch.matching.resource import ResourceDescription
from fairmatch.matching.settings import MatchingSettings
from fairmatch.taskqueues.matching_fields import MAX_GPUS
from fairmatch.taskqueues.requirements import Requirements
from tests.unit.catalogs import catalog_of, tq_row

# queue id: the GPUs its jobs ask for
ASKING = {1: 0, 2: 1, 3: 2, 4: 4, 5: 8}
EVERY = set(ASKING)


def query(rule: str, **body):
    described = ResourceDescription.model_validate({"Site": "A", "CPUTime": 86400, **body})
    return described.to_query(MatchingSettings(unstated_fields=rule))


def ids(catalog, bits):
    return set(catalog.tq_ids(bits))


@pytest.mark.parametrize("rule", ["dirac", "strict"])
@pytest.mark.parametrize(
    ("stated", "expected"),
    [
        ({}, {1}),  # no NumberOfGPUs: none offered, under either rule
        ({"NumberOfGPUs": 0}, {1}),
        ({"NumberOfGPUs": 1}, {1, 2}),
        ({"NumberOfGPUs": 2}, {1, 2, 3}),
        ({"NumberOfGPUs": 3}, {1, 2, 3}),
        ({"NumberOfGPUs": 4}, {1, 2, 3, 4}),
        ({"NumberOfGPUs": 8}, EVERY),
        ({"NumberOfGPUs": MAX_GPUS}, EVERY),
        ({"number_of_gpus": 2}, {1, 2, 3}),  # the snake_case key
        ({"NumberOfGPUs": " 4 "}, {1, 2, 3, 4}),  # a number written as text
    ],
)
def test_a_queue_passes_when_the_pilot_offers_at_least_the_gpus_its_jobs_ask_for(rule, stated, expected):
    catalog = catalog_of([tq_row(tq, number_of_gpus=n) for tq, n in ASKING.items()])
    q = query(rule, **stated)
    assert ids(catalog, eligible(catalog, q)) == expected
    assert ids(catalog, dict(conditions(catalog, q))["gpus"]) == expected
    assert analysis(catalog, q)["rejected_by"]["gpus"] == len(EVERY - expected)


def test_gpus_are_a_condition_of_their_own_beside_memory_and_follow_queues_arriving_later():
    catalog = catalog_of([tq_row(1), tq_row(2, number_of_gpus=2, min_ram_mb=8000)])
    assert ids(catalog, eligible(catalog, query("dirac", NumberOfGPUs=2))) == {1, 2}  # no MaxRAM: no RAM condition
    assert ids(catalog, eligible(catalog, query("dirac", NumberOfGPUs=2, MaxRAM=4000))) == {1}
    found = analysis(catalog, query("dirac", NumberOfGPUs=1, MaxRAM=4000))["rejected_by"]
    assert (found["gpus"], found["ram"]) == (1, 1)  # one queue failing both counts under each
    catalog.apply([tq_row(3, number_of_gpus=1), tq_row(4, number_of_gpus=3)])
    assert ids(catalog, eligible(catalog, query("dirac", NumberOfGPUs=2))) == {1, 2, 3}
    assert ids(catalog, eligible(catalog, query("dirac", NumberOfGPUs=3))) == {1, 2, 3, 4}
    assert CONDITION_NAMES.index("gpus") < CONDITION_NAMES.index("site")


@pytest.mark.parametrize("sent", [-1, MAX_GPUS + 1, 1.5, "two", True, "2.0"])
def test_a_pilot_stating_gpus_states_a_count(sent):
    with pytest.raises(ValidationError) as caught:
        ResourceDescription.model_validate({"Site": "A", "CPUTime": 1, "NumberOfGPUs": sent})
    assert caught.value.errors()[0]["loc"] == ("NumberOfGPUs",)


@pytest.mark.parametrize(("asked", "valid"), [(0, True), (1, True), (MAX_GPUS, True), (-1, False),
                                              (MAX_GPUS + 1, False), ("2", False), (2.0, False)])  # fmt: skip
def test_a_job_asks_for_a_count_of_gpus(asked, valid):
    given = {"owner": "a", "owner_group": "g", "number_of_gpus": asked}
    if valid:
        assert JobSpec.model_validate(given).number_of_gpus == asked
    else:
        with pytest.raises(ValidationError):
            JobSpec.model_validate(given)


def test_gpus_are_part_of_the_queue_and_a_queue_asking_for_none_keeps_its_hash():
    def build(**given):
        return Requirements.build(owner="alice", owner_group="g", vo="vo", cpu_time=500, priority_class=0,
                                  buckets=[500], **given)  # fmt: skip

    assert build(number_of_gpus=0).hash == build().hash
    assert "number_of_gpus" not in build().to_json()
    two = build(number_of_gpus=2)
    assert two.hash != build().hash != build(number_of_gpus=1).hash
    assert two.to_json()["number_of_gpus"] == 2 and two.amount("number_of_gpus") == 2
    assert Requirements.from_json(two.to_json()) == two
