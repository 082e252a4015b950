"""Service settings: defaults < `config/fairmatch.toml` (or `$FAIRMATCH_CONFIG`) < environment.

The composition root: each domain package defines its own section
(`fairmatch.<package>.settings`), and `Settings` puts them together with the
database and server sections. Every field is overridable by environment,
`FAIRMATCH_DATABASE_URL` for the database and `FAIRMATCH_<SECTION>__<NAME>`
for the rest, e.g. `FAIRMATCH_MATCHING__LOTTERY=dirac`; any other variable with
the prefix stops the start, unless the project reads it itself
(`fairmatch/settings_env.py`).
"""

from __future__ import annotations

import os
from datetime import timedelta
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from fairmatch.accounting.settings import AccountingSettings
from fairmatch.auth.settings import AuthSettings
from fairmatch.fields import Name
from fairmatch.jobs.settings import JobSettings
from fairmatch.limits.settings import SiteLimitSettings
from fairmatch.matching.settings import Lottery, MatchingSettings, ResolvedMatching
from fairmatch.priority.settings import GroupSettings, PrioritySettings
from fairmatch.sections import Section
from fairmatch.settings_env import UnknownVariableError, unknown_variables
from fairmatch.settings_errors import ConfigFileError, explain, read_toml
from fairmatch.taskqueues.settings import TaskQueueSettings

DEFAULT_CONFIG_FILE = Path("config/fairmatch.toml")
DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./fairmatch.db"


class DatabaseSettings(Section):
    prepared_statements: bool = Field(
        True,
        description="Let the driver prepare statements it runs often on the server (psycopg's "
        "prepare_threshold; PostgreSQL only). Set false behind a PgBouncer in transaction mode, "
        "where a statement prepared on one server connection is missing on the next.",
    )
    pool_size: int = Field(
        10,
        ge=1,
        le=1000,
        description="PostgreSQL connections each server process gives requests (plus 5 for its "
        "background work). Requests beyond it wait for one, in arrival order (at most 10 s, then "
        "503): connections opened and closed per burst would cost the database more than the wait.",
    )


class ServerSettings(Section):
    host: str = Field("127.0.0.1", description="Interface `fairmatch serve` binds to.")
    port: int = Field(8000, ge=1, le=65535, description="TCP port of the HTTP API.")
    workers: int = Field(1, ge=1, le=64, description="Server processes (one per core is right).")
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024, description="Largest request body; larger ones get 413.")
    max_json_depth: int = Field(32, ge=2, le=200, description="Deepest nesting of arrays/objects in a request body.")
    graceful_shutdown_seconds: float = Field(
        30, gt=0, description="On SIGTERM, how long in-flight requests may take to finish."
    )
    log_format: Literal["auto", "json", "text"] = Field(
        "auto",
        description="`text`: a plain line per message for a person (time, level, logger, message, then "
        "its fields as `name=value`); `json`: one JSON object per line for a log collector; `auto`: "
        "`text` when the log goes to a terminal, else `json`.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="`debug` also logs every match decision."
    )
    access_log: bool = Field(True, description="One line per HTTP request (route, status, duration).")
    metrics_dir: Path | None = Field(
        None,
        description="Directory the workers share for Prometheus metrics; emptied at start. "
        "Unset: a new temporary directory.",
    )
    metrics_cache_seconds: float = Field(
        5, ge=0, description="How long gauges read from the database are reused between scrapes."
    )


MAX_DAYS = 36500  # a century: anything beyond is a unit mistake
# the spans the overview's chart of achieved shares offers, by the name its `span` parameter takes
SHARE_CHART_SPANS = {
    "1h": timedelta(hours=1), "6h": timedelta(hours=6), "24h": timedelta(hours=24), "7d": timedelta(days=7),
}  # fmt: skip


