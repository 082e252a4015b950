"""Usage accounting over real HTTP, on both backends: a finished job's CPU is charged to its
association and every ancestor account, in the transaction that finishes it."""

from __future__ import annotations

import json

import httpx
import pytest
import sqlalchemy as sa

from tests.problems import assert_problem

TREE = "root|1|||\nphysics|40|root||\ntheory|1|physics||\ntheory|1||alice|\n"
PILOT = {"Site": "S1", "CPUTime": 10**7}


def import_tree(client: httpx.Client) -> None:
    r = client.put("/associations", content=TREE.encode(), headers={"content-type": "text/plain"})
    assert r.status_code == 200, r.text


def run_job(
    client: httpx.Client, owner: str, group: str, final: str = "Done", account: str | None = None, **report
) -> int:
    spec = {"owner": owner, "owner_group": group, **({"account": account} if account else {})}
    r = client.post("/jobs", json={"jobs": [spec]})
    assert r.status_code == 201, r.text
    job_id = r.json()["jobs"][0]["job_id"]
    r = client.post("/match", json={**PILOT, "JobID": job_id})
    assert r.status_code == 200 and r.json()["job_id"] == job_id, r.text
    for status, extra in (("Running", {}), (final, report)):
        r = client.post(f"/jobs/{job_id}/status", json={"status": status, **extra})
        assert r.status_code == 200, r.text
    return job_id


def totals(db, client: httpx.Client) -> dict[tuple[str, str], float]:
    """usage_totals once a forced priority run has folded every logged charge."""
    assert client.post("/priorities/recompute").status_code == 200
    engine = db.engine()
    with engine.connect() as conn:
        rows = conn.execute(sa.text('SELECT account, "user", usage FROM usage_totals')).all()
    engine.dispose()
    return {(account, user): usage for account, user, usage in rows}


def charges(db) -> list[tuple]:
    engine = db.engine()
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT job_id, vo, owner_group, owner, account, charge FROM usage_charges ORDER BY id")
        ).all()
    engine.dispose()
    return [tuple(r) for r in rows]


def test_done_charges_the_user_its_account_and_every_ancestor(client, clean):
    import_tree(client)
    job_id = run_job(client, "alice", "theory", cpu_seconds=120.0, wall_seconds=150.0)
    assert totals(clean, client) == {
        ("theory", "alice"): 120.0,
        ("theory", ""): 120.0,
        ("physics", ""): 120.0,
        ("root", ""): 120.0,
    }
    assert charges(clean) == [(job_id, "default", "theory", "alice", "theory", 120.0)]


def test_failed_jobs_are_charged_too_and_the_charges_add_up(client, clean):
    import_tree(client)
    run_job(client, "alice", "theory", cpu_seconds=100.0)
    run_job(client, "alice", "theory", final="Failed", cpu_seconds=50.0)
    used = totals(clean, client)
    for node in (("theory", "alice"), ("theory", ""), ("physics", ""), ("root", "")):
        assert used[node] == pytest.approx(150.0, rel=1e-6)  # seconds apart: decay is negligible


def test_a_job_outside_the_tree_is_refused_naming_account_and_user(client, clean):
    """As Slurm: with an imported tree, a job must belong to one of its associations."""
    import_tree(client)
    r = client.post("/jobs", json={"jobs": [{"owner": "alice", "owner_group": "theory"},
                                            {"owner": "bob", "owner_group": "chemistry"}]})  # fmt: skip
    body = assert_problem(r, 422)
    assert "account 'chemistry' and user 'bob'" in body["detail"]
    assert [e["loc"] for e in body["errors"]] == [["body", "jobs", 1, "account"]]
    assert client.get("/jobs").json()["jobs"] == []  # all or nothing
    r = client.post("/jobs", json={"jobs": [{"owner": "alice", "owner_group": "g", "account": "nowhere"}]})
    assert "account 'nowhere' and user 'alice'" in assert_problem(r, 422)["detail"]
    assert totals(clean, client) == {}


def test_a_job_names_its_account_and_is_charged_there_and_above(client, clean):
    """The account need not be the group: usage follows the association the job names."""
    import_tree(client)
    job_id = run_job(client, "alice", "lhcb_user", account="theory", cpu_seconds=20.0)
    assert client.get(f"/jobs/{job_id}").json()["account"] == "theory"
    used = totals(clean, client)
    assert {node: used[node] for node in used if used[node]} == {
        ("theory", "alice"): pytest.approx(20.0), ("theory", ""): pytest.approx(20.0),
        ("physics", ""): pytest.approx(20.0), ("root", ""): pytest.approx(20.0),
    }  # fmt: skip
    rows = {(row["account"], row["user"]): row for row in client.get("/associations/usage").json()["associations"]}
    assert rows[("theory", "alice")]["raw_usage"] == pytest.approx(20.0, rel=1e-3)
    assert rows[("theory", "alice")]["parent"] == "theory" and rows[("theory", None)]["parent"] == "physics"


