"""Bad and hostile input never gets a 500: every refusal is an RFC 9457 problem.

A refusal is a 4xx with Content-Type application/problem+json and
type/title/status/detail; a 422 carries `errors` whose `loc` points at the
offending field. What may be stored (SQL metacharacters, control characters in
the opaque payload, long names in characters) is stored, returned verbatim and
compared literally, on both backends; every refusal leaves each table as it was.

Input is checked before any database is touched, so the refusals run on one
backend (`refusal`); what reaches a table runs on both. The body size limit is
tested against a real uvicorn (a declared and a chunked body, a reused
connection); the rest in process. The static checks (no SQL built from strings,
a schema that bounds what clients send) are tests/unit/test_sql_and_schema.py.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy as sa

from fairmatch.db.tables import BACKGROUND_TABLES, metadata
from tests.conftest import BACKENDS, start_server
from tests.conftest import TestDatabase as Database  # (not collected as a test class)

JSON = {"content-type": "application/json"}
PILOT = {"Site": "S1", "CPUTime": 10**6}
SMALL_BODY_LIMIT = 100_000
DEPTH_LIMIT = 32  # the default server.max_json_depth

# input refused before the database is read or written: the first backend says it for both
refusal = pytest.mark.parametrize("database", BACKENDS[:1], indirect=True)


def assert_problem(
    response: httpx.Response, status: int | None = None, loc: list | tuple | None = None, kind: str | None = None
) -> dict:
    """A 4xx problem (of `status` and `urn:fairmatch:problem:<kind>` when given); for a 422, `loc`
    (a prefix, each element of which may be a set of alternatives: field aliases) names a
    reported field."""
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])
    if status is not None:
        assert response.status_code == status, response.text[:1000]
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body = response.json()
    assert {"type", "title", "status", "detail"} <= body.keys(), body
    assert body["status"] == response.status_code
    assert isinstance(body["title"], str) and isinstance(body["detail"], str)
    if kind is not None:
        assert body["type"] == f"urn:fairmatch:problem:{kind}", body
    # nothing hostile is echoed back: no input values, no stack traces
    assert len(response.content) < 20_000, len(response.content)
    assert "Traceback" not in response.text
    if response.status_code == 422:
        errors = body.get("errors")
        assert isinstance(errors, list) and errors, body
        assert all({"loc", "msg", "type"} <= e.keys() for e in errors), errors
        if loc is not None:
            assert any(_loc_matches(e["loc"], loc) for e in errors), (loc, errors)
    return body


def _loc_matches(actual: list, expected: list | tuple) -> bool:
    if len(actual) < len(expected):
        return False
    return all(a in e if isinstance(e, (set, frozenset)) else a == e for a, e in zip(actual, expected))


def assert_field_error(response: httpx.Response, loc: list) -> dict:
    return assert_problem(response, 422, loc)


def row_counts(db: Database) -> dict[str, int]:
    """Rows per table that requests write (background work fills the others on its own)."""
    engine = db.engine()
    try:
        with engine.connect() as conn:
            return {
                t.name: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
                for t in metadata.sorted_tables
                if t.name not in BACKGROUND_TABLES
            }
    finally:
        engine.dispose()


@contextlib.contextmanager
def writes_nothing(db: Database) -> Iterator[None]:
    before = row_counts(db)
    yield
    assert row_counts(db) == before


@pytest.fixture(scope="module", autouse=True)
def no_server_errors(server) -> Iterator[None]:
    """Nothing this module sends makes the server log a traceback."""
    start = len(server.log())
    yield
    logged = server.log()[start:]
    assert "Traceback" not in logged and "unhandled error" not in logged, logged[-5000:]


def spec(**overrides) -> dict:
    return {"owner": "alice", "owner_group": "physics", **overrides}


def without(key: str) -> dict:
    s = spec()
    s.pop(key)
    return s


def define_job_class(client: httpx.Client, name: str) -> None:
    """A job may only name a job class that exists."""
    assert client.put(f"/job-classes/{quote(name, safe='')}", json={}).status_code in (200, 201)


def submit(client: httpx.Client, **overrides) -> int:
    r = client.post("/jobs", json={"jobs": [spec(**overrides)]})
    assert r.status_code == 201, r.text
    return r.json()["jobs"][0]["job_id"]


def assert_still_waiting(client: httpx.Client, job_id: int) -> None:
    assert client.get(f"/jobs/{job_id}").json()["status"] == "Waiting"


@pytest.fixture
def running_job(client) -> int:
    job_id = submit(client)
    assert client.post("/match", json={**PILOT, "JobID": job_id}).status_code == 200
    assert client.post(f"/jobs/{job_id}/status", json={"status": "Running"}).status_code == 200
    return job_id


def raw_jobs(*jobs: dict, **raw: str) -> bytes:
    """A submission body whose `{"@name": ...}` placeholders become the raw JSON text `raw[name]`.

    For what a JSON encoder would refuse to write: NaN, Infinity, lone surrogates.
    """
    text = json.dumps({"jobs": list(jobs)})
    for name, value in raw.items():
        text = text.replace(json.dumps(f"@{name}"), value)
    return text.encode()


# --- SQL metacharacters: data, never code ----------------------------------------------

SQL_METACHARACTERS = {
    "drop-table": "'; DROP TABLE jobs; --",
    "or-true": '" OR 1=1 --',
    "quote": "O'Brien",
    "backslashes": "C:\\temp\\ \\' \\\\",
    "percent": "%",
    "underscore": "_",
    "like-pattern": "%_%",
    "comment": "/* */ -- #",
    "placeholders": ":site ? %s $1 {0} %(x)s",
    "unicode": "Zürich ☢ 𝕏",
}
NAME_FIELDS = ("owner", "owner_group", "vo", "job_class")
LIST_FIELDS = ("sites", "grid_ces", "platforms", "job_types", "tags")


@pytest.mark.parametrize("value", list(SQL_METACHARACTERS.values()), ids=list(SQL_METACHARACTERS))
def test_sql_metacharacters_are_stored_returned_and_matched_verbatim(client, database, value):
    job = {
        **{f: value for f in NAME_FIELDS},
        **{f: [value] for f in LIST_FIELDS},
        "banned_sites": [f"{value} (banned)"],
        "payload": {value: [value]},
    }
    define_job_class(client, value)
    r = client.post("/jobs", json={"jobs": [job]})
    assert r.status_code == 201, r.text
    job_id = r.json()["jobs"][0]["job_id"]

    stored = client.get(f"/jobs/{job_id}").json()
    assert {f: stored[f] for f in job} == job

    listed = client.get("/jobs", params={"owner": value, "owner_group": value}).json()["jobs"]
    assert [j["job_id"] for j in listed] == [job_id]

    pilot = {
        # lists as JSON lists: one string is DIRAC's written list, whose names lose the quotes around them
        "Site": value, "CPUTime": 10**6, "GridCE": [value], "Platform": [value], "JobType": [value],
        "Tag": [value], "OwnerGroup": [value], "Owner": value, "VirtualOrganization": value,
        "PilotReference": value, "request_id": value,
    }  # fmt: skip
    queues = client.post("/taskqueues/matching", json=pilot).json()["task_queues"]
    assert [q["sites"] for q in queues] == [[value]]
    matched = client.post("/match", json=pilot)
    assert matched.status_code == 200, matched.text
    assert (matched.json()["job_id"], matched.json()["site"], matched.json()["pilot_reference"]) == (
        job_id, value, value,
    )  # fmt: skip
    assert client.post("/match", json=pilot).json()["job_id"] == job_id  # request_id, looked up

    reported = client.post(f"/jobs/{job_id}/status", json={"status": "Running", "minor_status": value})
    assert reported.json()["minor_status"] == value
    # and every table is still there, holding what it should
    assert row_counts(database)["jobs"] == 1


def test_like_wildcards_match_only_themselves(client):
    sites = ["%", "_", "%_%", "LCG.CERN.cern", "LCG_CERN_cern", "a%b"]
    job_ids = {site: submit(client, owner=site, sites=[site]) for site in sites}

    for site in sites:
        queues = client.post("/taskqueues/matching", json={"Site": site, "CPUTime": 10**6}).json()
        assert [q["sites"] for q in queues["task_queues"]] == [[site]], site
        owned = client.get("/jobs", params={"owner": site}).json()["jobs"]
        assert [j["job_id"] for j in owned] == [job_ids[site]], site

    for pattern in ("LCG%", "LCG_CERN%", "%%", "__", "a_b", "\\%"):
        assert client.post("/match", json={"Site": pattern, "CPUTime": 10**6}).status_code == 204, pattern
        assert client.get("/jobs", params={"owner": pattern}).json()["jobs"] == [], pattern

    r = client.post("/match", json={"Site": "%", "CPUTime": 10**6})
    assert r.json()["job_id"] == job_ids["%"]
    assert client.post("/match", json={"Site": "%", "CPUTime": 10**6}).status_code == 204


# --- the job description ---------------------------------------------------------------

# names that are no names (control characters and lengths have tests of their own below)
BAD_NAMES = {"empty": "", "blank": "   ", "int": 42, "list": ["alice"], "object": {"name": "alice"}, "bool": True}
NAME_CASES = [
    pytest.param(field, value, id=f"{field}-{name}") for field in NAME_FIELDS for name, value in BAD_NAMES.items()
] + [
    pytest.param("owner", None, id="owner-null"),
    pytest.param("owner_group", None, id="owner_group-null"),
]


@refusal
@pytest.mark.parametrize(("field", "value"), NAME_CASES)
def test_bad_name_field_is_422_at_that_field(client, field, value):
    r = client.post("/jobs", json={"jobs": [spec(), spec(**{field: value})]})
    assert_problem(r, 422, ["body", "jobs", 1, field])


@refusal
@pytest.mark.parametrize("field", ["owner", "owner_group"])
def test_missing_required_field_is_422_at_that_field(client, field):
    r = client.post("/jobs", json={"jobs": [without(field)]})
    assert_problem(r, 422, ["body", "jobs", 0, field])


NUMBER_CASES = {
    "cpu_time": [-1, 10**9 + 1, 2**70, "one hour", 1.5, [], {"s": 1}],
    "user_priority": [-1, 11, 2**70, "high", 1.5],
    "priority_class": [-1024, 1025, -(2**70), "urgent", 0.5],
    "min_ram_mb": [-1, 4_096_001, 2**70, "2GB", "2000", 1.5, True],
    "max_ram_mb": [-1, 4_096_001, 2**70, "4GB", "4000", 2000.5, False],
}


@refusal
@pytest.mark.parametrize(
    ("field", "value"),
    [pytest.param(f, v, id=f"{f}={v!r}"[:40]) for f, values in NUMBER_CASES.items() for v in values],
)
def test_bad_number_is_422_at_that_field(client, field, value):
    r = client.post("/jobs", json={"jobs": [spec(**{field: value})]})
    assert_problem(r, 422, ["body", "jobs", 0, field])


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cpu_time", 0),
        ("cpu_time", 10**9),
        ("user_priority", 0),
        ("user_priority", 10),
        ("priority_class", -1023),
        ("priority_class", 1024),
        ("min_ram_mb", 0),
        ("min_ram_mb", 4_096_000),
        ("max_ram_mb", 4_096_000),
    ],
)
def test_numbers_at_their_bounds_are_accepted(client, field, value):
    r = client.post("/jobs", json={"jobs": [spec(**{field: value})]})
    assert r.status_code == 201, r.text


# (elements with control characters or over 255 characters: the string tests below)
BAD_LISTS = {
    "number": (5, []),
    "object": ({"S1": True}, []),
    "int-element": (["S1", 7], [1]),
    "null-element": ([None], [0]),
    "list-element": ([["S1"]], [0]),
    "empty-element": (["S1", ""], [1]),
    "blank-element": (["  "], [0]),
    "long-string": ("s" * 256, [0]),
    "too-many": ([f"s{i}" for i in range(1001)], []),
}


@refusal
@pytest.mark.parametrize(
    ("field", "value", "at"),
    [
        pytest.param(f, v, at, id=f"{f}-{name}")
        for f in (*LIST_FIELDS, "banned_sites")
        for name, (v, at) in BAD_LISTS.items()
    ],
)
def test_bad_value_list_is_422_at_that_field(client, field, value, at):
    r = client.post("/jobs", json={"jobs": [spec(**{field: value})]})
    assert_problem(r, 422, ["body", "jobs", 0, field, *at])


@refusal
@pytest.mark.parametrize(
    ("ram", "accepted"),
    [
        ({"min_ram_mb": 4000, "max_ram_mb": 2000}, False),
        ({"min_ram_mb": 4001, "max_ram_mb": 4000}, False),
        ({"max_ram_mb": 4000, "min_ram_mb": 4000}, True),
        ({"min_ram_mb": 4000, "max_ram_mb": 0}, True),  # 0: no maximum
        ({"min_ram_mb": 4000}, True),
        ({"max_ram_mb": 2000}, True),
    ],
)
def test_min_ram_above_a_non_zero_max_ram_is_422_at_min_ram(client, ram, accepted):
    r = client.post("/jobs", json={"jobs": [spec(), spec(**ram)]})
    if accepted:
        assert r.status_code == 201, r.text
        return
    body = assert_problem(r, 422, ["body", "jobs", 1, "min_ram_mb"])
    assert [e["loc"] for e in body["errors"]] == [["body", "jobs", 1, "min_ram_mb"]]
    assert "max_ram_mb" in body["errors"][0]["msg"]
    assert client.get("/jobs").json()["jobs"] == []


@refusal
@pytest.mark.parametrize(
    ("where", "accepted"),
    [
        ({"sites": ["S1"], "banned_sites": ["S1"]}, False),
        ({"sites": ["S1", "S2"], "banned_sites": ["S2", "S1", "S3"]}, False),
        ({"sites": "S1", "banned_sites": "S1"}, False),  # single strings, as DIRAC sends them
        ({"sites": ["S1", "S2"], "banned_sites": ["S1"]}, True),  # S2 is left
        ({"banned_sites": ["S1"]}, True),  # no sites: anywhere else
        ({"sites": ["S1"]}, True),
    ],
)
def test_banning_every_listed_site_is_422_at_banned_sites(client, where, accepted):
    r = client.post("/jobs", json={"jobs": [spec(), spec(**where)]})
    if accepted:
        assert r.status_code == 201, r.text
        return
    body = assert_problem(r, 422, ["body", "jobs", 1, "banned_sites"])
    assert "could never run" in body["errors"][0]["msg"]
    assert client.get("/jobs").json()["jobs"] == []  # the whole submission is refused


@refusal
def test_payload_over_64_kib_is_422_at_the_payload(client):
    # a JSON string of n characters takes n + 2 bytes
    r = client.post("/jobs", json={"jobs": [spec(payload="x" * 65_535)]})
    assert_problem(r, 422, ["body", "jobs", 0, "payload"])
    r = client.post("/jobs", json={"jobs": [spec(), spec(payload={"blob": ["y" * 40_000, "z" * 40_000]})]})
    assert_problem(r, 422, ["body", "jobs", 1, "payload"])


def test_payload_of_exactly_64_kib_is_accepted(client):
    r = client.post("/jobs", json={"jobs": [spec(payload="x" * 65_534)]})
    assert r.status_code == 201, r.text


@refusal
@pytest.mark.parametrize(
    "payload",
    ["NaN", "Infinity", '{"x": [-Infinity]}', r'"\ud800"', r'{"k": ["ok", "\udfff"]}'],
    ids=["nan", "infinity", "nested-minus-infinity", "lone-surrogate", "nested-lone-surrogate"],
)
def test_payload_that_is_not_strict_json_is_422_at_the_payload(client, payload):
    body = raw_jobs(spec(), spec(payload="@p"), p=payload)
    assert_problem(client.post("/jobs", content=body, headers=JSON), 422, ["body", "jobs", 1, "payload"])


@refusal
@pytest.mark.parametrize(
    ("field", "value", "at"),
    [
        ("owner", r'"\udc00"', []),
        ("owner_group", r'"a\ud800b"', []),
        ("vo", r'"\udc00"', []),
        ("sites", r'["ok", "\udc00"]', [1]),
        ("tags", r'"\ud83d"', [0]),
    ],
    ids=["owner", "owner_group", "vo", "sites", "tags"],
)
def test_lone_surrogate_in_a_name_is_422_at_that_field(client, field, value, at):
    body = raw_jobs(spec(**{field: "@v"}), v=value)
    assert_problem(client.post("/jobs", content=body, headers=JSON), 422, ["body", "jobs", 0, field, *at])


@refusal
@pytest.mark.parametrize(
    ("job", "loc"),
    [
        (spec(colour="blue"), ["body", "jobs", 0, "colour"]),
        (spec(Owner="alice"), ["body", "jobs", 0, "Owner"]),
        (spec(status="Done"), ["body", "jobs", 0, "status"]),
    ],
    ids=["colour", "camel-case-alias", "status"],
)
def test_unknown_job_field_is_422_at_that_field(client, job, loc):
    assert_problem(client.post("/jobs", json={"jobs": [job]}), 422, loc)


@refusal
@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"jobs": []}, ["body", "jobs"]),
        ({}, ["body", "jobs"]),
        ({"jobs": None}, ["body", "jobs"]),
        ({"jobs": spec()}, ["body", "jobs"]),
        ({"jobs": [None]}, ["body", "jobs", 0]),
        ({"jobs": ["alice"]}, ["body", "jobs", 0]),
        ({"jobs": [spec()], "dry_run": True}, ["body", "dry_run"]),
        ([spec()], ["body"]),
        ("jobs", ["body"]),
    ],
    ids=["empty-list", "no-jobs", "null", "object", "null-job", "string-job", "extra-key", "array", "string"],
)
def test_bad_submit_envelope_is_422(client, body, loc):
    assert_problem(client.post("/jobs", json=body), 422, loc)


@refusal
@pytest.mark.parametrize(
    "raw",
    [b'{"jobs": [', b"not json", b'{"jobs": [{"owner": "a",}]}', b"{'jobs': []}", b"\xff\xfe{}"],
    ids=["truncated", "text", "trailing-comma", "single-quotes", "not-utf8"],
)
@pytest.mark.parametrize("path", ["/jobs", "/match", "/taskqueues/matching", "/jobs/1/status"])
def test_malformed_json_body_is_400(client, path, raw):
    assert_problem(client.post(path, content=raw, headers=JSON), 400)


@refusal
def test_rejected_submissions_store_nothing(client):
    client.post("/jobs", json={"jobs": [spec(), spec(cpu_time=-5)]})
    client.post("/jobs", content=b'{"jobs": [', headers=JSON)
    assert client.get("/jobs").json()["jobs"] == []
    assert client.get("/taskqueues").json()["task_queues"] == []


# --- the resource description of /match and /taskqueues/matching ----------------------

# a resource field is reported under the key the pilot used: snake_case or DIRAC's
SITE, CPU = {"site", "Site"}, {"cpu_time", "CPUTime"}
NPROC, RAM = {"number_of_processors", "NumberOfProcessors"}, {"max_ram_mb", "MaxRAM"}
JOB_ID, PILOT_REF = {"job_id", "JobID"}, {"pilot_reference", "PilotReference"}
BENCH = {"pilot_benchmark", "PilotBenchmark"}
BAD_RESOURCES = {
    "missing-Site": ({"CPUTime": 1}, ["body", SITE]),
    "missing-CPUTime": ({"Site": "S1"}, ["body", CPU]),
    "empty": ({}, ["body"]),
    "empty-Site": ({"Site": "", "CPUTime": 1}, ["body", SITE]),
    "empty-Site-list": ({"Site": [], "CPUTime": 1}, ["body", SITE]),
    "empty-Site-in-a-list": ({"Site": ["S1", ""], "CPUTime": 1}, ["body", SITE]),
    "number-Site": ({"Site": 7, "CPUTime": 1}, ["body", SITE]),
    "negative-CPUTime": ({"Site": "S1", "CPUTime": -1}, ["body", CPU]),
    "negative-cpu_time": ({"site": "S1", "cpu_time": -1}, ["body", CPU]),
    "huge-CPUTime": ({"Site": "S1", "CPUTime": 2**70}, ["body", CPU]),
    "string-CPUTime": ({"Site": "S1", "CPUTime": "lots"}, ["body", CPU]),
    "fraction-text-CPUTime": ({"Site": "S1", "CPUTime": "1.5"}, ["body", CPU]),
    "empty-text-CPUTime": ({"Site": "S1", "CPUTime": ""}, ["body", CPU]),
    "negative-text-CPUTime": ({"Site": "S1", "CPUTime": "-1"}, ["body", CPU]),
    "MaxRAM-text-with-unit": ({**PILOT, "MaxRAM": "4GB"}, ["body", RAM]),
    "NumberOfProcessors-text-0": ({**PILOT, "NumberOfProcessors": "0"}, ["body", NPROC]),
    "NumberOfProcessors-bool": ({**PILOT, "NumberOfProcessors": True}, ["body", NPROC]),
    "PilotBenchmark-negative": ({**PILOT, "PilotBenchmark": -1}, ["body", BENCH]),
    "PilotBenchmark-text": ({**PILOT, "PilotBenchmark": "fast"}, ["body", BENCH]),
    "PilotBenchmark-nan-text": ({**PILOT, "PilotBenchmark": "nan"}, ["body", BENCH]),
    "PilotBenchmark-huge-text": ({**PILOT, "PilotBenchmark": "1e999"}, ["body", BENCH]),
    "Tag-control-in-text": ({**PILOT, "Tag": "GPU, a\x01b"}, ["body", {"tags", "Tag"}]),
    "RequiredTag-long-in-text": (
        {**PILOT, "Tag": "A", "RequiredTag": "A, " + "r" * 256},
        ["body", {"required_tags", "RequiredTag"}],
    ),
    "NumberOfProcessors-0": ({**PILOT, "NumberOfProcessors": 0}, ["body", NPROC]),
    "NumberOfProcessors-huge": ({**PILOT, "NumberOfProcessors": 10**6}, ["body", NPROC]),
    "MaxRAM-negative": ({**PILOT, "MaxRAM": -1}, ["body", RAM]),
    "MaxRAM-huge": ({**PILOT, "MaxRAM": 10**12}, ["body", RAM]),
    "JobID-0": ({**PILOT, "JobID": 0}, ["body", JOB_ID]),
    "JobID-negative": ({**PILOT, "JobID": -3}, ["body", JOB_ID]),
    "JobID-huge": ({**PILOT, "JobID": 2**70}, ["body", JOB_ID]),
    "Tag-number": ({**PILOT, "Tag": [1]}, ["body", {"tags", "Tag"}]),
    "OwnerGroup-empty-element": ({**PILOT, "OwnerGroup": [""]}, ["body", {"owner_group", "OwnerGroup"}]),
    "PilotReference-number": ({**PILOT, "PilotReference": 17}, ["body", PILOT_REF]),
    "array-body": ([PILOT], ["body"]),
}


@refusal
@pytest.mark.parametrize("path", ["/match", "/taskqueues/matching"])
@pytest.mark.parametrize(("resource", "loc"), list(BAD_RESOURCES.values()), ids=list(BAD_RESOURCES))
def test_bad_resource_description_is_422_at_that_field(client, path, resource, loc):
    job_id = submit(client)
    if path == "/taskqueues/matching" and resource == {"CPUTime": 1}:
        assert client.post(path, json=resource).status_code == 200  # the dry run may ask about any site
        return
    assert_problem(client.post(path, json=resource), 422, loc)
    assert_still_waiting(client, job_id)


@refusal
@pytest.mark.parametrize(("resource", "key"), [({"Site": "any", "CPUTime": 1}, "Site"),
                                              ({"Site": "ANY", "CPUTime": 1}, "Site"),
                                              ({"site": "Any", "cpu_time": 1}, "site")])  # fmt: skip
def test_match_refuses_site_any_which_only_a_dry_run_may_describe(client, resource, key):
    """A claim records the pilot's site, which site limits count: `any` names none."""
    job_id = submit(client)
    body = assert_problem(client.post("/match", json=resource), 422)
    assert [e["loc"] for e in body["errors"]] == [["body", key]] and "own site" in body["detail"]
    assert_still_waiting(client, job_id)
    assert client.post("/taskqueues/matching", json=resource).status_code == 200


