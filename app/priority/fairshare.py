"""Fair share over an association tree (pure logic): Slurm's classic formula and Fair Tree.

The tree is plain data, `{node: (parent, shares)}`, a node being (account,
user) with user '' for an account. `parent` is None at the top; `shares`
None stands for sacctmgr's `FairShare=parent`. Usage is the decayed usage
per node, each node holding its whole subtree's usage (charges go to every
ancestor, see app.accounting.usage).

Classic (https://slurm.schedmd.com/classic_fair_share.html, in our words):
- A node's normalised share is the product, along its path from the root, of
  each node's shares over the shares of it and its siblings.
- Its normalised usage is its usage over the root's.
- Its effective usage starts from its own normalised usage and is pulled
  toward its parent's effective usage by its local share fraction:
  U_eff = U_norm + (U_eff_parent - U_norm) * shares / siblings' shares.
  Directly below the root the effective usage is the normalised usage.
- The factor is 2^(-U_eff / S_norm): 1.0 for a subtree nobody used, 0.5 at
  share, below 0.5 when over-served. A `parent` node takes its parent's
  normalised share and effective usage (so its parent's factor).

Fair Tree (https://slurm.schedmd.com/fair_tree.html, in our words):
- Each node gets a Level FS = S/U among its siblings only: S its shares over
  the siblings' shares, U its usage over its parent's usage (infinite when it
  used nothing; 0 with no shares; a `parent` node ranks first).
- Siblings are visited by descending Level FS, depth first; users are ranked
  in the order they are met, counting down from the number of users, and a
  user's factor is rank / number of users (the first gets 1.0).
- Ties: sibling users with equal Level FS share a rank; on equal Level FS a
  user goes before an account and the account's best user shares its rank;
  sibling accounts with equal Level FS are descended as one merged list.
  An account's factor is its best user's (what a new user in it would get).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Node = tuple[str, str]  # (account, user); user '' for an account
TreeInput = Mapping[Node, tuple[Node | None, float | None]]  # node -> (parent, shares or None = "parent")

IMPLICIT_ROOT: Node = ("", "")  # joins several top-level nodes under one root
NEUTRAL_FACTOR = 0.5  # an association we know nothing about counts as exactly at share


@dataclass(frozen=True, slots=True)
class ShareRow:
    """One line of sshare.

    Classic: `norm_shares` is the share of the whole machine and
    `effective_usage` Slurm's U_eff. Fair Tree, as Slurm's sshare shows it:
    `norm_shares` is the fraction among siblings and `effective_usage` the
    node's usage over its parent's.
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


def is_user(node: Node) -> bool:
    return node[1] != ""


# --- the tree ---------------------------------------------------------------------------


class _Tree:
    """Children lists, the root, subtree usage and local share fractions of a TreeInput."""

    def __init__(self, tree: TreeInput, usage: Mapping[Node, float]) -> None:
        self.shares = {node: shares for node, (_, shares) in tree.items()}
        tops = [n for n, (parent, _) in tree.items() if parent is None or parent not in tree]
        self.root = tops[0] if len(tops) == 1 else IMPLICIT_ROOT
        self.parent: dict[Node, Node | None] = {self.root: None}
        self.children: dict[Node, list[Node]] = {node: [] for node in tree}
        self.children.setdefault(self.root, [])
        for node, (parent, _) in tree.items():  # input order: sacctmgr's order
            if node == self.root:
                continue
            up = parent if parent in tree and parent != node else self.root
            self.parent[node] = up
            self.children[up].append(node)
        self.order = list(self._depth_first(self.root, 0))
        self.usage = self._subtree_usage(usage)

    def _depth_first(self, node: Node, depth: int) -> Iterable[tuple[Node, int]]:
        stack = [(node, depth)]
        seen: set[Node] = set()
        while stack:
            current, level = stack.pop()
            if current in seen:  # a cycle in a hand-made tree: visit once
                continue
            seen.add(current)
            yield current, level
            stack.extend((child, level + 1) for child in reversed(self.children[current]))

    def _subtree_usage(self, usage: Mapping[Node, float]) -> dict[Node, float]:
        """A node's usage is at least its children's: a tree imported after some
        charges may have ancestors behind their descendants."""
        total: dict[Node, float] = {}
        for node, _ in reversed(self.order):
            below = sum(total.get(child, 0.0) for child in self.children[node])
            total[node] = max(max(usage.get(node, 0.0), 0.0), below)
        return total

    def local_share(self, node: Node) -> float:
        """shares / shares of it and its siblings; `parent` nodes do not count among siblings."""
        own = self.shares.get(node)
        if own is None:
            return 1.0
        siblings = self.children[self.parent[node]] if self.parent[node] is not None else [node]
        total = sum(self.shares.get(s) or 0.0 for s in siblings)
        return own / total if total > 0 else 0.0

    def local_usage(self, node: Node) -> float:
        """usage / parent's usage (Fair Tree's U)."""
        parent = self.parent[node]
        above = self.usage[parent] if parent is not None else self.usage[node]
        return self.usage[node] / above if above > 0 else 0.0

    def users(self) -> list[Node]:
        return [node for node, _ in self.order if is_user(node)]


