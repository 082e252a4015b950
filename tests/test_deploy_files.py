"""Static checks of the deployment files: the compose topology, the Dockerfile,
Prometheus' scrape configuration and Grafana's provisioning and dashboard.

No Docker engine is needed: the files are parsed and cross-checked against
each other and against the repository, and every PromQL expression of the
dashboard is parsed and its metric names compared with the metrics contract.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
from functools import cache
from pathlib import Path

import promql_parser
import pytest
import yaml

from tests.unit.test_metric_names import exposed as exposed_families

REPO = Path(__file__).resolve().parent.parent
COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
PROMETHEUS = REPO / "config/prometheus/prometheus.yml"
LOADBALANCER = REPO / "config/loadbalancer/nginx.conf"
GRAFANA = REPO / "config/grafana"
DATASOURCES = GRAFANA / "provisioning/datasources/prometheus.yml"
PROVIDERS = GRAFANA / "provisioning/dashboards/fairmatch.yml"
DASHBOARD = GRAFANA / "dashboards/fairmatch.json"
DASHBOARD_UID = "fairmatch-overview"

MATCHERS = ("matcher-1", "matcher-2")
SERVICES = {"postgres", "migrate", *MATCHERS, "loadbalancer", "prometheus", "grafana"}

# The service's metrics contract: family name -> Prometheus type.
CONTRACT = {
    "fairmatch_match_requests": "counter",
    "fairmatch_claim_conflicts": "counter",
    "fairmatch_claim_batch_size": "histogram",
    "fairmatch_submitted_jobs": "counter",
    "fairmatch_site_limit_exclusions": "counter",
    "fairmatch_http_requests": "counter",
    "fairmatch_match_duration_seconds": "histogram",
    "fairmatch_priority_recompute_seconds": "histogram",
    "fairmatch_http_request_duration_seconds": "histogram",
    "fairmatch_group_jobs": "gauge",
    "fairmatch_group_target_share": "gauge",
    "fairmatch_task_queues": "gauge",
    "fairmatch_jobs": "gauge",
    "fairmatch_share_correction": "gauge",
}
# series Prometheus makes itself for every target
PROMETHEUS_OWN = {"up"}


def sample_names(family: str, kind: str) -> set[str]:
    """The series names a family of this type shows in the text format."""
    return {
        "counter": {f"{family}_total"},
        "histogram": {f"{family}_bucket", f"{family}_sum", f"{family}_count"},
        "summary": {family, f"{family}_sum", f"{family}_count"},
    }.get(kind, {family})


CONTRACT_SERIES = set().union(*(sample_names(f, k) for f, k in CONTRACT.items()))


# --- helpers ------------------------------------------------------------------


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@cache
def compose() -> dict:
    return load_yaml(COMPOSE)


def service(name: str) -> dict:
    return compose()["services"][name]


def bind_mounts(svc: dict) -> dict[str, str]:
    """Container path -> repository path of a service's `./…` bind mounts."""
    mounts = {}
    for volume in svc.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("./"):
            mounts[target] = source[2:]
    return mounts


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_exprs(dash: dict) -> list[str]:
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    """Every metric named by a vector or range selector (ValueError if `expr` is not PromQL)."""
    names: set[str] = set()

    def visit(node) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            names.update(m.value for m in node.matchers.matchers if m.name == "__name__")

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def unknown_metrics(exprs: list[str], exported: set[str]) -> set[str]:
    """The names the expressions use that are neither exported nor Prometheus' own."""
    used = set().union(*(metric_names(e) for e in exprs))
    return used - exported - PROMETHEUS_OWN