def test_no_cpu_seconds_and_killed_jobs_charge_nothing(client, clean):
    import_tree(client)
    run_job(client, "alice", "theory")  # Done without cpu_seconds
    r = client.post("/jobs", json={"jobs": [{"owner": "alice", "owner_group": "theory"}]})
    killed = r.json()["jobs"][0]["job_id"]
    assert client.delete(f"/jobs/{killed}").status_code == 200
    assert totals(clean, client) == {} and charges(clean) == []


def test_a_refused_transition_charges_nothing(client, clean):
    import_tree(client)
    job_id = run_job(client, "alice", "theory", cpu_seconds=10.0)
    r = client.post(f"/jobs/{job_id}/status", json={"status": "Done", "cpu_seconds": 999.0})
    assert r.status_code == 409
    assert totals(clean, client)[("theory", "alice")] == 10.0
    assert len(charges(clean)) == 1


def test_sshare_associations_prints_every_association(client, clean, server, monkeypatch):
    from typer.testing import CliRunner

    from fairmatch.cli import cli, render

    import_tree(client)
    monkeypatch.setattr(render, "stdout_is_tty", lambda: False)
    result = CliRunner().invoke(cli, ["sshare", "--associations", "--url", server.url], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    rows = [(row["account"], row["user"], row["parent"]) for row in json.loads(result.stdout)["associations"]]
    assert rows == [("root", None, None), ("physics", None, "root"), ("theory", None, "physics"),
                    ("theory", "alice", "theory")]  # fmt: skip
    monkeypatch.setattr(render, "stdout_is_tty", lambda: True)
    shown = CliRunner().invoke(cli, ["sshare", "-a", "--url", server.url], catch_exceptions=False).stdout
    assert "Associations" in shown and "alice" in shown and "FairShare" in shown


def test_without_a_tree_any_account_is_accepted_and_charged(client, clean):
    job_id = run_job(client, "zoe", "g", account="anything", cpu_seconds=5.0)
    assert client.get(f"/jobs/{job_id}").json()["account"] == "anything"
    assert totals(clean, client) == {("anything", "zoe"): 5.0, ("anything", ""): 5.0}


def test_a_usage_reset_zeroes_what_it_names_and_keeps_the_rest(client, clean):
    r = client.put(
        "/associations", content=(TREE + "theory|1||bob|\n").encode(), headers={"content-type": "text/plain"}
    )
    assert r.status_code == 200, r.text
    run_job(client, "alice", "theory", cpu_seconds=100.0)
    run_job(client, "bob", "theory", cpu_seconds=50.0)
    assert totals(clean, client)[("theory", "")] == pytest.approx(150.0, rel=1e-5)  # decays a little

    r = client.post("/associations/usage/reset", json={"account": "theory", "user": "alice"})

    assert r.status_code == 200 and r.json() == {"reset": 1}, r.text
    after = totals(clean, client)
    assert after[("theory", "alice")] == 0.0
    assert (after[("theory", "bob")], after[("theory", "")]) == pytest.approx((50.0, 150.0), rel=1e-5)
    assert [c[3] for c in charges(clean)] == ["bob"]  # alice's folded charge is gone with her usage

    assert client.post("/associations/usage/reset", json={"account": "theory"}).json() == {"reset": 3}
    after = totals(clean, client)
    assert after[("theory", "bob")] == after[("theory", "")] == 0.0
    assert after[("root", "")] == pytest.approx(150.0, rel=1e-5)


def test_a_usage_reset_folds_first_so_no_charge_comes_back(client, clean):
    import_tree(client)
    run_job(client, "alice", "theory", cpu_seconds=100.0)  # logged, not yet folded

    assert client.post("/associations/usage/reset", json={}).json() == {"reset": 4}

    assert set(totals(clean, client).values()) == {0.0}  # the next fold finds nothing of it
    assert charges(clean) == []


@pytest.mark.parametrize("body", [{"acount": "theory"}, {"user": ""}, {"account": 5}, []])
def test_a_usage_reset_with_a_bad_body_is_a_422_and_resets_nothing(client, clean, body):
    import_tree(client)
    run_job(client, "alice", "theory", cpu_seconds=100.0)
    assert_problem(client.post("/associations/usage/reset", json=body), 422)
    assert totals(clean, client)[("theory", "alice")] == pytest.approx(100.0, rel=1e-5)


def test_only_an_admin_resets_usage(as_role):
    for role in ("operator", "user", "pilot"):
        assert_problem(as_role(role).post("/associations/usage/reset", json={}), 403)
    assert as_role("admin").post("/associations/usage/reset", json={}).status_code == 200