# --- classic ----------------------------------------------------------------------------


def classic_factor(effective_usage: float, norm_shares: float) -> float:
    """2^(-U_eff/S): 1.0 unused, 0.5 at share; no shares means the lowest factor."""
    if norm_shares <= 0:
        return 0.0
    return 2.0 ** (-effective_usage / norm_shares)


def classic(tree: TreeInput, usage: Mapping[Node, float]) -> dict[Node, ShareRow]:
    t = _Tree(tree, usage)
    total = t.usage[t.root]
    norm: dict[Node, float] = {}
    effective: dict[Node, float] = {}
    rows: dict[Node, ShareRow] = {}
    for node, depth in t.order:  # parents before children
        parent = t.parent[node]
        norm_usage = t.usage[node] / total if total > 0 else 0.0
        if parent is None:
            norm[node], effective[node] = 1.0, norm_usage
        elif t.shares.get(node) is None:  # FairShare=parent: the parent's values
            norm[node], effective[node] = norm[parent], effective[parent]
        else:
            fraction = t.local_share(node)
            norm[node] = norm[parent] * fraction
            if parent == t.root:
                effective[node] = norm_usage
            else:
                effective[node] = norm_usage + (effective[parent] - norm_usage) * fraction
        rows[node] = _row(t, node, depth, norm[node], norm_usage, effective[node], None,
                          classic_factor(effective[node], norm[node]))  # fmt: skip
    return _without_implicit_root(rows)


# --- Fair Tree --------------------------------------------------------------------------


def level_fs(tree: _Tree, node: Node) -> float:
    if tree.shares.get(node) is None:
        return math.inf  # FairShare=parent: never behind its siblings
    share = tree.local_share(node)
    if share <= 0:
        return 0.0
    used = tree.local_usage(node)
    return share / used if used > 0 else math.inf


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


def _rank(t: _Tree, lfs: dict[Node, float], siblings: list[Node], starts_tied: bool, ranking: _Ranking) -> None:
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
            children = [child for account in merged for child in t.children[account]]
            _rank(t, lfs, children, tied, ranking)
            i += len(merged)
        previous = lfs[node]


def _best_user_factor(t: _Tree, factors: dict[Node, float]) -> dict[Node, float | None]:
    best: dict[Node, float | None] = {}
    for node, _ in reversed(t.order):
        if is_user(node):
            best[node] = factors.get(node)
            continue
        found = [best[c] for c in t.children[node] if best.get(c) is not None]
        best[node] = max(found) if found else None
    return best


