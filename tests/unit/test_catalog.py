"""The per-process catalog of task queues: its bit sets, and how rows update it."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from fairmatch.matching.eligibility import CONDITION_NAMES, analysis, conditions, eligible
from fairmatch.matching.resource import ResourceDescription
from fairmatch.matching.settings import MatchingSettings
from tests.unit.catalogs import CHANGED, catalog_of, tq_row


def query(unstated_fields: str = "strict", **body):
    described = ResourceDescription.model_validate({"Site": "A", "CPUTime": 86400, **body})
    return described.to_query(MatchingSettings(unstated_fields=unstated_fields))


def ids(catalog, bits):
    return set(catalog.tq_ids(bits))


def test_each_condition_is_the_set_of_queues_that_pass_it():
    catalog = catalog_of(
        [
            tq_row(1),
            tq_row(2, sites=["A"], platforms=["el9"]),
            tq_row(3, sites=["B"]),
            tq_row(4, banned_sites=["A"]),
            tq_row(5, tags=["gpu"]),
            tq_row(6, tags=["gpu", "ssd"]),
            tq_row(7, cpu_time=172800),
            tq_row(8, owner="bob", owner_group="shared"),
            tq_row(9, vo="other"),
        ],
        sharing_groups=frozenset({"shared"}),
    )
    found = dict(conditions(catalog, query(Platform="el9", Tag=["gpu"], Owner="alice", VirtualOrganization="vo")))
    assert ids(catalog, found["site"]) == {1, 2, 4, 5, 6, 7, 8, 9}
    assert ids(catalog, found["banned_site"]) == set(range(1, 10)) - {4}
    assert ids(catalog, found["platform"]) == set(range(1, 10))  # only TQ 2 lists platforms, and el9
    assert ids(catalog, found["tags"]) == set(range(1, 10)) - {6}  # ssd is not offered
    assert ids(catalog, found["cpu_time"]) == set(range(1, 10)) - {7}
    assert ids(catalog, found["owner"]) == set()  # alice owns nothing; an Owner alone asks for her TQs
    assert ids(catalog, found["vo"]) == set(range(1, 10)) - {9}
    assert ids(
        catalog, eligible(catalog, query(Platform="el9", Tag=["gpu"], Owner="bob", VirtualOrganization="vo"))
    ) == {8}


def test_unstated_fields_take_only_queues_without_values_and_any_lifts_the_condition():
    catalog = catalog_of([tq_row(1), tq_row(2, platforms=["el9"]), tq_row(3, tags=["gpu"])])
    assert ids(catalog, eligible(catalog, query())) == {1}  # no platform and no tags stated
    assert ids(catalog, eligible(catalog, query(Platform="any", Tag=["any"]))) == {1, 2, 3}
    assert ids(catalog, eligible(catalog, query(Tag=["gpu"], RequiredTag=["gpu"]))) == {3}


def test_with_unstated_fields_dirac_a_field_left_out_is_no_condition_but_tags_keep_theirs():
    catalog = catalog_of([tq_row(1), tq_row(2, platforms=["el9"], job_types=["MC"]), tq_row(3, tags=["gpu"])])
    assert ids(catalog, eligible(catalog, query("dirac"))) == {1, 2}  # tags: only what is offered
    assert ids(catalog, eligible(catalog, query("dirac", Platform="el8"))) == {1}  # a stated value still counts
    assert ids(catalog, eligible(catalog, query("dirac", Tag=["gpu"]))) == {1, 2, 3}


def test_site_limit_bans_exclude_the_values_at_their_limit():
    catalog = catalog_of([tq_row(1, job_types=["MC"]), tq_row(2, job_types=["User"]), tq_row(3, owner_group="g2")])
    q = dataclasses.replace(query(JobType=["MC", "User"]), banned_job_types=frozenset({"MC"}))
    assert ids(catalog, eligible(catalog, q)) == {2, 3}  # 3 lists no job type, so none is banned
    q = dataclasses.replace(query(JobType=["MC", "User"]), banned_owner_groups=frozenset({"group"}))
    assert ids(catalog, eligible(catalog, q)) == {3}


def test_a_reused_id_with_other_requirements_is_a_new_queue():
    catalog = catalog_of([tq_row(1, sites=["A"])])
    catalog.apply([tq_row(1, requirements_hash="other", sites=["B"], changed_at=CHANGED + timedelta(seconds=1))])
    assert ids(catalog, eligible(catalog, query())) == set()
    assert ids(catalog, eligible(catalog, query(Site="B"))) == {1}


def test_a_drained_queue_comes_back_when_its_row_changes_and_old_rows_are_ignored():
    catalog = catalog_of([tq_row(1)])
    catalog.drain(catalog.entries[1])
    assert catalog.live == 0
    catalog.apply([tq_row(1, changed_at=CHANGED)])  # the same state read again within the margin
    assert catalog.live == 0  # still known to be empty
    newer = CHANGED + timedelta(seconds=5)
    catalog.apply([tq_row(1, priority=7.0, changed_at=newer)])  # new jobs: live again
    assert catalog.live != 0
    catalog.apply([tq_row(1, priority=1.0, changed_at=CHANGED)])  # older: kept out
    assert catalog.entries[1].priority == 7.0 and catalog.latest_change == newer


def test_a_queue_without_levels_is_not_live():
    catalog = catalog_of([tq_row(1, levels=[]), tq_row(2)])
    assert ids(catalog, catalog.live) == {2}


def test_tags_within_counts_the_offered_tags_of_each_queue():
    catalog = catalog_of([tq_row(1), tq_row(2, tags=["a"]), tq_row(3, tags=["a", "b"]), tq_row(4, tags=["c"])])
    assert ids(catalog, catalog.tags_within(frozenset())) == {1}
    assert ids(catalog, catalog.tags_within(frozenset({"a"}))) == {1, 2}
    assert ids(catalog, catalog.tags_within(frozenset({"a", "b", "x"}))) == {1, 2, 3}
    assert ids(catalog, catalog.tags_within(frozenset({"a", "b", "c"}))) == {1, 2, 3, 4}


def test_deleted_queues_leave_the_catalog():
    catalog = catalog_of([tq_row(1), tq_row(2)])
    catalog.remove([1, 99])
    assert ids(catalog, catalog.live) == {2} and catalog.wasted() == 1 and len(catalog) == 1


def test_analysis_counts_the_live_queues_each_condition_rejects_and_keeps_every_key():
    catalog = catalog_of([
        tq_row(1),                                              # eligible
        tq_row(2, sites=["B"]),                                 # site
        tq_row(3, cpu_time=10**6, platforms=["el9"]),           # cpu_time and platform: counted under both
        tq_row(4, tags=["gpu"], banned_sites=["A"]),            # tags and banned_site
        tq_row(5, owner_group="other"),                         # owner_group
        tq_row(6, sites=["B"], levels=[]),                      # no waiting jobs: not considered
    ])  # fmt: skip
    found = analysis(catalog, query(Platform="el8", OwnerGroup=["group"]))
    assert (found["task_queues_considered"], found["eligible"]) == (5, 1)
    assert list(found["rejected_by"]) == list(CONDITION_NAMES)
    assert {k: v for k, v in found["rejected_by"].items() if v} == {
        "site": 1, "cpu_time": 1, "platform": 1, "tags": 1, "banned_site": 1, "owner_group": 1,
    }  # fmt: skip
    banned = dataclasses.replace(query(), banned_owner_groups=frozenset({"group"}))
    assert analysis(catalog, banned)["rejected_by"]["site_limit"] == 4  # all but the other group's queue


def test_ram_condition_takes_queues_without_a_minimum_or_with_one_the_slot_reaches():
    catalog = catalog_of([
        tq_row(1), tq_row(2, min_ram_mb=2000, max_ram_mb=4000), tq_row(3, min_ram_mb=4000),
        tq_row(4, min_ram_mb=8000, max_ram_mb=8000), tq_row(5, min_ram_mb=4000, max_ram_mb=16000),
        tq_row(6, max_ram_mb=1000),  # a maximum alone puts no condition on the slot
    ])  # fmt: skip
    assert catalog.minima["min_ram_mb"].values == [2000, 4000, 8000]
    for mb, expected in ((0, {1, 6}), (1999, {1, 6}), (2000, {1, 2, 6}), (3999, {1, 2, 6}),
                         (4000, {1, 2, 3, 5, 6}), (7999, {1, 2, 3, 5, 6}), (8000, set(range(1, 7))),
                         (10**6, set(range(1, 7)))):  # fmt: skip
        assert ids(catalog, catalog.asking_at_most("min_ram_mb", mb)) == expected, mb
        assert ids(catalog, eligible(catalog, query(MaxRAM=mb))) == expected, mb
        assert ids(catalog, dict(conditions(catalog, query(MaxRAM=mb)))["ram"]) == expected
    # no MaxRAM, no RAM condition
    assert "ram" not in dict(conditions(catalog, query()))
    assert ids(catalog, eligible(catalog, query())) == set(range(1, 7))


def test_ram_sets_follow_queues_arriving_later():
    catalog = catalog_of([tq_row(1, min_ram_mb=4000)])
    assert ids(catalog, catalog.asking_at_most("min_ram_mb", 4000)) == {1}
    catalog.apply([tq_row(2, min_ram_mb=4000), tq_row(3, min_ram_mb=1000), tq_row(4, min_ram_mb=9000)])
    assert ids(catalog, catalog.asking_at_most("min_ram_mb", 999)) == set()
    assert ids(catalog, catalog.asking_at_most("min_ram_mb", 4000)) == {1, 2, 3}
    catalog.apply([tq_row(5)])
    assert ids(catalog, catalog.asking_at_most("min_ram_mb", 4000)) == {1, 2, 3, 5}
    assert ids(catalog, catalog.asking_at_most("min_ram_mb", 9000)) == {1, 2, 3, 4, 5}


def test_an_owner_alone_asks_for_its_queues_and_job_sharing_counts_only_with_groups():
    catalog = catalog_of(
        [tq_row(1, owner="alice", owner_group="shared"), tq_row(2, owner="bob", owner_group="shared"),
         tq_row(3, owner="bob", owner_group="private"), tq_row(4, owner="alice", owner_group="private")],
        sharing_groups=frozenset({"shared"}),
    )  # fmt: skip
    assert ids(catalog, eligible(catalog, query(Owner="alice"))) == {1, 4}
    assert ids(catalog, eligible(catalog, query(Owner="alice", OwnerGroup="shared"))) == {1, 2}
    assert ids(catalog, eligible(catalog, query(Owner="alice", OwnerGroup=["shared", "private"]))) == {1, 2, 4}
    assert ids(catalog, eligible(catalog, query(Owner="alice", OwnerGroup="private"))) == {4}
    assert ids(catalog, eligible(catalog, query(OwnerGroup="shared"))) == {1, 2}


def test_several_sites_take_a_queue_one_of_them_may_run_and_does_not_ban():
    catalog = catalog_of([
        tq_row(1),                                          # anywhere
        tq_row(2, sites=["A"]),
        tq_row(3, sites=["C"]),                             # none of the named sites
        tq_row(4, banned_sites=["A"]),                      # B may
        tq_row(5, banned_sites=["A", "B"]),                 # every named site banned
        tq_row(6, sites=["A"], banned_sites=["A"]),         # its only site banned: no site left
        tq_row(7, sites=["A", "B"], banned_sites=["A"]),    # B
        tq_row(8, sites=["C"], banned_sites=["A", "B"]),    # site, and every named site banned
    ])  # fmt: skip
    q = query(Site=["A", "B"])
    assert ids(catalog, eligible(catalog, q)) == {1, 2, 4, 7}
    found = analysis(catalog, q)
    assert {k: v for k, v in found["rejected_by"].items() if v} == {"site": 2, "banned_site": 3}
    # one site as a list is that site
    assert ids(catalog, eligible(catalog, query(Site=["A"]))) == ids(catalog, eligible(catalog, query(Site="A")))
    assert ids(catalog, eligible(catalog, query(Site="B"))) == {1, 4, 7}
    # any of them lifts the site conditions, bans included
    assert ids(catalog, eligible(catalog, query(Site=["A", "Any"]))) == set(range(1, 9))


def test_site_mask_takes_only_queues_listing_a_masked_job_type():
    catalog = catalog_of([tq_row(1), tq_row(2, job_types=["Test"]), tq_row(3, job_types=["User", "Test"]),
                          tq_row(4, job_types=["User"])])  # fmt: skip
    base = query("dirac")
    assert ids(catalog, eligible(catalog, base)) == {1, 2, 3, 4} and "site_mask" not in dict(conditions(catalog, base))
    masked = dataclasses.replace(base, masked_job_types=frozenset({"Test"}))
    assert ids(catalog, eligible(catalog, masked)) == {2, 3}  # a queue listing no job type is out
    assert analysis(catalog, masked)["rejected_by"]["site_mask"] == 2
    assert ids(catalog, eligible(catalog, dataclasses.replace(base, masked_job_types=frozenset()))) == set()
