"""The dirac priority policy on hand-worked cases."""

import pytest

from fairmatch.priority.dirac import MIN_PRIORITY, GroupPolicy, TqLoad, decide, workflow_of
from fairmatch.priority.settings import PrioritySettings
from fairmatch.taskqueues.matching_fields import AMOUNT_FIELDS


def tq(tq_id, owner, group, *real_priorities, workflow=None):
    """A TQ; each a workflow of its own unless `workflow` says otherwise."""
    return TqLoad(tq_id, owner, group, len(real_priorities), sum(real_priorities) / len(real_priorities),
                  sum(real_priorities), (f"own {tq_id}",) if workflow is None else workflow)  # fmt: skip


def test_job_sharing_group_is_one_entity():
    # g shares 1000 as one entity; 2 TQs of equal average -> 500 each, whoever owns them
    d = decide([tq(1, "alice", "g", 1), tq(2, "bob", "g", 1, 1, 1)], {"g": GroupPolicy(1000, job_sharing=True)})
    assert d.priorities == {1: 500, 2: 500}
    assert [(e.group, e.owner, e.share) for e in d.entities] == [("g", None, 1000)]


def test_other_groups_split_equally_among_owners_with_waiting_tqs():
    # S=1000, U=2 -> each owner 500; alice's two TQs split hers 250/250 (1/(N*U))
    d = decide([tq(1, "alice", "g", 1), tq(2, "alice", "g", 1), tq(3, "bob", "g", 1)], {"g": GroupPolicy(1000)})
    assert d.priorities == {1: 250, 2: 250, 3: 500}
    assert sum(d.priorities.values()) == 1000


def test_unconfigured_groups_get_the_default_share():
    d = decide([tq(1, "a", "x", 1), tq(2, "b", "y", 1)], {})
    assert d.priorities == {1: 1000, 2: 1000}


def test_avg_splits_by_average_real_priority():
    # averages 1 and 3 -> 1:3 of 1000 = 250, 750 (job counts do not matter)
    d = decide([tq(1, "a", "g", 1, 1, 1, 1), tq(2, "a", "g", 3)], {"g": GroupPolicy(1000)}, weight="avg")
    assert d.priorities == pytest.approx({1: 250, 2: 750})


def test_sum_splits_by_summed_real_priority():
    # sums 4 and 3 -> 4:3 of 700 = 400, 300
    d = decide([tq(1, "a", "g", 1, 1, 1, 1), tq(2, "a", "g", 3)], {"g": GroupPolicy(700)}, weight="sum")
    assert d.priorities == pytest.approx({1: 400, 2: 300})


def test_entity_totals_equal_entity_shares():
    loads = [tq(i, f"o{i % 3}", f"g{i % 2}", *(range(1, 2 + i % 4))) for i in range(1, 20)]
    d = decide(loads, {"g0": GroupPolicy(2000), "g1": GroupPolicy(500, job_sharing=True)})
    for e in d.entities:
        assert sum(d.priorities[i] for i in e.tq_ids) == pytest.approx(e.share)


def test_background_tqs_get_the_minimum_and_take_nothing():
    # user priority 0 -> real 1e-5 <= 0.1: background; the other TQ keeps the whole share
    groups = {"g": GroupPolicy(1000, allow_background_tqs=True)}
    d = decide([tq(1, "a", "g", 1e-5, 1e-5), tq(2, "a", "g", 1)], groups)
    assert d.priorities == {1: MIN_PRIORITY, 2: 1000}
    assert d.origins[1]["background"] is True


def test_without_background_tqs_a_tiny_weight_is_floored():
    # 1e-5 / (1 + 1e-5) of 1000 = 0.00999... stays; of share 1 it would be floored
    d = decide([tq(1, "a", "g", 1e-5), tq(2, "a", "g", 1)], {"g": GroupPolicy(1)})
    assert d.priorities[1] == MIN_PRIORITY
    assert d.origins[1]["floored"] is True
    assert d.priorities[2] == pytest.approx(1 / (1 + 1e-5))


def test_corrections_multiply_group_and_user_shares():
    # group g: 1000 * 0.5 = 500, split over 2 owners = 250 each; alice * 2 = 500, bob * 1
    d = decide(
        [tq(1, "alice", "g", 1), tq(2, "bob", "g", 1), tq(3, "carol", "h", 1)],
        {"g": GroupPolicy(1000), "h": GroupPolicy(1000)},
        group_corrections={"g": 0.5},
        user_corrections={("g", "alice"): 2.0},
    )
    assert d.priorities == {1: 500, 2: 250, 3: 1000}
    assert d.origins[1]["group_correction"] == 0.5 and d.origins[1]["user_correction"] == 2.0


def test_origin_explains_the_number():
    d = decide([tq(7, "a", "g", 2), tq(8, "a", "g", 6)], {"g": GroupPolicy(800)})
    o = d.origins[7]
    assert o["entity_share"] * o["weight"] / o["entity_weight"] == pytest.approx(d.priorities[7]) == 200


# --- DIRAC 9: an entity's queues that differ only in sites, banned sites or RAM are summed -------


def definition(owner="alice", group="g", **fields):
    """A task_queues row's definition: no restriction but what `fields` set."""
    row = {"owner": owner, "owner_group": group, "account": group, "vo": "lhcb", "cpu_time": 86400, "priority_class": 0,
           "job_class": None, "sites": [], "banned_sites": [], "grid_ces": [], "platforms": [], "job_types": [],
           "tags": [], **dict.fromkeys(AMOUNT_FIELDS, 0)}  # fmt: skip
    return {**row, **fields}


