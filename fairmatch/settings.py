"""Service settings: defaults < `config/fairmatch.toml` (or `$FAIRMATCH_CONFIG`) < environment.

Every field is overridable by environment, `FAIRMATCH_DATABASE_URL` for the
database and `FAIRMATCH_<SECTION>__<NAME>` for the rest, e.g.
`FAIRMATCH_MATCHING__LOTTERY=dirac`.
"""

from __future__ import annotations

import itertools
import os
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

DEFAULT_CONFIG_FILE = Path("config/fairmatch.toml")
DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./fairmatch.db"

# DIRAC's current CPU-time segments (seconds).
DIRAC_CPU_BUCKETS = [
    360, 1800, 3600, 21600, 43200, 86400, 172800, 259200,
    345600, 518400, 691200, 864000, 1080000,
]  # fmt: skip


class Lottery(StrEnum):
    exact = "exact"
    dirac = "dirac"
    highest = "highest"


class Section(BaseModel):
    # a misspelt key in the TOML file is an error, not a silently ignored line
    model_config = ConfigDict(extra="forbid")


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
        description="PostgreSQL connections each server process gives requests (plus 4 for its "
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
    log_format: Literal["json", "text"] = Field(
        "json", description="`json`: one JSON object per line (with request ids); `text`: plain lines."
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


class AuthMode(StrEnum):
    none = "none"
    token = "token"


MIN_SECRET_BYTES = 32  # RFC 7518: an HS256 key at least as long as the hash


class AuthSettings(Section):
    mode: AuthMode = Field(
        AuthMode.none,
        description="`none`: every caller is admin, loopback only. `token`: JWT bearer tokens.",
    )
    algorithm: Literal["HS256", "RS256"] = Field("HS256", description="How tokens are signed.")
    secret: SecretStr | None = Field(None, description="HS256 shared secret (at least 32 bytes).")
    public_key_file: Path | None = Field(None, description="RS256: PEM public key that verifies tokens.")
    private_key_file: Path | None = Field(
        None, description="RS256: PEM private key `fairmatch token create` signs with."
    )
    audience: str | None = Field(None, description="Required `aud` claim, when set.")
    issuer: str | None = Field(None, description="Required `iss` claim, when set (and put in new tokens).")
    allow_remote_without_auth: bool = Field(
        False,
        description="Let mode `none` serve on a non-loopback interface. Anyone who reaches it is admin.",
    )

    def hs256_key(self) -> str:
        """The shared secret that signs and verifies HS256 tokens; ValueError if too weak to use."""
        if self.secret is None or len(self.secret.get_secret_value().encode()) < MIN_SECRET_BYTES:
            raise ValueError(f"HS256 tokens need auth.secret of at least {MIN_SECRET_BYTES} bytes")
        return self.secret.get_secret_value()

    @model_validator(mode="after")
    def _keys_for_token_mode(self) -> AuthSettings:
        if self.mode is AuthMode.token:
            if self.algorithm == "HS256":
                self.hs256_key()
            elif self.public_key_file is None:
                raise ValueError("auth mode token with RS256 needs auth.public_key_file")
        return self


class TaskQueueSettings(Section):
    cpu_buckets: list[int] = Field(
        default_factory=lambda: list(DIRAC_CPU_BUCKETS),
        description="CPU-time segments in seconds; a job's cpu_time moves up to the first "
        "segment >= it, capped at the last. Strictly increasing.",
    )

    sweep_interval_seconds: float = Field(60, gt=0, description="How often task queues left empty are deleted.")

    @field_validator("cpu_buckets")
    @classmethod
    def _strictly_increasing(cls, buckets: list[int]) -> list[int]:
        if not buckets:
            raise ValueError("cpu_buckets must not be empty")
        if buckets[0] <= 0:
            raise ValueError("cpu_buckets must be positive")
        if any(b <= a for a, b in itertools.pairwise(buckets)):
            raise ValueError(f"cpu_buckets must be strictly increasing, got {buckets}")
        return buckets


class MatchingSettings(Section):
    lottery: Lottery | None = Field(
        None,
        description="How a task queue is drawn among the finalists: `exact` "
        "(P proportional to priority), `dirac` (DIRAC's RAND()/Priority, biased) or "
        "`highest` (deterministic, random tie-break). Unset: the policy's own "
        "(dirac: exact; rank and multifactor: highest).",
    )
    prefer_longest_cpu: bool = Field(
        True,
        description="Among eligible TQs of the top priority class, only draw from the longest CPU bucket. "
        "The multifactor policy, where job size is a factor, defaults to false.",
    )
    jobs_per_try: int = Field(
        10, ge=1, le=1000, description="Inside a TQ, pick at random among this many lowest job ids."
    )
    claim_attempts: int = Field(8, ge=1, le=100, description="How often a lost claim is retried before answering 204.")
    refresh_seconds: float = Field(
        0.25,
        gt=0,
        le=60,
        description="How often each process reads the task queues other processes changed "
        "(a new TQ is matchable everywhere within about this long).",
    )
    refresh_margin_seconds: float = Field(
        1.0,
        ge=0,
        le=600,
        description="Each read looks back this far before the previous one, for transactions "
        "that changed a TQ before it and committed after it.",
    )
    reload_seconds: float = Field(
        60.0,
        gt=0,
        description="How often each process reads the ids of all task queues, so that those "
        "other processes deleted leave its copy.",
    )
    unstated_fields: Literal["strict", "dirac"] = Field(
        "strict",
        description="A grid CE, platform or job type the resource leaves out: `strict` gives it only "
        "queues that list none; `dirac` (DIRAC's TaskQueueDB) puts no condition on that field.",
    )


class JobSettings(Section):
    matched_lease_seconds: int = Field(
        7200, ge=1, description="How long a Matched job waits for its pilot to confirm (DIRAC MatchedTime)."
    )
    lease_sweep_seconds: float = Field(
        60, gt=0, description="How often Matched jobs past their lease are put back to Waiting."
    )
    max_payload_bytes: int = Field(65536, ge=0, description="Largest JSON payload per job.")
    stall_timeout_seconds: int = Field(
        7200, ge=1, description="A Running job silent this long becomes Stalled (DIRAC: 2 h)."
    )
    stalled_fail_seconds: int = Field(
        3600,
        ge=1,
        description="A Stalled job silent this much longer becomes Failed ('Stalled too long'), "
        "or is rescheduled with reschedule_stalled.",
    )
    reschedule_stalled: bool = Field(False, description="Reschedule a job stalled too long instead of failing it.")
    max_reschedules: int = Field(
        3,
        ge=0,
        description="Returns to Waiting the owner did not ask for before the job fails instead "
        "(DIRAC's MaxRescheduling).",
    )
    max_batch: int = Field(10000, ge=1, le=10000, description="Most jobs in one POST /jobs (10 000 at most).")
    default_vo: str = Field("default", min_length=1, description="VO of jobs submitted without one.")
    default_cpu_time: int = Field(86400, ge=0, description="cpu_time of jobs submitted without one (s).")


class AccountingSettings(Section):
    cpu_weight: float = Field(
        1.0, gt=0, description="Charge per CPU second reported on Done/Failed (e.g. a per-core HS06 factor)."
    )
    half_life_days: float = Field(7, ge=0, description="Usage decays by half in this time; 0 = no decay.")
    reset: Literal["none", "daily", "weekly", "monthly"] = Field(
        "none", description="Start usage from zero at each period."
    )


class RankSettings(Section):
    window_days: float = Field(24, gt=0, description="USED is the fraction of usage in this window.")
    vo_factor: float = Field(100, ge=0, description="FACTOR of the VO level.")
    group_factor: float = Field(100, ge=0, description="FACTOR of the group level.")
    user_factor: float = Field(100, ge=0, description="FACTOR of the user level.")
    vo_shares: dict[str, float] = Field(
        default_factory=dict, description="TARGET of each VO (normalised); VOs not listed share equally."
    )


class MultifactorWeights(Section):
    fairshare: float = Field(10000, ge=0)
    age: float = Field(1000, ge=0)
    job_size: float = Field(100, ge=0)
    user: float = Field(100, ge=0)
    queue: float = Field(100, ge=0)
    qos: float = Field(1000, ge=0)


class MultifactorSettings(Section):
    weights: MultifactorWeights = Field(default_factory=MultifactorWeights)
    max_age_seconds: float = Field(7 * 86400, gt=0, description="The age factor saturates here.")
    favour: Literal["small", "large"] = Field("small", description="Which CPU buckets the job-size factor favours.")
    fairshare: Literal["classic", "fair_tree"] = Field(
        "classic", description="classic F = 2^(-U/S), or Fair Tree ranks."
    )


class SliceConfig(BaseModel):
    """One time slice of a corrector instance."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    time_span: int = Field(gt=0, validation_alias=AliasChoices("time_span", "TimeSpan"))
    weight: float = Field(gt=0, validation_alias=AliasChoices("weight", "Weight"))
    max_correction: float = Field(ge=1, validation_alias=AliasChoices("max_correction", "MaxCorrection"))


class InstanceConfig(BaseModel):
    """One instance of DIRAC's WMSHistory share corrector: between groups (no `group`)
    or between the owners of one group (`group` set)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    group: str | None = Field(
        None,
        validation_alias=AliasChoices("group", "Group"),
        description="Correct between the owners of this group; unset: between groups.",
    )
    max_global_correction: float = Field(
        3.0,
        ge=1,
        validation_alias=AliasChoices("max_global_correction", "MaxGlobalCorrectionFactor", "MaxGlobalCorrection"),
    )
    slices: dict[str, SliceConfig] = Field(min_length=1)


class CorrectionsConfig(BaseModel):
    """`[priority.corrections]`: the share corrector instances.

    DIRAC's key names (TimeSpan, Weight, MaxCorrection, MaxGlobalCorrectionFactor
    or its alias MaxGlobalCorrection, Group) are accepted alongside snake_case.
    """

    model_config = ConfigDict(extra="forbid")

    instances: dict[str, InstanceConfig] = Field(default_factory=dict)

    def longest_time_span(self) -> int:
        return max((s.time_span for i in self.instances.values() for s in i.slices.values()), default=0)


class PrioritySettings(Section):
    policy: Literal["dirac", "rank", "multifactor"] = Field(
        "dirac", description="How task-queue priorities are computed."
    )
    interval_seconds: float = Field(
        120,
        gt=0,
        description="How often the priority loop folds the logged charges into usage and recomputes every TQ "
        "(DIRAC: 120 s); usage seen by the policies and sshare lags a charge by at most this.",
    )
    tq_weight: Literal["avg", "sum"] = Field(
        "avg",
        description="How an entity's share is split over its TQs: by the average (`avg`) or the "
        "sum (`sum`) of their jobs' real priorities.",
    )
    sample_seconds: float = Field(
        60, gt=0, description="How often running jobs per group and owner are sampled for history."
    )
    corrections_enabled: bool = Field(False, description="Apply the WMSHistory share corrections.")
    corrections_file: Path | None = Field(
        None, description="Share corrections in DIRAC CFG (`.cfg`) or TOML (`.toml`) form."
    )
    corrections: CorrectionsConfig = Field(
        default_factory=CorrectionsConfig, description="Share corrections given inline."
    )
    rank: RankSettings = Field(default_factory=RankSettings)
    multifactor: MultifactorSettings = Field(default_factory=MultifactorSettings)

    @model_validator(mode="after")
    def _read_by_the_policy(self) -> PrioritySettings:
        """A setting only another policy reads would silently do nothing: refuse it."""
        if self.corrections_enabled and self.policy != "dirac":
            raise ValueError(
                f"priority.corrections_enabled = true: share corrections are applied by the dirac "
                f"policy only, and priority.policy is {self.policy!r}"
            )
        for section in ("rank", "multifactor"):
            if section in self.model_fields_set and self.policy != section:
                raise ValueError(
                    f"[priority.{section}] is read by the {section} policy only, and priority.policy is "
                    f"{self.policy!r}: remove the section or change the policy"
                )
        return self


class GroupSettings(Section):
    job_share: float = Field(1000, ge=0, description="The group's share (DIRAC JobShare).")
    properties: list[str] = Field(default_factory=list, description="e.g. ['JOB_SHARING'].")
    allow_background_tqs: bool = False
    priority: int = 0


LimitAttribute = Literal["job_type", "owner_group", "owner"]
_DIRAC_ATTRIBUTES = {"JobType": "job_type", "OwnerGroup": "owner_group", "Owner": "owner"}


class SiteLimitSettings(Section):
    """One site's limits, as DIRAC's `Sites/<site>/RunningLimit|MatchingDelay/<attribute>/<value>`."""

    running_limit: dict[LimitAttribute, dict[str, int]] = Field(
        default_factory=dict, description="attribute → value → most jobs Matched + Running at the site."
    )
    matching_delay: dict[LimitAttribute, dict[str, float]] = Field(
        default_factory=dict, description="attribute → value → least seconds between two matches at the site."
    )

    @field_validator("running_limit", "matching_delay", mode="before")
    @classmethod
    def _dirac_attribute_names(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {_DIRAC_ATTRIBUTES.get(k, k): v for k, v in value.items()}
        return value

    @field_validator("running_limit", "matching_delay")
    @classmethod
    def _not_negative(cls, value: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        for attribute, amounts in value.items():
            for name, amount in amounts.items():
                if amount < 0:
                    raise ValueError(f"{attribute}.{name} must not be negative, got {amount}")
        return value


POLICY_LOTTERY = {"dirac": Lottery.exact, "rank": Lottery.highest, "multifactor": Lottery.highest}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FAIRMATCH_",
        env_nested_delimiter="__",
        extra="forbid",
    )

    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        description="SQLAlchemy URL; `postgresql://…` and `sqlite:///…` are accepted and given their async drivers.",
    )
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    taskqueues: TaskQueueSettings = Field(default_factory=TaskQueueSettings)
    matching: MatchingSettings = Field(default_factory=MatchingSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    priority: PrioritySettings = Field(default_factory=PrioritySettings)
    accounting: AccountingSettings = Field(default_factory=AccountingSettings)
    groups: dict[str, GroupSettings] = Field(
        default_factory=dict, description="Groups created at start-up when not yet in the database."
    )
    site_limits: dict[str, SiteLimitSettings] = Field(
        default_factory=dict,
        description="Site limits created at start-up when not yet in the database (then edited over the API).",
    )

    @model_validator(mode="after")
    def _matching_of_the_policy(self) -> Settings:
        """The policy's own lottery and CPU-bucket narrowing, unless set; and no setting the
        policy would ignore."""
        policy = self.priority.policy
        if self.matching.lottery is None:
            self.matching.lottery = POLICY_LOTTERY[policy]
        if policy == "multifactor":
            job_size = self.priority.multifactor.weights.job_size
            if "prefer_longest_cpu" not in self.matching.model_fields_set:
                self.matching.prefer_longest_cpu = False  # job size is one of its factors
            elif self.matching.prefer_longest_cpu and job_size > 0:
                raise ValueError(
                    f"priority.multifactor.weights.job_size = {job_size:g} has no effect while "
                    "matching.prefer_longest_cpu = true draws from the longest CPU bucket first: "
                    "set one of them to 0 / false"
                )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = config_file_path()
        if config_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=config_file))
        return tuple(sources)


class ConfigFileError(RuntimeError):
    pass


def config_file_path() -> Path | None:
    """The TOML file to read: `$FAIRMATCH_CONFIG` (must exist) or `config/fairmatch.toml` if present."""
    named = os.environ.get("FAIRMATCH_CONFIG")
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigFileError(f"FAIRMATCH_CONFIG names {path}, which is not a file")
        return path
    return DEFAULT_CONFIG_FILE if DEFAULT_CONFIG_FILE.is_file() else None


def load_settings(**overrides: Any) -> Settings:
    return Settings(**overrides)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
