"""Settings: TOML file, environment overrides, validation."""

import re
from datetime import timedelta

import pytest
from pydantic import ValidationError

from fairmatch.matching.settings import Lottery
from fairmatch.settings import ConfigFileError, GivenSettings, Settings, problems
from fairmatch.settings_env import (
    NON_SETTING_PREFIXES,
    NON_SETTING_VARIABLES,
    UnknownVariableError,
    closest_name,
    unknown_variables,
)
from fairmatch.taskqueues.settings import DIRAC_CPU_BUCKETS


@pytest.fixture
def no_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no config/fairmatch.toml here
    for var in (
        "FAIRMATCH_CONFIG",
        "FAIRMATCH_DATABASE_URL",
        "FAIRMATCH_MATCHING__LOTTERY",
        "FAIRMATCH_PRIORITY__POLICY",
    ):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def test_defaults(no_config):
    s = Settings()
    assert s.database_url == "sqlite+aiosqlite:///./fairmatch.db"
    assert s.taskqueues.cpu_buckets == DIRAC_CPU_BUCKETS
    assert s.matching.lottery is None  # the policy's own, as matching reads it:
    assert s.effective_matching.lottery is Lottery.exact
    assert s.matching.jobs_per_try == 10
    assert s.jobs.matched_lease_seconds == 7200


def test_the_matching_defaults_are_dirac_9s(no_config):
    """CPU time is a condition, not an order, and a field the pilot leaves out is no condition:
    under every policy, unless a deployment sets the 2009 order or the strict rule back."""
    for policy in ("dirac", "rank", "multifactor"):
        matching = Settings(priority={"policy": policy}).effective_matching
        assert (matching.prefer_longest_cpu, matching.unstated_fields) == (False, "dirac")
    kept = Settings(matching={"prefer_longest_cpu": True, "unstated_fields": "strict"}).effective_matching
    assert (kept.prefer_longest_cpu, kept.unstated_fields) == (True, "strict")


def test_toml_file_then_environment(no_config, monkeypatch):
    config = no_config / "f.toml"
    config.write_text(
        'database_url = "postgresql://db/x"\n[matching]\nlottery = "highest"\njobs_per_try = 3\n'
        "[taskqueues]\ncpu_buckets = [500, 5000, 50000, 300000]\n"
    )
    monkeypatch.setenv("FAIRMATCH_CONFIG", str(config))
    s = Settings()
    assert (s.database_url, s.matching.lottery, s.matching.jobs_per_try) == ("postgresql://db/x", "highest", 3)
    assert s.taskqueues.cpu_buckets == [500, 5000, 50000, 300000]
    monkeypatch.setenv("FAIRMATCH_MATCHING__LOTTERY", "dirac")
    monkeypatch.setenv("FAIRMATCH_DATABASE_URL", "sqlite:///other.db")
    s = Settings()
    assert s.matching.lottery is Lottery.dirac
    assert s.matching.jobs_per_try == 3
    assert s.database_url == "sqlite:///other.db"


def test_default_config_file_is_read_when_present(no_config):
    (no_config / "config").mkdir()
    (no_config / "config" / "fairmatch.toml").write_text("[matching]\nprefer_longest_cpu = true\n")
    assert Settings().matching.prefer_longest_cpu is True


def test_named_config_file_must_exist(no_config, monkeypatch):
    monkeypatch.setenv("FAIRMATCH_CONFIG", str(no_config / "missing.toml"))
    with pytest.raises(ConfigFileError):
        Settings()


@pytest.mark.parametrize("buckets", [[], [100, 100], [300, 200], [0, 10], [-5, 10]])
def test_non_increasing_buckets_are_a_configuration_error(no_config, monkeypatch, buckets):
    monkeypatch.setenv("FAIRMATCH_TASKQUEUES__CPU_BUCKETS", str(buckets))
    with pytest.raises(ValidationError, match="cpu_buckets"):
        Settings()


