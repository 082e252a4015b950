"""Commands that change many jobs, purge, or ban a site no pilot reported: the installed
`fairmatch` script against a real server, its stdin a pipe or a pseudo-terminal.

A pipe is not a terminal: without --yes the command refuses, naming --yes, and changes
nothing. On a pseudo-terminal (python's pty) it asks; "n" changes nothing and says so,
"y" acts. What changed, or not, is read back through the API.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from urllib.parse import quote

import httpx

from tests.conftest import Server
from tests.e2e.test_cli import FAIRMATCH, submit_via_api
from tests.in_process import run_fairmatch

ALICE = {"owner": "alice", "owner_group": "g", "sites": ["S1"], "cpu_time": 3600}
BOB = {"owner": "bob", "owner_group": "g", "sites": ["S1"], "cpu_time": 3600}
CERN, MISSPELT = "LCG.CERN.cern", "LCG.CERN.cren"


def piped(cli_env, tmp_path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    """The console script with stdin, stdout and stderr pipes: no terminal anywhere."""
    return subprocess.run([str(FAIRMATCH), *args], input=stdin, env=cli_env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=30)  # fmt: skip


def on_a_terminal(cli_env, tmp_path, *args: str, answer: str) -> tuple[int, str, str]:
    """The console script with stdin and stderr on a pseudo-terminal, stdout a pipe (so it
    prints JSON): `answer` is typed once the question `[y/N]` shows. (exit code, what the
    terminal showed, stdout)."""
    leader, follower = pty.openpty()
    process = subprocess.Popen([str(FAIRMATCH), *args], stdin=follower, stderr=follower, stdout=subprocess.PIPE,
                               env=cli_env, cwd=tmp_path, text=True)  # fmt: skip
    os.close(follower)
    shown, answered = b"", False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed: the command ended
                break
            if not chunk:
                break
            shown += chunk
        if not answered and b"[y/N]" in shown:
            os.write(leader, answer.encode() + b"\n")
            answered = True
        if process.poll() is not None and not ready:
            break
    os.close(leader)
    stdout, _ = process.communicate(timeout=30)
    assert answered, f"no question was asked: {shown!r}"
    return process.returncode, shown.decode(errors="replace").replace("\r\n", "\n"), stdout


def statuses(server: Server, job_ids: list[int]) -> list[str]:
    with server.client() as client:
        return [client.get(f"/jobs/{job_id}").json()["status"] for job_id in job_ids]


def refused_without_yes(result: subprocess.CompletedProcess, question: str) -> None:
    """Exit 2 and one line: what it would have done, and that --yes is needed."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: {question}"), result.stderr
    assert "? Not asked, as stdin is not a terminal: nothing changed; pass --yes (-y)" in result.stderr
    assert "interrupted" not in result.stderr


# --- bulk actions --------------------------------------------------------------------------


def test_a_bulk_hold_from_a_pipe_refuses_without_yes_and_holds_with_it(cli_env, tmp_path, server, clean):
    ids = [j["job_id"] for j in submit_via_api(server, ALICE, ALICE, ALICE, BOB)]
    url = ["--url", server.url]

    refused = piped(cli_env, tmp_path, "jobs", "hold", "--owner", "alice", *url, stdin="n\n")  # echo n | fairmatch …
    refused_without_yes(refused, "hold 3 jobs of owner alice?")
    assert statuses(server, ids) == ["Waiting"] * 4

    held = piped(cli_env, tmp_path, "jobs", "hold", "--owner", "alice", "--reason", "disk full", "--yes", *url)
    assert held.returncode == 0, held.stderr
    assert "?" not in held.stderr
    assert statuses(server, ids) == ["Held", "Held", "Held", "Waiting"]
    with server.client() as client:
        assert client.get(f"/jobs/{ids[0]}").json()["minor_status"] == "disk full"
        [entry] = client.get("/audit", params={"action": "bulk.hold"}).json()["entries"]
    assert (entry["detail"]["filter"], entry["detail"]["new"], entry["detail"]["reason"]) == (
        {"owner": "alice"}, {"status": "Held"}, "disk full")  # fmt: skip
    released = piped(cli_env, tmp_path, "jobs", "release", "--owner", "alice", "--status", "Held", "-y", *url)
    assert released.returncode == 0, released.stderr
    assert statuses(server, ids) == ["Waiting"] * 4


