"""The Slurm association tree, as dumped by sacctmgr. Pure: no I/O.

Input is exactly what
`sacctmgr -n -p show assoc cluster=X format=account,share,parentn,user`
prints: one association per line, `account|shares|parent|user|` (`-p` ends
every field, the last one too, with `|`). An account row has an empty user
and names its parent account (the root account's parent is empty); a user
row names a user and hangs under its account (Slurm prints its parent name
empty). Shares are a whole number or `parent`.

Round trip. Rows keep the order and the exact text of their fields, so
`export_sacctmgr(parse_sacctmgr(text)) == text` for every dump sacctmgr
prints: lines end in "\\n", the last one too. One leniency: a missing final
newline (e.g. a dump passed through `$(...)`) is accepted, and export ends
the last line with "\\n" like every other. Anything else that would not come
back byte for byte (blank lines, CRLF endings, a byte-order mark) is refused.

Rows become the association tree (`fairmatch.accounting.tree.ShareTree`,
where nodes and `parent` shares are explained) with build_tree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from fairmatch.accounting.tree import Node, ShareTree
from fairmatch.fields import MAX_NAME, clean_name

SHARES_PARENT = "parent"
MAX_SHARES = 2**32 - 1  # Slurm keeps shares in a uint32
FIELDS = 4  # account, shares, parent, user
SEPARATOR = "|"
# what sacctmgr prints first without -n (`Par Name` is parentn's column title)
HEADER = ("account", "share", "par name", "user")
MAX_QUOTED = 200  # characters of an offending line quoted in an error
MAX_LISTED_ERRORS = 5  # in an error's message; `errors` has them all

_WHOLE_NUMBER = re.compile(r"[0-9]+")
_NEGATIVE_NUMBER = re.compile(r"-[0-9]+")
# C0, DEL and C1: they would garble listings, and PostgreSQL refuses NUL
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True, slots=True)
class Association:
    """One line of the dump, each field as written, the names without the spaces around them."""

    account: str
    shares: str  # digits or "parent" (any case)
    parent: str  # '' for the root account and (as sacctmgr prints them) for users
    user: str  # '' for an account row

    @property
    def node(self) -> Node:
        return Node(self.account, self.user)

    @property
    def is_user(self) -> bool:
        return self.user != ""

    @property
    def uses_parent_shares(self) -> bool:
        return self.shares.lower() == SHARES_PARENT

    @property
    def raw_shares(self) -> int | None:
        """The number of shares; None for `parent`."""
        return None if self.uses_parent_shares else int(self.shares)

    @property
    def parent_node(self) -> Node | None:
        """The node above in the tree: a user's account, an account's parent; None at the root."""
        if self.is_user:
            return Node(self.account)
        return Node(self.parent) if self.parent else None

    def to_line(self) -> str:
        return SEPARATOR.join((self.account, self.shares, self.parent, self.user)) + SEPARATOR


# --- errors --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LineError:
    line: int  # 1-based, as an editor counts
    content: str
    problem: str

    def __str__(self) -> str:
        shown = self.content if len(self.content) <= MAX_QUOTED else self.content[:MAX_QUOTED] + "…"
        return f"line {self.line}: {self.problem}: {shown!r}"


class AssociationError(ValueError):
    """A dump that cannot be imported; `errors` lists every problem found, in line order."""

    def __init__(self, errors: Sequence[LineError]) -> None:
        self.errors = sorted(errors, key=lambda e: e.line)
        shown = "; ".join(str(e) for e in self.errors[:MAX_LISTED_ERRORS])
        more = len(self.errors) - MAX_LISTED_ERRORS
        super().__init__(shown + (f" (and {more} more)" if more > 0 else ""))

    @property
    def line(self) -> int:
        """The first offending line."""
        return self.errors[0].line


# --- parsing -------------------------------------------------------------------------


def parse_sacctmgr(text: str) -> list[Association]:
    """The associations of a dump, in its line order; AssociationError if any line is wrong.

    Line syntax is checked first; the tree (parents, users' accounts, cycles,
    duplicates, one root) only once every line reads, so that one bad line
    does not also show up as a missing account elsewhere.
    """
    lines = _split_lines(text)
    if not lines:
        raise AssociationError([LineError(1, "", "the dump is empty: expected at least the root account")])
    parsed = [_parse_line(number, line) for number, line in enumerate(lines, start=1)]
    errors = [p for p in parsed if isinstance(p, LineError)]
    if errors:
        raise AssociationError(errors)
    rows = [p for p in parsed if isinstance(p, Association)]
    check_tree(rows)
    return rows


def user_associations(rows: Iterable[Association]) -> frozenset[tuple[str, str]]:
    """The (account, user) pairs of a tree's users: what a job may be charged to."""
    return frozenset((row.account, row.user) for row in rows if row.is_user)


