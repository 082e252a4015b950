"""The sacctmgr association dump: parsing, every rejection, byte-exact export, the tree and its shares."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairmatch.accounting.associations import (
    Association,
    AssociationError,
    build_tree,
    export_sacctmgr,
    parse_sacctmgr,
)
from fairmatch.accounting.tree import IMPLICIT_ROOT, Node, ShareTree, UnknownAssociation

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "sacctmgr_lhcb.txt"


@pytest.fixture(scope="module")
def lhcb_text() -> str:
    return FIXTURE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def lhcb(lhcb_text) -> ShareTree:
    return build_tree(parse_sacctmgr(lhcb_text))


def rejection(text: str) -> AssociationError:
    with pytest.raises(AssociationError) as caught:
        parse_sacctmgr(text)
    return caught.value


# --- parsing and export ---------------------------------------------------------------


def test_fields_are_kept_as_written_in_line_order():
    rows = parse_sacctmgr("root|1|||\nroot|1||root|\nvo|Parent|root||\nvo|10||alice|\n")

    assert rows == [
        Association("root", "1", "", ""),
        Association("root", "1", "", "root"),
        Association("vo", "Parent", "root", ""),
        Association("vo", "10", "", "alice"),
    ]
    assert [r.raw_shares for r in rows] == [1, 1, None, 10]
    assert rows[2].uses_parent_shares  # any case, kept as written
    assert [r.parent_node for r in rows] == [None, Node("root"), Node("root"), Node("vo")]


def test_names_drop_the_spaces_around_them_as_everywhere_else():
    rows = parse_sacctmgr("root|1|||\n vo |10| root ||\nvo|10|  |  alice |\n")

    assert rows == [Association("root", "1", "", ""), Association("vo", "10", "root", ""),
                    Association("vo", "10", "", "alice")]  # fmt: skip


def test_the_fixture_is_a_realistic_dump(lhcb_text, lhcb):
    assert len(lhcb_text.splitlines()) >= 50
    depths = {len(lhcb.ancestors(*node)) for node in lhcb.nodes if not node.is_user}
    assert depths == {1, 2, 3}  # root, the VOs, their groups
    assert any(lhcb.shares(node) is None for node in lhcb.nodes)


def test_export_gives_the_dump_back_byte_for_byte(lhcb_text):
    assert export_sacctmgr(parse_sacctmgr(lhcb_text)) == lhcb_text


def test_a_missing_final_newline_is_accepted_and_export_adds_it():
    assert export_sacctmgr(parse_sacctmgr("root|1|||\nroot|1||root|")) == "root|1|||\nroot|1||root|\n"


def test_a_user_row_may_name_its_own_account_as_parent():
    rows = parse_sacctmgr("root|1|||\nvo|1|root||\nvo|1|vo|alice|\n")
    assert export_sacctmgr(rows).endswith("vo|1|vo|alice|\n")
    assert build_tree(rows).parent(("vo", "alice")) == Node("vo")


def test_names_may_hold_spaces_and_unicode_as_written():
    text = "root|1|||\nphysique des particules|5|root||\nphysique des particules|1||élodie|\n"
    assert export_sacctmgr(parse_sacctmgr(text)) == text


# --- rejections: each names its line and shows it -------------------------------------

ROOT = "root|1|||\n"


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("", 1, "the dump is empty"),
        (ROOT + "vo|1|root|\n", 2, "missing the trailing '|'"),
        (ROOT + "vo|1|root||x|\n", 2, "expected 4 fields"),
        (ROOT + "vo|1|\n", 2, "expected 4 fields"),
        (ROOT + "vo\n", 2, "expected 4 fields"),
        (ROOT + "|1|root||\n", 2, "empty account"),
        (ROOT + "vo|lots|root||\n", 2, "shares 'lots' are neither a whole number nor 'parent'"),
        (ROOT + "vo|1.5|root||\n", 2, "neither a whole number nor 'parent'"),
        (ROOT + "vo||root||\n", 2, "neither a whole number nor 'parent'"),
        (ROOT + "vo| 1|root||\n", 2, "neither a whole number nor 'parent'"),
        (ROOT + "vo|-3|root||\n", 2, "negative shares -3"),
        (ROOT + "vo|4294967296|root||\n", 2, "above Slurm's largest"),
        (ROOT + "vo|1|nowhere||\n", 2, "unknown parent account 'nowhere'"),
        (ROOT + "vo|1|root||\nvo|1||alice|\nvo|2||alice|\n", 4,
         "duplicate association: user 'alice' of account 'vo' is already on line 3"),
        (ROOT + "vo|1|root||\nvo|2|root||\n", 3, "duplicate association: account 'vo'"),
        (ROOT + "ghost|1||alice|\n", 2, "the account 'ghost' of user 'alice' does not exist"),
        (ROOT + "vo|1|root||\nvo|1|other|alice|\n", 3, "parent 'other', which is not its account 'vo'"),
        (ROOT + "other|1|||\n", 2, "a second root account: the root is 'root' (line 1)"),
        (ROOT + "\nvo|1|root||\n", 2, "empty line"),
        (ROOT + "vo|1|root||\n\n", 3, "empty line"),
        (ROOT + "vo|1|root||\r\n", 2, "carriage return (CRLF)"),
        ("\ufeff" + ROOT, 1, "byte-order mark"),
        (ROOT + "vo|1|ro\tot||\n", 2, "control character"),
        ("Account|Share|Par Name|User|\n" + ROOT, 1, "a header line: run sacctmgr with -n"),
        (ROOT + "x" * 256 + "|1|root||\n", 2, "account is longer than 255 characters"),
    ],
)  # fmt: skip
def test_each_rejection_names_the_line(text, line, fragment):
    error = rejection(text)

    assert error.line == line
    assert f"line {line}: " in str(error)
    assert fragment in str(error)
    wrong = text.split("\n")[line - 1] if text else ""
    assert repr(wrong[:200]).strip("'\"") in str(error)  # the offending line is shown


def test_a_cycle_is_reported_once_at_its_first_account():
    error = rejection(ROOT + "a|1|b||\nb|1|c||\nc|1|a||\nd|1|d||\n")

    assert [e.line for e in error.errors] == [2, 5]
    assert "account 'a' is in a cycle of parents: a → b → c → a" in str(error)
    assert "line 5: account 'd' is in a cycle of parents: d → d" in str(error)


def test_a_tree_without_a_root_says_so():
    error = rejection("a|1|b||\nb|1|a||\n")

    assert "no root account" in str(error.errors[0])
    assert "cycle of parents" in str(error)


def test_every_bad_line_is_listed_in_line_order():
    error = rejection(ROOT + "a|x|root||\nb|1|root||\nc|-1|root||\nd|1|root|\n")

    assert [e.line for e in error.errors] == [2, 4, 5]
    assert [e.content for e in error.errors] == ["a|x|root||", "c|-1|root||", "d|1|root|"]


def test_tree_problems_wait_until_every_line_reads():
    # line 2 does not parse: the missing 'vo' account is not also blamed on line 3
    error = rejection(ROOT + "vo|x|root||\nvo|1||alice|\n")
    assert [e.line for e in error.errors] == [2]


def test_a_long_list_of_errors_is_shortened_in_the_message():
    error = rejection(ROOT + "".join(f"a{i}|x|root||\n" for i in range(8)))

    assert len(error.errors) == 8
    assert str(error).endswith("(and 3 more)")


def test_build_tree_checks_rows_from_elsewhere():
    with pytest.raises(AssociationError, match="line 2: unknown parent account 'gone'"):
        build_tree([Association("root", "1", "", ""), Association("vo", "1", "gone", "")])


# --- the tree -------------------------------------------------------------------------


def test_structure(lhcb):
    assert lhcb.root == Node("root")
    assert lhcb.children(("root", "")) == [("root", "root"), ("lhcb", ""), ("atlas", ""), ("belle", "")]
    assert lhcb.children(("lhcb", "")) == [("lhcb_prod", ""), ("lhcb_user", ""), ("lhcb_sgm", "")]
    assert lhcb.children(("lhcb_prod", "")) == [("lhcb_prod", "lbprods"), ("lhcb_prod", "lbmc")]
    assert lhcb.children(("lhcb_prod", "lbmc")) == []
    assert lhcb.parent(("lhcb_user", "alice")) == ("lhcb_user", "")
    assert lhcb.parent(("root", "")) is None
    assert ("lhcb_user", "alice") in lhcb and ("lhcb", "alice") not in lhcb


def test_ancestors_go_from_the_node_up_to_the_root(lhcb):
    assert lhcb.ancestors("lhcb_user", "alice") == [
        ("lhcb_user", "alice"), ("lhcb_user", ""), ("lhcb", ""), ("root", ""),
    ]  # fmt: skip
    assert lhcb.ancestors("atlas") == [("atlas", ""), ("root", "")]
    assert lhcb.ancestors("root") == [("root", "")]
    with pytest.raises(UnknownAssociation):
        lhcb.ancestors("lhcb", "alice")  # alice is in lhcb_user, not directly in lhcb
    with pytest.raises(UnknownAssociation):
        lhcb.ancestors("cms")


def test_siblings_are_the_other_nodes_dividing_the_same_share(lhcb):
    assert lhcb.siblings(("lhcb_user", "")) == [("lhcb_prod", ""), ("lhcb_sgm", "")]
    assert lhcb.siblings(("root", "root")) == [("lhcb", ""), ("atlas", ""), ("belle", "")]
    assert lhcb.siblings(("lhcb_prod", "lbmc")) == [("lhcb_prod", "lbprods")]
    assert lhcb.siblings(("root", "")) == []
    # root|1||root| + lhcb 60 + atlas 30 + belle 9; lhcb_user's: 50 + 30 + 20; alice's: 4 + 7×2 + 2×1
    nodes = [("lhcb", ""), ("lhcb_user", ""), ("lhcb_user", "alice")]
    assert [lhcb.level_shares(n) for n in nodes] == [100, 100, 20]


def test_normalised_shares_of_the_fixture_worked_by_hand(lhcb):
    expected = {
        ("root", ""): 1.0,
        ("root", "root"): 1 / 100,
        ("lhcb", ""): 60 / 100,
        ("lhcb_user", ""): 30 / 100 * 0.6,  # 0.18
        ("lhcb_user", "alice"): 4 / 20 * 0.18,  # 0.036
        ("lhcb_user", "judy"): 1 / 20 * 0.18,  # 0.009
        ("lhcb_prod", "lbprods"): 3 / 4 * 50 / 100 * 0.6,  # 0.225
        ("atlas_user", "krossi"): 1 / 12 * 25 / 100 * 30 / 100,  # 0.00625
        ("belle_user", "hnakamura"): 1 / 8 * 1 / 3 * 9 / 100,  # 0.00375
    }
    for node, share in expected.items():
        assert lhcb.normalised_share(node) == pytest.approx(share), node


def test_a_user_with_parent_shares_is_its_account(lhcb):
    # lhcb_sgm|parent||lbsgm|: Fairshare=parent, the account's share and level stand for the user
    assert lhcb.fair_share_node(("lhcb_sgm", "lbsgm")) == ("lhcb_sgm", "")
    assert lhcb.normalised_share(("lhcb_sgm", "lbsgm")) == pytest.approx(20 / 100 * 0.6)  # 0.12
    assert lhcb.siblings(("lhcb_sgm", "lbsgm")) == lhcb.siblings(("lhcb_sgm", ""))


def test_every_level_divides_exactly_its_parents_share(lhcb):
    for node in lhcb.nodes:
        level = [child for child in lhcb.children(node) if not lhcb.uses_parent(child)]
        if level:
            total = sum(lhcb.normalised_share(child) for child in level)
            assert total == pytest.approx(lhcb.normalised_share(node)), node


SMALL = """\
root|1|||
a|3|root||
a|2||u1|
a|parent||u2|
a|6||u3|
b|1|root||
c|parent|root||
c|4||u4|
c|0||u5|
"""


def test_an_account_with_parent_shares_hands_its_children_to_its_parent():
    """Worked by hand: c's users are reparented to root's level: a 3, b 1, u4 4, u5 0 → 8."""
    tree = build_tree(parse_sacctmgr(SMALL))

    assert tree.members(("root", "")) == [("a", ""), ("b", ""), ("c", "u4"), ("c", "u5")]
    assert tree.level_shares(("a", "")) == 8
    assert tree.normalised_share(("a", "")) == pytest.approx(3 / 8)
    assert tree.normalised_share(("b", "")) == pytest.approx(1 / 8)
    assert tree.normalised_share(("c", "u4")) == pytest.approx(4 / 8)
    assert tree.normalised_share(("c", "u5")) == 0.0
    # c itself stands for its fair-share node, the root
    assert tree.fair_share_node(("c", "")) == ("root", "")
    assert tree.normalised_share(("c", "")) == 1.0
    # inside a: u2 (parent) takes no part, u1 and u3 divide a's 3/8 as 2:6
    assert tree.siblings(("a", "u1")) == [("a", "u3")]
    assert tree.members(("a", "")) == [("a", "u1"), ("a", "u2"), ("a", "u3")]  # Fair Tree still ranks u2
    assert tree.normalised_share(("a", "u1")) == pytest.approx(2 / 8 * 3 / 8)
    assert tree.normalised_share(("a", "u3")) == pytest.approx(6 / 8 * 3 / 8)
    assert tree.normalised_share(("a", "u2")) == pytest.approx(3 / 8)
    # ancestors are the real tree's, whatever the shares
    assert tree.ancestors("c", "u4") == [("c", "u4"), ("c", ""), ("root", "")]


def test_a_level_whose_shares_are_all_zero_gets_nothing():
    tree = build_tree(parse_sacctmgr("root|1|||\na|0|root||\nb|0|root||\nb|5||u|\n"))

    assert tree.normalised_share(("a", "")) == 0.0
    assert tree.normalised_share(("b", "u")) == 0.0


def test_a_deep_chain_needs_no_recursion():
    depth = 5000
    lines = ["a0|1|||"] + [f"a{i}|1|a{i - 1}||" for i in range(1, depth)] + [f"a{depth - 1}|1||u|"]
    tree = build_tree(parse_sacctmgr("\n".join(lines) + "\n"))

    assert tree.normalised_share((f"a{depth - 1}", "u")) == 1.0
    assert len(tree.ancestors(f"a{depth - 1}", "u")) == depth + 1


def test_a_hand_made_tree_is_taken_as_it_comes():
    """The policies' trees (the groups' implicit tree, a simulation's) are not checked as a dump is:
    several tops share an implicit root, a parent without a row makes a top, a cycle ends the walks."""
    tree = ShareTree({
        ("a", ""): (None, 3.0), ("a", "u"): (("a", ""), 1.0),
        ("b", ""): (("gone", ""), 1.0),
        ("x", ""): (("y", ""), 1.0), ("y", ""): (("x", ""), 1.0),
    })  # fmt: skip

    assert tree.root == IMPLICIT_ROOT and IMPLICIT_ROOT not in tree and len(tree) == 5
    assert tree.members(IMPLICIT_ROOT) == [("a", ""), ("b", "")]
    assert tree.normalised_share(("a", "u")) == pytest.approx(3 / 4)
    assert [node for node, _ in tree.order] == [IMPLICIT_ROOT, ("a", ""), ("a", "u"), ("b", "")]
    assert tree.ancestors("x") == [("x", ""), ("y", "")]
    with pytest.raises(UnknownAssociation):
        tree.parent(("a", "nobody"))
