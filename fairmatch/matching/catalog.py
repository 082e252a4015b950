"""This process's copy of the task-queue table, indexed for eligibility. Pure logic.

Why a copy: with the table in the database, every match evaluated the
conditions on every task queue and grouped a queue's jobs to draw a level,
so its cost grew with both (bench/README.md has the figures). Here a TQ has
a position, and each (field, value) the set of positions of the TQs that
list it, as an integer used as a bit set: a resource's eligible TQs are a
few dozen ANDs and ORs of such sets, whatever the number of TQs.

What keeps the copy right:
- a TQ's requirements never change (its id and hash name one requirement set), so
  whether a resource may take it never changes either; only its priority,
  its levels and whether it still holds jobs do, and each change of those
  moves the row's `changed_at`, which `fairmatch.services.keeper` polls;
- a claim that finds a level, or a whole TQ, empty takes it out of this copy
  until its row changes again (new jobs always change it);
- TQs deleted from the database leave it at the keeper's periodic sweep of ids.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from fairmatch.taskqueues.matching_fields import MATCHED_AMOUNTS
from fairmatch.taskqueues.requirements import MULTI_VALUE_FIELDS, levels_of

# single-valued keys with bit sets of their own
KEY_FIELDS = ("owner", "owner_group", "vo")


@dataclass(slots=True)
class Entry:
    """One TQ as matching sees it."""

    tq_id: int
    requirements_hash: str
    position: int
    owner: str
    owner_group: str
    vo: str
    cpu_time: int
    priority_class: int
    amounts: dict[str, int]  # what the jobs ask of each amount a pilot offers (0: none)
    values: dict[str, tuple[str, ...]]
    priority: float
    levels: dict[float, int]  # real priority -> jobs (an upper bound between priority runs)
    changed_at: datetime | None
    drained: set[float] = field(default_factory=set)  # levels a claim found empty since

    def open_levels(self) -> list[tuple[float, int]]:
        return [(p, n) for p, n in sorted(self.levels.items()) if n > 0 and p not in self.drained]


def bit(position: int) -> int:
    return 1 << position


class Minima:
    """The TQs by what they ask of one amount (memory, GPUs): those asking for none, and per
    distinct minimum (ascending) those asking for it; the prefix unions of those, made when
    first asked for after a change. What an offer passes is one bisect over the distinct
    minima and one union, whatever the number of TQs."""

    def __init__(self) -> None:
        self.without = 0
        self.values: list[int] = []
        self.asking: dict[int, int] = {}
        self._up_to: list[int] | None = []

    def add(self, minimum: int, positions: int) -> None:
        if minimum <= 0:
            self.without |= positions
            return
        if minimum not in self.asking:
            insort(self.values, minimum)
        self.asking[minimum] = self.asking.get(minimum, 0) | positions
        self._up_to = None

    def at_most(self, offered: int) -> int:
        if self._up_to is None:
            found, self._up_to = 0, []
            for minimum in self.values:
                found |= self.asking[minimum]
                self._up_to.append(found)
        index = bisect_right(self.values, offered)
        return self.without | (self._up_to[index - 1] if index else 0)


class Catalog:
    def __init__(self) -> None:
        self.entries: dict[int, Entry] = {}
        self.slots: list[Entry] = []  # by position; positions are never reused before a reload
        self.live = 0  # TQs believed to hold waiting jobs
        self.every = 0  # all positions
        self.having: dict[str, dict[str, int]] = {f: {} for f in (*MULTI_VALUE_FIELDS, *KEY_FIELDS)}
        self.without: dict[str, int] = {f: 0 for f in MULTI_VALUE_FIELDS}  # TQs listing no value
        self.classes: dict[int, int] = {}  # priority class -> TQs
        self.buckets: dict[int, int] = {}  # CPU bucket -> TQs
        self.classes_down: list[int] = []
        self.buckets_down: list[int] = []
        self.shareless = 0  # TQs of groups without a share under rank: drawn only when no other is eligible
        self.minima = {name: Minima() for name in MATCHED_AMOUNTS}  # per amount a pilot offers
        self._priorities = np.zeros(64)
        self.sharing_groups: frozenset[str] = frozenset()  # JOB_SHARING: matched by group alone
        self.limited_sites: frozenset[str] = frozenset()  # sites with site limits
        self.masked_sites: frozenset[str] = frozenset()  # sites in the site mask (banned)
        self._tag_counts = np.zeros(64, dtype=np.int32)  # tags per TQ, by position
        self.latest_change: datetime | None = None  # the latest changed_at applied

    @property
    def priorities(self) -> np.ndarray:
        return self._priorities[: len(self.slots)]

    def __len__(self) -> int:
        return len(self.entries)

    def knows(self, tq_id: int, requirements_hash: str) -> bool:
        """Whether this copy holds the TQ's requirements (a new state of it is enough then)."""
        entry = self.entries.get(tq_id)
        return entry is not None and entry.requirements_hash == requirements_hash

    def apply(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Take rows of `task_queues`: new TQs with every column matching reads, known ones
        with at least their state (id, requirements_hash, priority, shareless, levels, changed_at)."""
        for row in rows:
            entry = self.entries.get(row["id"])
            if entry is None or not self.knows(row["id"], row["requirements_hash"]):
                if entry is not None:  # SQLite may give a deleted TQ's id to a new one
                    self.live &= ~bit(entry.position)
                entry = self._add(row)
            elif (
                row["changed_at"] is not None and entry.changed_at is not None and row["changed_at"] <= entry.changed_at
            ):
                continue  # a state already held, read again within the poll's margin
            changed = row["changed_at"]
            if changed is not None and (self.latest_change is None or changed > self.latest_change):
                self.latest_change = changed
            entry.priority = float(row["priority"])
            entry.levels = levels_of(row["levels"])
            entry.changed_at = row["changed_at"]
            entry.drained = set()
            self._priorities[entry.position] = entry.priority
            if row["shareless"]:
                self.shareless |= bit(entry.position)
            else:
                self.shareless &= ~bit(entry.position)
            if entry.open_levels():
                self.live |= bit(entry.position)
            else:
                self.live &= ~bit(entry.position)

    def _add(self, row: Mapping[str, Any]) -> Entry:
        position = len(self.slots)
        values = {f: tuple(row[f] or ()) for f in MULTI_VALUE_FIELDS}
        entry = Entry(
            tq_id=row["id"], requirements_hash=row["requirements_hash"], position=position, owner=row["owner"], owner_group=row["owner_group"], vo=row["vo"],
            cpu_time=int(row["cpu_time"]), priority_class=int(row["priority_class"]),
            amounts={name: int(row[name]) for name in MATCHED_AMOUNTS}, values=values, priority=0.0, levels={}, changed_at=None,
        )  # fmt: skip
        self.entries[entry.tq_id] = entry
        self.slots.append(entry)
        if position >= self._priorities.size:
            self._priorities = np.concatenate([self._priorities, np.zeros(self._priorities.size)])
            self._tag_counts = np.concatenate([self._tag_counts, np.zeros(self._tag_counts.size, dtype=np.int32)])
        self._tag_counts[position] = len(set(values["tags"]))
        b = bit(position)
        self.every |= b
        for f, listed in values.items():
            if not listed:
                self.without[f] |= b
            for value in listed:
                self.having[f][value] = self.having[f].get(value, 0) | b
        for f in KEY_FIELDS:
            value = row[f]
            self.having[f][value] = self.having[f].get(value, 0) | b
        if entry.priority_class not in self.classes:
            self.classes_down = sorted([*self.classes, entry.priority_class], reverse=True)
        self.classes[entry.priority_class] = self.classes.get(entry.priority_class, 0) | b
        if entry.cpu_time not in self.buckets:
            self.buckets_down = sorted([*self.buckets, entry.cpu_time], reverse=True)
        self.buckets[entry.cpu_time] = self.buckets.get(entry.cpu_time, 0) | b
        for name, asked in entry.amounts.items():
            self.minima[name].add(asked, b)
        return entry

    def drain(self, entry: Entry, level: float | None = None) -> None:
        """A claim found this level (None: the whole TQ) empty."""
        if level is None:
            entry.drained.update(entry.levels)
        else:
            entry.drained.add(level)
        if not entry.open_levels():
            self.live &= ~bit(entry.position)

    def with_value(self, field_name: str, value: str) -> int:
        return self.having[field_name].get(value, 0)

    def with_any(self, field_name: str, values: Iterable[str]) -> int:
        found = 0
        for value in values:
            found |= self.having[field_name].get(value, 0)
        return found

    def cpu_at_most(self, seconds: int) -> int:
        found = 0
        for bucket, positions in self.buckets.items():
            if bucket <= seconds:
                found |= positions
        return found

    def asking_at_most(self, amount: str, offered: int) -> int:
        """TQs asking for none of `amount`, or for at most `offered`."""
        return self.minima[amount].at_most(offered)

    def tags_within(self, offered: frozenset[str]) -> int:
        """TQs whose tags are all among `offered`: those with as many of the offered
        tags as they have tags (a count per TQ, so the cost follows the tags offered,
        not all the tags there are)."""
        size = len(self.slots)
        found = np.zeros(size, dtype=np.int32)
        for tag in offered:
            bits = self.having["tags"].get(tag)
            if bits:
                found += self._unpack(bits)
        return self._pack(found == self._tag_counts[:size])

    def remove(self, tq_ids: Iterable[int]) -> None:
        """TQs deleted from the database."""
        for tq_id in tq_ids:
            entry = self.entries.pop(tq_id, None)
            if entry is not None:
                self.live &= ~bit(entry.position)

    def wasted(self) -> int:
        """Positions of TQs no longer here (reclaimed by building a new catalog)."""
        return len(self.slots) - len(self.entries)

    def _unpack(self, bits: int) -> np.ndarray:
        raw = np.frombuffer(bits.to_bytes((len(self.slots) + 7) // 8 or 1, "little"), dtype=np.uint8)
        return np.unpackbits(raw, bitorder="little")[: len(self.slots)]

    def _pack(self, flags: np.ndarray) -> int:
        return int.from_bytes(np.packbits(flags, bitorder="little").tobytes(), "little")

    def positions(self, bits: int) -> np.ndarray:
        """The positions in a bit set, ascending."""
        return np.flatnonzero(self._unpack(bits))

    def entries_in(self, bits: int) -> list[Entry]:
        return [self.slots[p] for p in self.positions(bits)]

    def tq_ids(self, bits: int) -> Sequence[int]:
        return [self.slots[p].tq_id for p in self.positions(bits)]
