"""Fair share over an association tree: Slurm's classic factor and Fair Tree ranks, on hand-worked numbers."""

from __future__ import annotations

import math

import pytest

from fairmatch.accounting.tree import IMPLICIT_ROOT
from fairmatch.priority import fairshare as fs
from fairmatch.priority.groups import DEFAULT_JOB_SHARE

ROOT = ("root", "")


def acct(name: str) -> tuple[str, str]:
    return (name, "")


def three_level_tree() -> dict:
    """root -> VO accounts -> group accounts -> users.

    lhcb 50 -> lhcb_prod -> pat;  atlas 30 -> atlas_sim 3 -> sam, atlas_ana 1 -> ann;
    cms 20 -> cms_user -> carl.
    """
    return {
        ROOT: (None, 1.0),
        acct("lhcb"): (ROOT, 50.0),
        acct("atlas"): (ROOT, 30.0),
        acct("cms"): (ROOT, 20.0),
        acct("lhcb_prod"): (acct("lhcb"), 1.0),
        acct("atlas_sim"): (acct("atlas"), 3.0),
        acct("atlas_ana"): (acct("atlas"), 1.0),
        acct("cms_user"): (acct("cms"), 1.0),
        ("lhcb_prod", "pat"): (acct("lhcb_prod"), 1.0),
        ("atlas_sim", "sam"): (acct("atlas_sim"), 1.0),
        ("atlas_ana", "ann"): (acct("atlas_ana"), 1.0),
        ("cms_user", "carl"): (acct("cms_user"), 1.0),
    }


def charged(*charges: tuple[list[tuple[str, str]], float]) -> dict:
    """Usage as charge() leaves it: each charge added to the node and all its ancestors."""
    usage: dict = {}
    for path, amount in charges:
        for node in path:
            usage[node] = usage.get(node, 0.0) + amount
    return usage


# pat used exactly lhcb's half; sam used atlas's 30% and more; nobody in cms ran anything
THREE_LEVEL_USAGE = charged(
    ([("lhcb_prod", "pat"), acct("lhcb_prod"), acct("lhcb"), ROOT], 500.0),
    ([("atlas_sim", "sam"), acct("atlas_sim"), acct("atlas"), ROOT], 500.0),
)


def test_classic_factor_is_half_at_share_one_unused_and_below_half_over_served():
    rows = fs.classic(three_level_tree(), THREE_LEVEL_USAGE)

    # lhcb: S = 50/100 = 0.5, U = 500/1000 = 0.5 -> 2^-1; its single-child chain stays at share
    for node in (acct("lhcb"), acct("lhcb_prod"), ("lhcb_prod", "pat")):
        assert rows[node].norm_shares == pytest.approx(0.5)
        assert rows[node].effective_usage == pytest.approx(0.5)
        assert rows[node].factor == pytest.approx(0.5, rel=1e-12)
    # cms and everything below used nothing: effective usage 0 -> factor 1
    for node in (acct("cms"), acct("cms_user"), ("cms_user", "carl")):
        assert rows[node].effective_usage == 0.0
        assert rows[node].factor == 1.0
    # atlas: S = 0.3, U_eff = 0.5 -> 2^(-5/3)
    assert rows[acct("atlas")].factor == pytest.approx(2 ** (-5 / 3))
    assert rows[acct("atlas")].factor < 0.5
    # atlas_sim: S = 0.3 * 3/4 = 0.225, U_eff = 0.5 + (0.5 - 0.5) * 3/4 = 0.5 -> 2^(-20/9)
    sim = rows[acct("atlas_sim")]
    assert (sim.norm_shares, sim.effective_usage) == (pytest.approx(0.225), pytest.approx(0.5))
    assert sim.factor == pytest.approx(2 ** (-20 / 9))
    assert rows[("atlas_sim", "sam")].factor == pytest.approx(2 ** (-20 / 9))
    # atlas_ana never ran, but its parent is over-served: U_eff = 0 + (0.5 - 0) * 1/4 = 0.125, S = 0.075
    ana = rows[acct("atlas_ana")]
    assert (ana.norm_shares, ana.effective_usage) == (pytest.approx(0.075), pytest.approx(0.125))
    assert ana.factor == pytest.approx(2 ** (-5 / 3))
    assert rows[("atlas_ana", "ann")].effective_usage == pytest.approx(0.125)