@refusal
def test_match_refuses_a_list_of_sites_which_only_a_dry_run_may_name(client):
    job_id = submit(client)
    for sites in (["S1", "S2"], ["S1"]):
        for key in ("Site", "site"):
            body = assert_problem(client.post("/match", json={key: sites, "CPUTime": 1}), 422)
            assert [e["loc"] for e in body["errors"]] == [["body", key]]
            assert client.post("/taskqueues/matching", json={key: sites, "CPUTime": 10**6}).status_code == 200
    assert_still_waiting(client, job_id)


# the exact key named: a missing key in the caller's own spelling, as a bad value's is
SPELLINGS = {
    "DIRAC-missing-Site": ({"CPUTime": 1}, "Site", "Field required (send Site or site)"),
    "DIRAC-missing-CPUTime": ({"Site": "S1"}, "CPUTime", "Field required (send CPUTime or cpu_time)"),
    "snake-missing-site": ({"cpu_time": 1}, "site", "Field required (send Site or site)"),
    "snake-missing-cpu_time": ({"site": "S1"}, "cpu_time", "Field required (send CPUTime or cpu_time)"),
    "DIRAC-bad-CPUTime": ({"Site": "S1", "CPUTime": "lots"}, "CPUTime", "valid integer"),
    "snake-bad-cpu_time": ({"site": "S1", "cpu_time": "lots"}, "cpu_time", "valid integer"),
}