def test_every_bulk_command_refuses_without_yes_and_a_single_job_by_id_is_not_asked(cli_env, tmp_path, server,
                                                                                       clean):  # fmt: skip
    ids = [j["job_id"] for j in submit_via_api(server, ALICE, ALICE)]

    def run(*args: str) -> subprocess.CompletedProcess:
        return run_fairmatch(*args, "--url", server.url, env=cli_env, cwd=tmp_path)

    for args, question in [
        (["jobs", "kill", "--owner", "alice"], "kill 2 jobs of owner alice"),
        (["jobs", "hold", *map(str, ids)], f"hold 2 jobs with ids {ids[0]}, {ids[1]}"),
        (["jobs", "priority", "--group", "g", "--user-priority", "0"], "set user priority 0 on 2 jobs of group g"),
        (["jobs", "priority", "--owner", "alice", "--status", "Waiting", "--user-priority", "3", "--priority-class",
          "1"], "set user priority 3 and priority class 1 on 2 jobs in status Waiting, of owner alice"),
    ]:  # fmt: skip
        refused_without_yes(run(*args), question)
    with server.client() as client:
        jobs = [client.get(f"/jobs/{job_id}").json() for job_id in ids]
    assert [(j["status"], j["user_priority"], j["priority_class"]) for j in jobs] == [("Waiting", 1, 0)] * 2

    # a selection that changes nothing asks nothing: no Matched job to reschedule
    nothing = run("jobs", "reschedule", "--owner", "alice")
    assert nothing.returncode == 0 and '"changed": 0' in nothing.stdout, nothing.stderr
    # one job by its id is not asked about, as the one-job commands
    assert run("jobs", "hold", str(ids[0])).returncode == 0
    assert run("jobs", "priority", str(ids[1]), "--user-priority", "5").returncode == 0
    assert run("jobs", "kill", str(ids[1])).returncode == 0
    assert statuses(server, ids) == ["Held", "Killed"]


def test_a_bulk_hold_on_a_terminal_asks_and_a_no_changes_nothing(cli_env, tmp_path, server, clean):
    ids = [j["job_id"] for j in submit_via_api(server, ALICE, ALICE, BOB)]
    hold = ("jobs", "hold", "--owner", "alice", "--url", server.url)

    code, shown, stdout = on_a_terminal(cli_env, tmp_path, *hold, answer="n")
    assert code == 1, shown
    assert "hold 2 jobs of owner alice? [y/N]" in shown and "nothing changed" in shown
    assert "error" not in shown and stdout == ""
    assert statuses(server, ids) == ["Waiting"] * 3

    code, shown, stdout = on_a_terminal(cli_env, tmp_path, *hold, answer="y")
    assert code == 0, shown
    assert '"changed": 2' in stdout
    assert statuses(server, ids) == ["Held", "Held", "Waiting"]


# --- purge ---------------------------------------------------------------------------------


def test_a_purge_asks_on_a_terminal_and_refuses_from_a_pipe_without_yes(cli_env, tmp_path, server, clean):
    ids = [j["job_id"] for j in submit_via_api(server, ALICE, ALICE)]
    with server.client() as client:
        for job_id in ids:
            assert client.delete(f"/jobs/{job_id}").status_code == 200
    time.sleep(1.1)  # finished more than a second ago
    purge = ("jobs", "purge", "--older-than", "1s", "--url", server.url)

    refused = piped(cli_env, tmp_path, *purge)
    refused_without_yes(refused, "delete 2 jobs (Killed 2) that finished before")
    code, shown, _ = on_a_terminal(cli_env, tmp_path, *purge, answer="n")
    assert code == 1 and "nothing changed" in shown and "error" not in shown, shown
    assert statuses(server, ids) == ["Killed", "Killed"]

    code, shown, _ = on_a_terminal(cli_env, tmp_path, *purge, answer="y")
    assert code == 0, shown
    assert "delete 2 jobs (Killed 2) that finished before" in shown
    with server.client() as client:
        assert [client.get(f"/jobs/{job_id}").status_code for job_id in ids] == [404, 404]
    nothing = piped(cli_env, tmp_path, *purge)  # nothing left to purge: nothing to ask
    assert nothing.returncode == 0 and '"dry_run": true' in nothing.stdout, nothing.stderr


# --- a site no pilot reported --------------------------------------------------------------


