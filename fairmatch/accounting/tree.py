"""The association tree: who is under whom, who competes with whom, and each node's share.

Pure: no I/O. The accounting (the imported sacctmgr tree, sshare) and the
fair-share policies read the same tree: `ShareTree` is built from plain
`{node: (parent, shares)}` data, shares None standing for sacctmgr's
`FairShare=parent`.

Nodes are `Node(account, user)` tuples, user '' for an account: the keys of
the `associations` and `usage_totals` tables. A plain `(account, user)`
tuple is the same node.

Shares `parent` follow sacctmgr's definition ("Fairshare=parent"): the node
takes no part in the sharing itself.
- A user or account with `parent` shares stands for its nearest ancestor
  with a number of shares (its "fair-share node"; the root at the latest):
  its normalised share, its level and its siblings are that node's.
- The children of an account with `parent` shares are reparented, for the
  sharing only, to that fair-share node: they compete on its level, next to
  its own children. As in Slurm, a `parent` child adds its own children's
  shares to its parent's level sum (slurm's `_get_children_level_shares`);
  unlike Slurm's classic code, a reparented child is also normalised within
  that level, so the normalised shares of every level add up to its node's.
Normalised share (Slurm's classic formula): a node's shares over the sum of
its level's shares, times the same for its fair-share parent, up to the
root (1.0). A level whose shares sum to 0 gives its members 0.

Hand-made trees (the implicit tree of groups, a simulation's) are taken as
they come: several top nodes share an implicit root, a parent without a row
of its own makes its child a top node, and a node is visited once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple


class Node(NamedTuple):
    """An association's key: (account, '') for an account, (account, user) for a user."""

    account: str
    user: str = ""

    @property
    def is_user(self) -> bool:
        return self.user != ""

    def describe(self) -> str:
        if self.is_user:
            return f"user {self.user!r} of account {self.account!r}"
        return f"account {self.account!r}"


# node -> (parent, shares); None shares: `parent`. Plain (account, user) tuples or Nodes.
TreeInput = Mapping[tuple[str, str], tuple[tuple[str, str] | None, float | None]]

IMPLICIT_ROOT = Node("", "")  # joins several top-level nodes under one root


class UnknownAssociation(KeyError):
    """No association for this (account, user)."""