@refusal
@pytest.mark.parametrize("path", ["/match", "/taskqueues/matching"])
@pytest.mark.parametrize(("resource", "key", "message"), list(SPELLINGS.values()), ids=list(SPELLINGS))
def test_a_resource_key_is_named_as_the_caller_spells_it(client, path, resource, key, message):
    if path == "/taskqueues/matching" and key.lower() == "site":
        # the dry run names no site when it asks about any site
        assert client.post(path, json=resource).status_code == 200
        return
    errors = assert_problem(client.post(path, json=resource), 422)["errors"]
    assert [(e["loc"], message in e["msg"]) for e in errors] == [(["body", key], True)], errors


def test_only_a_claim_that_hands_the_job_off_may_name_no_site(client):
    job_id = submit(client)
    body = assert_problem(client.post("/match", json={"Site": None, "CPUTime": 10**6}), 422)
    assert "only a claim that hands the job off" in body["errors"][0]["msg"]
    assert_still_waiting(client, job_id)
    taken = client.post("/match", json={"CPUTime": 10**6, "handoff": True, "PilotReference": "p-1"})
    assert taken.status_code == 200 and taken.json()["status"] == "HandedOff" and taken.json()["site"] is None


@refusal
@pytest.mark.parametrize(
    "tags",
    [
        {"RequiredTag": ["GPU"]},
        {"Tag": ["CPU"], "RequiredTag": ["GPU"]},
        {"tags": ["a", "b"], "required_tags": ["b", "c"]},
        {"MaxRAM": 4000, "RequiredTag": ["4GB"]},
        {"Tag": "CPU, SSD", "RequiredTag": "[GPU]"},
        {"NumberOfProcessors": 4, "RequiredTag": "8Processors"},
    ],
    ids=["no-tags", "other-tag", "partly", "maxram-yields-no-gb-tag", "as-text", "not-derived"],
)
@pytest.mark.parametrize("path", ["/match", "/taskqueues/matching"])
def test_required_tags_not_a_subset_of_tags_is_400(client, path, tags):
    job_id = submit(client, tags=["GPU"])
    assert_problem(client.post(path, json={**PILOT, **tags}), 400)
    assert_still_waiting(client, job_id)


