"""`fairmatch simulate --from URL`: a running service's groups, classes, policy and waiting jobs.

The service runs in auth mode `token`; the command (the console script's main(),
in process) reads it with an operator's real JWT, as an operator would, and
simulates from that state.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from fairmatch.auth.tokens import Role, create_token
from tests.conftest import TOKEN_SETTINGS
from tests.e2e.test_cli import succeeded
from tests.in_process import run_fairmatch

SCENARIO = """
[simulation]
hours = 8.0
slots = 200
site = "S1"  # beta's site-bound queue is eligible too: else its part of beta's share would be lost
imported_runtime_hours = 1.0
"""


@pytest.fixture
def service_state(as_role):
    """Groups alpha (2000) and beta (1000), both JOB_SHARING; a job class; waiting jobs of both."""
    admin = as_role("admin", sub="root")
    for name, share in (("alpha", 2000), ("beta", 1000)):
        r = admin.put(f"/groups/{name}", json={"job_share": share, "properties": ["JOB_SHARING"]})
        assert r.status_code in (200, 201), r.text
    r = admin.put("/job-classes/bulk", json={"default_class": 0, "priority": 5})
    assert r.status_code in (200, 201), r.text
    jobs = [{"owner": "prod", "owner_group": "alpha", "user_priority": 2}] * 3000
    jobs += [{"owner": "mc", "owner_group": "beta", "job_class": "bulk"}] * 2000
    jobs += [{"owner": "mc", "owner_group": "beta", "user_priority": 5, "sites": ["S1"]}] * 500
    for start in range(0, len(jobs), 2500):
        r = admin.post("/jobs", json={"jobs": jobs[start : start + 2500]})
        assert r.status_code == 201, r.text


def simulate(token_server, cli_env, tmp_path, scenario: str, out: str) -> subprocess.CompletedProcess:
    (tmp_path / f"{out}.toml").write_text(scenario)
    operator = create_token(TOKEN_SETTINGS, role=Role.operator, sub="ops", ttl_seconds=600)
    return run_fairmatch("simulate", f"{out}.toml", "--out", out, "--from", token_server.url,
                         env={**cli_env, "FAIRMATCH_TOKEN": operator}, cwd=tmp_path)  # fmt: skip


def test_from_a_running_service_reproduces_its_groups_target_shares(token_server, service_state, cli_env, tmp_path):
    done = simulate(token_server, cli_env, tmp_path, SCENARIO, "state")
    summary = succeeded(done)
    assert f"from {token_server.url}: 2 groups, 1 job classes, 5500 waiting jobs" in done.stderr
    groups = summary["groups"]
    assert groups["alpha"]["target_share"] == pytest.approx(2 / 3)
    assert groups["beta"]["target_share"] == pytest.approx(1 / 3)
    # JOB_SHARING came along: alpha is one entity and takes its 2/3 of the slots (exact lottery, the default)
    assert groups["alpha"]["achieved_share"] == pytest.approx(2 / 3, abs=0.03)
    assert summary["policy"] == "dirac" and summary["lottery"] == "exact"
    started = groups["alpha"]["jobs_started"] + groups["beta"]["jobs_started"]
    assert started == summary["matches"] > 1500
    assert json.loads((tmp_path / "state" / "summary.json").read_text()) == summary


def test_the_scenarios_sections_go_on_top_of_the_services(token_server, service_state, cli_env, tmp_path):
    on_top = SCENARIO + '\n[config.groups.beta]\njob_share = 2000\n\n[config.priority]\npolicy = "rank"\n'
    on_top += '\n[[streams]]\nowner = "new"\nowner_group = "gamma"\nbacklog = 100\n'
    summary = succeeded(simulate(token_server, cli_env, tmp_path, on_top, "changed"))
    groups = summary["groups"]
    assert summary["policy"] == "rank" and summary["lottery"] == "highest"  # rank's own lottery, not the service's
    assert set(groups) == {"alpha", "beta", "gamma"}
    assert groups["alpha"]["target_share"] == pytest.approx(2000 / 4000)  # beta's share is the scenario's
    # gamma, no group of the service's: the default share, and no usage yet, so rank starts it at once
    assert groups["gamma"]["jobs_started"] == 100 and groups["gamma"]["target_share"] == 0


def test_from_a_service_that_refuses_the_token_is_one_error_line(token_server, service_state, cli_env, tmp_path):
    (tmp_path / "s.toml").write_text(SCENARIO)
    done = run_fairmatch("simulate", "s.toml", "--out", "o", "--from", token_server.url,
                         env={**cli_env, "FAIRMATCH_TOKEN": "not-a-token"}, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("error:"), done.stderr
    assert not (tmp_path / "o").exists()


def test_from_a_service_with_an_association_tree_simulates_over_it(token_server, service_state, as_role, cli_env,
                                                                   tmp_path):  # fmt: skip
    dump = "root|1|||\nalpha|9|root||\nalpha|1||prod|\nbeta|1|root||\nbeta|1||mc|\n"
    r = as_role("admin", sub="root").put("/associations", content=dump, headers={"content-type": "text/plain"})
    assert r.status_code == 200, r.text
    on_top = SCENARIO + '\n[config.priority]\npolicy = "multifactor"\n'
    done = simulate(token_server, cli_env, tmp_path, on_top, "tree")
    summary = succeeded(done)
    assert "an association tree of 5 lines" in done.stderr
    # accounts of shares 9 and 1: multifactor's fair share moves the slots towards 9:1
    assert summary["groups"]["alpha"]["achieved_share"] > 0.75
