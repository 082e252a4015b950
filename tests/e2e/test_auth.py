"""Tokens and roles over real HTTP (docs/how-to/tokens.md)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
import time

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from fairmatch.auth.settings import AuthSettings
from fairmatch.auth.tokens import Role, create_token
from tests.conftest import REPO, TOKEN_SECRET, TOKEN_SETTINGS, start_server
from tests.in_process import run_fairmatch
from tests.problems import assert_problem

SECRET = TOKEN_SECRET
HS256 = TOKEN_SETTINGS  # the session's token-mode server (tests/e2e/conftest.py) checks these
AUDIENCE, ISSUER = "fairmatch-test", "https://iam.example.org"


def rsa_pem_pair() -> tuple[bytes, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public


@pytest.fixture(scope="session")
def hs_server(token_server):
    return token_server


@pytest.fixture(scope="module")
def rs_keys(tmp_path_factory):
    directory = tmp_path_factory.mktemp("rsa")
    private, public = rsa_pem_pair()
    (directory / "private.pem").write_bytes(private)
    (directory / "public.pem").write_bytes(public)
    return directory


@pytest.fixture(scope="module")
def rs_server(database, tmp_path_factory, rs_keys):
    srv = start_server(
        database,
        tmp_path_factory.mktemp("rs"),
        AUTH__MODE="token",
        AUTH__ALGORITHM="RS256",
        AUTH__PUBLIC_KEY_FILE=str(rs_keys / "public.pem"),
        AUTH__AUDIENCE=AUDIENCE,
        AUTH__ISSUER=ISSUER,
    )
    yield srv
    srv.stop()


def token(role: Role | str = Role.admin, sub: str = "root", settings: AuthSettings = HS256, **claims) -> str:
    return create_token(settings, role=Role(role), sub=sub, ttl_seconds=3600, **claims)


class Api:
    """An HTTP client acting as one principal."""

    def __init__(self, server, bearer: str | None):
        headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
        self.http = httpx.Client(base_url=server.api, headers=headers, timeout=30, verify=False)

    def submit(self, **spec) -> httpx.Response:
        return self.http.post("/jobs", json={"jobs": [{"owner": "alice", "owner_group": "g1", **spec}]})

    def submit_id(self, **spec) -> int:
        r = self.submit(**spec)
        assert r.status_code == 201, r.text
        return r.json()["jobs"][0]["job_id"]

    def match(self, **resource) -> httpx.Response:
        return self.http.post("/match", json={"Site": "S1", "CPUTime": 10**6, **resource})

    def __getattr__(self, name):
        return getattr(self.http, name)


@pytest.fixture
def as_role(hs_server, clean):
    clients: list[Api] = []

    def make(role: str, sub: str = "someone", **claims) -> Api:
        api = Api(hs_server, token(role, sub, **claims))
        clients.append(api)
        return api

    yield make
    for api in clients:
        api.http.close()


# --- 401: who are you? -----------------------------------------------------------


def _b64json(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def _unsigned(claims: dict) -> str:
    return f"{_b64json({'alg': 'none', 'typ': 'JWT'})}.{_b64json(claims)}."


def _bad_tokens() -> dict[str, str | None]:
    now = int(time.time())
    valid = {"sub": "root", "role": "admin", "exp": now + 3600}
    return {
        "missing": None,
        "not-a-jwt": "abc.def",
        "garbage": "x" * 50,
        "forged-secret": jwt.encode(valid, "another secret of enough length....", algorithm="HS256"),
        "alg-none": _unsigned(valid),
        "expired": jwt.encode({**valid, "exp": now - 60}, SECRET, algorithm="HS256"),
        "no-exp": jwt.encode({"sub": "root", "role": "admin"}, SECRET, algorithm="HS256"),
        "no-role": jwt.encode({"sub": "root", "exp": now + 60}, SECRET, algorithm="HS256"),
        "unknown-role": jwt.encode({**valid, "role": "superuser"}, SECRET, algorithm="HS256"),
        "empty-sub": jwt.encode({**valid, "sub": ""}, SECRET, algorithm="HS256"),
        "groups-not-a-list": jwt.encode({**valid, "groups": {"g": 1}}, SECRET, algorithm="HS256"),
        "tampered": token()[:-4] + "AAAA",
    }


BAD_TOKENS = _bad_tokens()


@pytest.mark.parametrize("name", list(BAD_TOKENS))
def test_missing_malformed_forged_or_expired_tokens_are_401(hs_server, clean, name):
    api = Api(hs_server, BAD_TOKENS[name])
    for r in (api.get("/jobs"), api.match(), api.submit()):
        body = assert_problem(r, 401)
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert "Traceback" not in body["detail"]


def test_wrong_authorization_scheme_is_401(hs_server, clean):
    r = httpx.get(f"{hs_server.api}/jobs", headers={"Authorization": f"Basic {token()}"})
    assert_problem(r, 401)


def test_health_endpoints_need_no_token(hs_server):
    assert httpx.get(f"{hs_server.url}/healthz").status_code == 200
    assert httpx.get(f"{hs_server.url}/readyz").status_code == 200


def test_a_valid_token_is_accepted(hs_server, clean):
    assert Api(hs_server, token()).get("/jobs").status_code == 200


class TestRS256:
    def settings(self, keys, **overrides) -> AuthSettings:
        fields = dict(
            mode="token", algorithm="RS256", public_key_file=keys / "public.pem",
            private_key_file=keys / "private.pem", audience=AUDIENCE, issuer=ISSUER,
        )  # fmt: skip
        return AuthSettings(**{**fields, **overrides})

    def test_token_signed_with_the_private_key_is_accepted(self, rs_server, rs_keys, clean):
        api = Api(rs_server, token(settings=self.settings(rs_keys)))
        assert api.get("/jobs").status_code == 200

    @pytest.mark.parametrize("what", ["audience", "issuer"])
    def test_wrong_audience_or_issuer_is_401(self, rs_server, rs_keys, clean, what):
        wrong = self.settings(rs_keys, **{what: "someone-else"})
        assert_problem(Api(rs_server, token(settings=wrong)).get("/jobs"), 401)

    def test_missing_audience_is_401(self, rs_server, rs_keys, clean):
        private = (rs_keys / "private.pem").read_text()
        claims = {"sub": "root", "role": "admin", "exp": int(time.time()) + 60, "iss": ISSUER}
        assert_problem(Api(rs_server, jwt.encode(claims, private, algorithm="RS256")).get("/jobs"), 401)

    def test_another_key_pair_is_401(self, rs_server, clean):
        other_private, _ = rsa_pem_pair()
        claims = {"sub": "root", "role": "admin", "exp": int(time.time()) + 60, "aud": AUDIENCE, "iss": ISSUER}
        assert_problem(Api(rs_server, jwt.encode(claims, other_private, algorithm="RS256")).get("/jobs"), 401)

    def test_hs256_signed_with_the_public_key_is_401(self, rs_server, rs_keys, clean):
        """The algorithm-confusion attack: the public key used as an HMAC secret."""
        claims = {"sub": "root", "role": "admin", "exp": int(time.time()) + 60, "aud": AUDIENCE, "iss": ISSUER}
        public = (rs_keys / "public.pem").read_bytes()
        assert_problem(Api(rs_server, _hmac_token(claims, public)).get("/jobs"), 401)


def _hmac_token(claims: dict, key: bytes) -> str:
    """HS256 by hand: PyJWT rightly refuses a PEM key as an HMAC secret."""
    signing_input = f"{_b64json({'alg': 'HS256', 'typ': 'JWT'})}.{_b64json(claims)}"
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


def test_token_create_command_mints_a_working_token(hs_server, clean, tmp_path):
    config = tmp_path / "empty.toml"
    config.write_text("")
    env = {"PATH": "/usr/bin:/bin", "FAIRMATCH_CONFIG": str(config), "FAIRMATCH_AUTH__SECRET": SECRET}
    done = run_fairmatch("token", "create", "--role", "pilot", "--sub", "p9", "--site", "S1",
                         "--groups", "g1,g2", "--vo", "lhcb", "--ttl", "2h", env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    minted = out.strip().splitlines()[-1]
    claims = jwt.decode(minted, SECRET, algorithms=["HS256"])
    assert (claims["sub"], claims["role"], claims["site"], claims["vo"]) == ("p9", "pilot", "S1", "lhcb")
    assert sorted(claims["groups"]) == ["g1", "g2"]
    assert 7190 <= claims["exp"] - claims["iat"] <= 7200
    Api(hs_server, token()).submit_id(owner_group="g1", vo="lhcb")
    assert Api(hs_server, minted).match().status_code == 200


@pytest.mark.parametrize("mode", ["none", "token"])
def test_token_create_refuses_a_secret_shorter_than_32_bytes_in_every_mode(tmp_path, mode):
    """Mode `none` does not check tokens, but a token signed now is used later under mode
    `token`: a weak key is refused when signing too, with the rule's own words."""
    config = tmp_path / "empty.toml"
    config.write_text("")
    env = {"PATH": "/usr/bin:/bin", "FAIRMATCH_CONFIG": str(config), "FAIRMATCH_AUTH__MODE": mode,
           "FAIRMATCH_AUTH__SECRET": "short secret, 25 bytes..."}  # fmt: skip
    result = run_fairmatch("token", "create", "--role", "pilot", "--sub", "p9", env=env, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert "at least 32 bytes" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


# --- 403 and 404: what may you do? -------------------------------------------------


def test_admin_may_do_everything(as_role):
    admin = as_role("admin")
    job = admin.submit_id(owner="bob", priority_class=7)
    assert admin.get(f"/jobs/{job}").status_code == 200
    assert admin.get("/taskqueues").json()["task_queues"]
    assert admin.post("/taskqueues/matching", json={"Site": "S1", "CPUTime": 10**6}).status_code == 200
    assert admin.match().json()["job_id"] == job
    assert admin.post(f"/jobs/{job}/status", json={"status": "Running"}).status_code == 200
    assert admin.delete(f"/jobs/{job}").status_code == 200


def test_operator_sees_all_jobs_sets_any_class_and_kills_but_does_not_match(as_role):
    operator = as_role("operator", "op")
    job = operator.submit_id(owner="carol", owner_group="g9", priority_class=1024)
    assert len(operator.get("/jobs").json()["jobs"]) == 1
    assert operator.get(f"/jobs/{job}").status_code == 200
    assert operator.get("/taskqueues").json()["task_queues"][0]["priority_class"] == 1024
    assert operator.post("/taskqueues/matching", json={"Site": "S1", "CPUTime": 10**6}).status_code == 200
    assert_problem(operator.match(), 403)
    assert operator.delete(f"/jobs/{job}").json()["status"] == "Killed"


class TestUser:
    @pytest.fixture
    def alice(self, as_role):
        return as_role("user", "alice", groups=["g1", "g2"])

    @pytest.fixture
    def bobs_job(self, as_role):
        return as_role("admin").submit_id(owner="bob", owner_group="g1")

    def test_submits_own_jobs_in_own_groups(self, alice):
        assert alice.submit(owner="alice", owner_group="g2").status_code == 201

    @pytest.mark.parametrize(
        "spec",
        [{"owner": "bob"}, {"owner_group": "g3"}, {"priority_class": 1}],
        ids=["other-owner", "other-group", "raised-class"],
    )
    def test_may_not_submit_for_others_or_raise_the_class(self, alice, spec, clean):
        assert_problem(alice.submit(**spec), 403)
        with clean.engine().connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM jobs").scalar() == 0

    def test_may_lower_the_priority_class(self, alice):
        assert alice.submit(priority_class=-100).status_code == 201

    def test_a_batch_with_one_forbidden_job_stores_nothing(self, alice, clean):
        r = alice.http.post("/jobs", json={"jobs": [{"owner": "alice", "owner_group": "g1"}] * 3
                                           + [{"owner": "bob", "owner_group": "g1"}]})  # fmt: skip
        assert "jobs[3]" in assert_problem(r, 403)["detail"]
        with clean.engine().connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM jobs").scalar() == 0

    def test_token_vo_is_the_default_and_the_only_vo(self, as_role):
        carol = as_role("user", "carol", groups=["g1"], vo="lhcb")
        job = carol.submit_id(owner="carol")
        assert carol.get(f"/jobs/{job}").json()["vo"] == "lhcb"
        assert_problem(carol.submit(owner="carol", vo="atlas"), 403)

    def test_sees_only_own_jobs_others_are_404(self, alice, bobs_job):
        mine = alice.submit_id()
        assert [j["job_id"] for j in alice.get("/jobs").json()["jobs"]] == [mine]
        assert alice.get("/jobs", params={"owner": "bob"}).json()["jobs"] == []
        assert alice.get(f"/jobs/{mine}").status_code == 200
        assert_problem(alice.get(f"/jobs/{bobs_job}"), 404)
        assert_problem(alice.delete(f"/jobs/{bobs_job}"), 404)

    def test_kills_own_jobs(self, alice):
        mine = alice.submit_id()
        assert alice.delete(f"/jobs/{mine}").json()["status"] == "Killed"

    def test_own_job_in_a_group_no_longer_held_is_invisible(self, as_role):
        job = as_role("admin").submit_id(owner="alice", owner_group="g7")
        assert_problem(as_role("user", "alice", groups=["g1"]).get(f"/jobs/{job}"), 404)

    def test_may_not_match_explain_or_report_status(self, alice):
        mine = alice.submit_id()
        assert_problem(alice.match(), 403)
        assert_problem(alice.post("/taskqueues/matching", json={"Site": "S1", "CPUTime": 1}), 403)
        assert_problem(alice.post(f"/jobs/{mine}/status", json={"status": "Running"}), 403)

    def test_sees_only_the_task_queues_of_own_jobs(self, alice, bobs_job):
        mine = alice.submit_id(sites=["S7"])
        tqs = alice.get("/taskqueues").json()["task_queues"]
        assert [tq["sites"] for tq in tqs] == [["S7"]]
        bobs_tq = as_admin_get_tq(alice, bobs_job)
        assert_problem(alice.get(f"/taskqueues/{bobs_tq}"), 404)
        assert alice.get(f"/jobs/{mine}").json()["task_queue_id"] == tqs[0]["task_queue_id"]


def as_admin_get_tq(api: Api, job_id: int) -> int:
    admin = httpx.Client(base_url=str(api.http.base_url), headers={"Authorization": f"Bearer {token()}"})
    return admin.get(f"/jobs/{job_id}").json()["task_queue_id"]


class TestPilot:
    @pytest.fixture
    def admin(self, as_role):
        return as_role("admin")

    def test_matches_at_its_site_only(self, as_role, admin):
        admin.submit_id()
        pilot = as_role("pilot", "p1", site="S1")
        assert_problem(pilot.match(Site="S2"), 403)
        assert_problem(pilot.match(Site="any"), 422)  # no claim names site `any`
        assert_problem(pilot.post("/taskqueues/matching", json={"Site": "S2", "CPUTime": 1}), 403)
        assert pilot.post("/taskqueues/matching", json={"Site": "S1", "CPUTime": 10**6}).status_code == 200
        assert pilot.match(Site="S1").status_code == 200

    def test_reports_status_of_its_own_jobs_only(self, as_role, admin):
        first, second = admin.submit_id(), admin.submit_id()
        p1, p2 = as_role("pilot", "p1"), as_role("pilot", "p2")
        got1, got2 = p1.match().json()["job_id"], p2.match().json()["job_id"]
        assert {got1, got2} == {first, second}
        assert p1.post(f"/jobs/{got1}/status", json={"status": "Running"}).status_code == 200
        assert_problem(p1.post(f"/jobs/{got2}/status", json={"status": "Running"}), 404)
        assert p1.get(f"/jobs/{got1}").status_code == 200
        assert_problem(p1.get(f"/jobs/{got2}"), 404)
        assert [j["job_id"] for j in p1.get("/jobs").json()["jobs"]] == [got1]

    def test_may_not_submit_kill_or_list_task_queues(self, as_role, admin):
        job = admin.submit_id()
        pilot = as_role("pilot", "p1")
        assert pilot.match().json()["job_id"] == job
        assert_problem(pilot.submit(), 403)
        assert_problem(pilot.delete(f"/jobs/{job}"), 403)
        assert_problem(pilot.get("/taskqueues"), 403)

    def test_groups_claim_makes_a_private_pilot(self, as_role, admin):
        other = admin.submit_id(owner="bob", owner_group="g2", priority_class=5)
        own = admin.submit_id(owner="alice", owner_group="g1")
        private = as_role("pilot", "p1", groups=["g1"])
        assert_problem(private.match(OwnerGroup="g2"), 403)
        assert private.match().json()["job_id"] == own
        assert private.match().status_code == 204
        assert as_role("pilot", "p2").match().json()["job_id"] == other

    def test_vo_claim_restricts_to_its_vo(self, as_role, admin):
        admin.submit_id(vo="atlas")
        lhcb_job = admin.submit_id(vo="lhcb")
        pilot = as_role("pilot", "p1", vo="lhcb")
        assert_problem(pilot.match(VirtualOrganization="atlas"), 403)
        assert pilot.match().json()["job_id"] == lhcb_job
        assert pilot.match().status_code == 204

    def test_request_ids_belong_to_their_pilot(self, as_role, admin):
        admin.submit_id(), admin.submit_id()
        p1, p2 = as_role("pilot", "p1"), as_role("pilot", "p2")
        first = p1.match(request_id="r-1").json()["job_id"]
        assert p1.match(request_id="r-1").json()["job_id"] == first
        other = p2.match(request_id="r-1").json()["job_id"]
        assert other != first
        assert p2.get(f"/jobs/{first}").status_code == 404


def test_serve_refuses_a_public_interface_without_auth(tmp_path):
    config = tmp_path / "empty.toml"
    config.write_text("")
    env = {"PATH": "/usr/bin:/bin", "FAIRMATCH_CONFIG": str(config),
           "FAIRMATCH_DATABASE_URL": f"sqlite:///{tmp_path}/x.db"}  # fmt: skip
    result = subprocess.run(
        [str(REPO / ".venv/bin/fairmatch"), "serve", "--host", "0.0.0.0"],
        capture_output=True, text=True, env=env, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2
    assert "refusing to listen on 0.0.0.0" in result.stderr
    assert "Traceback" not in result.stderr