def test_unknown_lottery_and_unknown_keys_are_errors(no_config, monkeypatch):
    monkeypatch.setenv("FAIRMATCH_MATCHING__LOTTERY", "random")
    with pytest.raises(ValidationError):
        Settings()
    monkeypatch.delenv("FAIRMATCH_MATCHING__LOTTERY")
    (no_config / "f.toml").write_text("[matching]\nlotery = 'exact'\n")
    monkeypatch.setenv("FAIRMATCH_CONFIG", str(no_config / "f.toml"))
    with pytest.raises(ValidationError):
        Settings()


def _unknown(**environ: str) -> list[str]:
    return unknown_variables(Settings, environ, "FAIRMATCH_", "__")


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("FAIRMATCH_MATCHING__LOTTERIE", "FAIRMATCH_MATCHING__LOTTERY"),
        ("FAIRMATCH_LOTTERIE", "FAIRMATCH_MATCHING__LOTTERY"),  # the section left out
        ("fairmatch_server__prot", "FAIRMATCH_SERVER__PORT"),  # read in any case, as pydantic-settings reads them
        ("FAIRMATCH_SERVER__PORT__NUMBER", "FAIRMATCH_SERVER__PORT"),  # a plain setting has no parts
        ("FAIRMATCH_GROUPS__LHCB_USER__JOB_SHARES", "FAIRMATCH_GROUPS__LHCB_USER__JOB_SHARE"),
        ("FAIRMATCH_CONFG", "FAIRMATCH_CONFIG"),
        ("FAIRMATCH_WORKLOAD_DIR", "FAIRMATCH_WORKLOADS_DIR"),
        ("FAIRMATCH_QWXZ", None),
        ("FAIRMATCH_", None),
    ],
)
def test_a_variable_that_names_no_setting_is_named_with_what_it_probably_meant(name, meant):
    suggestion = f" (did you mean {meant}?)" if meant else ""
    assert _unknown(**{name: "1"}) == [f"{name} names no setting{suggestion}"]


@pytest.mark.parametrize(
    "name",
    [
        "FAIRMATCH_DATABASE_URL",
        "FAIRMATCH_MATCHING__LOTTERY",
        "fairmatch_matching__lottery",
        "FAIRMATCH_MATCHING",  # a whole section as JSON
        "FAIRMATCH_PRIORITY__RANK__WINDOW_DAYS",
        "FAIRMATCH_GROUPS__LHCB_USER",
        "FAIRMATCH_GROUPS__LHCB_USER__JOB_SHARE",
        "FAIRMATCH_PRIORITY__CORRECTIONS__INSTANCES__MAIN__SLICES__LAST__TIMESPAN",  # DIRAC's alias
        *NON_SETTING_VARIABLES,
        *(f"{prefix}ANYTHING" for prefix in NON_SETTING_PREFIXES),
        "PATH",
    ],
)
def test_settings_and_the_projects_own_variables_pass(name):
    assert _unknown(**{name: "1"}) == []


def test_settings_stop_at_an_unknown_variable_before_reading_anything(no_config, monkeypatch):
    monkeypatch.setenv("FAIRMATCH_MATCHING__LOTTERIE", "dirac")
    monkeypatch.setenv("FAIRMATCH_SERVER__PROT", "80")
    with pytest.raises(UnknownVariableError) as refused:
        Settings()
    assert str(refused.value) == (
        "FAIRMATCH_MATCHING__LOTTERIE names no setting (did you mean FAIRMATCH_MATCHING__LOTTERY?);"
        " FAIRMATCH_SERVER__PROT names no setting (did you mean FAIRMATCH_SERVER__PORT?)"
    )
    # settings built from their arguments alone read no environment, so they do not check it
    assert GivenSettings().matching.lottery is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[server]\nport = 80 80\n", "f.toml:2:11: not TOML: expected newline or end of document after a statement"),
        ('[server]\nhost = "a\n', "f.toml:2:10: not TOML: illegal character '\\n'"),
        ("[matching\n", "f.toml:1:10: not TOML: expected ']' at the end of a table declaration"),
        ("a = [1,\n", "f.toml: not TOML at its end: invalid value"),
    ],
)
def test_a_file_that_is_not_toml_is_named_with_its_line_and_column(no_config, monkeypatch, text, message):
    (no_config / "f.toml").write_text(text)
    monkeypatch.setenv("FAIRMATCH_CONFIG", "f.toml")
    with pytest.raises(ConfigFileError) as refused:
        Settings()
    assert str(refused.value) == message