def report(server: Server, site: str) -> None:
    """A pilot at `site` takes a job: the site is on record."""
    submit_via_api(server, {**ALICE, "sites": [site]})
    with server.client() as client:
        r = client.post("/match", json={"Site": site, "CPUTime": 100_000, "PilotReference": f"https://ce/{site}/1"})
    assert r.status_code == 200, r.text


def banned(client: httpx.Client) -> list[str]:
    return [entry["site"] for entry in client.get("/site-mask").json()["sites"]]


def test_banning_a_site_no_pilot_reported_warns_offers_the_known_one_and_asks(cli_env, tmp_path, server, client):
    report(server, CERN)
    url = ["--url", server.url]
    check = client.get(f"/site-mask/check/{quote(MISSPELT, safe='')}").json()
    assert check == {"site": MISSPELT, "reported": False, "banned": False, "similar": [CERN],
                     "warning": f"site {MISSPELT} has never been reported by a pilot; known sites like it: {CERN}"}  # fmt: skip
    assert client.get(f"/site-mask/check/{CERN}").json()["reported"] is True
    warning = f"site {MISSPELT} has never been reported by a pilot; known sites like it: {CERN} — ban anyway"

    refused = piped(cli_env, tmp_path, "sites", "ban", MISSPELT, "--reason", "CE down", *url)
    refused_without_yes(refused, f"{warning}?")
    code, shown, _ = on_a_terminal(cli_env, tmp_path, "sites", "ban", MISSPELT, "--reason", "CE down", *url,
                                   answer="n")  # fmt: skip
    assert code == 1 and f"{warning}? [y/N]" in shown and "nothing changed" in shown, shown
    assert banned(client) == []

    # the site a pilot reported is banned without a question
    known = piped(cli_env, tmp_path, "sites", "ban", CERN, "--reason", "CE down", *url)
    assert known.returncode == 0 and known.stderr == "", known.stderr
    assert banned(client) == [CERN]
    code, shown, _ = on_a_terminal(cli_env, tmp_path, "sites", "ban", MISSPELT, "--reason", "typo kept", *url,
                                   answer="y")  # fmt: skip
    assert code == 0, shown
    assert banned(client) == [CERN, MISSPELT]
    other = piped(cli_env, tmp_path, "sites", "ban", "LCG.Nowhere.xx", "--reason", "r", "--yes", *url)
    assert other.returncode == 0, other.stderr
    answer = client.put("/site-mask/LCG.Elsewhere.yy", json={"reason": "r"}).json()  # the API bans, and says so
    assert (answer["reported"], answer["similar"]) == (False, [])
    assert "known sites like it: none" in answer["warning"]
    by_site = {
        e["target"]: e["detail"] for e in client.get("/audit").json()["entries"] if e["action"] == "site_mask.ban"
    }
    assert by_site[CERN]["reported"] is True and by_site[MISSPELT] == {"reason": "typo kept", "created": True,
                                                                         "reported": False}  # fmt: skip


def test_the_console_warns_before_banning_a_site_no_pilot_reported(console_as, as_role, token_server):
    admin, console = as_role("admin"), console_as("operator", sub="olga")
    assert admin.post("/jobs", json={"jobs": [{**ALICE, "sites": [CERN]}]}).status_code == 201
    assert (
        admin.post("/match", json={"Site": CERN, "CPUTime": 100_000, "PilotReference": "https://ce/1"}).status_code
        == 200
    )

    asked = console.submit("/ui/actions/site-mask/ban", {"site": MISSPELT, "reason": "CE down"}, confirm=False)
    assert asked.status_code == 200 and 'id="confirmation"' in asked.text
    assert 'id="confirm-warnings"' in asked.text
    assert f"site {MISSPELT} has never been reported by a pilot; known sites like it: {CERN}" in asked.text
    assert admin.get("/site-mask").json() == {"sites": []}  # asking changed nothing
    known = console.submit("/ui/actions/site-mask/ban", {"site": CERN, "reason": "CE down"}, confirm=False)
    assert 'id="confirmation"' in known.text and 'id="confirm-warnings"' not in known.text
    done = console.submit("/ui/actions/site-mask/ban", {"site": MISSPELT, "reason": "CE down"})
    assert done.status_code == 200 and 'id="done"' in done.text
    assert [e["site"] for e in admin.get("/site-mask").json()["sites"]] == [MISSPELT]