@refusal
def test_required_tags_covered_by_derived_tags_are_accepted(client):
    submit(client, tags=["8Processors"])  # needs more cores than the slot has
    r = client.post("/match", json={**PILOT, "NumberOfProcessors": 4, "WholeNode": False,
                                    "RequiredTag": ["MultiProcessor", "4Processors", "WholeNode"]})  # fmt: skip
    assert r.status_code == 204, r.text


# --- status reports -------------------------------------------------------------------

BAD_REPORTS = {
    "unknown-status": ({"status": "Sleeping"}, ["body", "status"]),
    "Matched": ({"status": "Matched"}, ["body", "status"]),
    "Killed": ({"status": "Killed"}, ["body", "status"]),
    "lowercase": ({"status": "done"}, ["body", "status"]),
    "null-status": ({"status": None}, ["body", "status"]),
    "missing-status": ({"cpu_seconds": 1}, ["body", "status"]),
    "negative-cpu_seconds": ({"status": "Done", "cpu_seconds": -1}, ["body", "cpu_seconds"]),
    "negative-wall_seconds": ({"status": "Done", "wall_seconds": -0.5}, ["body", "wall_seconds"]),
    "huge-cpu_seconds": ({"status": "Done", "cpu_seconds": 1e13}, ["body", "cpu_seconds"]),
    "string-cpu_seconds": ({"status": "Done", "cpu_seconds": "lots"}, ["body", "cpu_seconds"]),
    "long-minor_status": ({"status": "Running", "minor_status": "m" * 256}, ["body", "minor_status"]),
    "unknown-field": ({"status": "Done", "exit_code": 3}, ["body", "exit_code"]),
    "array-body": (["Done"], ["body"]),
}