def dashboard_metric_names() -> set[str]:
    return set().union(*(metric_names(e) for e in dashboard_exprs(dashboard()))) - PROMETHEUS_OWN


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    lines = [ln for ln in DOCKERFILE.read_text().splitlines() if not ln.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    return [
        (word.upper(), rest.strip())
        for word, _, rest in (ln.strip().partition(" ") for ln in text.splitlines() if ln.strip())
    ]


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = Path(path).parts
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if any(fnmatch.fnmatchcase(c, pattern) for c in candidates):
            excluded = not negate
    return excluded


def dockerignore_patterns() -> list[str]:
    lines = (ln.strip() for ln in DOCKERIGNORE.read_text().splitlines())
    return [ln for ln in lines if ln and not ln.startswith("#")]


# --- docker-compose.yml ------------------------------------------------------


def test_compose_has_the_services_and_no_version_key():
    assert "version" not in compose()  # the compose spec dropped it
    assert set(compose()["services"]) == SERVICES


def test_postgres_is_checked_with_pg_isready_and_keeps_its_data_in_a_volume():
    pg = service("postgres")
    assert pg["image"].split(":")[1].startswith("15")
    assert "pg_isready" in pg["healthcheck"]["test"]
    volumes = [v.split(":")[0] for v in pg["volumes"]]
    assert any(v in compose()["volumes"] for v in volumes)


def test_migrate_runs_once_after_postgres_is_healthy():
    migrate = service("migrate")
    assert migrate["command"] == ["db", "upgrade"]
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert migrate.get("restart", "no") == "no"


@pytest.mark.parametrize("name", MATCHERS)
def test_matchers_start_after_the_migration_with_two_workers(name):
    matcher, migrate = service(name), service("migrate")
    assert (matcher["image"], matcher["build"]) == (migrate["image"], migrate["build"])
    assert (REPO / matcher["build"] / "Dockerfile").is_file()
    assert matcher["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    command = matcher["command"]
    assert command[0] == "serve"
    assert command[command.index("--workers") + 1] == "2"
    assert command[command.index("--port") + 1] == "8000"
    assert command[command.index("--host") + 1] == "0.0.0.0"
    check = matcher["healthcheck"]
    assert not check.get("disable") and "/readyz" in " ".join(check["test"])


@pytest.mark.parametrize("name", MATCHERS)
def test_matchers_use_postgres_and_an_auth_mode_that_permits_0_0_0_0(name):
    env = service(name)["environment"]
    assert "@postgres:5432/" in env["FAIRMATCH_DATABASE_URL"]
    if env.get("FAIRMATCH_AUTH__MODE") == "token":
        assert env["FAIRMATCH_AUTH__SECRET"]
    else:
        assert str(env["FAIRMATCH_AUTH__ALLOW_REMOTE_WITHOUT_AUTH"]).lower() == "true"


def test_load_balancer_waits_for_both_matchers_and_publishes_8000():
    lb = service("loadbalancer")
    assert {m: lb["depends_on"][m]["condition"] for m in MATCHERS} == dict.fromkeys(MATCHERS, "service_healthy")
    assert any(str(p).endswith("8000:8000") for p in lb["ports"])
    assert "config/loadbalancer/nginx.conf" in bind_mounts(lb).values()


def test_load_balancer_config_names_both_matchers():
    text = LOADBALANCER.read_text()
    name, body = re.search(r"upstream\s+(\S+)\s*\{(.*?)\}", text, re.S).groups()
    assert set(re.findall(r"^\s*server\s+([^\s;]+)", body, re.M)) == {f"{m}:8000" for m in MATCHERS}
    assert "least_conn" not in body and "ip_hash" not in body  # round robin
    assert f"proxy_pass http://{name};" in text


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_bind_mount_exists_in_the_repository(name):
    for source in bind_mounts(service(name)).values():
        assert (REPO / source).exists(), f"{name} mounts {source}, which is missing"


def test_prometheus_reads_the_repository_config():
    prom = service("prometheus")
    config_flag = next(a for a in prom["command"] if a.startswith("--config.file="))
    assert bind_mounts(prom)[config_flag.partition("=")[2]] == "config/prometheus/prometheus.yml"


def test_grafana_mounts_its_provisioning_where_the_provider_looks():
    mounts = bind_mounts(service("grafana"))
    assert mounts["/etc/grafana/provisioning/datasources"] == str(DATASOURCES.parent.relative_to(REPO))
    assert mounts["/etc/grafana/provisioning/dashboards"] == str(PROVIDERS.parent.relative_to(REPO))
    (provider,) = load_yaml(PROVIDERS)["providers"]
    assert provider["type"] == "file"
    assert mounts[provider["options"]["path"]] == str(DASHBOARD.parent.relative_to(REPO))
    home = service("grafana")["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/{DASHBOARD.name}"
    assert any(str(p).endswith(":3000") for p in service("grafana")["ports"])


# --- Dockerfile ----------------------------------------------------------------


def stages() -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for instruction in dockerfile_instructions():
        if instruction[0] == "FROM":
            found.append([])
        if found:
            found[-1].append(instruction)
    return found


def base_image(from_args: str) -> str:
    image = from_args.split()[0]
    defaults = dict(
        args.partition("=")[::2] for name, args in dockerfile_instructions() if name == "ARG" and "=" in args
    )
    return re.sub(r"\$\{?(\w+)\}?", lambda m: defaults[m.group(1)], image)


def test_dockerfile_is_multi_stage_with_a_slim_python_final_stage():
    *builders, final = stages()
    assert builders, "a single-stage image would ship the build tools"
    assert re.fullmatch(r"python:3\.1[1-9]-slim", base_image(final[0][1]))
    assert any(name == "RUN" and "pip" in args for name, args in builders[0])
    assert any(name == "COPY" and args.startswith("--from=") for name, args in final)


def test_final_stage_runs_as_a_user_with_a_healthcheck_and_the_cli():
    final = dict(stages()[-1])  # the last of each instruction
    assert final["USER"] not in {"root", "0"}
    assert "/healthz" in final["HEALTHCHECK"]
    assert final["EXPOSE"] == "8000"
    assert json.loads(final["ENTRYPOINT"]) == ["fairmatch"]
    assert json.loads(final["CMD"])[:3] == ["serve", "--host", "0.0.0.0"]


def copied_sources() -> list[str]:
    sources = []
    for name, args in dockerfile_instructions():
        if name == "COPY" and not args.startswith("--from="):
            sources += shlex.split(args)[:-1]
    return sources


def test_dockerfile_copies_only_what_exists_and_is_in_the_build_context():
    patterns = dockerignore_patterns()
    for source in copied_sources():
        assert (REPO / source).exists(), source
        assert not dockerignored(source, patterns), f"{source} is excluded by .dockerignore"
    for source in (".venv", "tests", ".git", "fairmatch.db", "fairmatch/__pycache__"):
        assert dockerignored(source, patterns), f"{source} would be sent to the build"


def test_the_dockerignore_check_catches_an_excluded_source():
    assert dockerignored("fairmatch/main.py", ["*", "!pyproject.toml"])
    assert not dockerignored("fairmatch/main.py", ["*", "!fairmatch"])


# --- Prometheus ------------------------------------------------------------------


def test_prometheus_scrapes_each_matcher_at_metrics():
    (job,) = load_yaml(PROMETHEUS)["scrape_configs"]
    assert job["job_name"] == "fairmatch"
    assert job.get("metrics_path", "/metrics") == "/metrics"
    targets = {t for group in job["static_configs"] for t in group["targets"]}
    assert targets == {f"{m}:8000" for m in MATCHERS}


# --- Grafana -----------------------------------------------------------------------


def provisioned_datasource() -> dict:
    (source,) = load_yaml(DATASOURCES)["datasources"]
    return source


def test_the_datasource_points_at_the_prometheus_service():
    source = provisioned_datasource()
    assert source["type"] == "prometheus" and source["uid"]
    assert source["url"] == "http://prometheus:9090"
    assert "prometheus" in compose()["services"]


def test_dashboard_has_its_fixed_uid_and_unique_panel_ids():
    dash = dashboard()
    assert dash["uid"] == DASHBOARD_UID
    assert dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


def test_every_query_uses_the_provisioned_datasource():
    uid = provisioned_datasource()["uid"]
    queried = [p for p in dashboard()["panels"] if p["type"] != "row"]
    assert queried
    for panel in queried:
        assert panel["datasource"] == {"type": "prometheus", "uid": uid}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target.get("datasource", panel["datasource"])["uid"] == uid, panel["title"]


@pytest.mark.parametrize("expr", dashboard_exprs(dashboard()))
def test_every_expression_parses_and_names_contract_metrics(expr):
    assert metric_names(expr), "an expression without a metric plots nothing"
    assert not unknown_metrics([expr], CONTRACT_SERIES)


def test_the_service_exposes_the_contract():
    exposed = exposed_families()
    assert {f"{family}_total" if kind == "counter" else family: kind for family, kind in CONTRACT.items()}.items() <= (
        exposed.items()
    )


def test_the_dashboard_covers_the_contract():
    families = {f for f, k in CONTRACT.items() if sample_names(f, k) & dashboard_metric_names()}
    assert families == set(CONTRACT)


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("sum(rate(fairmatch_match_requests_total[1m])", "syntax"),  # unclosed parenthesis
        ("rate(fairmatch_match_requests_total[1x])", "syntax"),  # no such duration unit
        ("sum(rate(fairmatch_match_request_total[1m]))", "fairmatch_match_request_total"),
        ("histogram_quantile(0.9, rate(fairmatch_match_duration_seconds[5m]))", "fairmatch_match_duration_seconds"),
        ('rate({__name__="fairmatch_claims_total"}[5m])', "fairmatch_claims_total"),
    ],
)
def test_the_expression_check_catches_bad_queries(expr, problem):
    if problem == "syntax":
        with pytest.raises(ValueError):
            metric_names(expr)
    else:
        assert unknown_metrics([expr], CONTRACT_SERIES) == {problem}


def _planned_installs(target: str, tmp_path: Path) -> list[str]:
    """The pip installs `make TARGET` would run on a fresh machine (make -n runs nothing)."""
    planned = subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
    return [line.split("install", 1)[1].split()[-1] for line in planned.splitlines() if "pip install" in line
            and "--upgrade pip" not in line]  # fmt: skip


def test_make_run_installs_only_what_serving_needs(tmp_path):
    assert _planned_installs("run", tmp_path) == ["."]


def test_make_test_adds_the_dev_extras(tmp_path):
    assert _planned_installs("test", tmp_path) == [".", '".[dev]"']