def fair_tree(tree: TreeInput, usage: Mapping[Node, float]) -> dict[Node, ShareRow]:
    t = _Tree(tree, usage)
    lfs = {node: level_fs(t, node) for node, _ in t.order if node != t.root}
    ranking = _Ranking(len(t.users()))
    _rank(t, lfs, t.children[t.root], False, ranking)
    factors = _best_user_factor(t, ranking.factor)
    total = t.usage[t.root]
    rows = {
        node: _row(
            t, node, depth,
            norm_shares=t.local_share(node) if node != t.root else 1.0,
            norm_usage=t.usage[node] / total if total > 0 else 0.0,
            effective_usage=t.local_usage(node) if node != t.root else 1.0 if total > 0 else 0.0,
            level=lfs.get(node),
            factor=factors.get(node),
        )  # fmt: skip
        for node, depth in t.order
    }
    return _without_implicit_root(rows)


# --- shared ------------------------------------------------------------------------------


def _row(
    t: _Tree,
    node: Node,
    depth: int,
    norm_shares: float,
    norm_usage: float,
    effective_usage: float,
    level: float | None,
    factor: float | None,
) -> ShareRow:
    return ShareRow(
        account=node[0],
        user=node[1],
        parent=t.parent[node],
        depth=depth,
        raw_shares=t.shares.get(node, 1.0),
        norm_shares=norm_shares,
        raw_usage=t.usage[node],
        norm_usage=norm_usage,
        effective_usage=effective_usage,
        level_fs=level,
        factor=factor,
    )


def _without_implicit_root(rows: dict[Node, ShareRow]) -> dict[Node, ShareRow]:
    return {node: row for node, row in rows.items() if node != IMPLICIT_ROOT}


def compute(
    tree: TreeInput, usage: Mapping[Node, float], algorithm: Literal["classic", "fair_tree"] = "classic"
) -> dict[Node, ShareRow]:
    """Every node's sshare row, in depth-first tree order."""
    if not tree:
        return {}
    return fair_tree(tree, usage) if algorithm == "fair_tree" else classic(tree, usage)


def factor_of(rows: Mapping[Node, ShareRow], account: str, user: str, default: float = NEUTRAL_FACTOR) -> float:
    """The fair-share factor of (account, user): the user's association, else its
    account's, else `default` (exactly at share: neither favoured nor held back)."""
    for node in ((account, user), (account, "")):
        row = rows.get(node)
        if row is not None and row.factor is not None:
            return row.factor
    return default


# --- building the tree input -------------------------------------------------------------


def parse_shares(text: str | float | int) -> float | None:
    """sacctmgr's shares column: a number, or `parent`."""
    if isinstance(text, str) and text.strip().lower() == "parent":
        return None
    value = float(text)
    if value < 0 or math.isnan(value) or math.isinf(value):
        raise ValueError(f"shares must be a non-negative number or 'parent', got {text!r}")
    return value


def tree_from_associations(rows: Iterable[tuple[str, str, str, str | float]]) -> dict[Node, tuple[Node | None, float | None]]:
    """The tree from (account, user, parent, shares) rows, as in the `associations` table.

    A user's parent is its account; an account's is the account its `parent`
    names (none at the root). An account named as a parent without a row of
    its own is added with one share, so no subtree is cut off.
    """
    tree: dict[Node, tuple[Node | None, float | None]] = {}
    for account, user, parent, shares in rows:
        if user:
            tree[(account, user)] = ((account, ""), parse_shares(shares))
        else:
            tree[(account, "")] = ((parent, "") if parent else None, parse_shares(shares))
    for node, (parent, _) in list(tree.items()):
        if parent is not None and parent not in tree:
            tree[parent] = (None, 1.0)
    return tree


def implicit_tree(
    group_shares: Mapping[str, float], members: Iterable[tuple[str, str]]
) -> dict[Node, tuple[Node | None, float | None]]:
    """A tree for sites that imported none: root -> each group (its job_share) -> its users (1 share each)."""
    tree: dict[Node, tuple[Node | None, float | None]] = {("root", ""): (None, 1.0)}
    for group, share in sorted(group_shares.items()):
        tree[(group, "")] = (("root", ""), float(share))
    for group, owner in sorted(set(members)):
        tree.setdefault((group, ""), (("root", ""), 1000.0))  # DIRAC's default job share
        tree[(group, owner)] = ((group, ""), 1.0)
    return tree
