"""Hostile input: SQL metacharacters, control characters, huge strings, deep JSON,
oversized bodies and batches, absurd numbers, wrong content types.

What may be stored is stored and returned verbatim and compared literally;
everything else is a 4xx problem (never a 500) after which no table holds a
row more or less than before. Plus two static checks: no SQL is built from
strings, and the OpenAPI schema bounds every string and number clients send.
"""

from __future__ import annotations

import ast
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy as sa

from fairmatch.db.tables import BACKGROUND_TABLES, metadata
from tests.conftest import REPO, start_server
from tests.conftest import TestDatabase as Database  # (not collected as a test class)

JSON = {"content-type": "application/json"}
PILOT = {"Site": "S1", "CPUTime": 10**6}
SMALL_BODY_LIMIT = 100_000
DEPTH_LIMIT = 32  # the default server.max_json_depth


def spec(**overrides) -> dict:
    return {"owner": "alice", "owner_group": "physics", **overrides}


def assert_problem(response: httpx.Response, status: int | None = None, kind: str | None = None) -> dict:
    """A 4xx RFC 9457 problem (of `status` and `urn:fairmatch:problem:<kind>` when given)."""
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])
    if status is not None:
        assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body = response.json()
    assert {"type", "title", "status", "detail"} <= body.keys(), body
    assert body["status"] == response.status_code
    if kind is not None:
        assert body["type"] == f"urn:fairmatch:problem:{kind}", body
    # nothing hostile is echoed back: no input values, no stack traces
    assert len(response.content) < 20_000, len(response.content)
    assert "Traceback" not in response.text
    return body


def assert_field_error(response: httpx.Response, loc: list) -> None:
    body = assert_problem(response, 422)
    assert any(e["loc"][: len(loc)] == loc for e in body["errors"]), (loc, body["errors"])


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


def define_job_class(client: httpx.Client, name: str) -> None:
    """A job may only name a job class that exists."""
    assert client.put(f"/job-classes/{quote(name, safe='')}", json={}).status_code in (200, 201)


def submit(client: httpx.Client, **overrides) -> int:
    r = client.post("/jobs", json={"jobs": [spec(**overrides)]})
    assert r.status_code == 201, r.text
    return r.json()["jobs"][0]["job_id"]


@pytest.fixture
def running_job(client) -> int:
    job_id = submit(client)
    assert client.post("/match", json={**PILOT, "JobID": job_id}).status_code == 200
    assert client.post(f"/jobs/{job_id}/status", json={"status": "Running"}).status_code == 200
    return job_id


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


@pytest.mark.parametrize(("path", "build", "field", "loc"), STRING_FIELDS, ids=STRING_FIELD_IDS)
def test_control_characters_are_422(client, database, path, build, field, loc):
    with writes_nothing(database):
        for char in CONTROL_CHARACTERS:
            for value in (char, f"a{char}b", f"ab{char}"):
                assert_field_error(client.post(path, json=build(field, value)), loc)


@pytest.mark.parametrize(
    ("path", "build", "field", "loc"),
    [("/jobs", _job_with, "owner", ["body", "jobs", 0, "owner"]), ("/match", _resource_with, "Site", ["body", "Site"])],
    ids=["job-owner", "resource-Site"],
)
def test_c1_control_characters_are_422(client, database, path, build, field, loc):
    with writes_nothing(database):
        for char in C1_CONTROL_CHARACTERS:
            assert_field_error(client.post(path, json=build(field, f"a{char}b")), loc)


def test_control_characters_in_status_reports_and_filters_are_422(client, database, running_job):
    with writes_nothing(database):
        for char in CONTROL_CHARACTERS:
            r = client.post(f"/jobs/{running_job}/status", json={"status": "Done", "minor_status": f"x{char}"})
            assert_field_error(r, ["body", "minor_status"])
            for name in ("owner", "owner_group"):
                assert_field_error(client.get("/jobs", params={name: f"a{char}"}), ["query", name])


def test_control_characters_inside_the_opaque_payload_round_trip(client):
    payload = {"text": "".join(CONTROL_CHARACTERS), "key\t": ["\n", "\x7f", "\x00"]}
    job_id = submit(client, payload=payload)
    assert client.get(f"/jobs/{job_id}").json()["payload"] == payload


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


def test_a_long_query_string_is_422(client):
    assert_field_error(client.get("/jobs", params={"owner": "o" * 8000}), ["query", "owner"])
    assert_field_error(client.get("/jobs", params={"cursor": "c" * 8000}), ["query", "cursor"])


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


@pytest.mark.parametrize("path", ["/jobs", "/match", "/taskqueues/matching", "/jobs/1/status"])
@pytest.mark.parametrize("body", list(DEEP_BODIES.values()), ids=list(DEEP_BODIES))
def test_json_nested_deeper_than_the_limit_is_400(client, database, path, body):
    with writes_nothing(database):
        r = client.post(path, content=body.encode(), headers=JSON)
    assert_problem(r, 400, "json-too-deep")


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


