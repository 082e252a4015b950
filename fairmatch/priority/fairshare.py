"""Fair share over an association tree (pure logic): Slurm's classic formula and Fair Tree.

The tree is plain data, `{node: (parent, shares)}`, a node being (account,
user) with user '' for an account. `parent` is None at the top; `shares`
None stands for sacctmgr's `FairShare=parent`. It becomes the accounting's
own tree (fairmatch.accounting.tree.ShareTree), which answers who competes
with whom and each node's normalised share. Usage is the decayed usage
per node, each node holding its whole subtree's usage (charges go to every
ancestor, see fairmatch.accounting.usage).

Shares (both algorithms): a node's normalised share is the product, along
its path from the root, of each node's shares over the shares of its level
(itself and its siblings). A `parent`-shares node gives way to its children,
who join its own level; it answers with the values of its nearest ancestor
that has a number of shares (Slurm's FairShare=parent).

Classic (https://slurm.schedmd.com/classic_fair_share.html, in our words):
- Normalised usage is the node's usage over the root's.
- Effective usage starts from the node's own normalised usage and is pulled
  toward its parent's effective usage by its local share fraction:
  U_eff = U_norm + (U_eff_parent - U_norm) * shares / level's shares.
  Directly below the root the effective usage is the normalised usage.
- The factor is 2^(-U_eff / S_norm): 1.0 for a subtree nobody used, 0.5 at
  share, below 0.5 when over-served.

Fair Tree (https://slurm.schedmd.com/fair_tree.html, in our words):
- Each node gets a Level FS = S/U within its level only: S its shares over
  the level's shares, U its usage over its parent's usage (infinite when it
  used nothing; 0 with no shares; a `parent`-shares user ranks first).
- Levels are visited by descending Level FS, depth first; users are ranked
  in the order they are met, counting down from the number of users, and a
  user's factor is rank / number of users (the first gets 1.0).
- Ties: users of a level with equal Level FS share a rank; on equal Level FS
  a user goes before an account and the account's best user shares its
  rank; accounts of a level with equal Level FS are descended as one merged
  list. An account's factor is its best user's (what a newcomer there gets
  at most).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fairmatch.accounting.tree import IMPLICIT_ROOT, Node, ShareTree, TreeInput
from fairmatch.priority.groups import DEFAULT_JOB_SHARE

NEUTRAL_FACTOR = 0.5  # an association we know nothing about counts as exactly at share


@dataclass(frozen=True, slots=True)
class ShareRow:
    """One line of sshare.

    `norm_shares` is the node's share of the whole machine under either
    algorithm. `effective_usage` is Slurm's U_eff for classic, and for Fair
    Tree the node's usage over the usage of where it competes (Slurm's sshare
    shows that column too). `level_fs` is Fair Tree's only.
    """

    account: str
    user: str
    parent: Node | None
    depth: int
    raw_shares: float | None  # None: FairShare=parent
    norm_shares: float
    raw_usage: float
    norm_usage: float
    effective_usage: float
    level_fs: float | None  # Fair Tree only
    factor: float | None  # Fair Tree: None for an account without users

    def as_dict(self) -> dict[str, Any]:
        return {
            "account": self.account,
            "user": self.user,
            "parent": None if self.parent is None else {"account": self.parent[0], "user": self.parent[1]},
            "depth": self.depth,
            "raw_shares": "parent" if self.raw_shares is None else self.raw_shares,
            "norm_shares": self.norm_shares,
            "raw_usage": self.raw_usage,
            "norm_usage": self.norm_usage,
            "effective_usage": self.effective_usage,
            "level_fs": _json_number(self.level_fs),
            "fairshare": self.factor,
        }


def _json_number(value: float | None) -> float | str | None:
    return "inf" if value is not None and math.isinf(value) else value


def is_user(node: tuple[str, str]) -> bool:
    return node[1] != ""


# --- usage ------------------------------------------------------------------------------


class _Usage:
    """Each node's usage as the formulas read it: its whole subtree's."""

    def __init__(self, tree: ShareTree, usage: Mapping[tuple[str, str], float]) -> None:
        self.tree = tree
        self.of: dict[Node, float] = {}
        # at least its children's: a tree imported after some charges may have
        # ancestors behind their descendants
        for node, _ in reversed(tree.order):
            below = sum(self.of.get(child, 0.0) for child in tree.children(node))
            self.of[node] = max(max(usage.get(node, 0.0), 0.0), below)

    def normalised(self, node: Node) -> float:
        """usage / the root's usage."""
        total = self.of[self.tree.root]
        return self.of[node] / total if total > 0 else 0.0

    def local(self, node: Node) -> float:
        """usage / usage of where it competes (Fair Tree's U)."""
        above = self.tree.fair_share_parent(node)
        whole = self.of[above] if above is not None else self.of[node]
        return self.of[node] / whole if whole > 0 else 0.0