def refusal(**environ: str) -> list[str]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environ.items():
            patch.setenv(name, value)
        with pytest.raises(ValidationError) as refused:
            Settings()
        return problems(refused.value)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[server]\nprot = 8080\n", "f.toml: server.prot names no setting (did you mean server.port?)"),
        ("[sever]\nport = 8080\n", "f.toml: sever names no setting (did you mean server?)"),
        ("lotery = 'exact'\n", "f.toml: lotery names no setting (did you mean matching.lottery?)"),
        ("[groups.lhcb_user]\njob_shares = 3\n",
         "f.toml: groups.lhcb_user.job_shares names no setting (did you mean groups.lhcb_user.job_share?)"),
        ("[server]\nqwxz = 1\n", "f.toml: server.qwxz names no setting"),
        ("[server]\nworkers = 'two'\n",
         "f.toml: server.workers: Input should be a valid integer, unable to parse string as an integer"),
        ("[taskqueues]\ncpu_buckets = [100, 'x']\n",
         "f.toml: taskqueues.cpu_buckets[1]: Input should be a valid integer, unable to parse string as an integer"),
        ('server = "fast"\n', "f.toml: server: Input should be a valid dictionary or instance of ServerSettings"),
    ],
)  # fmt: skip
def test_the_file_is_named_with_the_key_at_fault_and_the_name_it_probably_meant(no_config, text, said):
    (no_config / "f.toml").write_text(text)
    assert refusal(FAIRMATCH_CONFIG="f.toml") == [said]


def test_a_value_is_named_by_the_variable_that_gave_it_over_the_file(no_config):
    (no_config / "f.toml").write_text("[server]\nworkers = 'two'\nport = 0\n")
    said = refusal(FAIRMATCH_CONFIG="f.toml", FAIRMATCH_SERVER__WORKERS="three", fairmatch_server__log_level="loud")
    assert said == [
        "f.toml: server.port: Input should be greater than or equal to 1",
        "FAIRMATCH_SERVER__WORKERS: Input should be a valid integer, unable to parse string as an integer",
        "fairmatch_server__log_level: Input should be 'debug', 'info', 'warning' or 'error'",
    ]
    # a section given whole as JSON: the variable, then where in its value
    assert refusal(FAIRMATCH_MATCHING='{"lottery": "random"}') == [
        "FAIRMATCH_MATCHING.lottery: Input should be 'exact', 'dirac' or 'highest'"
    ]
    assert refusal(FAIRMATCH_TASKQUEUES__CPU_BUCKETS='[100, "x"]') == [
        "FAIRMATCH_TASKQUEUES__CPU_BUCKETS[1]: Input should be a valid integer, unable to parse string as an integer"
    ]


def test_a_rule_over_several_settings_is_named_by_the_settings_not_the_file(no_config):
    """The file holds the section, not the one value at fault: the rule's own message names them."""
    (no_config / "f.toml").write_text("[retention]\nevents_days = 30\n")
    (said,) = refusal(FAIRMATCH_CONFIG="f.toml")
    assert said.startswith("retention: Value error, retention.events_days = 30 is not shorter than the 7 days")
    assert "f.toml" not in said