def test_classic_reproduces_slurms_documented_example():
    """The worked example of Slurm's classic fair-share page: A 40 (B 30, C 10), D 60 (E 25, F 35)."""
    tree = {
        ROOT: (None, 1.0),
        acct("A"): (ROOT, 40.0), acct("D"): (ROOT, 60.0),
        acct("B"): (acct("A"), 30.0), acct("C"): (acct("A"), 10.0),
        acct("E"): (acct("D"), 25.0), acct("F"): (acct("D"), 35.0),
        ("B", "u1"): (acct("B"), 1.0), ("C", "u2"): (acct("C"), 1.0), ("C", "u3"): (acct("C"), 1.0),
        ("E", "u4"): (acct("E"), 1.0), ("F", "u5"): (acct("F"), 1.0),
    }  # fmt: skip
    # usage as fractions of the whole machine (the root also ran 0.3 of it itself)
    usage = {ROOT: 1.0, acct("A"): 0.45, acct("B"): 0.2, ("B", "u1"): 0.2, acct("C"): 0.25,
             ("C", "u2"): 0.25, acct("D"): 0.25, acct("E"): 0.25, ("E", "u4"): 0.25}  # fmt: skip
    rows = fs.classic(tree, usage)
    expected = {  # user: (normalised share, effective usage, factor), as the page works them out
        ("B", "u1"): (0.3, 0.3875, 0.408479),
        ("C", "u2"): (0.05, 0.275, 0.022097),
        ("C", "u3"): (0.05, 0.15, 0.125),
        ("E", "u4"): (0.25, 0.25, 0.5),
        ("F", "u5"): (0.35, 0.1458333, 0.749154),
    }
    for node, (share, effective, factor) in expected.items():
        row = rows[node]
        assert row.norm_shares == pytest.approx(share)
        assert row.effective_usage == pytest.approx(effective, abs=1e-6)
        assert row.factor == pytest.approx(factor, abs=1e-6)


def test_sshare_columns_raw_and_normalised():
    rows = fs.classic(three_level_tree(), THREE_LEVEL_USAGE)
    sam = rows[("atlas_sim", "sam")].as_dict()
    assert sam["raw_shares"] == 1.0 and sam["raw_usage"] == 500.0
    assert sam["norm_usage"] == pytest.approx(0.5)
    assert sam["parent"] == {"account": "atlas_sim", "user": ""}
    assert list(rows)[:4] == [ROOT, acct("lhcb"), acct("lhcb_prod"), ("lhcb_prod", "pat")]  # tree order
    assert [rows[n].depth for n in list(rows)[:4]] == [0, 1, 2, 3]


def test_fairshare_parent_takes_the_parents_values():
    tree = three_level_tree()
    tree[("atlas_sim", "sid")] = (acct("atlas_sim"), None)  # FairShare=parent
    rows = fs.classic(tree, THREE_LEVEL_USAGE)
    sid, sim = rows[("atlas_sim", "sid")], rows[acct("atlas_sim")]
    assert (sid.norm_shares, sid.effective_usage, sid.factor) == (sim.norm_shares, sim.effective_usage, sim.factor)
    # a parent-shares sibling does not dilute sam's share
    assert rows[("atlas_sim", "sam")].norm_shares == pytest.approx(0.225)
    # Fair Tree: a parent-shares user ranks first in its account
    ranked = fs.fair_tree(tree, THREE_LEVEL_USAGE)
    assert math.isinf(ranked[("atlas_sim", "sid")].level_fs)
    assert ranked[("atlas_sim", "sid")].factor > ranked[("atlas_sim", "sam")].factor


def test_ancestors_behind_their_children_are_lifted_to_the_subtree_usage():
    usage = {("lhcb_prod", "pat"): 300.0, ("atlas_sim", "sam"): 100.0}  # no ancestor rows at all
    rows = fs.classic(three_level_tree(), usage)
    assert rows[ROOT].raw_usage == 400.0
    assert rows[acct("lhcb")].raw_usage == 300.0
    assert rows[acct("lhcb")].norm_usage == pytest.approx(0.75)