def unknown_association(known: frozenset[tuple[str, str]], account: str, user: str) -> str | None:
    """With an imported tree (`known`: its user_associations), why a job of (account, user)
    is refused, as Slurm refuses a job of an unknown association; None when it is known."""
    if (account, user) in known:
        return None
    return f"no association of account {account!r} and user {user!r} in the imported tree"


def export_sacctmgr(rows: Iterable[Association]) -> str:
    """The dump again: one line per association, each ending in a newline, as sacctmgr prints."""
    return "".join(row.to_line() + "\n" for row in rows)


def _split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline ending the last line starts no new one
    return lines


def _parse_line(number: int, line: str) -> Association | LineError:
    problem = _line_problem(number, line)
    if problem:
        return LineError(number, line, problem)
    account, shares, parent, user = line.split(SEPARATOR)[:FIELDS]
    try:
        row = Association(_trimmed(account), shares, _trimmed(parent), _trimmed(user))
    except ValueError as exc:
        return LineError(number, line, str(exc))
    problem = _field_problem(row)
    return LineError(number, line, problem) if problem else row


def _trimmed(name: str) -> str:
    """A name of the dump as every name that enters is stored (spaces around it dropped); none stays none."""
    return clean_name(name) if name.strip() else ""


def _line_problem(number: int, line: str) -> str | None:
    """What is wrong with the line as a whole: its shape, before any field is read."""
    if line == "":
        return "empty line"
    if number == 1 and line.startswith("\ufeff"):
        return "the dump starts with a byte-order mark; save it as UTF-8 without one"
    if line.endswith("\r"):
        return "the line ends in a carriage return (CRLF): the dump must have Unix (LF) line endings"
    if _CONTROL.search(line):
        return "control character in the line"
    fields = line.split(SEPARATOR)
    if len(fields) == FIELDS:
        return "missing the trailing '|' (use sacctmgr -p, not -P)"
    if len(fields) != FIELDS + 1 or fields[-1] != "":
        found = len(fields) - 1 if fields[-1] == "" else len(fields)
        return f"expected {FIELDS} fields account|shares|parent|user| ending in '|', found {found}"
    if tuple(f.lower() for f in fields[:FIELDS]) == HEADER:
        return "a header line: run sacctmgr with -n (no header)"
    return None


def _field_problem(row: Association) -> str | None:
    if row.account == "":
        return "empty account"
    for name in ("account", "parent", "user"):
        if len(getattr(row, name)) > MAX_NAME:
            return f"{name} is longer than {MAX_NAME} characters"
    shares = _shares_problem(row.shares)
    if shares:
        return shares
    if row.is_user and row.parent not in ("", row.account):
        # sacctmgr prints a user's parent empty: the user hangs under its account
        return f"user {row.user!r} has parent {row.parent!r}, which is not its account {row.account!r}"
    return None


