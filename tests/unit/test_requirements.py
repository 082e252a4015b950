"""Requirement normalisation, CPU-time buckets, the TQ hash and real priorities."""

import hashlib
import json

import pytest

from fairmatch.taskqueues.requirements import Requirements, bucket_cpu_time, real_priority, requeued
from fairmatch.taskqueues.settings import DIRAC_CPU_BUCKETS

BUCKETS_2009 = [500, 5000, 50000, 300000]


@pytest.mark.parametrize(
    ("cpu_time", "bucket"),
    [(0, 360), (1, 360), (360, 360), (361, 1800), (5000, 21600), (86400, 86400),
     (86401, 172800), (1080000, 1080000), (5_000_000, 1080000)],
)  # fmt: skip
def test_dirac_buckets_round_up_and_cap(cpu_time, bucket):
    assert bucket_cpu_time(cpu_time, DIRAC_CPU_BUCKETS) == bucket


@pytest.mark.parametrize(("cpu_time", "bucket"), [(0, 500), (500, 500), (501, 5000), (49999, 50000), (300001, 300000)])
def test_2009_buckets_work_too(cpu_time, bucket):
    assert bucket_cpu_time(cpu_time, BUCKETS_2009) == bucket


@pytest.mark.parametrize(("user", "real"), [(0, 1e-5), (1, 1.0), (5, 5.0), (9, 9.0), (10, 1e6)])
def test_real_priority_mapping(user, real):
    assert real_priority(user) == real


def build(**kwargs):
    base = dict(owner="alice", owner_group="g", vo="vo", cpu_time=100, priority_class=0, buckets=BUCKETS_2009)
    return Requirements.build(**{**base, **kwargs})


def test_sets_are_sorted_and_deduplicated():
    r = build(sites=["B", "A", "A", " C "], tags=["t2", "t1", "t1"])
    assert r.sites == ("A", "B", "C")
    assert r.tags == ("t1", "t2")


def test_identical_requirements_hash_alike_whatever_the_order():
    assert build(sites=["B", "A"], platforms=["p"]).hash == build(sites=["A", "B", "A"], platforms=["p"]).hash


def test_cpu_time_in_the_same_bucket_hashes_alike():
    assert build(cpu_time=600).hash == build(cpu_time=4000).hash
    assert build(cpu_time=400).hash != build(cpu_time=600).hash


@pytest.mark.parametrize(
    "change",
    [{"owner": "bob"}, {"owner_group": "h"}, {"vo": "other"}, {"priority_class": 1},
     {"sites": ["A"]}, {"banned_sites": ["A"]}, {"grid_ces": ["ce"]}, {"platforms": ["p"]},
     {"job_types": ["User"]}, {"tags": ["t"]}, {"min_ram_mb": 2000}, {"max_ram_mb": 4000},
     {"min_ram_mb": 2000, "max_ram_mb": 4000}, {"account": "physics"}],
)  # fmt: skip
def test_any_difference_gives_another_hash(change):
    assert build(**change).hash != build().hash


def test_a_value_in_one_field_is_not_the_same_value_in_another():
    assert build(sites=["X"]).hash != build(banned_sites=["X"]).hash


@pytest.mark.parametrize("field", ["sites", "grid_ces", "platforms", "job_types"])
def test_any_means_no_restriction_where_dirac_allows_it(field):
    assert build(**{field: ["ANY", "x"]}).values(field) == ()


@pytest.mark.parametrize("field", ["banned_sites", "tags"])
def test_any_is_literal_for_tags_and_bans(field):
    assert build(**{field: ["any"]}).values(field) == ("any",)


def test_json_round_trip():
    r = build(sites=["A"], tags=["t"])
    assert Requirements.from_json(r.to_json()) == r
    assert Requirements.from_json(r.to_json()).hash == r.hash


def test_unknown_field_is_refused():
    with pytest.raises(TypeError):
        build(colour=["red"])


# the hash of build() computed before RAM ranges existed: the queues it names keep their identity
PLAIN_HASH = "9338939aaaaa48cebb20af61c99ba2f0139343ae8d1be2e9a0c42cab85e8f3c4"


def test_without_ram_the_canonical_form_and_hash_are_what_they_were():
    r = build(sites=["A"], tags=["t"], job_class="short")
    assert "min_ram_mb" not in r.to_json() and "max_ram_mb" not in r.to_json()
    assert r.to_json() == {
        "owner": "alice", "owner_group": "g", "vo": "vo", "cpu_time": 500, "priority_class": 0,
        "job_class": "short", "sites": ["A"], "banned_sites": [], "grid_ces": [], "platforms": [],
        "job_types": [], "tags": ["t"],
    }  # fmt: skip
    assert build().hash == PLAIN_HASH
    assert build(min_ram_mb=0, max_ram_mb=0).hash == PLAIN_HASH
    assert build(account="g").hash == PLAIN_HASH == build(account="").hash


def test_ram_is_part_of_the_queue_and_round_trips():
    r = build(min_ram_mb=2000, max_ram_mb=4000)
    assert r.to_json()["min_ram_mb"] == 2000 and r.to_json()["max_ram_mb"] == 4000
    assert Requirements.from_json(r.to_json()) == r
    assert build(min_ram_mb=2000).hash != build(max_ram_mb=2000).hash
    # a job's spec stored before RAM ranges reads as none
    stored = build().to_json()
    assert (
        Requirements.from_json(stored).amount("min_ram_mb") == 0 == Requirements.from_json(stored).amount("max_ram_mb")
    )


def test_the_hash_digests_the_canonical_form_alone_and_is_kept():
    """A queue's name is the SHA-256 of its requirements' sorted canonical JSON: the cached
    digest is no part of that form, and a hash asked for twice is the same."""
    req = build(sites=["B", "A"], tags=["gpu"], min_ram_mb=2048)
    canonical = req.to_json()
    assert "_digest" not in canonical and canonical["sites"] == ["A", "B"] and canonical["min_ram_mb"] == 2048
    digest = hashlib.sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert req.hash == digest == req.hash
    assert Requirements.from_json(canonical) == req and Requirements.from_json(canonical).hash == digest
    assert "min_ram_mb" not in build().to_json()  # a queue without a RAM range keeps its older hash


def test_the_account_is_part_of_the_queue_and_defaults_to_the_owner_group():
    """Jobs charged to their owner group share a queue whether they name it or not; those
    charged to another account have a queue of their own, and its spec names the account."""
    assert build().account == "g" == build(account="g").account
    assert build(account="g") == build()
    charged = build(account="physics")
    assert charged.account == "physics" and charged.to_json()["account"] == "physics"
    assert "account" not in build(account="g").to_json()
    assert Requirements.from_json(charged.to_json()) == charged
    assert Requirements.from_json(build().to_json()).account == "g"


def test_a_job_queued_again_takes_the_account_it_is_charged_to():
    """A spec stored before accounts were part of a queue does not name it: queued again, the
    job goes to the queue of the account it is charged to."""
    stored = build().to_json()
    assert requeued(stored, 1, "physics") == build(account="physics", priority_class=1)
    assert requeued(stored, 0, "g").hash == PLAIN_HASH