# --- body size -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_server(database, tmp_path_factory):
    """A server on the session's database that takes bodies of at most 100 000 bytes."""
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


def test_a_body_at_the_size_limit_is_accepted(small):
    r = small.post("/jobs", content=padded_submission(SMALL_BODY_LIMIT), headers=JSON)
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("size", [SMALL_BODY_LIMIT + 1, 10_000_000])
def test_a_declared_body_over_the_size_limit_is_413(small, database, size):
    with writes_nothing(database):
        r = small.post("/jobs", content=padded_submission(size), headers=JSON)
    assert_problem(r, 413, "body-too-large")
    # the connection stays usable: the unread rest of the body was discarded
    assert small.get("/jobs").status_code == 200


@pytest.mark.parametrize("size", [SMALL_BODY_LIMIT + 1, 10_000_000])
def test_a_chunked_body_over_the_size_limit_is_413(small, database, size):
    body = padded_submission(size)
    chunks = (body[i : i + 65536] for i in range(0, len(body), 65536))  # no Content-Length
    with writes_nothing(database):
        r = small.post("/jobs", content=chunks, headers=JSON)
    assert "content-length" not in r.request.headers
    assert_problem(r, 413, "body-too-large")


def test_a_chunked_body_under_the_size_limit_is_accepted(small):
    body = padded_submission(SMALL_BODY_LIMIT)
    r = small.post("/jobs", content=iter([body[:1000], body[1000:]]), headers=JSON)
    assert r.status_code == 201, r.text


# --- batches ---------------------------------------------------------------------------


def test_a_batch_of_10_001_jobs_is_422_and_stores_nothing(client, database):
    with writes_nothing(database):
        r = client.post("/jobs", json={"jobs": [spec(sites=[f"S{i}"]) for i in range(10_001)]})
    assert_field_error(r, ["body", "jobs"])


@pytest.mark.parametrize(
    ("bad_job", "field"),
    [(spec(owner="x" * 256), "owner"), (spec(payload="p" * 70_000), "payload")],
    ids=["field-validation", "payload-limit-checked-after-parsing"],
)
def test_a_batch_with_one_bad_job_at_the_end_stores_nothing(client, database, bad_job, field):
    jobs = [spec(sites=[f"S{i}"]) for i in range(9_999)] + [bad_job]
    with writes_nothing(database):
        assert_field_error(client.post("/jobs", json={"jobs": jobs}), ["body", "jobs", 9_999, field])


def test_value_lists_of_1001_values_are_422(client, database):
    with writes_nothing(database):
        values = [f"v{i}" for i in range(1001)]
        assert_field_error(client.post("/jobs", json={"jobs": [spec(sites=values)]}), ["body", "jobs", 0, "sites"])
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


@pytest.mark.parametrize(("path", "field"), INT_FIELDS, ids=[f for _, f in INT_FIELDS])
def test_absurd_numbers_in_integer_fields_are_4xx(client, database, path, field):
    with writes_nothing(database):
        for name, number in ABSURD_NUMBERS.items():
            r = client.post(path, content=body_with_number(path, field, number), headers=JSON)
            assert_problem(r)
            assert r.status_code in (400, 422), (name, r.text)


@pytest.mark.parametrize("field", ["cpu_seconds", "wall_seconds"])
def test_absurd_numbers_in_status_reports_are_4xx(client, database, running_job, field):
    with writes_nothing(database):
        for name, number in ABSURD_NUMBERS.items():
            if name in ("fraction", "tiny"):
                continue  # fine values for seconds
            raw = json.dumps({"status": "Done", field: "@n@"}).replace('"@n@"', number).encode()
            r = client.post(f"/jobs/{running_job}/status", content=raw, headers=JSON)
            assert_problem(r)


@pytest.mark.parametrize("number", [str(2**63), str(2**64), str(10**400), "1" + "0" * 5000, "-1", "1e3", "NaN"])
def test_absurd_numbers_in_paths_and_queries_are_422(client, number):
    assert_field_error(client.get(f"/jobs/{number}"), ["path", "job_id"])
    assert_field_error(client.get(f"/taskqueues/{number}"), ["path", "tq_id"])
    assert_field_error(client.get("/jobs", params={"limit": number}), ["query", "limit"])


# --- content types and empty bodies ----------------------------------------------------

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


@pytest.mark.parametrize("path", ["/jobs", "/match", "/taskqueues/matching", "/jobs/1/status"])
@pytest.mark.parametrize(("content_type", "body"), list(WRONG_CONTENT.values()), ids=list(WRONG_CONTENT))
def test_wrong_content_types_and_empty_bodies_are_4xx(client, database, path, content_type, body):
    headers = {"content-type": content_type} if content_type else {}
    with writes_nothing(database):
        r = client.post(path, content=body.encode(), headers=headers)
    assert_problem(r)