# --- classic ----------------------------------------------------------------------------


def classic_factor(effective_usage: float, norm_shares: float) -> float:
    """2^(-U_eff/S): 1.0 unused, 0.5 at share; no shares means the lowest factor."""
    if norm_shares <= 0:
        return 0.0
    return float(2.0 ** (-effective_usage / norm_shares))


def _effective_usage(t: ShareTree, used: _Usage) -> dict[Node, float]:
    effective: dict[Node, float] = {}
    for node, _ in t.order:  # a node's fair-share parent is an ancestor: already done
        own = used.normalised(node)
        above = t.fair_share_parent(node)
        if t.uses_parent(node):
            effective[node] = effective[t.fair_share_node(node)]
        elif above is None or above == t.root:
            effective[node] = own  # the root and the level just below it: their own usage
        else:
            effective[node] = own + (effective[above] - own) * t.local_share(node)
    return effective


def classic(tree: TreeInput, usage: Mapping[tuple[str, str], float]) -> dict[Node, ShareRow]:
    t = ShareTree(tree)
    used = _Usage(t, usage)
    norm = t.normalised_shares()
    effective = _effective_usage(t, used)
    rows = {
        node: _row(t, used, node, depth, norm[node], effective[node], None, classic_factor(effective[node], norm[node]))
        for node, depth in t.order
    }
    return _without_implicit_root(rows)


# --- Fair Tree --------------------------------------------------------------------------


def level_fs(tree: ShareTree, used: _Usage, node: Node) -> float:
    if tree.uses_parent(node):
        return math.inf  # a `parent`-shares user ranks first in its account
    share = tree.local_share(node)
    if share <= 0:
        return 0.0
    local = used.local(node)
    return share / local if local > 0 else math.inf


class _Ranking:
    """Counts users down as the depth-first walk meets them."""

    def __init__(self, users: int) -> None:
        self.users = users
        self.next_rank = users  # what the next user gets when not tied
        self.rank = users
        self.factor: dict[Node, float] = {}

    def place(self, user: Node, tied: bool) -> None:
        if not tied:
            self.rank = self.next_rank
        self.factor[user] = self.rank / self.users
        self.next_rank -= 1


def _rank(t: ShareTree, lfs: dict[Node, float], siblings: list[Node], starts_tied: bool, ranking: _Ranking) -> None:
    # highest Level FS first; on a tie users before accounts; then a stable, readable order
    ordered = sorted(siblings, key=lambda n: (-lfs[n], not is_user(n), n))
    previous: float | None = None
    i = 0
    while i < len(ordered):
        node = ordered[i]
        tied = starts_tied if i == 0 else lfs[node] == previous
        if is_user(node):
            ranking.place(node, tied)
            i += 1
        else:
            merged = [node]
            while i + len(merged) < len(ordered):
                candidate = ordered[i + len(merged)]
                if is_user(candidate) or lfs[candidate] != lfs[node]:
                    break
                merged.append(candidate)
            children = [child for account in merged for child in t.members(account)]
            _rank(t, lfs, children, tied, ranking)
            i += len(merged)
        previous = lfs[node]


def _best_user_factor(t: ShareTree, factors: dict[Node, float]) -> dict[Node, float | None]:
    best: dict[Node, float | None] = {}
    for node, _ in reversed(t.order):
        if is_user(node):
            best[node] = factors.get(node)
            continue
        found = [factor for child in t.children(node) if (factor := best.get(child)) is not None]
        best[node] = max(found) if found else None
    return best


def _ranked(t: ShareTree, node: Node) -> bool:
    """Whether a node has a Level FS: not the root, nor an account that gave way to its children."""
    return node != t.root and (is_user(node) or not t.uses_parent(node))