@refusal
@pytest.mark.parametrize(("body", "loc"), list(BAD_REPORTS.values()), ids=list(BAD_REPORTS))
def test_bad_status_report_is_422_and_changes_nothing(client, running_job, body, loc):
    before = client.get(f"/jobs/{running_job}").json()
    assert_problem(client.post(f"/jobs/{running_job}/status", json=body), 422, loc)
    assert client.get(f"/jobs/{running_job}").json() == before


# --- control characters ----------------------------------------------------------------

CONTROL_CHARACTERS = ["\x00", "\x01", "\x08", "\t", "\n", "\r", "\x1b", "\x1f", "\x7f"]
C1_CONTROL_CHARACTERS = ["\x80", "\x85", "\x9b", "\x9f"]


def _job_with(field: str, value: str) -> dict:
    return {"jobs": [spec(**{field: [value] if field in (*LIST_FIELDS, "banned_sites") else value})]}


def _resource_with(field: str, value: str) -> dict:
    listed = field in ("Tag", "RequiredTag", "OwnerGroup")
    resource = {**PILOT, field: [value] if listed else value}
    if field == "RequiredTag":
        resource["Tag"] = [value]
    return resource


RESOURCE_STRING_FIELDS = (
    "Site", "GridCE", "Platform", "JobType", "Tag", "RequiredTag", "OwnerGroup",
    "Owner", "VirtualOrganization", "PilotReference", "request_id",
)  # fmt: skip
# (path, body builder, field, where the 422 points)
STRING_FIELDS = [
    *[("/jobs", _job_with, f, ["body", "jobs", 0, f]) for f in NAME_FIELDS],
    *[("/jobs", _job_with, f, ["body", "jobs", 0, f, 0]) for f in (*LIST_FIELDS, "banned_sites")],
    *[("/match", _resource_with, f, ["body", f]) for f in RESOURCE_STRING_FIELDS],
]
STRING_FIELD_IDS = [f"{path}:{field}" for path, _, field, _ in STRING_FIELDS]