@pytest.mark.parametrize(
    ("parts", "meant"),
    [
        (["server", "prot"], "server.port"),
        (["lotterie"], "matching.lottery"),
        (["matchin"], "matching"),
        (["groups", "lhcb", "job_shar"], "groups.lhcb.job_share"),
        (["priority", "rank", "windows_days"], "priority.rank.window_days"),
        (["qwxz"], None),
    ],
)
def test_a_key_of_the_file_is_answered_by_the_rule_of_the_variables(parts, meant):
    assert closest_name(parts, Settings, "", ".", upper=False) == meant
    variable = closest_name([p.upper() for p in parts], Settings, "FAIRMATCH_", "__", upper=True)
    assert variable == (meant and "FAIRMATCH_" + "__".join(p.upper() for p in meant.split(".")))


@pytest.mark.parametrize(
    ("policy", "lottery"), [("dirac", Lottery.exact), ("rank", Lottery.highest), ("multifactor", Lottery.highest)]
)
def test_the_lottery_defaults_to_the_policys_own(no_config, monkeypatch, policy, lottery):
    monkeypatch.setenv("FAIRMATCH_PRIORITY__POLICY", policy)
    assert Settings().effective_matching.lottery is lottery
    monkeypatch.setenv("FAIRMATCH_MATCHING__LOTTERY", "dirac")
    assert Settings().effective_matching.lottery is Lottery.dirac  # an explicit choice wins


def test_prepared_statements_setting_from_file_and_environment(no_config, monkeypatch):
    from fairmatch.db.engine import normalise_url, postgresql_connect_args

    monkeypatch.delenv("FAIRMATCH_DATABASE__PREPARED_STATEMENTS", raising=False)
    assert Settings().database.prepared_statements is True
    (no_config / "f.toml").write_text('database_url = "postgresql://db/x"\n[database]\nprepared_statements = false\n')
    monkeypatch.setenv("FAIRMATCH_CONFIG", str(no_config / "f.toml"))
    assert Settings().database.prepared_statements is False
    # the section and FAIRMATCH_DATABASE_URL live side by side
    monkeypatch.setenv("FAIRMATCH_DATABASE__PREPARED_STATEMENTS", "true")
    monkeypatch.setenv("FAIRMATCH_DATABASE_URL", "postgresql://pgbouncer:6432/x")
    s = Settings()
    assert (s.database.prepared_statements, s.database_url) == (True, "postgresql://pgbouncer:6432/x")

    url = normalise_url(s.database_url)
    assert "prepare_threshold" not in postgresql_connect_args(url)  # psycopg's default: prepare after 5 runs
    assert postgresql_connect_args(url, prepared_statements=False)["prepare_threshold"] is None


def test_multifactor_takes_the_cpu_order_only_without_a_job_size_factor(no_config):
    """Under multifactor job size is a factor: narrowing to the longest bucket first would void it."""
    assert Settings(priority={"policy": "multifactor"}).effective_matching.prefer_longest_cpu is False
    without_job_size = {"policy": "multifactor", "multifactor": {"weights": {"job_size": 0}}}
    told = Settings(priority=without_job_size, matching={"prefer_longest_cpu": True})
    assert told.effective_matching.prefer_longest_cpu


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"priority": {"policy": "multifactor", "corrections_enabled": True}}, "priority.corrections_enabled"),
        (
            {"priority": {"policy": "multifactor"}, "matching": {"prefer_longest_cpu": True}},
            "priority.multifactor.weights.job_size",
        ),
        ({"priority": {"policy": "rank", "multifactor": {"favour": "large"}}}, "[priority.multifactor]"),
        ({"priority": {"policy": "multifactor", "rank": {"window_days": 3}}}, "[priority.rank]"),
    ],
)
def test_a_setting_the_policy_would_ignore_is_refused_by_name(no_config, changes, named):
    with pytest.raises(ValidationError, match=re.escape(named)):
        Settings(**changes)