class ConsoleSettings(Section):
    """`[console]`: the web pages under /ui (fairmatch/console)."""

    enabled: bool = Field(True, description="Serve the console under `/ui`.")
    refresh_seconds: float = Field(
        5, ge=0, le=300, description="How often an open page reads its figures again (0: never)."
    )
    page_size: int = Field(50, ge=10, le=500, description="Rows per page of the task-queue, job and pilot tables.")
    share_hours: float = Field(
        6,
        gt=0,
        le=24 * 14,
        description="How far back the overview's chart of achieved shares reaches when the page names no span "
        "(it offers 1 h, 6 h, 24 h and 7 d); running-job samples are kept as long as the longest of these.",
    )

    def samples_kept(self) -> timedelta:
        """How long the chart of shares needs running-job samples: its longest span."""
        return max(timedelta(hours=self.share_hours), *SHARE_CHART_SPANS.values())


class RetentionSettings(Section):
    enabled: bool = Field(True, description="Purge in the background every `interval_seconds`.")
    interval_seconds: float = Field(60, gt=0, description="How often the background purge runs.")
    batch_size: int = Field(
        200,
        ge=1,
        description="Rows deleted per transaction: each batch is one short transaction, so that "
        "a claim or a status report never waits long behind the purge.",
    )
    pause_factor: float = Field(
        1.0,
        ge=0,
        le=100,
        description="Between two batches the purge pauses this many times as long as the batch "
        "before took, so that claims and reports have the database in between: with 1 a purge is "
        "busy at most half its time, and takes twice as long. 0: no pause.",
    )
    done_days: float = Field(7, gt=0, le=MAX_DAYS, description="Days after `finished_at` a Done job is deleted.")
    failed_days: float = Field(14, gt=0, le=MAX_DAYS, description="Days after `finished_at` a Failed job is deleted.")
    killed_days: float = Field(7, gt=0, le=MAX_DAYS, description="Days after `finished_at` a Killed job is deleted.")
    handed_off_days: float = Field(
        7, gt=0, le=MAX_DAYS, description="Days after it was handed off (`finished_at`) a HandedOff job is deleted."
    )
    events_days: float | None = Field(
        None,
        gt=0,
        le=MAX_DAYS,
        description="Days after `finished_at` a finished job's events are deleted, the job staying "
        "until its own time. Unset: the events go with the job. Must be shorter than the four above.",
    )
    request_ids_hours: float = Field(
        24,
        gt=0,
        le=MAX_DAYS * 24,
        description="Hours a pilot's `request_id` replays its match; after that the same id is a new request.",
    )
    pilots_days: float = Field(
        14, gt=0, le=MAX_DAYS, description="Days after a pilot was last seen its record is deleted."
    )
    archive_dir: Path | None = Field(
        None,
        description="Directory every job is written to before it is deleted, as gzipped JSON Lines "
        "per UTC day of `finished_at` (`jobs-YYYY-MM-DD.jsonl.gz`). Unset: jobs are deleted unarchived.",
    )

    index_rebuild_ratio: float = Field(
        2.0,
        ge=0,
        description="After each background purge, an index at least this many times the size its "
        "entries need (estimated from PostgreSQL's statistics) is rebuilt with `REINDEX INDEX "
        "CONCURRENTLY`, which stops no claim or report: the indexes ordered by job id otherwise keep "
        "a page for each long-waiting job among the purged ones, and grow with every job ever "
        "submitted. 0: never rebuilt; otherwise above 1. SQLite has nothing to rebuild.",
    )
    index_rebuild_min_mb: float = Field(
        16,
        ge=0,
        description="An index is rebuilt only when it also wastes at least this many MiB over its "
        "need: a small index is not worth a rebuild.",
    )

    @model_validator(mode="after")
    def _events_go_before_their_jobs(self) -> RetentionSettings:
        shortest = min(self.done_days, self.failed_days, self.killed_days, self.handed_off_days)
        if self.events_days is not None and self.events_days >= shortest:
            raise ValueError(
                f"retention.events_days = {self.events_days:g} is not shorter than the {shortest:g} days "
                "a finished job is kept: unset it (events go with their job) or make it shorter"
            )
        return self

    @model_validator(mode="after")
    def _rebuilds_only_what_grew(self) -> RetentionSettings:
        if 0 < self.index_rebuild_ratio <= 1:
            raise ValueError(
                f"retention.index_rebuild_ratio = {self.index_rebuild_ratio:g} would rebuild indexes that "
                "have not grown: use a ratio above 1 (2 rebuilds an index twice its need), or 0 for never"
            )
        return self

    def days_of(self, status: str) -> float:
        """How many days a job finished with `status` (Done, Failed, Killed, HandedOff) is kept."""
        days = {"Done": self.done_days, "Failed": self.failed_days, "Killed": self.killed_days}
        return days.get(status, self.handed_off_days)


