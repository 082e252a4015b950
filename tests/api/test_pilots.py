"""Pilots on record (docs/how-to/pilots.md): what a match records, what a 204 counts, who reads them.

A 200 creates or updates the pilot in the claim itself; a 204 is counted in the
process and written by the background loop. The tests write those counts when
they choose (`flush`), on the server's own event loop: a flush waits for one in
progress, so once it returns every 204 answered before is in the database.
"""

from __future__ import annotations

import base64
from datetime import datetime
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy as sa

from fairmatch.services import background
from tests.problems import assert_problem

URL_REF = "https://ce.example.org:9619/123.0"
PILOT = {"Site": "LCG.CERN.cern", "CPUTime": 10**6, "GridCE": "ce1.cern.ch"}


def submit(client: httpx.Client, n: int = 1, **overrides) -> list[int]:
    jobs = [{"owner": "alice", "owner_group": "physics", **overrides} for _ in range(n)]
    r = client.post("/jobs", json={"jobs": jobs})
    assert r.status_code == 201, r.text
    return [j["job_id"] for j in r.json()["jobs"]]


def match(client: httpx.Client, reference: str | None, status: int = 200, **resource) -> dict | None:
    body = {**PILOT, **resource}
    if reference is not None:
        body["PilotReference"] = reference
    r = client.post("/match", json=body)
    assert r.status_code == status, r.text
    return r.json() if status == 200 else None


def pilot(client: httpx.Client, reference: str, status: int = 200) -> dict:
    r = client.get(f"/pilots/{quote(reference, safe='')}")
    assert r.status_code == status, r.text
    return r.json()


def flush(server) -> int:
    """The server's 204s written now, on its own event loop."""

    async def run() -> int:
        process = server.app.state.process
        async with process.engine.connect() as conn:
            return await process.empty_matches.flush(conn)

    return server.portal.call(run)


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


# --- what a match records ----------------------------------------------------------------


def test_a_match_creates_the_pilot_and_the_next_one_updates_it(client):
    jobs = submit(client, 2)
    answer = match(client, URL_REF, PilotBenchmark=17.5)
    assert answer["minor_status"] == "Assigned"
    first = answer["job_id"]
    [second] = set(jobs) - {first}
    created = pilot(client, URL_REF)
    assert created == {
        "reference": URL_REF, "site": "LCG.CERN.cern", "grid_ce": "ce1.cern.ch", "benchmark": 17.5,
        "first_seen": created["first_seen"], "last_seen": created["first_seen"],
        "matches": 1, "empty_matches": 0, "current_job_id": first, "job_ids": [first],
    }  # fmt: skip
    # the next job of the same pilot, sent without a benchmark and from another CE
    match(client, URL_REF, GridCE="ce2.cern.ch")
    updated = pilot(client, URL_REF)
    assert (updated["matches"], updated["current_job_id"], updated["job_ids"]) == (2, second, sorted(jobs))
    assert (updated["grid_ce"], updated["benchmark"]) == ("ce2.cern.ch", 17.5)  # the benchmark on record stays
    assert updated["first_seen"] == created["first_seen"]
    assert ts(updated["last_seen"]) >= ts(created["last_seen"])


def test_the_job_shows_its_pilot_ce_and_minor_status_assigned(client, database):
    [job_id] = submit(client)
    match(client, "pilot-7")
    job = client.get(f"/jobs/{job_id}").json()
    assert (job["status"], job["minor_status"]) == ("Matched", "Assigned")
    assert (job["pilot_reference"], job["grid_ce"], job["site"]) == ("pilot-7", "ce1.cern.ch", "LCG.CERN.cern")
    with database.engine().connect() as conn:
        rows = conn.execute(
            sa.text("SELECT status, minor_status, source FROM job_events WHERE job_id = :j ORDER BY id"), {"j": job_id}
        ).all()
    assert [tuple(r) for r in rows] == [("Waiting", None, "submit"), ("Matched", "Assigned", "match")]


