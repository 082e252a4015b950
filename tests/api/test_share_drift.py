"""Share drift over HTTP on both backends: `GET /status` and the console's overview name the setting
that makes a group's achieved share leave its target, from the server's own running-job samples.

The case of the report: three equal-share groups, one with its backlog in the longest CPU bucket
a pilot of 200 000 s takes, 60 such pilots. With `prefer_longest_cpu = true` (the 2009 order) all
60 go to that group and the status says so; with the default (DIRAC 9: CPU time is a condition,
then the lottery) each group gets about a third and the status reports nothing.
"""

from __future__ import annotations

import time
from collections import Counter

import httpx
import pytest
import sqlalchemy as sa
from rich.console import Console

from fairmatch.cli.status import status_screen
from fairmatch.db.tables import history_samples, running_samples
from fairmatch.matching.drift import DRIFT_MIN_SAMPLES
from tests.api.test_fair_share import match, put_group, recompute, submit
from tests.fair_share import SITE, job
from tests.statistics import assert_fraction

pytestmark = pytest.mark.timeout(180)

PILOTS = 60
PILOT = {"Site": SITE, "CPUTime": 200_000}
LONG_CPU = 150_000  # the 172 800 s bucket: the longest a 200 000 s pilot takes
GROUPS = ("long", "short_a", "short_b")
SAMPLING = {"PRIORITY__SAMPLE_SECONDS": "0.2", "PRIORITY__INTERVAL_SECONDS": "0.5"}


def _long_cpu_backlog(c: httpx.Client, long_cpu: int = LONG_CPU) -> Counter:
    """The groups and their backlogs, then PILOTS matches: the groups they went to."""
    for group in GROUPS:
        put_group(c, group, 1000)
    submit(c, [job("lena", "long", cpu_time=long_cpu) for _ in range(200)]
           + [job("sam", "short_a") for _ in range(200)] + [job("sid", "short_b") for _ in range(200)])  # fmt: skip
    recompute(c)
    matched: Counter = Counter()
    for _ in range(PILOTS):
        got = match(c, PILOT)
        assert got is not None, f"nothing matched after {sum(matched.values())} pilots"
        matched[got["owner_group"]] += 1
    return matched


def _wait_for_busy_samples(database, count: int, seconds: float = 30) -> None:
    """Until the server's sampler has taken `count` samples with jobs running."""
    busy = sa.select(sa.func.count(sa.distinct(running_samples.c.sample_id))).join(
        history_samples, history_samples.c.id == running_samples.c.sample_id
    )
    engine = database.engine()
    deadline = time.monotonic() + seconds
    try:
        while True:
            with engine.connect() as conn:
                taken = conn.execute(busy).scalar_one()
            if taken >= count:
                return
            if time.monotonic() > deadline:
                pytest.fail(f"{taken} samples with jobs running within {seconds} s, not {count}")
            time.sleep(0.2)
    finally:
        engine.dispose()


def _status(c: httpx.Client) -> dict:
    r = c.get("/status")
    assert r.status_code == 200, r.text
    return r.json()


def _screen(document: dict) -> str:
    console = Console(width=200, record=True)
    console.print(status_screen(document))
    return console.export_text()


def _overview(c: httpx.Client) -> str:
    r = c.get(str(c.base_url.join("/ui/")))
    assert r.status_code == 200, r.text
    return r.text


def test_the_cpu_order_with_a_long_backlog_drifts_and_status_and_overview_say_so(server_factory, clean):
    server = server_factory(MATCHING__PREFER_LONGEST_CPU="true", **SAMPLING)
    with server.client() as c:
        assert _long_cpu_backlog(c) == {"long": PILOTS}
        _wait_for_busy_samples(clean, DRIFT_MIN_SAMPLES + 2)
        (drift,) = _status(c)["share_drift"]
        assert (drift["setting"], drift["value"], drift["group"]) == ("matching.prefer_longest_cpu", "true", "long")
        assert drift["achieved_share"] == 1.0 and drift["target_share"] == pytest.approx(1 / 3)
        assert drift["cpu_time"] == 172_800 and drift["behind"] == ["short_a", "short_b"]
        assert drift["samples"] >= DRIFT_MIN_SAMPLES
        assert drift["message"].startswith("group long achieved 100% of the running jobs against a 33% target")
        overview = _overview(c)  # the same sentence; more samples may have been taken since
        head, tail = drift["message"].split(" over the last ")
        assert head in overview and tail.split(" samples; ")[1] in overview
        screen = _screen(_status(c))  # `fairmatch status` on a terminal
        assert "Shares drifting because of a setting" in screen and "matching.prefer_longest_cpu = true" in screen
        assert "100%" in screen and "33%" in screen


@pytest.mark.parametrize(
    ("settings", "long_cpu"),
    [
        pytest.param({}, LONG_CPU, id="default-lottery-over-every-bucket"),
        pytest.param({"MATCHING__PREFER_LONGEST_CPU": "true"}, 100, id="cpu-order-without-a-long-backlog"),
    ],
)
def test_shares_that_hold_are_reported_as_no_drift(server_factory, clean, settings, long_cpu):
    server = server_factory(**settings, **SAMPLING)
    with server.client() as c:
        matched = _long_cpu_backlog(c, long_cpu)
        assert_fraction(matched["long"], PILOTS, 1 / 3, "the long group's third")
        _wait_for_busy_samples(clean, DRIFT_MIN_SAMPLES + 2)
        assert _status(c)["share_drift"] == []
        assert "orders by CPU bucket" not in _overview(c)
        assert "Shares drifting" not in _screen(_status(c))
