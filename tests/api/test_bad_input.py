"""Bad input never gets a 500: every error is an RFC 9457 problem.

4xx with Content-Type application/problem+json and type/title/status/detail;
a 422 carries `errors` whose `loc` points at the offending field.
"""

from __future__ import annotations

import base64
import json

import httpx
import pytest

PROBLEM_KEYS = {"type", "title", "status", "detail"}
PILOT = {"Site": "S1", "CPUTime": 10**6}
JSON = {"content-type": "application/json"}


def assert_problem(response: httpx.Response, status: int, loc: list | tuple | None = None) -> dict:
    """`response` is the problem `status`; for 422, `loc` (a prefix) names a reported field."""
    assert response.status_code == status, response.text[:1000]
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body.keys() >= PROBLEM_KEYS, body
    assert body["status"] == status
    assert isinstance(body["title"], str) and isinstance(body["detail"], str)
    assert "Traceback" not in response.text
    if status == 422:
        errors = body.get("errors")
        assert isinstance(errors, list) and errors, body
        assert all({"loc", "msg", "type"} <= e.keys() for e in errors), errors
        if loc is not None:
            assert any(_loc_matches(e["loc"], loc) for e in errors), (loc, errors)
    return body


def _loc_matches(actual: list, expected: list | tuple) -> bool:
    """Prefix match; an element of `expected` may be a set of alternatives (field aliases)."""
    if len(actual) < len(expected):
        return False
    return all(a in e if isinstance(e, (set, frozenset)) else a == e for a, e in zip(actual, expected))


def spec(**overrides) -> dict:
    return {"owner": "alice", "owner_group": "physics", **overrides}


def without(key: str) -> dict:
    s = spec()
    s.pop(key)
    return s


@pytest.fixture
def api(server, clean) -> httpx.Client:
    """A client on emptied tables: what an earlier test left (an association tree, a job
    class) must not decide whether a test's own job is accepted. Plain http: no TLS context
    to build (~30 ms a test)."""
    with server.client() as c:
        yield c


def submit_one(api: httpx.Client, **overrides) -> int:
    r = api.post("/jobs", json={"jobs": [spec(**overrides)]})
    assert r.status_code == 201, r.text
    return r.json()["jobs"][0]["job_id"]


def assert_still_waiting(api: httpx.Client, job_id: int) -> None:
    assert api.get(f"/jobs/{job_id}").json()["status"] == "Waiting"


@pytest.fixture
def running_job(api) -> int:
    job_id = submit_one(api)
    assert api.post("/match", json={**PILOT, "JobID": job_id}).status_code == 200
    assert api.post(f"/jobs/{job_id}/status", json={"status": "Running"}).status_code == 200
    return job_id


# --- JobSpec --------------------------------------------------------------------------

BAD_NAMES = {
    "empty": "",
    "blank": "   ",
    "too-long": "x" * 256,
    "nul": "a\x00b",
    "newline": "a\nb",
    "tab": "a\tb",
    "escape": "a\x1bb",
    "del": "a\x7fb",
    "int": 42,
    "list": ["alice"],
    "object": {"name": "alice"},
    "bool": True,
}

NAME_CASES = [
    pytest.param(field, value, id=f"{field}-{name}")
    for field in ("owner", "owner_group", "vo", "job_class")
    for name, value in BAD_NAMES.items()
] + [
    pytest.param("owner", None, id="owner-null"),
    pytest.param("owner_group", None, id="owner_group-null"),
]


@pytest.mark.parametrize(("field", "value"), NAME_CASES)
def test_bad_name_field_is_422_at_that_field(api, field, value):
    r = api.post("/jobs", json={"jobs": [spec(), spec(**{field: value})]})
    assert_problem(r, 422, ["body", "jobs", 1, field])


@pytest.mark.parametrize("field", ["owner", "owner_group"])
def test_missing_required_field_is_422_at_that_field(api, field):
    r = api.post("/jobs", json={"jobs": [without(field)]})
    assert_problem(r, 422, ["body", "jobs", 0, field])