def test_a_resource_naming_several_ces_records_none(client):
    [job_id] = submit(client)
    match(client, "pilot-ces", GridCE=["ce1.cern.ch", "ce2.cern.ch"])
    assert pilot(client, "pilot-ces")["grid_ce"] is None
    assert client.get(f"/jobs/{job_id}").json()["grid_ce"] is None


def test_a_match_without_a_reference_records_no_pilot(client, server):
    submit(client)
    match(client, None)
    match(client, None, status=204)
    assert flush(server) == 0
    assert client.get("/pilots").json() == {"pilots": [], "next_cursor": None}


def test_a_replayed_request_id_counts_nothing(client, server):
    [job_id] = submit(client)
    for _ in range(3):
        assert match(client, "pilot-r", request_id="once")["job_id"] == job_id
    flush(server)
    found = pilot(client, "pilot-r")
    assert (found["matches"], found["empty_matches"], found["job_ids"]) == (1, 0, [job_id])


# --- what a 204 counts -------------------------------------------------------------------


def test_empty_matches_count_after_the_flush_and_a_pilot_may_be_first_seen_on_one(client, server):
    for _ in range(3):
        match(client, URL_REF, status=204, PilotBenchmark=9.0)
    flush(server)
    first = pilot(client, URL_REF)
    assert (first["matches"], first["empty_matches"], first["current_job_id"], first["job_ids"]) == (0, 3, None, [])
    assert (first["site"], first["grid_ce"], first["benchmark"]) == ("LCG.CERN.cern", "ce1.cern.ch", 9.0)
    [job_id] = submit(client)
    match(client, URL_REF)
    match(client, URL_REF, status=204)
    flush(server)
    later = pilot(client, URL_REF)
    assert (later["matches"], later["empty_matches"], later["job_ids"]) == (1, 4, [job_id])
    assert later["first_seen"] == first["first_seen"] and later["benchmark"] == 9.0


def test_204s_are_written_by_the_flush_not_by_the_request(database, server_factory, monkeypatch):
    monkeypatch.setattr(background, "EMPTY_MATCH_FLUSH_SECONDS", 3600.0)  # only the test's flushes
    server = server_factory()
    with server.client() as client:
        match(client, "quiet-pilot", status=204)
        match(client, "quiet-pilot", status=204)
        pilot(client, "quiet-pilot", status=404)  # counted in the process, not yet written
        assert flush(server) == 1
        assert pilot(client, "quiet-pilot")["empty_matches"] == 2
        assert flush(server) == 0  # written once


def test_the_204s_left_are_written_when_the_server_stops(database, server_factory, monkeypatch, clean):
    monkeypatch.setattr(background, "EMPTY_MATCH_FLUSH_SECONDS", 3600.0)
    server = server_factory()
    with server.client() as client:
        for _ in range(4):
            match(client, "last-words", status=204)
    server.stop()
    with database.engine().connect() as conn:
        row = conn.execute(sa.text("SELECT matches, empty_matches FROM pilots WHERE reference = 'last-words'")).one()
    assert tuple(row) == (0, 4)


# --- the listing ---------------------------------------------------------------------------