def test_fair_tree_ranks_accounts_then_their_users():
    """Same tree and usage as Slurm's example; Level FS = (shares/siblings') / (usage/parent's usage)."""
    tree = {
        ROOT: (None, 1.0),
        acct("A"): (ROOT, 40.0), acct("D"): (ROOT, 60.0),
        acct("B"): (acct("A"), 30.0), acct("C"): (acct("A"), 10.0),
        acct("E"): (acct("D"), 25.0), acct("F"): (acct("D"), 35.0),
        ("B", "u1"): (acct("B"), 1.0), ("C", "u2"): (acct("C"), 1.0), ("C", "u3"): (acct("C"), 1.0),
        ("E", "u4"): (acct("E"), 1.0), ("F", "u5"): (acct("F"), 1.0),
    }  # fmt: skip
    usage = {ROOT: 100.0, acct("A"): 45.0, acct("B"): 20.0, ("B", "u1"): 20.0, acct("C"): 25.0,
             ("C", "u2"): 25.0, acct("D"): 25.0, acct("E"): 25.0, ("E", "u4"): 25.0}  # fmt: skip
    rows = fs.fair_tree(tree, usage)
    # root level: A 0.4/0.45 = 0.889, D 0.6/0.25 = 2.4 -> D's users first
    assert rows[acct("A")].level_fs == pytest.approx(0.4 / 0.45)
    assert rows[acct("D")].level_fs == pytest.approx(2.4)
    # under D: F never ran (inf) before E 25/60 / (25/25) = 0.417; under A: B 0.75/(20/45) = 1.6875 before C 0.45
    assert math.isinf(rows[acct("F")].level_fs)
    assert rows[acct("E")].level_fs == pytest.approx(25 / 60)
    assert rows[acct("B")].level_fs == pytest.approx(1.6875)
    assert rows[acct("C")].level_fs == pytest.approx(0.45)
    # in C: u3 never ran (inf) before u2 (0.5 / 1.0)
    factors = {n[1]: rows[n].factor for n in rows if fs.is_user(n)}
    assert factors == {"u5": 1.0, "u4": 0.8, "u1": 0.6, "u3": 0.4, "u2": 0.2}
    # an account shows its best user's factor
    assert rows[acct("A")].factor == 0.6 and rows[acct("D")].factor == 1.0


def test_fair_tree_ties_share_ranks():
    """P: p1, p2 (1 share each) and Q (2 shares): q1, q2. Everyone at P's level has Level FS 1."""
    tree = {
        acct("P"): (None, 1.0),
        ("P", "p1"): (acct("P"), 1.0), ("P", "p2"): (acct("P"), 1.0), acct("Q"): (acct("P"), 2.0),
        ("Q", "q1"): (acct("Q"), 1.0), ("Q", "q2"): (acct("Q"), 1.0),
    }  # fmt: skip
    usage = {acct("P"): 40.0, ("P", "p1"): 10.0, ("P", "p2"): 10.0, acct("Q"): 20.0,
             ("Q", "q1"): 15.0, ("Q", "q2"): 5.0}  # fmt: skip
    rows = fs.fair_tree(tree, usage)
    # p1, p2 tie (rank 4/4); Q ties with them, so its best user q2 (0.5/0.25 = 2) shares that rank;
    # q1 (0.5/0.75) comes after three users: rank 1/4
    assert {n[1]: rows[n].factor for n in rows if fs.is_user(n)} == {"p1": 1.0, "p2": 1.0, "q2": 1.0, "q1": 0.25}


def test_fair_tree_merges_tied_sibling_accounts():
    """A (a1, a2) and B (b1) tie at the root, so their users are ranked as one list."""
    tree = {
        acct("A"): (None, 1.0), acct("B"): (None, 1.0),  # two tops: an implicit root joins them
        ("A", "a1"): (acct("A"), 1.0), ("A", "a2"): (acct("A"), 1.0), ("B", "b1"): (acct("B"), 1.0),
    }  # fmt: skip
    usage = {acct("A"): 10.0, ("A", "a1"): 10.0, acct("B"): 10.0, ("B", "b1"): 10.0}
    rows = fs.fair_tree(tree, usage)
    # merged: a2 (unused, inf), b1 (1/1 = 1), a1 (0.5/1 = 0.5); without merging a1 would precede b1
    assert {n[1]: rows[n].factor for n in rows if fs.is_user(n)} == {
        "a2": 1.0,
        "b1": pytest.approx(2 / 3),
        "a1": pytest.approx(1 / 3),
    }
    assert IMPLICIT_ROOT not in rows


def test_nobody_used_anything():
    rows_classic = fs.classic(three_level_tree(), {})
    rows_tree = fs.fair_tree(three_level_tree(), {})
    for node in three_level_tree():
        if fs.is_user(node):
            assert rows_classic[node].factor == 1.0
            assert rows_tree[node].factor == 1.0  # everyone ties at the top