def test_name_of_255_characters_is_accepted(client):
    r = client.post("/jobs", json={"jobs": [spec(owner="o" * 255, owner_group="g" * 255, vo="v" * 255)]})
    assert r.status_code == 201, r.text


NUMBER_CASES = {
    "cpu_time": [-1, 10**9 + 1, 2**70, "one hour", 1.5, [], {"s": 1}],
    "user_priority": [-1, 11, 2**70, "high", 1.5],
    "priority_class": [-1024, 1025, -(2**70), "urgent", 0.5],
    "min_ram_mb": [-1, 4_096_001, 2**70, "2GB", "2000", 1.5, True],
    "max_ram_mb": [-1, 4_096_001, 2**70, "4GB", "4000", 2000.5, False],
}


@pytest.mark.parametrize(
    ("field", "value"),
    [pytest.param(f, v, id=f"{f}={v!r}"[:40]) for f, values in NUMBER_CASES.items() for v in values],
)
def test_bad_number_is_422_at_that_field(api, field, value):
    r = api.post("/jobs", json={"jobs": [spec(**{field: value})]})
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


LIST_FIELDS = ("sites", "banned_sites", "grid_ces", "platforms", "job_types", "tags")
BAD_LISTS = {
    "number": (5, []),
    "object": ({"S1": True}, []),
    "int-element": (["S1", 7], [1]),
    "null-element": ([None], [0]),
    "list-element": ([["S1"]], [0]),
    "empty-element": (["S1", ""], [1]),
    "blank-element": (["  "], [0]),
    "long-element": (["S1", "s" * 256], [1]),
    "long-string": ("s" * 256, [0]),
    "nul-element": (["S\x00"], [0]),
    "too-many": ([f"s{i}" for i in range(1001)], []),
}


@pytest.mark.parametrize(
    ("field", "value", "at"),
    [pytest.param(f, v, at, id=f"{f}-{name}") for f in LIST_FIELDS for name, (v, at) in BAD_LISTS.items()],
)
def test_bad_value_list_is_422_at_that_field(api, field, value, at):
    r = api.post("/jobs", json={"jobs": [spec(**{field: value})]})
    assert_problem(r, 422, ["body", "jobs", 0, field, *at])


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


def test_payload_over_64_kib_is_422_at_the_payload(api):
    # a JSON string of n characters takes n + 2 bytes
    r = api.post("/jobs", json={"jobs": [spec(payload="x" * 65_535)]})
    assert_problem(r, 422, ["body", "jobs", 0, "payload"])
    r = api.post("/jobs", json={"jobs": [spec(), spec(payload={"blob": ["y" * 40_000, "z" * 40_000]})]})
    assert_problem(r, 422, ["body", "jobs", 1, "payload"])


def test_payload_of_exactly_64_kib_is_accepted(client):
    r = client.post("/jobs", json={"jobs": [spec(payload="x" * 65_534)]})
    assert r.status_code == 201, r.text


def raw_jobs(*jobs: dict, **raw: str) -> bytes:
    """A submission body whose `{"@name": ...}` placeholders become the raw JSON text `raw[name]`.

    For what a JSON encoder would refuse to write: NaN, Infinity, lone surrogates.
    """
    text = json.dumps({"jobs": list(jobs)})
    for name, value in raw.items():
        text = text.replace(json.dumps(f"@{name}"), value)
    return text.encode()


@pytest.mark.parametrize(
    "payload",
    ["NaN", "Infinity", '{"x": [-Infinity]}', r'"\ud800"', r'{"k": ["ok", "\udfff"]}'],
    ids=["nan", "infinity", "nested-minus-infinity", "lone-surrogate", "nested-lone-surrogate"],
)
def test_payload_that_is_not_strict_json_is_422_at_the_payload(api, payload):
    body = raw_jobs(spec(), spec(payload="@p"), p=payload)
    assert_problem(api.post("/jobs", content=body, headers=JSON), 422, ["body", "jobs", 1, "payload"])


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
def test_lone_surrogate_in_a_name_is_422_at_that_field(api, field, value, at):
    body = raw_jobs(spec(**{field: "@v"}), v=value)
    assert_problem(api.post("/jobs", content=body, headers=JSON), 422, ["body", "jobs", 0, field, *at])