@refusal
@pytest.mark.parametrize(("path", "build", "field", "loc"), STRING_FIELDS, ids=STRING_FIELD_IDS)
def test_control_characters_are_422(client, database, path, build, field, loc):
    with writes_nothing(database):
        for char in CONTROL_CHARACTERS:
            for value in (char, f"a{char}b", f"ab{char}"):
                assert_field_error(client.post(path, json=build(field, value)), loc)


@refusal
@pytest.mark.parametrize(
    ("path", "build", "field", "loc"),
    [("/jobs", _job_with, "owner", ["body", "jobs", 0, "owner"]), ("/match", _resource_with, "Site", ["body", "Site"])],
    ids=["job-owner", "resource-Site"],
)
def test_c1_control_characters_are_422(client, database, path, build, field, loc):
    with writes_nothing(database):
        for char in C1_CONTROL_CHARACTERS:
            assert_field_error(client.post(path, json=build(field, f"a{char}b")), loc)


@refusal
def test_control_characters_in_status_reports_and_filters_are_422(client, database, running_job):
    before = client.get(f"/jobs/{running_job}").json()
    with writes_nothing(database):
        for char in CONTROL_CHARACTERS:
            r = client.post(f"/jobs/{running_job}/status", json={"status": "Done", "minor_status": f"x{char}"})
            assert_field_error(r, ["body", "minor_status"])
            for name in ("owner", "owner_group"):
                assert_field_error(client.get("/jobs", params={name: f"a{char}"}), ["query", name])
    assert client.get(f"/jobs/{running_job}").json() == before


def test_control_characters_inside_the_opaque_payload_round_trip(client):
    payload = {"text": "".join(CONTROL_CHARACTERS), "key\t": ["\n", "\x7f", "\x00"]}
    job_id = submit(client, payload=payload)
    assert client.get(f"/jobs/{job_id}").json()["payload"] == payload


def test_numbers_inside_the_opaque_payload_round_trip_exactly(client):
    """Integers past 64 bits stay exact, in the match's answer as in a read of the job."""
    payload = {"big": 2**70 + 1, "low": -(2**64) - 3, "digits": "12345678901234567890123", "x": 0.1, "n": [7, -1]}
    job_id = submit(client, payload=payload)
    assert client.get(f"/jobs/{job_id}").json()["payload"] == payload
    assert client.post("/match", json={**PILOT, "JobID": job_id}).json()["payload"] == payload
    assert client.post(f"/jobs/{job_id}/status", json={"status": "Running"}).json()["payload"] == payload


# --- lengths ---------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "build", "field", "loc"), STRING_FIELDS, ids=STRING_FIELD_IDS)
def test_strings_over_255_characters_are_422(client, database, path, build, field, loc):
    with writes_nothing(database):
        for length in (256, 4096, 1_000_000):
            assert_field_error(client.post(path, json=build(field, "x" * length)), loc)
    if path == "/jobs":  # characters, not bytes: 255 three-byte characters make a fine name
        if field == "job_class":
            define_job_class(client, "€" * 255)
        assert client.post(path, json=build(field, "€" * 255)).status_code == 201


@refusal
@pytest.mark.parametrize(
    ("where", "request_args"),
    [
        ("job-owner", lambda big: ("POST", "/jobs", {"json": {"jobs": [spec(owner=big)]}})),
        ("site", lambda big: ("POST", "/match", {"json": {**PILOT, "Site": big}})),
        ("payload", lambda big: ("POST", "/jobs", {"json": {"jobs": [spec(payload=big)]}})),
        ("minor_status", lambda big: ("POST", "/jobs/1/status", {"json": {"status": "Done", "minor_status": big}})),
    ],
)
def test_a_10_mb_string_is_refused(client, database, where, request_args):
    method, path, kwargs = request_args("x" * 10_000_000)
    with writes_nothing(database):
        r = client.request(method, path, **kwargs)
    assert r.status_code in (404, 413, 422), r.text[:500]
    assert_problem(r)


# --- nesting depth ---------------------------------------------------------------------


def nested_array(depth: int, leaf: str = '"x"', close: bool = True) -> str:
    return "[" * depth + leaf + ("]" * depth if close else "")


