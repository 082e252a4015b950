"""/associations and `fairmatch associations` over real HTTP, on both backends."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from fairmatch.api.associations import MAX_DUMP_CHARS
from tests.in_process import run_fairmatch
from tests.problems import assert_problem

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "sacctmgr_lhcb.txt"
TEXT = {"content-type": "text/plain; charset=utf-8"}
SMALL = "root|1|||\nvo|1|root||\nvo|1||alice|\n"


@pytest.fixture(scope="module")
def dump() -> str:
    return FIXTURE.read_text(encoding="utf-8")


def put_text(client: httpx.Client, text: str) -> httpx.Response:
    return client.put("/associations", content=text.encode(), headers=TEXT)


def exported(client: httpx.Client) -> httpx.Response:
    r = client.get("/associations")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return r


def row_count(clean) -> int:
    engine = clean.engine()
    with engine.connect() as conn:
        count = conn.exec_driver_sql("SELECT count(*) FROM associations").scalar()
    engine.dispose()
    return count


# --- PUT then GET -------------------------------------------------------------------


def test_put_then_get_gives_the_same_bytes(client, dump, clean):
    r = put_text(client, dump)

    assert r.status_code == 200, r.text
    assert r.json() == {"associations": 52}
    assert exported(client).content == dump.encode()
    assert row_count(clean) == 52


def test_get_before_any_import_is_empty(client):
    assert exported(client).content == b""


def test_put_replaces_the_whole_tree(client):
    put_text(client, SMALL + "vo|1||bob|\n")
    assert put_text(client, SMALL).json() == {"associations": 3}
    assert exported(client).text == SMALL


def test_json_body_is_accepted_too(client, dump):
    r = client.put("/associations", json={"sacctmgr": dump})

    assert r.status_code == 200, r.text
    assert exported(client).text == dump


def test_any_other_content_type_is_the_text(client):
    r = client.put("/associations", content=SMALL.encode(), headers={"content-type": "application/octet-stream"})
    assert r.status_code == 200, r.text
    assert exported(client).text == SMALL


def test_get_as_json_shows_rows_and_normalised_shares(client, dump):
    put_text(client, dump)

    r = client.get("/associations", headers={"accept": "application/json"})

    assert r.status_code == 200, r.text
    rows = r.json()["associations"]
    assert len(rows) == 52
    assert rows[7] == {"line": 8, "account": "lhcb_user", "user": "alice", "parent": "", "shares": "4",
                       "normalised_share": pytest.approx(0.036)}  # fmt: skip
    sgm = next(row for row in rows if row["user"] == "lbsgm")
    assert (sgm["shares"], sgm["normalised_share"]) == ("parent", pytest.approx(0.12))


# --- refusals: nothing changes --------------------------------------------------------


def test_a_broken_dump_is_refused_naming_the_line_and_the_tree_stays(client, dump, clean):
    put_text(client, dump)
    broken = dump.replace("atlas_user|25|atlas||\n", "atlas_user|25|atlsa||\n")
    line = broken.split("\n").index("atlas_user|25|atlsa||") + 1

    problem = assert_problem(put_text(client, broken), 422)

    assert problem["detail"].startswith(f"line {line}: unknown parent account 'atlsa'")
    assert problem["errors"] == [{"loc": ["body", "line", line], "msg": "unknown parent account 'atlsa'",
                                  "type": "invalid_association", "line": line,
                                  "content": "atlas_user|25|atlsa||"}]  # fmt: skip
    assert exported(client).text == dump
    assert row_count(clean) == 52


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "line 1: the dump is empty"),
        ("root|1|||\nvo|-1|root||\n", "line 2: negative shares -1"),
        ("root|1|||\nvo|1|root|\n", "line 2: missing the trailing '|'"),
        ("root|1|||\r\nvo|1|root||\r\n", "line 1: the line ends in a carriage return"),
        ("root|1|||\nvo|1||alice|\n", "line 2: the account 'vo' of user 'alice' does not exist"),
    ],
)
def test_other_broken_dumps_change_nothing(client, text, fragment):
    put_text(client, SMALL)

    problem = assert_problem(put_text(client, text), 422)

    assert fragment in problem["detail"]
    assert exported(client).text == SMALL


def test_bad_bodies_are_problems_not_errors(client):
    assert_problem(client.put("/associations", content=b"\xff\xfe", headers=TEXT), 422)
    json_type = {"content-type": "application/json"}
    assert_problem(client.put("/associations", content=b"{nope", headers=json_type), 400)
    assert_problem(client.put("/associations", json={"dump": SMALL}), 422)
    assert_problem(client.put("/associations", json=[SMALL]), 422)
    assert_problem(client.put("/associations", json={"sacctmgr": 42}), 422)
    too_long = "root|1|||\n" + "x" * MAX_DUMP_CHARS
    assert "more than" in assert_problem(put_text(client, too_long), 422)["detail"]
    assert exported(client).text == ""


# --- roles ----------------------------------------------------------------------------


def test_only_admin_imports_admin_and_operator_export(as_role):
    assert put_text(as_role("admin"), SMALL).status_code == 200
    for role in ("operator", "user", "pilot"):
        assert_problem(put_text(as_role(role), "root|1|||\n"), 403)
    for role in ("admin", "operator"):
        assert exported(as_role(role)).text == SMALL
    for role in ("user", "pilot"):
        assert_problem(as_role(role).get("/associations"), 403)


def test_delete_removes_the_tree_and_any_account_is_accepted_again(client, clean):
    put_text(client, SMALL)
    outside = {"owner": "bob", "owner_group": "vo", "account": "elsewhere"}
    assert_problem(client.post("/jobs", json={"jobs": [outside]}), 422)  # no such association

    r = client.delete("/associations")

    assert r.status_code == 204 and r.content == b""
    assert exported(client).content == b"" and row_count(clean) == 0
    assert client.post("/jobs", json={"jobs": [outside]}).status_code == 201
    assert client.delete("/associations").status_code == 204  # nothing to remove: still done


def test_only_admin_removes_the_tree(as_role):
    assert put_text(as_role("admin"), SMALL).status_code == 200
    for role in ("operator", "user", "pilot"):
        assert_problem(as_role(role).delete("/associations"), 403)
    assert exported(as_role("admin")).text == SMALL


# --- the command line -----------------------------------------------------------------


@pytest.fixture
def fairmatch(tmp_path) -> Callable[..., subprocess.CompletedProcess]:
    config = tmp_path / "empty.toml"
    config.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRMATCH_")}
    env["FAIRMATCH_CONFIG"] = str(config)

    def run(*args: str) -> subprocess.CompletedProcess:
        return run_fairmatch(*args, env=env, cwd=tmp_path)

    return run


def test_cli_import_then_export_round_trips(fairmatch, server, clean, dump):
    imported = fairmatch("associations", "import", str(FIXTURE), "--url", server.url)

    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout) == {"associations": 52}
    exported_now = fairmatch("associations", "export", "--url", server.url)
    assert exported_now.returncode == 0, exported_now.stderr
    assert exported_now.stdout == FIXTURE.read_text()


def test_cli_remove_takes_the_tree_away(fairmatch, server, clean):
    fairmatch("associations", "import", str(FIXTURE), "--url", server.url)

    removed = fairmatch("associations", "remove", "--url", server.url)

    assert removed.returncode == 0, removed.stderr
    assert json.loads(removed.stdout) == {"associations": 0}
    assert fairmatch("associations", "export", "--url", server.url).stdout == ""
    assert row_count(clean) == 0


def test_cli_reset_usage_names_what_it_reset(fairmatch, server, clean):
    fairmatch("associations", "import", str(FIXTURE), "--url", server.url)
    with server.client() as client:  # one job of alice's charged to lhcb_user
        r = client.post("/jobs", json={"jobs": [{"owner": "alice", "owner_group": "lhcb_user"}]})
        job_id = r.json()["jobs"][0]["job_id"]
        assert client.post("/match", json={"Site": "S1", "CPUTime": 10**7, "JobID": job_id}).status_code == 200
        for status in ("Running", "Done"):
            assert client.post(f"/jobs/{job_id}/status", json={"status": status, "cpu_seconds": 60}).status_code == 200

    one = fairmatch("associations", "reset-usage", "--account", "lhcb_user", "--user", "alice", "--url", server.url)
    nodes = usage_nodes(clean)  # the association and its ancestors, charged by the fold the reset made
    everything = fairmatch("associations", "reset-usage", "--url", server.url)

    assert one.returncode == 0 and everything.returncode == 0, one.stderr + everything.stderr
    assert json.loads(one.stdout) == {"reset": 1}
    assert len(nodes) > 1 and json.loads(everything.stdout) == {"reset": len(nodes)}
    assert set(usage_nodes(clean).values()) == {0.0}


def usage_nodes(clean) -> dict[tuple[str, str], float]:
    engine = clean.engine()
    with engine.connect() as conn:
        rows = conn.exec_driver_sql('SELECT account, "user", usage FROM usage_totals').all()
    engine.dispose()
    return {(account, user): usage for account, user, usage in rows}


def test_cli_import_of_a_broken_dump_names_the_line(fairmatch, server, clean, dump, tmp_path):
    fairmatch("associations", "import", str(FIXTURE), "--url", server.url)
    broken = tmp_path / "broken.txt"
    broken.write_bytes(FIXTURE.read_bytes().replace(b"lhcb_user|4||alice|", b"lhcb_user|four||alice|"))

    result = fairmatch("associations", "import", str(broken), "--url", server.url)

    assert result.returncode == 1
    assert result.stderr.startswith("error: Invalid input: line 8: shares 'four' are neither")
    assert fairmatch("associations", "export", "--url", server.url).stdout == FIXTURE.read_text()


def test_cli_usage_errors(fairmatch, tmp_path, server):
    missing = fairmatch("associations", "import", str(tmp_path / "missing.txt"), "--url", server.url)
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("root|1|||\nécole|1|root||\n".encode("latin-1"))
    not_utf8 = fairmatch("associations", "import", str(latin1), "--url", server.url)

    for result, fragment in ((missing, "cannot read"), (not_utf8, "is not UTF-8 text")):
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("error: ") and fragment in result.stderr


# --- concurrency ----------------------------------------------------------------------


def test_concurrent_imports_leave_exactly_one_whole_dump(server, clean):
    from concurrent.futures import ThreadPoolExecutor

    dumps = [SMALL + "".join(f"vo|1||user{n}_{i}|\n" for i in range(n)) for n in range(1, 9)]

    def put(text: str) -> int:
        with server.client() as c:
            return put_text(c, text).status_code

    with ThreadPoolExecutor(len(dumps)) as pool:
        assert list(pool.map(put, dumps * 2)) == [200] * 2 * len(dumps)
    with server.client() as c:
        assert exported(c).text in dumps