@pytest.mark.parametrize(
    ("job", "loc"),
    [
        (spec(colour="blue"), ["body", "jobs", 0, "colour"]),
        (spec(Owner="alice"), ["body", "jobs", 0, "Owner"]),
        (spec(status="Done"), ["body", "jobs", 0, "status"]),
    ],
    ids=["colour", "camel-case-alias", "status"],
)
def test_unknown_job_field_is_422_at_that_field(api, job, loc):
    assert_problem(api.post("/jobs", json={"jobs": [job]}), 422, loc)


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
def test_bad_submit_envelope_is_422(api, body, loc):
    assert_problem(api.post("/jobs", json=body), 422, loc)


@pytest.mark.parametrize(
    "raw",
    [b'{"jobs": [', b"not json", b'{"jobs": [{"owner": "a",}]}', b"{'jobs': []}", b"\xff\xfe{}"],
    ids=["truncated", "text", "trailing-comma", "single-quotes", "not-utf8"],
)
@pytest.mark.parametrize("path", ["/jobs", "/match", "/taskqueues/matching", "/jobs/1/status"])
def test_malformed_json_body_is_400(api, path, raw):
    assert_problem(api.post(path, content=raw, headers=JSON), 400)


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
    "nul-Site": ({"Site": "S\x00", "CPUTime": 1}, ["body", SITE]),
    "long-Site": ({"Site": "s" * 256, "CPUTime": 1}, ["body", SITE]),
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
    "Platform-long": ({**PILOT, "Platform": ["p" * 256]}, ["body", {"platform", "Platform"}]),
    "OwnerGroup-empty-element": ({**PILOT, "OwnerGroup": [""]}, ["body", {"owner_group", "OwnerGroup"}]),
    "Owner-control": ({**PILOT, "Owner": "a\x01"}, ["body", {"owner", "Owner"}]),
    "request_id-long": ({**PILOT, "request_id": "r" * 256}, ["body", "request_id"]),
    "PilotReference-number": ({**PILOT, "PilotReference": 17}, ["body", PILOT_REF]),
    "array-body": ([PILOT], ["body"]),
}


@pytest.mark.parametrize("path", ["/match", "/taskqueues/matching"])
@pytest.mark.parametrize(("resource", "loc"), list(BAD_RESOURCES.values()), ids=list(BAD_RESOURCES))
def test_bad_resource_description_is_422_at_that_field(api, path, resource, loc):
    job_id = submit_one(api)
    if path == "/taskqueues/matching" and resource == {"CPUTime": 1}:
        assert api.post(path, json=resource).status_code == 200  # the dry run may ask about any site
        return
    assert_problem(api.post(path, json=resource), 422, loc)
    assert_still_waiting(api, job_id)


@pytest.mark.parametrize(("resource", "key"), [({"Site": "any", "CPUTime": 1}, "Site"),
                                              ({"Site": "ANY", "CPUTime": 1}, "Site"),
                                              ({"site": "Any", "cpu_time": 1}, "site")])  # fmt: skip
def test_match_refuses_site_any_which_only_a_dry_run_may_describe(api, resource, key):
    """A claim records the pilot's site, which site limits count: `any` names none."""
    job_id = submit_one(api)
    body = assert_problem(api.post("/match", json=resource), 422)
    assert [e["loc"] for e in body["errors"]] == [["body", key]] and "own site" in body["detail"]
    assert_still_waiting(api, job_id)
    assert api.post("/taskqueues/matching", json=resource).status_code == 200


def test_match_refuses_a_list_of_sites_which_only_a_dry_run_may_name(api):
    job_id = submit_one(api)
    for sites in (["S1", "S2"], ["S1"]):
        for key in ("Site", "site"):
            body = assert_problem(api.post("/match", json={key: sites, "CPUTime": 1}), 422)
            assert [e["loc"] for e in body["errors"]] == [["body", key]]
            assert api.post("/taskqueues/matching", json={key: sites, "CPUTime": 10**6}).status_code == 200
    assert_still_waiting(api, job_id)