POLICY_LOTTERY = {"dirac": Lottery.exact, "rank": Lottery.highest, "multifactor": Lottery.highest}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FAIRMATCH_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        description="SQLAlchemy URL; `postgresql://…` and `sqlite:///…` are accepted and given their async drivers. "
        "Several PostgreSQL hosts, tried in order: `?host=h1:5432&host=h2:5432` or libpq's `h1:5432,h2:5432`, "
        "with `target_session_attrs=read-write` to reach the primary.",
    )
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    taskqueues: TaskQueueSettings = Field(default_factory=TaskQueueSettings)
    matching: MatchingSettings = Field(default_factory=MatchingSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    priority: PrioritySettings = Field(default_factory=PrioritySettings)
    accounting: AccountingSettings = Field(default_factory=AccountingSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)
    groups: dict[Name, GroupSettings] = Field(
        default_factory=dict,
        description="Groups created at start-up when not yet in the database (spaces around a name dropped).",
    )
    site_limits: dict[Name, SiteLimitSettings] = Field(
        default_factory=dict,
        description="Site limits created at start-up when not yet in the database (then edited over the API).",
    )

    @model_validator(mode="after")
    def _nothing_the_policy_ignores(self) -> Settings:
        """Refuse a matching setting that would defeat one of the policy's factors."""
        job_size = self.priority.multifactor.weights.job_size
        if self.priority.policy == "multifactor" and self.matching.prefer_longest_cpu and job_size > 0:
            raise ValueError(
                f"priority.multifactor.weights.job_size = {job_size:g} has no effect while "
                "matching.prefer_longest_cpu = true draws from the longest CPU bucket first: "
                "set one of them to 0 / false"
            )
        return self

    @cached_property
    def effective_matching(self) -> ResolvedMatching:
        """`matching` as the matcher reads it: the policy's own lottery unless one is set."""
        resolved: dict[str, Any] = {}
        if self.matching.lottery is None:
            resolved["lottery"] = POLICY_LOTTERY[self.priority.policy]
        return ResolvedMatching.model_validate(self.matching.model_dump() | resolved)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # a misspelt variable would be passed over: refused here, as a misspelt key in the file is
        config = settings_cls.model_config
        unknown = unknown_variables(settings_cls, os.environ, str(config["env_prefix"]),
                                    str(config["env_nested_delimiter"]))  # fmt: skip
        if unknown:
            raise UnknownVariableError("; ".join(unknown))
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = config_file_path()
        if config_file is not None:
            # read here, so that a file that is not TOML is named with its line and column
            sources.append(InitSettingsSource(settings_cls, init_kwargs=read_toml(config_file)))
        return tuple(sources)


class GivenSettings(Settings):
    """The settings from the arguments given alone: neither the environment nor a settings
    file leaks in (a simulation's scenario, the documentation's defaults)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def config_file_path() -> Path | None:
    """The TOML file to read: `$FAIRMATCH_CONFIG` (must exist) or `config/fairmatch.toml` if present."""
    named = os.environ.get("FAIRMATCH_CONFIG")
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigFileError(f"FAIRMATCH_CONFIG names {path}, which is not a file")
        return path
    return DEFAULT_CONFIG_FILE if DEFAULT_CONFIG_FILE.is_file() else None


def problems(exc: ValidationError) -> list[str]:
    """The settings' refusal, one line per problem, each named by the variable or the file's key
    that gave the value (`fairmatch/settings_errors.py`)."""
    config = Settings.model_config
    try:
        config_file = config_file_path()
        data = read_toml(config_file) if config_file is not None else {}
    except ConfigFileError:
        config_file, data = None, {}
    return explain(exc.errors(), Settings, os.environ, str(config["env_prefix"]),
                   str(config["env_nested_delimiter"]), config_file, data)  # fmt: skip


def load_settings(**overrides: Any) -> Settings:
    return Settings(**overrides)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