def test_the_listing_is_newest_first_and_its_pages_cover_every_pilot_once(client):
    references = [f"pilot-{i}" for i in range(7)]
    submit(client, len(references))
    for reference in references:
        match(client, reference)
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = client.get("/pilots", params=params).json()
        seen += [p["reference"] for p in page["pilots"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == references[::-1]
    whole = client.get("/pilots").json()["pilots"]
    assert [p["reference"] for p in whole] == references[::-1]
    assert "job_ids" not in whole[0]
    stamps = [ts(p["first_seen"]) for p in whole]
    assert stamps == sorted(stamps, reverse=True)


def test_the_listing_filters_by_site_since_and_reference_as_sent(client):
    submit(client, 3)
    match(client, URL_REF)
    match(client, "elsewhere", Site="LCG.RAL.uk")
    match(client, "later")
    listed = client.get("/pilots").json()["pilots"]
    since = {p["reference"]: p["first_seen"] for p in listed}["elsewhere"]

    def refs(**params) -> list[str]:
        r = client.get("/pilots", params=params)
        assert r.status_code == 200, r.text
        return [p["reference"] for p in r.json()["pilots"]]

    assert refs(site="LCG.CERN.cern") == ["later", URL_REF]
    assert refs(site="LCG.RAL.uk") == ["elsewhere"]
    assert refs(since=since) == ["later", "elsewhere"]  # at or after
    assert refs(reference=URL_REF) == [URL_REF]
    assert refs(reference="https://ce.example.org:9619/123.1") == []
    assert refs(site="LCG.CERN.cern", since=since) == ["later"]


@pytest.mark.parametrize("params", [{"sites": "x"}, {"limit": 10, "page": 2}, {"Reference": "x"}])
def test_an_unknown_query_parameter_is_422_naming_it(client, params):
    problem = assert_problem(client.get("/pilots", params=params), 422)
    unknown = next(k for k in params if k not in ("limit",))
    assert any(e["loc"][-1] == unknown for e in problem["errors"]), problem


@pytest.mark.parametrize(
    ("params", "status", "key"),
    [
        ({"limit": 0}, 422, "limit"),
        ({"limit": 1001}, 422, "limit"),
        ({"since": "yesterday"}, 422, "since"),
        ({"since": "2026-11-25T00:00:00" + "0" * 60}, 422, "since"),
        ({"since": "0001-01-01T00:00:00+14:00"}, 422, "since"),
        ({"since": "9999-12-31T23:59:59-14:00"}, 422, "since"),
        ({"site": "x\x01"}, 422, "site"),
        ({"reference": "r" * 256}, 422, "reference"),
        ({"cursor": "bm90IGEgY3Vyc29y"}, 400, None),
        ({"cursor": base64.urlsafe_b64encode(b'["2026-11-25T00:00:00+00:00","x\\u0000"]').decode()}, 400, None),
        ({"cursor": base64.urlsafe_b64encode(b'["2026-11-25T00:00:00","x"]').decode()}, 400, None),
    ],
)
def test_bad_listing_parameters_are_refused(client, params, status, key):
    problem = assert_problem(client.get("/pilots", params=params), status)
    if key is not None:
        assert any(e["loc"][-1] == key for e in problem["errors"]), problem


def test_an_unknown_pilot_is_404(client):
    assert_problem(client.get(f"/pilots/{quote(URL_REF, safe='')}"), 404)
    assert_problem(client.get("/pilots/nobody"), 404)


# --- who reads them ------------------------------------------------------------------------


def test_a_pilot_reads_only_its_own_pilots(as_role):
    admin = as_role("admin")
    submit(admin, 2)
    alpha, beta = as_role("pilot", sub="pilot-alpha"), as_role("pilot", sub="pilot-beta")
    match(alpha, URL_REF)
    match(beta, "beta-1")
    assert [p["reference"] for p in alpha.get("/pilots").json()["pilots"]] == [URL_REF]
    assert [p["reference"] for p in beta.get("/pilots").json()["pilots"]] == ["beta-1"]
    assert pilot(alpha, URL_REF)["matches"] == 1
    assert_problem(alpha.get("/pilots/beta-1"), 404)  # another's pilot is not revealed
    assert alpha.get("/pilots", params={"reference": "beta-1"}).json()["pilots"] == []
    for reader in (admin, as_role("operator")):
        assert {p["reference"] for p in reader.get("/pilots").json()["pilots"]} == {URL_REF, "beta-1"}
        assert pilot(reader, "beta-1")["matches"] == 1
    user = as_role("user", sub="alice", groups=["physics"])
    assert_problem(user.get("/pilots"), 403)
    assert_problem(user.get("/pilots/beta-1"), 403)