# the exact key named: a missing key in the caller's own spelling, as a bad value's is
SPELLINGS = {
    "DIRAC-missing-Site": ({"CPUTime": 1}, "Site", "Field required (send Site or site)"),
    "DIRAC-missing-CPUTime": ({"Site": "S1"}, "CPUTime", "Field required (send CPUTime or cpu_time)"),
    "snake-missing-site": ({"cpu_time": 1}, "site", "Field required (send Site or site)"),
    "snake-missing-cpu_time": ({"site": "S1"}, "cpu_time", "Field required (send CPUTime or cpu_time)"),
    "DIRAC-bad-CPUTime": ({"Site": "S1", "CPUTime": "lots"}, "CPUTime", "valid integer"),
    "snake-bad-cpu_time": ({"site": "S1", "cpu_time": "lots"}, "cpu_time", "valid integer"),
}


@pytest.mark.parametrize("path", ["/match", "/taskqueues/matching"])
@pytest.mark.parametrize(("resource", "key", "message"), list(SPELLINGS.values()), ids=list(SPELLINGS))
def test_a_resource_key_is_named_as_the_caller_spells_it(api, path, resource, key, message):
    if path == "/taskqueues/matching" and key.lower() == "site":
        # the dry run names no site when it asks about any site
        assert api.post(path, json=resource).status_code == 200
        return
    errors = assert_problem(api.post(path, json=resource), 422)["errors"]
    assert [(e["loc"], message in e["msg"]) for e in errors] == [(["body", key], True)], errors


def test_only_a_claim_that_hands_the_job_off_may_name_no_site(api):
    job_id = submit_one(api)
    body = assert_problem(api.post("/match", json={"Site": None, "CPUTime": 10**6}), 422)
    assert "only a claim that hands the job off" in body["errors"][0]["msg"]
    assert_still_waiting(api, job_id)
    taken = api.post("/match", json={"CPUTime": 10**6, "handoff": True, "PilotReference": "p-1"})
    assert taken.status_code == 200 and taken.json()["status"] == "HandedOff" and taken.json()["site"] is None


@pytest.mark.parametrize(
    "tags",
    [
        {"RequiredTag": ["GPU"]},
        {"Tag": ["CPU"], "RequiredTag": ["GPU"]},
        {"tags": ["a", "b"], "required_tags": ["b", "c"]},
        {"MaxRAM": 4000, "RequiredTag": ["4GB"]},
        {"Tag": "CPU, SSD", "RequiredTag": "[GPU]"},
    ],
    ids=["no-tags", "other-tag", "partly", "maxram-yields-no-gb-tag", "as-text"],
)
@pytest.mark.parametrize("path", ["/match", "/taskqueues/matching"])
def test_required_tags_not_a_subset_of_tags_is_400(api, path, tags):
    job_id = submit_one(api, tags=["GPU"])
    assert_problem(api.post(path, json={**PILOT, **tags}), 400)
    assert_still_waiting(api, job_id)


def test_required_tags_covered_by_derived_tags_are_accepted(client):
    submit_one(client, tags=["8Processors"])  # needs more cores than the slot has
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
    "nul-minor_status": ({"status": "Running", "minor_status": "x\x00"}, ["body", "minor_status"]),
    "long-minor_status": ({"status": "Running", "minor_status": "m" * 256}, ["body", "minor_status"]),
    "unknown-field": ({"status": "Done", "exit_code": 3}, ["body", "exit_code"]),
    "array-body": (["Done"], ["body"]),
}


@pytest.mark.parametrize(("body", "loc"), list(BAD_REPORTS.values()), ids=list(BAD_REPORTS))
def test_bad_status_report_is_422_and_changes_nothing(api, running_job, body, loc):
    before = api.get(f"/jobs/{running_job}").json()
    assert_problem(api.post(f"/jobs/{running_job}/status", json=body), 422, loc)
    assert api.get(f"/jobs/{running_job}").json() == before