def test_the_worked_example_of_the_readme_loads(no_config, monkeypatch):
    """examples/fair-share: its configuration, corrections file and jobs are valid as shipped."""
    import json
    from pathlib import Path

    from fairmatch.jobs.models import JobSpec
    from fairmatch.services.priorities import configured_corrections

    example = Path(__file__).resolve().parents[2] / "examples" / "fair-share"
    monkeypatch.chdir(example.parents[1])  # the file names the corrections from the repository root
    monkeypatch.setenv("FAIRMATCH_CONFIG", str(example / "fairmatch.toml"))
    settings = Settings()
    assert sorted(settings.groups) == ["lhcb_mc", "lhcb_prod", "lhcb_user"]
    (instance,) = configured_corrections(settings.priority).instances.values()
    assert instance.group is None and instance.slices["LastTwoMinutes"].time_span == 120
    jobs = [JobSpec(**job) for job in json.loads((example / "jobs.json").read_text())["jobs"]]
    assert len(jobs) == 180 and {job.cpu_time for job in jobs} == {43200}


def test_the_sections_stay_as_written(no_config):
    """The policy's matching defaults are resolved apart; no section is changed once loaded."""
    s = Settings(priority={"policy": "multifactor"})
    assert s.matching.lottery is None
    assert s.effective_matching.lottery is Lottery.highest
    with pytest.raises(ValidationError, match="frozen"):
        s.matching.prefer_longest_cpu = True
    with pytest.raises(ValidationError, match="frozen"):
        s.priority.policy = "rank"


def test_retention_from_the_environment_and_its_bounds(no_config, monkeypatch):
    monkeypatch.setenv("FAIRMATCH_RETENTION__DONE_DAYS", "0.001389")  # two minutes
    monkeypatch.setenv("FAIRMATCH_RETENTION__ARCHIVE_DIR", "/var/lib/fairmatch/archive")
    retention = Settings().retention
    assert (retention.done_days, retention.days_of("Failed"), str(retention.archive_dir)) == (
        0.001389, 14, "/var/lib/fairmatch/archive",
    )  # fmt: skip
    for name, value in [("BATCH_SIZE", "0"), ("FAILED_DAYS", "0"), ("REQUEST_IDS_HOURS", "-1"), ("PILOTS_DAYS", "1e9")]:
        monkeypatch.setenv(f"FAIRMATCH_RETENTION__{name}", value)
        with pytest.raises(ValidationError, match=name.lower()):
            Settings()
        monkeypatch.delenv(f"FAIRMATCH_RETENTION__{name}")


def test_events_kept_as_long_as_their_jobs_are_refused_by_name(no_config):
    assert Settings(retention={"events_days": 1, "done_days": 2}).retention.events_days == 1
    with pytest.raises(ValidationError, match=re.escape("retention.events_days = 7 is not shorter than the 2 days")):
        Settings(retention={"events_days": 7, "killed_days": 2})


def test_an_index_rebuild_ratio_that_would_rebuild_what_never_grew_is_refused(no_config):
    assert Settings().retention.index_rebuild_ratio == 2
    assert Settings(retention={"index_rebuild_ratio": 0}).retention.index_rebuild_ratio == 0  # never
    with pytest.raises(ValidationError, match=re.escape("retention.index_rebuild_ratio = 0.5 would rebuild")):
        Settings(retention={"index_rebuild_ratio": 0.5})
    with pytest.raises(ValidationError, match="index_rebuild_min_mb"):
        Settings(retention={"index_rebuild_min_mb": -1})


def test_folded_charges_are_kept_only_for_the_rank_window_that_reads_them(no_config):
    assert Settings().priority.charges_kept() == timedelta(0)  # dirac reads the totals only
    assert Settings(priority={"policy": "multifactor"}).priority.charges_kept() == timedelta(0)
    ranked = Settings(priority={"policy": "rank", "rank": {"window_days": 3}})
    assert ranked.priority.charges_kept() == timedelta(days=3)