def fair_tree(tree: TreeInput, usage: Mapping[tuple[str, str], float]) -> dict[Node, ShareRow]:
    t = ShareTree(tree)
    used = _Usage(t, usage)
    lfs = {node: level_fs(t, used, node) for node, _ in t.order if _ranked(t, node)}
    ranking = _Ranking(len(t.users()))
    _rank(t, lfs, t.members(t.root), False, ranking)
    factors = _best_user_factor(t, ranking.factor)
    norm = t.normalised_shares()
    rows = {
        node: _row(t, used, node, depth, norm[node], used.local(node), lfs.get(node), factors.get(node))
        for node, depth in t.order
    }
    return _without_implicit_root(rows)


# --- shared ------------------------------------------------------------------------------


def _row(
    t: ShareTree,
    used: _Usage,
    node: Node,
    depth: int,
    norm_shares: float,
    effective_usage: float,
    level: float | None,
    factor: float | None,
) -> ShareRow:
    return ShareRow(
        account=node[0],
        user=node[1],
        parent=t.parent(node),
        depth=depth,
        raw_shares=t.shares(node),
        norm_shares=norm_shares,
        raw_usage=used.of[node],
        norm_usage=used.normalised(node),
        effective_usage=effective_usage,
        level_fs=level,
        factor=factor,
    )


def _without_implicit_root(rows: dict[Node, ShareRow]) -> dict[Node, ShareRow]:
    return {node: row for node, row in rows.items() if node != IMPLICIT_ROOT}


def compute(
    tree: TreeInput, usage: Mapping[tuple[str, str], float], algorithm: Literal["classic", "fair_tree"] = "classic"
) -> dict[Node, ShareRow]:
    """Every node's sshare row, in depth-first tree order."""
    if not tree:
        return {}
    return fair_tree(tree, usage) if algorithm == "fair_tree" else classic(tree, usage)


def factor_of(
    rows: Mapping[tuple[str, str], ShareRow], account: str, user: str, default: float = NEUTRAL_FACTOR
) -> float:
    """The fair-share factor of (account, user): the user's association, else its
    account's, else `default` (exactly at share: neither favoured nor held back)."""
    for node in ((account, user), (account, "")):
        row = rows.get(node)
        if row is not None and row.factor is not None:
            return row.factor
    return default


# --- building the tree input -------------------------------------------------------------


def parse_shares(text: str | float) -> float | None:
    """sacctmgr's shares column: a number, or `parent`."""
    if isinstance(text, str) and text.strip().lower() == "parent":
        return None
    value = float(text)
    if value < 0 or math.isnan(value) or math.isinf(value):
        raise ValueError(f"shares must be a non-negative number or 'parent', got {text!r}")
    return value


def tree_from_associations(
    rows: Iterable[tuple[str, str, str, str | float]],
) -> dict[Node, tuple[Node | None, float | None]]:
    """The tree from (account, user, parent, shares) rows, as in the `associations` table.

    A user's parent is its account; an account's is the account its `parent`
    names (none at the root). An account named as a parent without a row of
    its own is added with one share, so no subtree is cut off.
    """
    tree: dict[Node, tuple[Node | None, float | None]] = {}
    for account, user, parent, shares in rows:
        if user:
            tree[Node(account, user)] = (Node(account), parse_shares(shares))
        else:
            tree[Node(account)] = (Node(parent) if parent else None, parse_shares(shares))
    for above, _ in list(tree.values()):
        if above is not None and above not in tree:
            tree[above] = (None, 1.0)
    return tree


def implicit_tree(
    group_shares: Mapping[str, float], members: Iterable[tuple[str, str]]
) -> dict[Node, tuple[Node | None, float | None]]:
    """A tree for sites that imported none: root -> each group (its job_share) -> its users (1 share each)."""
    root = Node("root")
    tree: dict[Node, tuple[Node | None, float | None]] = {root: (None, 1.0)}
    for group, share in sorted(group_shares.items()):
        tree[Node(group)] = (root, float(share))
    for group, owner in sorted(set(members)):
        tree.setdefault(Node(group), (root, DEFAULT_JOB_SHARE))
        tree[Node(group, owner)] = (Node(group), 1.0)
    return tree
