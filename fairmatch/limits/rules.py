"""Site limits as pure logic: which attribute values a site may not take now, and why.

A rule names a site, an attribute of the job (`job_type`, `owner_group`,
`owner`) and one value of it, with a `running_limit` (at most N jobs of that
value Matched or Running at the site) and/or a `matching_delay` (at least N
seconds between two matches of that value at the site). A value at its limit
is banned from the site's matches, the way DIRAC's Limiter adds negative
conditions to the resource description.

A rule may also name one computing element of the site (`grid_ce`; '' is the
whole site): it then counts, spaces and limits only the jobs matched through
that CE (DIRAC's `RunningLimit/<site>/CEs/<CE>`). A pilot at site S behind CE C
is held to S's limits on the whole site and to C's, merged; a pilot that names
no CE (or several) to the whole site's only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from fairmatch.matching.resource import ResourceQuery


class Attribute(StrEnum):
    job_type = "job_type"
    owner_group = "owner_group"
    owner = "owner"


# DIRAC's CS spells them JobType, OwnerGroup, Owner
DIRAC_NAMES = {"JobType": Attribute.job_type, "OwnerGroup": Attribute.owner_group, "Owner": Attribute.owner}


# `grid_ce` of a limit on the whole site
WHOLE_SITE = ""


class Rule(StrEnum):
    running_limit = "running_limit"
    matching_delay = "matching_delay"


@dataclass(frozen=True, slots=True)
class Limit:
    site: str
    attribute: Attribute
    value: str
    running_limit: int | None = None
    matching_delay: float | None = None
    grid_ce: str = WHOLE_SITE

    @property
    def key(self) -> tuple[str, str, str, str]:
        """(site, grid_ce, attribute, value): one limit of each."""
        return (self.site, self.grid_ce, self.attribute.value, self.value)

    def where(self) -> dict[str, str]:
        """The limit's key as a reason names it."""
        return {"site": self.site, "grid_ce": self.grid_ce, "attribute": self.attribute.value, "value": self.value}

    def applies_to(self, site: str, grid_ce: str | None) -> bool:
        """Whether a pilot at `site` behind `grid_ce` (None: no one CE) is held to this limit."""
        return self.site == site and (self.grid_ce == WHOLE_SITE or self.grid_ce == grid_ce)

    def counted(self, per_ce: Mapping[tuple[str | None, str], int]) -> int:
        """The jobs this limit counts, from the site's jobs holding a slot per (CE they were
        matched through, value): a whole-site limit counts them all, a CE's limit its own."""
        return sum(
            n for (ce, value), n in per_ce.items()
            if value == self.value and (self.grid_ce == WHOLE_SITE or ce == self.grid_ce)
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class LimitState:
    """A limit with what the database says now."""

    limit: Limit
    running: int = 0
    last_match_at: datetime | None = None

    def reasons(self, now: datetime) -> list[dict[str, Any]]:
        """Why this value may not be matched at the site now (empty: it may)."""
        found: list[dict[str, Any]] = []
        lim = self.limit
        where = lim.where()
        if lim.running_limit is not None and self.running >= lim.running_limit:
            found.append({"rule": Rule.running_limit.value, **where,
                          "limit": lim.running_limit, "running": self.running})  # fmt: skip
        if lim.matching_delay is not None and self.last_match_at is not None:
            free_at = self.last_match_at + timedelta(seconds=lim.matching_delay)
            if free_at > now:
                found.append({"rule": Rule.matching_delay.value, **where,
                              "delay_seconds": lim.matching_delay, "next_match_at": free_at})  # fmt: skip
        return found


def values_of(attribute: Attribute, owner: str, owner_group: str, job_types: Iterable[str]) -> set[str]:
    if attribute is Attribute.owner:
        return {owner}
    if attribute is Attribute.owner_group:
        return {owner_group}
    return set(job_types)


@dataclass(frozen=True, slots=True)
class SiteLimits:
    """The limits a pilot at one site is held to (the whole site's and its CE's) and their state at `now`.

    Limits of the site and of the CE on one value merge: the value is banned while either bans it."""

    states: tuple[LimitState, ...]
    now: datetime

    def blocked(self) -> dict[tuple[Attribute, str], list[dict[str, Any]]]:
        """(attribute, value) → the reasons it is banned now."""
        found: dict[tuple[Attribute, str], list[dict[str, Any]]] = {}
        for state in self.states:
            reasons = state.reasons(self.now)
            if reasons:
                found.setdefault((state.limit.attribute, state.limit.value), []).extend(reasons)
        return found

    def restrict(self, query: ResourceQuery) -> ResourceQuery:
        """The query with every banned value excluded."""
        return with_banned(query, [reason for reasons in self.blocked().values() for reason in reasons])

    def excluding(self, query: ResourceQuery, reasons: list[dict[str, Any]]) -> ResourceQuery:
        """The query less the values these reasons (of a refused claim) name."""
        return with_banned(query, reasons)

    def reasons_for(self, tq: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Why a task queue (as the API shows it) is kept from this site now."""
        blocked = self.blocked()
        found: list[dict[str, Any]] = []
        for attribute in Attribute:
            for value in sorted(values_of(attribute, tq["owner"], tq["owner_group"], tq["job_types"])):
                found.extend(blocked.get((attribute, value), []))
        return found

    def applicable(self, owner: str, owner_group: str, job_types: Iterable[str]) -> list[Limit]:
        """The limits a job with these values counts against."""
        job_types = list(job_types)
        return [
            s.limit for s in self.states
            if s.limit.value in values_of(s.limit.attribute, owner, owner_group, job_types)
        ]  # fmt: skip


def with_banned(query: ResourceQuery, reasons: Iterable[Mapping[str, Any]]) -> ResourceQuery:
    """The query with the (attribute, value) of each reason excluded as well."""
    banned: dict[Attribute, set[str]] = {a: set() for a in Attribute}
    for reason in reasons:
        banned[Attribute(reason["attribute"])].add(reason["value"])
    return dataclasses.replace(
        query,
        banned_job_types=query.banned_job_types | banned[Attribute.job_type],
        banned_owner_groups=query.banned_owner_groups | banned[Attribute.owner_group],
        banned_owners=query.banned_owners | banned[Attribute.owner],
    )


def from_settings(configured: Mapping[str, Any]) -> list[Limit]:
    """Limits from the `[site_limits."<site>".{running_limit,matching_delay}.<attribute>]` tables of the
    settings, and a CE's from `[site_limits."<site>".CEs."<ce>".{running_limit,matching_delay}.<attribute>]`."""
    merged: dict[tuple[str, str, Attribute, str], dict[str, Any]] = {}
    for site, site_rules in configured.items():
        for grid_ce, rules in [(WHOLE_SITE, site_rules), *sorted(site_rules.CEs.items())]:
            for rule in Rule:
                for attribute, values in getattr(rules, rule.value).items():
                    for value, amount in values.items():
                        merged.setdefault((site, grid_ce, Attribute(attribute), value), {})[rule.value] = amount
    return [
        Limit(site, attribute, value, grid_ce=grid_ce, **amounts)
        for (site, grid_ce, attribute, value), amounts in sorted(merged.items())
    ]