def test_sites_banned_sites_and_ram_make_variants_of_one_workflow():
    base = workflow_of(definition(job_types=["MCSimulation"]))
    variants = [
        definition(job_types=["MCSimulation"], sites=["LCG.CERN.cern"]),
        definition(job_types=["MCSimulation"], sites=["LCG.CNAF.it", "LCG.PIC.es"], banned_sites=["LCG.RAL.uk"]),
        definition(job_types=["MCSimulation"], min_ram_mb=4000, max_ram_mb=8000),
    ]
    assert all(workflow_of(v) == base for v in variants)
    others = [
        definition(job_types=["User"]),
        definition(job_types=["MCSimulation"], tags=["GPU"]),
        definition(job_types=["MCSimulation"], platforms=["x86_64-el9"]),
        definition(job_types=["MCSimulation"], grid_ces=["ce1.cern.ch"]),
        definition(job_types=["MCSimulation"], cpu_time=3600),
        definition(job_types=["MCSimulation"], priority_class=1),
        definition(job_types=["MCSimulation"], job_class="long"),
        definition(job_types=["MCSimulation"], vo="atlas"),
        definition("bob", job_types=["MCSimulation"]),
        definition(group="h", job_types=["MCSimulation"]),
        definition(job_types=["MCSimulation"], account="physics"),
    ]
    assert all(workflow_of(o) != base for o in others)


def test_a_workflow_split_over_site_queues_gets_the_sum_at_each_site():
    # alice (share 1000, alone in g) has 4 TQs of equal average real priority 1 -> 250 each.
    # TQs 1, 2, 3 are one workflow at three sites: each gets 250 + 250 + 250 = 750; TQ 4 keeps 250.
    loads = [tq(1, "alice", "g", 1, workflow=("mc",)), tq(2, "alice", "g", 1, 1, workflow=("mc",)),
             tq(3, "alice", "g", 1, workflow=("mc",)), tq(4, "alice", "g", 1, workflow=("user",))]  # fmt: skip
    d = decide(loads, {"g": GroupPolicy(1000)})
    assert d.priorities == pytest.approx({1: 750, 2: 750, 3: 750, 4: 250})
    assert d.origins[2]["own_priority"] == pytest.approx(250)
    assert d.origins[2]["variants"] == {"task_queues": [1, 2, 3], "count": 3, "summed": True}
    assert d.origins[4]["variants"] == {"task_queues": [4], "count": 1, "summed": False}


def test_variants_sum_their_unequal_shares_and_turned_off_keep_their_own():
    # averages 1, 3 (workflow w) and 4 (alone): 1000 * 1/8 = 125, 375, 500; w's two get 500 each
    loads = [tq(1, "a", "g", 1, workflow=("w",)), tq(2, "a", "g", 3, workflow=("w",)), tq(3, "a", "g", 4)]
    assert decide(loads, {"g": GroupPolicy(1000)}).priorities == pytest.approx({1: 500, 2: 500, 3: 500})
    off = decide(loads, {"g": GroupPolicy(1000)}, sum_variants=False)
    assert off.priorities == pytest.approx({1: 125, 2: 375, 3: 500})
    assert off.origins[1]["variants"] == {"task_queues": [1, 2], "count": 2, "summed": False}


def test_variants_are_summed_within_an_entity_only():
    # g splits 1000 between alice and bob (500 each); each has two TQs (250 each) and
    # the same definition apart from the owner; only each owner's own two are summed
    same = ("mc",)
    loads = [tq(1, "alice", "g", 1, workflow=("alice", *same)), tq(2, "alice", "g", 1, workflow=("alice", *same)),
             tq(3, "bob", "g", 1, workflow=("bob", *same)), tq(4, "bob", "g", 1, workflow=("bob", *same))]  # fmt: skip
    assert decide(loads, {"g": GroupPolicy(1000)}).priorities == pytest.approx({1: 500, 2: 500, 3: 500, 4: 500})
    # and across groups never: h's TQ 5 with g's workflow keeps its own share
    loads.append(tq(5, "alice", "h", 1, workflow=("alice", *same)))
    assert decide(loads, {"g": GroupPolicy(1000), "h": GroupPolicy(40)}).priorities[5] == pytest.approx(40)


def test_variants_sum_after_the_floor_and_a_background_variant_gets_the_sum():
    # allow_background_tqs: TQ 1 (user priority 0) is background, 0.001; TQ 2 takes the whole 1000.
    # DIRAC sums after the floor: both, one workflow, get 1000.001.
    loads = [tq(1, "a", "g", 1e-5, workflow=("w",)), tq(2, "a", "g", 1, workflow=("w",))]
    d = decide(loads, {"g": GroupPolicy(1000, allow_background_tqs=True)})
    assert d.priorities == pytest.approx({1: 1000 + MIN_PRIORITY, 2: 1000 + MIN_PRIORITY})
    assert d.origins[1]["background"] is True and d.origins[1]["own_priority"] == MIN_PRIORITY


def test_turning_the_sum_off_is_refused_under_another_policy():
    assert PrioritySettings(sum_site_variants=False).sum_site_variants is False
    with pytest.raises(ValueError, match="sum_site_variants"):
        PrioritySettings(policy="rank", sum_site_variants=False)