def test_factor_lookup_falls_back_to_the_account_then_neutral():
    rows = fs.classic(three_level_tree(), THREE_LEVEL_USAGE)
    assert fs.factor_of(rows, "atlas_sim", "sam") == pytest.approx(2 ** (-20 / 9))
    assert fs.factor_of(rows, "atlas_sim", "newcomer") == pytest.approx(2 ** (-20 / 9))
    assert fs.factor_of(rows, "unknown", "nobody") == 0.5
    assert fs.compute({}, {}) == {}


def test_tree_from_association_rows():
    rows = [  # (account, user, parent, shares) as sacctmgr writes them
        ("root", "", "", "1"),
        ("physics", "", "root", "40"),
        ("physics", "alice", "", "1"),
        ("physics", "bob", "", "parent"),
        ("chem", "", "science", "10"),  # parent without a row of its own
    ]
    tree = fs.tree_from_associations(rows)
    assert tree[acct("physics")] == (ROOT, 40.0)
    assert tree[("physics", "alice")] == (acct("physics"), 1.0)
    assert tree[("physics", "bob")] == (acct("physics"), None)
    assert tree[acct("science")] == (None, 1.0)
    with pytest.raises(ValueError):
        fs.parse_shares("-3")


def test_implicit_tree_from_groups():
    tree = fs.implicit_tree({"lhcb": 3000, "dteam": 1000}, [("lhcb", "pat"), ("lhcb", "sam"), ("other", "x")])
    rows = fs.classic(tree, {})
    assert rows[acct("lhcb")].norm_shares == pytest.approx(3000 / 5000)
    assert rows[("lhcb", "pat")].norm_shares == pytest.approx(0.3)
    assert tree[acct("other")] == (ROOT, DEFAULT_JOB_SHARE)  # a group without a row of its own


def test_a_parent_shares_account_gives_way_to_its_children():
    """A has `parent` shares: a1 (2) and a2 (1) compete with B (1) directly under the root."""
    tree = {
        ROOT: (None, 1.0),
        acct("A"): (ROOT, None),
        ("A", "a1"): (acct("A"), 2.0), ("A", "a2"): (acct("A"), 1.0),
        acct("B"): (ROOT, 1.0), ("B", "b1"): (acct("B"), 1.0),
    }  # fmt: skip
    usage = {ROOT: 100.0, acct("A"): 100.0, ("A", "a1"): 100.0}
    rows = fs.classic(tree, usage)
    assert rows[("A", "a1")].norm_shares == pytest.approx(0.5)
    assert rows[("A", "a2")].norm_shares == pytest.approx(0.25)
    assert rows[acct("B")].norm_shares == pytest.approx(0.25)
    # a1 competes just below the root: U_eff = its own 1.0 -> 2^(-1/0.5)
    assert rows[("A", "a1")].factor == pytest.approx(0.25)
    assert rows[("A", "a2")].factor == 1.0 and rows[("B", "b1")].factor == 1.0
    assert rows[acct("A")].norm_shares == 1.0  # answers for the root
    assert rows[acct("A")].effective_usage == rows[ROOT].effective_usage
    ranked = fs.fair_tree(tree, usage)
    # level of the root: a2 and B unused (inf, tied: B's b1 shares a2's rank), then a1 (0.5/1.0)
    assert {n[1]: ranked[n].factor for n in ranked if fs.is_user(n)} == {
        "a2": 1.0, "b1": 1.0, "a1": pytest.approx(1 / 3),
    }  # fmt: skip


def test_parent_shares_across_accounts_from_association_rows():
    """Worked by hand. A (parent) hands a1 2 and a2 1 to the root's level, beside B 1: 4 in all.
    In B: b1 (parent) stands for B and takes no share; b2 3 and C 4 divide B's quarter."""
    rows = [
        ("root", "", "", "1"),
        ("A", "", "root", "parent"), ("A", "a1", "", "2"), ("A", "a2", "", "1"),
        ("B", "", "root", "1"), ("B", "b1", "", "parent"), ("B", "b2", "", "3"),
        ("C", "", "B", "4"), ("C", "c1", "", "1"),
    ]  # fmt: skip
    tree = fs.tree_from_associations(rows)
    assert tree[("B", "b1")] == (acct("B"), None)
    norm = {node: row.norm_shares for node, row in fs.classic(tree, {}).items()}
    assert norm == pytest.approx({
        ROOT: 1.0, acct("A"): 1.0, ("A", "a1"): 0.5, ("A", "a2"): 0.25,
        acct("B"): 0.25, ("B", "b1"): 0.25, ("B", "b2"): 3 / 7 * 0.25, acct("C"): 4 / 7 * 0.25, ("C", "c1"): 1 / 7,
    })  # fmt: skip