# --- static: SQL is never built from strings -------------------------------------------

SQL_CALLS = {"text", "literal_column", "exec_driver_sql", "execute", "executemany", "executescript"}

# (file, the argument's source) -> why it is safe
ALLOWED_BUILT_SQL: dict[tuple[str, str], str] = {}


def _builds_a_string(node: ast.expr) -> bool:
    """An f-string, a `%`/`+` expression or a `.format(...)` call."""
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"


def _called_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def built_sql(tree: ast.Module) -> list[ast.expr]:
    """First arguments of SQL-taking calls that are built from strings at run time."""
    return [
        node.args[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _called_name(node) in SQL_CALLS
        and node.args and _builds_a_string(node.args[0])
    ]  # fmt: skip


def string_constants(tree: ast.Module) -> set[str]:
    """Module-level names assigned a plain string literal (and never anything else)."""
    assigned: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(node.value)
    return {
        name for name, values in assigned.items()
        if all(isinstance(v, ast.Constant) and isinstance(v.value, str) for v in values)
    }  # fmt: skip


def python_sources() -> list[Path]:
    return sorted(p for p in (REPO / "fairmatch").rglob("*.py"))


def test_no_sql_is_built_by_string_formatting():
    # constant SQL is fine (the PRAGMAs and BEGINs of fairmatch/db/engine.py, SELECT 1): only
    # strings built at run time could carry input into a statement
    found = {}
    for path in python_sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = string_constants(tree)
        for arg in built_sql(tree):
            key = (path.relative_to(REPO).as_posix(), ast.unparse(arg))
            found[key] = arg
            if key in ALLOWED_BUILT_SQL:
                # the exception holds only while every name in it is a module string constant
                names = {n.id for n in ast.walk(arg) if isinstance(n, ast.Name)}
                assert names <= constants, (key, names - constants)
                assert not any(isinstance(n, ast.Call) and n is not arg for n in ast.walk(arg)), key
    unexpected = sorted(set(found) - set(ALLOWED_BUILT_SQL))
    assert not unexpected, f"SQL built from strings (use bound parameters): {unexpected}"
    stale = sorted(set(ALLOWED_BUILT_SQL) - set(found))
    assert not stale, f"allowed exceptions that no longer exist: {stale}"


def test_the_sql_scan_finds_what_it_looks_for():
    tree = ast.parse(
        "conn.execute(text(f'SELECT {x}'))\n"
        "conn.exec_driver_sql('DELETE FROM ' + table)\n"
        "cursor.execute('SELECT %s' % name)\n"
        "sa.text('x = {}'.format(y))\n"
        "conn.execute(text('SELECT :x'), {'x': y})\n"
    )
    assert len(built_sql(tree)) == 4


# --- static: the schema bounds what clients send ----------------------------------------

# JSON Schema keywords that bound a value of each type
BOUNDS = {"string": ("maxLength",), "integer": ("minimum", "maximum"), "number": ("minimum", "maximum")}
UNBOUNDED_BY_DESIGN = {"JsonValue": "the payload: any JSON, bounded in bytes by jobs.max_payload_bytes"}


def _unbounded(schema: dict, components: dict, where: str, seen: set[str]) -> list[str]:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        if name in UNBOUNDED_BY_DESIGN or name in seen:
            return []
        return _unbounded(components[name], components, f"{where}->{name}", seen | {name})
    problems = []
    kind = schema.get("type")
    if kind in BOUNDS and "enum" not in schema and "const" not in schema:
        problems += [f"{where}: {kind} without {b}" for b in BOUNDS[kind] if b not in schema]
    if kind == "array" and "maxItems" not in schema:
        problems.append(f"{where}: array without maxItems")
    for key in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(schema.get(key, [])):
            problems += _unbounded(sub, components, f"{where}|{i}", seen)
    for name, sub in schema.get("properties", {}).items():
        problems += _unbounded(sub, components, f"{where}.{name}", seen)
    if isinstance(schema.get("items"), dict):
        problems += _unbounded(schema["items"], components, f"{where}[]", seen)
    return problems


def test_every_string_and_number_a_client_sends_is_bounded_in_the_schema(server):
    schema = httpx.get(f"{server.url}/openapi.json").json()
    components = schema["components"]["schemas"]
    problems = []
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            for p in op.get("parameters", []):
                problems += _unbounded(p["schema"], components, f"{method} {path} {p['name']}", set())
            for media in op.get("requestBody", {}).get("content", {}).values():
                problems += _unbounded(media["schema"], components, f"{method} {path} body", set())
    assert not problems, problems