class ShareTree:
    """The structure and the shares of an association tree; answers are computed once."""

    def __init__(self, tree: TreeInput) -> None:
        given = {Node(*node): (None if up is None else Node(*up), shares) for node, (up, shares) in tree.items()}
        self.nodes: list[Node] = list(given)  # the input's order: sacctmgr's
        self._shares = {node: shares for node, (_, shares) in given.items()}
        tops = [node for node, (up, _) in given.items() if up is None or up not in given]
        self.root: Node = tops[0] if len(tops) == 1 else IMPLICIT_ROOT
        self._parent: dict[Node, Node | None] = {self.root: None}
        self._children: dict[Node, list[Node]] = {node: [] for node in given}
        self._children.setdefault(self.root, [])
        for node, (up, _) in given.items():
            if node == self.root:
                continue
            above = up if up is not None and up in given and up != node else self.root
            self._parent[node] = above
            self._children[above].append(node)
        self.order: list[tuple[Node, int]] = list(self._depth_first())
        self._members: dict[Node, list[Node]] = {}
        self._member_shares: dict[Node, float] = {}
        self._normalised: dict[Node, float] | None = None

    def _depth_first(self) -> Iterator[tuple[Node, int]]:
        """(node, depth) from the root down, children in the input's order."""
        stack = [(self.root, 0)]
        seen: set[Node] = set()
        while stack:
            node, depth = stack.pop()
            if node in seen:  # a cycle in a hand-made tree: visit once
                continue
            seen.add(node)
            yield node, depth
            stack.extend((child, depth + 1) for child in reversed(self._children[node]))

    def _known(self, node: tuple[str, str]) -> Node:
        key = Node(*node)
        if key not in self._parent:
            raise UnknownAssociation(key.describe())
        return key

    # --- structure ------------------------------------------------------------------------

    def __contains__(self, node: object) -> bool:
        return node in self._shares

    def __len__(self) -> int:
        return len(self.nodes)

    def parent(self, node: tuple[str, str]) -> Node | None:
        """The node above: a user's account, an account's parent account; None for the root."""
        return self._parent[self._known(node)]

    def children(self, node: tuple[str, str]) -> list[Node]:
        """Users and sub-accounts directly under an account, in the input's order ([] for a user)."""
        return list(self._children[self._known(node)])

    def ancestors(self, account: str, user: str = "") -> list[Node]:
        """The path to the root, the node itself first: user → account → … → root.

        These are the nodes a job of (account, user) charges. UnknownAssociation
        if the tree has no such association.
        """
        path = [self._known((account, user))]
        seen = set(path)  # a cycle in a hand-made tree ends the walk
        while (above := self._parent[path[-1]]) is not None and above not in seen:
            path.append(above)
            seen.add(above)
        return path

    def users(self) -> list[Node]:
        """Every user, in depth-first order."""
        return [node for node, _ in self.order if node.is_user]

    # --- shares ---------------------------------------------------------------------------

    def shares(self, node: tuple[str, str]) -> float | None:
        """The node's own shares; None for `parent` (the implicit root: 1)."""
        return self._shares.get(Node(*node), 1.0)

    def uses_parent(self, node: tuple[str, str]) -> bool:
        """Whether the node gives way to its fair-share node (`parent` shares; never the root)."""
        return node != self.root and self._shares.get(Node(*node), 1.0) is None

    def fair_share_node(self, node: tuple[str, str]) -> Node:
        """The node whose shares stand for this one: itself, or with `parent` shares its
        nearest ancestor that has a number of shares (the root at the latest)."""
        current = self._known(node)
        while self.uses_parent(current) and (above := self._parent[current]) is not None:
            current = above
        return current

    def fair_share_parent(self, node: tuple[str, str]) -> Node | None:
        """Where the node competes for shares: the fair-share node of its parent."""
        above = self._parent[self._known(node)]
        return None if above is None else self.fair_share_node(above)

    def members(self, above: tuple[str, str]) -> list[Node]:
        """The nodes that divide `above`'s part, in the input's order: its children, an account
        with `parent` shares replaced by its own children, a user with `parent` shares kept
        (with no shares: Fair Tree ranks it first in its account)."""
        key = Node(*above)
        if key not in self._members:
            found: list[Node] = []
            pending = list(reversed(self._children[key]))  # a stack: the input's order comes out
            while pending:
                child = pending.pop()
                if self.uses_parent(child) and not child.is_user:
                    pending.extend(reversed(self._children[child]))
                else:
                    found.append(child)
            self._members[key] = found
        return self._members[key]

    def _members_shares(self, above: Node) -> float:
        # cached: a flat account of thousands of users would otherwise cost n^2
        if above not in self._member_shares:
            self._member_shares[above] = sum(self._shares.get(m) or 0.0 for m in self.members(above))
        return self._member_shares[above]

    def siblings(self, node: tuple[str, str]) -> list[Node]:
        """The other nodes whose shares the node's own are divided against (none with `parent` shares)."""
        own = self.fair_share_node(node)
        above = self.fair_share_parent(own)
        if above is None:
            return []
        return [other for other in self.members(above) if other != own and not self.uses_parent(other)]

    def level_shares(self, node: tuple[str, str]) -> float:
        """Σ shares of the node's level (Slurm's S_siblings, the node's own included)."""
        own = self.fair_share_node(node)
        above = self.fair_share_parent(own)
        return (self.shares(own) or 0.0) if above is None else self._members_shares(above)

    def local_share(self, node: tuple[str, str]) -> float:
        """The node's shares over those of its level: 1 at the root, 0 in a level of no shares."""
        above = self.fair_share_parent(node)
        if above is None:
            return 1.0
        total = self._members_shares(above)
        return (self.shares(node) or 0.0) / total if total > 0 else 0.0

    def normalised_shares(self) -> dict[Node, float]:
        """Each node's fraction of the whole machine, in [0, 1]: the product of the local
        shares down its path; a `parent`-shares node answers for its fair-share node."""
        if self._normalised is None:
            norm: dict[Node, float] = {}
            for node, _ in self.order:  # ancestors first: no recursion, so no depth limit
                above = self.fair_share_parent(node)
                if above is None:
                    norm[node] = 1.0  # the root
                elif self.uses_parent(node):
                    norm[node] = norm[self.fair_share_node(node)]
                else:
                    norm[node] = norm[above] * self.local_share(node)
            self._normalised = norm
        return self._normalised

    def normalised_share(self, node: tuple[str, str]) -> float:
        return self.normalised_shares()[self._known(node)]
