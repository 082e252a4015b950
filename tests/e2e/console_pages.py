"""What the console's end-to-end tests share: jobs queued through the API, and the parts of a
console page they read (the rows a listing shows, a form's fields, its links)."""

from __future__ import annotations

import html
import re
from typing import Any

import httpx

CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')
JOB_ROW = re.compile(r'<tr data-job="(\d+)">')
QUEUE_ROW = re.compile(r'<td class="num"><a href="/ui/taskqueues/(\d+)">')
NEXT = re.compile(r'<a href="([^"]+)" rel="next"')
PREVIOUS = re.compile(r'<a href="([^"]+)" rel="prev"')
HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


def submit(api: httpx.Client, *specs: dict[str, Any], count: int = 1) -> list[int]:
    """Queues each spec `count` times, in order; a spec's owner and group default to alice's in lhcb_user."""
    jobs = [
        {"owner": "alice", "owner_group": "lhcb_user", "cpu_time": 3600, **spec} for spec in specs for _ in range(count)
    ]
    r = api.post("/jobs", json={"jobs": jobs})
    assert r.status_code == 201, r.text
    return [j["job_id"] for j in r.json()["jobs"]]


def listed_jobs(page: httpx.Response) -> list[int]:
    """The ids of the jobs the page lists, in its order."""
    assert page.status_code == 200, page.text
    return [int(i) for i in JOB_ROW.findall(page.text)]


def listed_queues(page: httpx.Response) -> list[int]:
    """The ids of the task queues the page lists, in its order."""
    assert page.status_code == 200, page.text
    return [int(i) for i in QUEUE_ROW.findall(page.text)]


def link(pattern: re.Pattern[str], page: httpx.Response) -> str | None:
    """The address of the page's first link `pattern` finds, as a browser follows it."""
    found = pattern.search(page.text)
    return html.unescape(found.group(1)) if found else None


def form_fields(page: str, action: str) -> dict[str, str]:
    """The hidden fields of the page's form posting to `action`, as a browser would send them."""
    found = re.search(rf'<form method="post" action="{re.escape(action)}".*?</form>', page, re.S)
    assert found, f"no form posting to {action}"
    return {name: html.unescape(value) for name, value in HIDDEN.findall(found.group(0))}