@pytest.mark.parametrize(
    "raw",
    [
        b'{"status": "Done", "cpu_seconds": NaN}',
        b'{"status": "Done", "wall_seconds": Infinity}',
        b'{"status": "Done", "cpu_seconds": -Infinity}',
    ],
    ids=["nan", "infinity", "minus-infinity"],
)
def test_non_finite_seconds_are_rejected(api, running_job, raw):
    before = api.get(f"/jobs/{running_job}").json()
    r = api.post(f"/jobs/{running_job}/status", content=raw, headers=JSON)
    assert 400 <= r.status_code < 500, r.text
    assert_problem(r, r.status_code)
    assert api.get(f"/jobs/{running_job}").json() == before


# --- path and query parameters --------------------------------------------------------

BAD_IDS = ["0", "-1", str(2**70), str(2**63), "abc", "1.5", "1e3"]
JOB_ROUTES = [
    ("GET", "/jobs/{id}", None),
    ("DELETE", "/jobs/{id}", None),
    ("POST", "/jobs/{id}/status", {"status": "Running"}),
]


@pytest.mark.parametrize("job_id", BAD_IDS)
@pytest.mark.parametrize(("method", "path", "body"), JOB_ROUTES, ids=["get", "delete", "status"])
def test_bad_job_id_in_path_is_422(api, method, path, body, job_id):
    r = api.request(method, path.format(id=job_id), json=body)
    assert_problem(r, 422, ["path", "job_id"])


@pytest.mark.parametrize("tq_id", ["0", "-1", str(2**70), "abc"])
def test_bad_task_queue_id_in_path_is_422(api, tq_id):
    assert_problem(api.get(f"/taskqueues/{tq_id}"), 422, ["path", "tq_id"])


def test_unknown_task_queue_is_404(api):
    assert_problem(api.get(f"/taskqueues/{2**62}"), 404)


@pytest.mark.parametrize(
    ("params", "loc"),
    [
        ({"status": "Sleeping"}, ["query", "status"]),
        ({"status": "waiting"}, ["query", "status"]),
        ({"limit": 0}, ["query", "limit"]),
        ({"limit": 1001}, ["query", "limit"]),
        ({"limit": "ten"}, ["query", "limit"]),
        ({"limit": 10**30}, ["query", "limit"]),
        ({"owner": "o" * 256}, ["query", "owner"]),
        ({"owner_group": "g" * 256}, ["query", "owner_group"]),
        ({"cursor": "c" * 65}, ["query", "cursor"]),
    ],
    ids=lambda v: str(v)[:30],
)
def test_bad_list_query_is_422(api, params, loc):
    assert_problem(api.get("/jobs", params=params), 422, loc)


def _cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    ["garbage", "====", "%%%", _cursor("after:"), _cursor("after:-5"), _cursor("after:1.5"), _cursor("id:3")],
)
def test_garbage_cursor_is_400(api, cursor):
    assert_problem(api.get("/jobs", params={"cursor": cursor}), 400)


@pytest.mark.parametrize("after", [2**63, 2**70, 10**40])
def test_cursor_beyond_the_id_range_is_400(api, after):
    assert_problem(api.get("/jobs", params={"cursor": _cursor(f"after:{after}")}), 400)


def test_cursor_at_the_top_of_the_id_range_is_an_empty_last_page(api):
    r = api.get("/jobs", params={"cursor": _cursor(f"after:{2**63 - 1}")})
    assert r.status_code == 200, r.text
    assert r.json() == {"jobs": [], "next_cursor": None}


@pytest.mark.parametrize("field", ["owner", "owner_group"])
@pytest.mark.parametrize("value", ["a\x00b", "a\x01b", "a\nb", "\x7f"], ids=["nul", "soh", "newline", "del"])
def test_list_filter_with_control_characters_is_422_like_the_name_it_filters(api, field, value):
    assert_problem(api.get("/jobs", params={field: value}), 422, ["query", field])


# --- routes ---------------------------------------------------------------------------


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
def test_unknown_route_is_404_problem(api, server, method, url):
    assert_problem(api.request(method, url.format(root=server.url)), 404)


@pytest.mark.parametrize(("method", "url"), [("PUT", "/jobs"), ("DELETE", "/jobs"), ("GET", "/match")])
def test_wrong_method_is_405_problem(api, method, url):
    assert_problem(api.request(method, url), 405)