def nested_object(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def job_with_payload(payload: str) -> str:
    """A submission whose payload is the raw JSON text `payload`, three levels down."""
    return '{"jobs": [{"owner": "a", "owner_group": "g", "payload": ' + payload + "}]}"


DEEP_BODIES = {
    **{f"array-{d}": nested_array(d) for d in (DEPTH_LIMIT + 1, 1000, 100_000)},
    **{f"object-{d}": nested_object(d) for d in (DEPTH_LIMIT + 1, 1000, 100_000)},
    "unclosed-100000": nested_array(100_000, close=False),
    "payload-33": job_with_payload(nested_array(DEPTH_LIMIT - 2)),
    "payload-100000": job_with_payload(nested_array(100_000)),
}


@refusal
@pytest.mark.parametrize("path", ["/jobs", "/match", "/taskqueues/matching", "/jobs/1/status"])
@pytest.mark.parametrize("body", list(DEEP_BODIES.values()), ids=list(DEEP_BODIES))
def test_json_nested_deeper_than_the_limit_is_400(client, database, path, body):
    with writes_nothing(database):
        r = client.post(path, content=body.encode(), headers=JSON)
    assert_problem(r, 400, kind="json-too-deep")


@refusal
@pytest.mark.parametrize(
    ("content_type", "encoding"),
    [("application/json", "utf-16"), ("application/json", "utf-32"), ("application/merge-patch+json", "utf-8")],
)
def test_the_depth_limit_holds_for_every_json_encoding_and_media_type(client, content_type, encoding):
    body = nested_array(1000).encode(encoding)
    assert_problem(client.post("/jobs", content=body, headers={"content-type": content_type}), 400)


def test_json_at_the_depth_limit_is_accepted(client):
    payload = nested_array(DEPTH_LIMIT - 3)  # plus body, jobs list and job object: 32
    r = client.post("/jobs", content=job_with_payload(payload).encode(), headers=JSON)
    assert r.status_code == 201, r.text
    stored = client.get(f"/jobs/{r.json()['jobs'][0]['job_id']}").json()["payload"]
    assert json.dumps(stored, separators=(",", ":")) == payload


def test_brackets_inside_strings_do_not_count_as_nesting(client):
    payload = {"text": "[" * 5000 + '{"\\"' + "]" * 5000, "k[[[": "\\\\[[[", "[": "\\"}
    job_id = submit(client, payload=payload, owner="[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[")
    assert client.get(f"/jobs/{job_id}").json()["payload"] == payload


# --- body size: a real server ------------------------------------------------------------


@pytest.fixture(scope="module")
def small_server(database, tmp_path_factory):
    """A real uvicorn on the session's database that takes bodies of at most 100 000 bytes."""
    srv = start_server(database, tmp_path_factory.mktemp("small-body"), SERVER__MAX_BODY_BYTES=str(SMALL_BODY_LIMIT))
    yield srv
    srv.stop()


@pytest.fixture
def small(small_server, clean) -> Iterator[httpx.Client]:
    with small_server.client() as c:
        yield c


def padded_submission(size: int) -> bytes:
    """A valid one-job submission of exactly `size` bytes (JSON whitespace pads it)."""
    body = json.dumps({"jobs": [spec()]}).encode()
    return body[:-1] + b" " * (size - len(body)) + b"}"


@refusal
def test_a_body_at_the_size_limit_is_accepted_and_one_over_it_is_413(small, database):
    r = small.post("/jobs", content=padded_submission(SMALL_BODY_LIMIT), headers=JSON)
    assert r.status_code == 201, r.text
    body = padded_submission(SMALL_BODY_LIMIT)
    r = small.post("/jobs", content=iter([body[:1000], body[1000:]]), headers=JSON)  # chunked
    assert r.status_code == 201, r.text
    for size in (SMALL_BODY_LIMIT + 1, 10_000_000):
        with writes_nothing(database):
            r = small.post("/jobs", content=padded_submission(size), headers=JSON)
        assert_problem(r, 413, kind="body-too-large")
        # the connection stays usable: the unread rest of the body was discarded
        assert small.get("/jobs").status_code == 200
        body = padded_submission(size)
        chunks = (body[i : i + 65536] for i in range(0, len(body), 65536))  # no Content-Length
        with writes_nothing(database):
            r = small.post("/jobs", content=chunks, headers=JSON)
        assert "content-length" not in r.request.headers
        assert_problem(r, 413, kind="body-too-large")


# --- batches ---------------------------------------------------------------------------


@refusal
def test_a_batch_of_10_001_jobs_is_422_and_stores_nothing(client, database):
    with writes_nothing(database):
        r = client.post("/jobs", json={"jobs": [spec(sites=[f"S{i}"]) for i in range(10_001)]})
    assert_field_error(r, ["body", "jobs"])


@refusal
@pytest.mark.parametrize(
    ("bad_job", "field"),
    [(spec(owner="x" * 256), "owner"), (spec(payload="p" * 70_000), "payload")],
    ids=["field-validation", "payload-limit-checked-after-parsing"],
)
def test_a_batch_with_one_bad_job_at_the_end_stores_nothing(client, database, bad_job, field):
    jobs = [spec(sites=[f"S{i}"]) for i in range(9_999)] + [bad_job]
    with writes_nothing(database):
        assert_field_error(client.post("/jobs", json={"jobs": jobs}), ["body", "jobs", 9_999, field])


@refusal
def test_a_pilot_s_list_of_1001_values_is_422(client, database):
    with writes_nothing(database):
        values = [f"v{i}" for i in range(1001)]
        assert_field_error(client.post("/match", json={**PILOT, "Tag": values}), ["body", "Tag"])


# --- numbers ---------------------------------------------------------------------------

# raw JSON number texts: a JSON encoder would refuse to write some of them
ABSURD_NUMBERS = {
    "2**63": str(2**63),
    "2**64": str(2**64),
    "-2**63-1": str(-(2**63) - 1),
    "10**400": str(10**400),
    "10**5000": "1" + "0" * 5000,  # beyond Python's int-parsing digit limit
    "1e400": "1e400",
    "-1e400": "-1e400",
    "NaN": "NaN",
    "Infinity": "Infinity",
    "-Infinity": "-Infinity",
    "fraction": "1.5",
    "tiny": "1e-7",
}  # (pydantic's lax mode takes true as 1 and "12" as 12, and 3600.0 as 3600: in range, fine)
INT_FIELDS = [
    ("/jobs", "cpu_time"), ("/jobs", "user_priority"), ("/jobs", "priority_class"), ("/jobs", "min_ram_mb"),
    ("/jobs", "max_ram_mb"),
    ("/match", "CPUTime"), ("/match", "MaxRAM"), ("/match", "NumberOfProcessors"), ("/match", "JobID"),
]  # fmt: skip


def body_with_number(path: str, field: str, number: str) -> bytes:
    marker = "@number@"
    body = {"jobs": [spec(**{field: marker})]} if path == "/jobs" else {**PILOT, field: marker}
    return json.dumps(body).replace(json.dumps(marker), number).encode()


@refusal
@pytest.mark.parametrize(("path", "field"), INT_FIELDS, ids=[f for _, f in INT_FIELDS])
def test_absurd_numbers_in_integer_fields_are_4xx(client, database, path, field):
    with writes_nothing(database):
        for name, number in ABSURD_NUMBERS.items():
            r = client.post(path, content=body_with_number(path, field, number), headers=JSON)
            assert_problem(r)
            assert r.status_code in (400, 422), (name, r.text)


@refusal
@pytest.mark.parametrize("field", ["cpu_seconds", "wall_seconds"])
def test_absurd_numbers_in_status_reports_are_4xx_and_change_nothing(client, database, running_job, field):
    before = client.get(f"/jobs/{running_job}").json()
    with writes_nothing(database):
        for name, number in ABSURD_NUMBERS.items():
            if name in ("fraction", "tiny"):
                continue  # fine values for seconds
            raw = json.dumps({"status": "Done", field: "@n@"}).replace('"@n@"', number).encode()
            r = client.post(f"/jobs/{running_job}/status", content=raw, headers=JSON)
            assert_problem(r)
    assert client.get(f"/jobs/{running_job}").json() == before


# --- path and query parameters --------------------------------------------------------

BAD_IDS = ["0", "-1", str(2**63), str(2**64), str(2**70), str(10**400), "1" + "0" * 5000, "abc", "1.5", "1e3", "NaN"]
JOB_ROUTES = [
    ("GET", "/jobs/{id}", None),
    ("DELETE", "/jobs/{id}", None),
    ("POST", "/jobs/{id}/status", {"status": "Running"}),
]


@refusal
@pytest.mark.parametrize("job_id", BAD_IDS, ids=lambda v: v[:20])
@pytest.mark.parametrize(("method", "path", "body"), JOB_ROUTES, ids=["get", "delete", "status"])
def test_bad_job_id_in_path_is_422(client, method, path, body, job_id):
    r = client.request(method, path.format(id=job_id), json=body)
    assert_problem(r, 422, ["path", "job_id"])


@refusal
@pytest.mark.parametrize("tq_id", BAD_IDS, ids=lambda v: v[:20])
def test_bad_task_queue_id_in_path_is_422(client, tq_id):
    assert_problem(client.get(f"/taskqueues/{tq_id}"), 422, ["path", "tq_id"])


def test_unknown_task_queue_is_404(client):
    assert_problem(client.get(f"/taskqueues/{2**62}"), 404)


@refusal
@pytest.mark.parametrize(
    ("params", "loc"),
    [
        ({"status": "Sleeping"}, ["query", "status"]),
        ({"status": "waiting"}, ["query", "status"]),
        ({"limit": 0}, ["query", "limit"]),
        ({"limit": 1001}, ["query", "limit"]),
        ({"limit": "ten"}, ["query", "limit"]),
        ({"limit": 10**30}, ["query", "limit"]),
        ({"limit": "1" + "0" * 5000}, ["query", "limit"]),
        ({"limit": "NaN"}, ["query", "limit"]),
        ({"limit": "1e3"}, ["query", "limit"]),
        ({"owner": "o" * 256}, ["query", "owner"]),
        ({"owner_group": "g" * 256}, ["query", "owner_group"]),
        ({"cursor": "c" * 65}, ["query", "cursor"]),
    ],
    ids=lambda v: str(v)[:30],
)
def test_bad_list_query_is_422(client, params, loc):
    assert_problem(client.get("/jobs", params=params), 422, loc)


def _cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@refusal
@pytest.mark.parametrize(
    "cursor",
    [
        "garbage", "====", "%%%", _cursor("after:"), _cursor("after:-5"), _cursor("after:1.5"), _cursor("id:3"),
        _cursor(f"after:{2**63}"), _cursor(f"after:{2**70}"), _cursor(f"after:{10**40}"),  # beyond the id range
    ],
)  # fmt: skip
def test_garbage_cursor_is_400(client, cursor):
    assert_problem(client.get("/jobs", params={"cursor": cursor}), 400)


def test_cursor_at_the_top_of_the_id_range_is_an_empty_last_page(client):
    r = client.get("/jobs", params={"cursor": _cursor(f"after:{2**63 - 1}")})
    assert r.status_code == 200, r.text
    assert r.json() == {"jobs": [], "next_cursor": None}


# --- content types, empty bodies, routes ------------------------------------------------

WRONG_CONTENT = {
    "text-plain": ("text/plain", json.dumps({"jobs": [spec()]})),
    "form": ("application/x-www-form-urlencoded", "owner=alice&owner_group=physics"),
    "multipart": (
        "multipart/form-data; boundary=b",
        '--b\r\nContent-Disposition: form-data; name="jobs"\r\n\r\n[]\r\n--b--\r\n',
    ),
    "xml": ("application/xml", "<jobs><job owner='alice'/></jobs>"),
    "no-content-type": (None, json.dumps({"jobs": [spec()]})),
    "empty-json": ("application/json", ""),
    "empty-no-content-type": (None, ""),
    "whitespace-json": ("application/json", "  \n "),
    "null": ("application/json", "null"),
    "bom-garbage": ("application/json", "\ufeff\x00\x00"),
}


@refusal
@pytest.mark.parametrize("path", ["/jobs", "/match", "/taskqueues/matching", "/jobs/1/status"])
@pytest.mark.parametrize(("content_type", "body"), list(WRONG_CONTENT.values()), ids=list(WRONG_CONTENT))
def test_wrong_content_types_and_empty_bodies_are_4xx(client, database, path, content_type, body):
    headers = {"content-type": content_type} if content_type else {}
    with writes_nothing(database):
        r = client.post(path, content=body.encode(), headers=headers)
    assert_problem(r)


@refusal
@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("GET", "/nope"),
        ("GET", "/jobs/1/nope"),
        ("POST", "/jobs/1/kill"),
        ("GET", "/taskqueues/1/jobs"),
        ("GET", "{root}/nope"),
        ("GET", "{root}/api/v2/jobs"),
        ("POST", "{root}/jobs"),
    ],
)
def test_unknown_route_is_404_problem(client, server, method, url):
    assert_problem(client.request(method, url.format(root=server.url)), 404)


@refusal
@pytest.mark.parametrize(("method", "url"), [("PUT", "/jobs"), ("DELETE", "/jobs"), ("GET", "/match")])
def test_wrong_method_is_405_problem(client, method, url):
    assert_problem(client.request(method, url), 405)