def _shares_problem(shares: str) -> str | None:
    if shares.lower() == SHARES_PARENT:
        return None
    if _NEGATIVE_NUMBER.fullmatch(shares):
        return f"negative shares {shares}"
    if not _WHOLE_NUMBER.fullmatch(shares):
        return f"shares {shares!r} are neither a whole number nor 'parent'"
    if int(shares) > MAX_SHARES:
        return f"shares {shares} are above Slurm's largest, {MAX_SHARES}"
    return None


# --- the tree's consistency ----------------------------------------------------------


def check_tree(rows: Sequence[Association]) -> None:
    """Refuse rows that do not form one tree; line numbers count rows from 1.

    One root account (empty parent); every parent and every user's account an
    existing account; no cycle; each (account, user) once.
    """
    errors = [
        *_duplicates(rows),
        *_root_problems(rows),
        *_missing_accounts(rows),
        *_cycles(rows),
    ]
    if errors:
        raise AssociationError(errors)


def _error(rows: Sequence[Association], index: int, problem: str) -> LineError:
    return LineError(index + 1, rows[index].to_line(), problem)


def _duplicates(rows: Sequence[Association]) -> Iterator[LineError]:
    first_line: dict[Node, int] = {}
    for index, row in enumerate(rows):
        if row.node in first_line:
            yield _error(rows, index, f"duplicate association: {row.node.describe()} is already on line "
                                      f"{first_line[row.node]}")  # fmt: skip
        else:
            first_line[row.node] = index + 1


def _root_problems(rows: Sequence[Association]) -> Iterator[LineError]:
    first_rows = {row.node: i for i, row in reversed(list(enumerate(rows)))}.values()
    roots = sorted(i for i in first_rows if not rows[i].is_user and not rows[i].parent)  # duplicates said so
    if not roots:
        yield _error(rows, 0, "no root account: no account row has an empty parent (e.g. root|1|||)")
    for index in roots[1:]:
        root = rows[roots[0]].account
        yield _error(rows, index, f"a second root account: the root is {root!r} (line {roots[0] + 1})")


def _missing_accounts(rows: Sequence[Association]) -> Iterator[LineError]:
    accounts = {row.account for row in rows if not row.is_user}
    for index, row in enumerate(rows):
        if row.is_user and row.account not in accounts:
            yield _error(rows, index, f"the account {row.account!r} of user {row.user!r} does not exist")
        elif not row.is_user and row.parent and row.parent not in accounts:
            yield _error(rows, index, f"unknown parent account {row.parent!r}")


def _cycles(rows: Sequence[Association]) -> Iterator[LineError]:
    """Each cycle of account parents once, at the line of its first account in the file."""
    parent = {row.account: row.parent for row in rows if not row.is_user}
    line = {row.account: i for i, row in reversed(list(enumerate(rows))) if not row.is_user}
    settled: set[str] = set()  # reaches the root, a missing parent, or a cycle already reported
    for account in parent:
        path: list[str] = []
        on_path: set[str] = set()
        current = account
        while current in parent and current not in settled and current not in on_path:
            path.append(current)
            on_path.add(current)
            current = parent[current]
        if current in on_path:
            cycle = path[path.index(current) :]
            first = min(cycle, key=line.__getitem__)
            loop = " → ".join([*_rotated(cycle, first), first])
            yield _error(rows, line[first], f"account {first!r} is in a cycle of parents: {loop}")
        settled.update(path)


def _rotated(cycle: list[str], first: str) -> list[str]:
    start = cycle.index(first)
    return cycle[start:] + cycle[:start]


# --- the tree ------------------------------------------------------------------------


def tree_of(rows: Iterable[Association]) -> ShareTree:
    """The tree of rows already checked (e.g. read back from the database), in their order."""
    return ShareTree(
        {row.node: (row.parent_node, None if row.raw_shares is None else float(row.raw_shares)) for row in rows}
    )


def build_tree(rows: Sequence[Association]) -> ShareTree:
    """The tree of rows from elsewhere; AssociationError unless they form one."""
    check_tree(rows)
    return tree_of(rows)
