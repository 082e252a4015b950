"""The task-queue listing's query and links: where its headers and pages lead, and how levels
and sites are shown (fairmatch/console/pages/taskqueues.py). What its filters refuse is the 422
page of tests/e2e/test_console.py."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

from fairmatch.console.pages.taskqueues import (
    COLUMNS,
    USER_PRIORITY_OF_LEVEL,
    QueueQuery,
    _headers,
    _levels,
    _short,
)
from fairmatch.db.console_queues import Level, Waiting


def params(href: str) -> dict[str, str]:
    parts = urlsplit(href)
    assert parts.path == "/ui/taskqueues"
    return {name: values[-1] for name, values in parse_qs(parts.query).items()}


def test_without_an_order_each_column_sorts_its_natural_way_first():
    assert QueueQuery().direction == "desc"  # priority: highest first
    assert QueueQuery(sort="owner").direction == "asc"
    assert QueueQuery(sort="oldest").direction == "desc"  # the longest wait first
    assert QueueQuery(sort="jobs", order="asc").direction == "asc"


def test_links_keep_the_filters_and_change_only_what_they_say():
    query = QueueQuery(group="lhcb", site="S1", sort="jobs", order="asc", page=3)
    assert params(query.href(page=4)) == {"group": "lhcb", "site": "S1", "sort": "jobs", "order": "asc", "page": "4"}


def test_the_current_column_s_header_reverses_its_order_and_the_others_sort_from_page_one():
    query = QueueQuery(owner="alice", sort="priority", order="desc", page=2)
    headers = dict(zip([label for _, label, _ in COLUMNS], _headers(query), strict=True))
    current = headers["Priority"]
    assert current.sorted and current.label == "Priority ▼"
    assert params(current.href or "") == {"owner": "alice", "sort": "priority", "order": "asc", "page": "1"}
    other = headers["Oldest waiting"]
    assert (
        not other.sorted
        and params(other.href or "")["sort"] == "oldest"
        and params(other.href or "")["order"] == "desc"
    )
    assert headers["Account"].href is None and headers["Sites"].href is None
    # in words, with the command line's name beside
    assert (headers["Task queue"].short, headers["Priority class"].short) == ("TQ", "class")


def test_levels_show_the_user_priority_each_stands_for():
    assert sorted(USER_PRIORITY_OF_LEVEL.values()) == list(range(11))  # one level per user priority
    then = datetime(2026, 1, 1, tzinfo=UTC)
    waiting = Waiting([Level(1e6, 2, then), Level(3.0, 5, None)])
    assert [(lv["user_priority"], lv["jobs"]) for lv in _levels(waiting)] == [(10, 2), (3, 5)]
    assert waiting.jobs == 7 and waiting.oldest == then
    assert _levels(None) == []


def test_sites_are_shortened_and_none_means_any():
    assert _short([]) == "any"
    assert _short(["A", "B", "C"]) == "A, B, C"
    assert _short(["A", "B", "C", "D", "E"]) == "A, B, C (+2)"
