"""The one settings object. Built once at an entry point (a CLI command, a
deployment's flow run) by :func:`load_settings` and passed down
(judgeflow/run/entry.py); nothing reads the environment anywhere else."""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from judgeflow.errors import ConfigError, MetricError
from judgeflow.config.key_transport import check_key_destinations
from judgeflow.config.metric_catalogue import CataloguedMetric, catalogue, served_metrics
from judgeflow.config.scrub import install_log_scrubbing, register_settings
from judgeflow.config.secrets import resolve_secrets

log = logging.getLogger("judgeflow.config.settings")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# the metadata keys each source preset segments alerts by when JUDGEFLOW_ALERT_SEGMENT_BY is unset
PRESET_SEGMENT_KEYS: dict[str, tuple[str, ...]] = {
    "litellm": ("model", "model_group", "team_id", "end_user", "tags"),
    "phoenix": ("project",),
}
# the metadata keys each source preset's traces carry (judgeflow/sources/litellm.py, judgeflow/sources/phoenix.py):
# a metric's own segment_by naming another key would segment nothing
PRESET_METADATA_KEYS: dict[str, tuple[str, ...]] = {
    "litellm": ("model", "model_group", "team_id", "end_user", "tags", "user", "call_type", "status", "session_id"),
    "phoenix": ("project", "trace_id", "span_name", "model", "status"),
}


# longer than any history judgeflow keeps, short enough that "that long ago" is a date
# Python and PostgreSQL can hold
MAX_DURATION_DAYS = 36500


def is_duration(text: str) -> bool:
    """Whether ``text`` is written as a duration ('7d'), whatever its length."""
    return bool(_DURATION.match(text or ""))


def parse_duration(text: str) -> float:
    """'90s', '15m', '6h', '7d', '2w' -> seconds (at most :data:`MAX_DURATION_DAYS`)."""
    match = _DURATION.match(text or "")
    if not match:
        raise ConfigError(f"not a duration: {text!r} (expected e.g. '30m', '6h', '7d')")
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
    if not seconds <= MAX_DURATION_DAYS * 86400:
        raise ConfigError(f"duration too long: {text!r} (at most {MAX_DURATION_DAYS}d)")
    return seconds


def normalise_database_url(url: str) -> str:
    """postgres:// and postgresql:// (and +psycopg2) become postgresql+psycopg://."""
    for prefix in ("postgres://", "postgresql://", "postgresql+psycopg2://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


class _MetricVariables(PydanticBaseSettingsSource):
    """One of pydantic-settings' own sources (the environment, or ``.env``),
    with the catalogue's metrics' variables (``JUDGEFLOW_<NAME>_THRESHOLD``,
    ...) it holds given as ``{"metric_settings": {metric: {field: raw value}}}``
    (a ``.env`` source would give them as flat keys, which would then win over
    the environment's)."""

    def __init__(self, settings_cls: type[BaseSettings], variables: EnvSettingsSource):
        super().__init__(settings_cls)
        self._variables = variables

    def _set_current_state(self, state: dict[str, Any]) -> None:
        super()._set_current_state(state)
        self._variables._set_current_state(state)

    def _set_settings_sources_data(self, states: dict[str, dict[str, Any]]) -> None:
        super()._set_settings_sources_data(states)
        self._variables._set_settings_sources_data(states)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # every value is given by __call__

    def __call__(self) -> dict[str, Any]:
        given = self._variables()
        found: dict[str, dict[str, Any]] = {}
        values, prefix = self._variables.env_vars, self._variables.env_prefix
        # a metrics file's metrics are left out: their file gives their settings, and which file is only
        # known once these are read
        for spec in catalogue().fixed().values():
            for setting, name in spec.setting_names().items():
                given.pop(setting, None)
                key = f"{prefix}{setting}"
                key = key if self._variables.case_sensitive else key.lower()
                if values.get(key) is not None:
                    found.setdefault(spec.name, {})[name] = values[key]
        return {**given, "metric_settings": found} if found else given


def _metric_values(data: dict[str, Any], specs: dict[str, CataloguedMetric]) -> dict[str, BaseModel]:
    """Each served metric's settings from ``data``: its nested
    ``metric_settings`` (the environment's), then keyword arguments named as
    its variables are, which win."""
    nested = data.pop("metric_settings", None) or {}
    unknown = set(nested) - set(specs)
    if unknown:
        raise ConfigError(f"settings for unknown metric(s) {', '.join(sorted(unknown))}; registered: "
                          f"{', '.join(specs)}")
    built: dict[str, BaseModel] = {}
    for name, spec in specs.items():
        given = nested.get(name, {})
        values = dict(given.model_dump() if isinstance(given, BaseModel) else given)
        for setting, field in spec.setting_names().items():
            if setting in data:
                values[field] = data.pop(setting)
        try:
            built[name] = spec.settings.model_validate(values)
        except ValidationError as error:
            problems = "; ".join(f"{spec.setting_name(str(e['loc'][0])) if e['loc'] else name}: {e['msg']}"
                                 for e in error.errors())
            raise ConfigError(f"invalid judgeflow settings: {problems}") from None
    return built


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="JUDGEFLOW_", env_file=".env", env_file_encoding="utf-8", extra="ignore",
        # a run's parameters are set on a copy (with_parameters), validated like the environment's values
        validate_assignment=True,
    )

    # --- judge -----------------------------------------------------------
    judge_model: str = Field("gpt-4o", description="litellm model string, or 'offline'")
    # a secret: a base URL may carry credentials (https://user:pass@host/...?api-key=...)
    judge_api_base: SecretStr | None = None
    judge_api_key: SecretStr | None = None
    # `judgeflow shadow`'s candidate endpoint (--judge-api-base / --judge-api-key): a base other than
    # judge_api_base needs its own key; the production key is never sent there (judgeflow.shadow.plan)
    shadow_judge_api_base: SecretStr | None = None
    shadow_judge_api_key: SecretStr | None = None
    plain_http_key_hosts: str | None = Field(
        None, description="comma-separated hosts a key may be sent to over plain http:// (a private network's "
        "service names); otherwise only loopback (judgeflow.config.key_transport)",
    )
    judge_timeout_s: float = Field(60.0, gt=0)
    judge_max_retries: int = Field(4, ge=0, description="adapter retries on transient errors")
    judge_backoff_base_s: float = Field(1.0, ge=0)
    judge_backoff_max_s: float = Field(30.0, ge=0)
    judge_max_repairs: int = Field(2, ge=0, description="re-asks after an invalid reply")
    max_concurrency: int = Field(8, ge=1, description="judge calls in flight per scoring run (per process)")
    judge_rpm: int | None = Field(
        None, ge=1,
        description="requests per minute the judge's account allows: held across every process on the same "
        "Prefect API (a Prefect global concurrency limit with slot decay, judgeflow/run/account.py); every "
        "attempt sent, retries included, is a request. Unset: no account limit",
    )
    judge_tpm: int | None = Field(
        None, ge=1,
        description="tokens per minute the judge's account allows, held like judge_rpm: each request takes its "
        "estimate (prompt characters / 4 plus 60 completion tokens) and is corrected by its reply's usage. "
        "Unset: no token limit",
    )
    judge_account: str | None = Field(
        None,
        description="the name of the account judge_rpm and judge_tpm belong to: processes with the same name "
        "share one limit. Unset: a hash of the judge's endpoint and key (never the key itself), so two keys "
        "on one Prefect API hold a limit each",
    )
    judge_processes: int | None = Field(
        None, ge=1, le=32,
        description="worker processes making the judge calls of a run (litellm's CPU per call runs on one core "
        "per process, which one process alone cannot keep up with at high concurrency); max_concurrency is "
        "shared between them. Unset: one per core, at most 4 (1 on a one-core machine: the calls stay in the "
        "run's process)",
    )

    # --- the judge through the provider's batch API (judgeflow/judge/batches.py; judge_batch: below) ---
    judge_batch_window: str = Field(
        "24h", description="the provider's completion window: a batch older than this is dead, its pairs free",
    )
    judge_batch_poll_s: float = Field(10.0, gt=0, description="the first pause between polls of a batch out")
    judge_batch_poll_max_s: float = Field(300.0, gt=0, description="the longest pause between polls (backoff)")
    judge_batch_settle_s: float = Field(
        2.0, gt=0, description="a round of batch lines is sent once no new line joined it for this long",
    )
    judge_batch_max_lines: int = Field(50_000, ge=1, description="lines per batch file (the provider's limit)")
    judge_batch_max_mb: float = Field(200.0, gt=0, description="megabytes per batch file (the provider's limit)")
    judge_batch_line_retry: Literal["online", "batch"] = Field(
        "online", description="a batch line the provider answered with an error: its retries go online (no "
        "second turnaround) or as lines of the next round; a permanent error (400-class) is not retried",
    )

    # --- judge spend -----------------------------------------------------
    judge_input_cost_per_mtok: float | None = Field(
        None, ge=0, description="USD per million prompt tokens; overrides litellm's price map (set both or neither)"
    )
    judge_output_cost_per_mtok: float | None = Field(
        None, ge=0, description="USD per million completion tokens; overrides litellm's price map"
    )
    judge_cached_input_cost_per_mtok: float | None = Field(
        None, ge=0,
        description="USD per million prompt tokens the provider served from its prompt cache, with the two prices "
        "above; unset: the input price (no discount assumed). Without them, litellm's map prices cached tokens",
    )
    judge_batch: bool = Field(
        False, description="send a run's judge calls through the provider's batch API (litellm's batch functions): "
        "about half the price, answered within the provider's window (24 h) instead of seconds",
    )
    judge_batch_discount: float = Field(
        0.5, gt=0, le=1,
        description="a batch call's price as a fraction of the online price, for models litellm's price map has "
        "no batch prices for",
    )
    run_budget_usd: float | None = Field(
        None, gt=0, description="a scoring run stops claiming once spent + in-flight (estimated) reaches this"
    )
    sample_budget_usd: float | None = Field(
        None, gt=0,
        description="when judging a night's new traces would cost more than this, a nightly run judges a stratified "
        "sample that fits (per-stratum minimums, then Neyman allocation) and records the rest as not sampled",
    )
    sample_late_reserve: float | None = Field(
        None, ge=0, le=0.5,
        description="the share of a night's sample budget held back for traces that arrive after the night's plan "
        "(judged by a later run of the night at their stratum's probability); unset: the share of traces decided "
        "late over the last 7 nights",
    )
    stratify_by: str | None = Field(
        None,
        description="comma-separated metadata keys whose values form the sample budget's strata; unset: the alert "
        "segment keys (none: one stratum)",
    )
    settle_delay: str = Field(
        "0s", description="only traces older than this are scored (e.g. '10m'): a trace still being written waits"
    )
    # --- conversations (docs/metrics.md, "Conversations") ----------------------
    session_key: str = Field(
        "session_id", min_length=1, max_length=200,
        description="the metadata key whose value makes traces one session (the table source's metadata; the "
        "phoenix preset reads session.id, the litellm preset its session_id column, whatever this says)",
    )
    session_idle: str = Field(
        "30m", description="a session is judged once its last turn is older than this, by the database's clock; "
        "one that grows later is judged again at its next quiet point",
    )
    session_max_chars: int = Field(
        60_000, ge=2_000, description="a judged conversation's size budget in characters of turn text: over it "
        "the first turn and the latest turns are kept and the judge is told how many were left out",
    )
    reuse_identical: bool = Field(
        True, description="a pair identical to an already-scored one (same metric version, judge, content) "
        "reuses its result instead of calling the judge"
    )

    # --- metrics ---------------------------------------------------------
    metrics_file: Path | None = Field(
        None, description="a TOML file of your own metrics (G-Eval: criteria, evaluation steps, inputs, threshold, "
        "alert rules), served beside the built-ins (docs/metrics.md, \"Your own metrics\")",
    )
    include_reason: bool = True
    max_field_chars: int = Field(20_000, ge=100, description="per-field truncation budget")
    # Each served metric's own settings (judgeflow/metrics/registry.py: its threshold, its alert
    # rules' limits, ...; which metrics: judgeflow/config/metric_catalogue.py), filled at load from
    # JUDGEFLOW_<NAME>_<FIELD> (:class:`_MetricVariables`) and from keyword arguments named as those
    # variables are (``<name>_threshold=0.3``).
    metric_settings: dict[str, Any] = Field(default_factory=dict, exclude=False)
    # the metrics these settings serve (the catalogue's fixed ones, then metrics_file's), as read when
    # validated (None: not yet, as for a copy made without validation)
    _metrics: dict[str, CataloguedMetric] | None = PrivateAttr(default=None)

    # --- database --------------------------------------------------------
    database_url: SecretStr | None = Field(None, description="unset: the embedded database")
    source: Literal["table", "litellm", "phoenix"] = Field(
        "table", description="what the traces are: 'table' (JUDGEFLOW_TRACES_TABLE in judgeflow's shape), "
        "'litellm' (the LiteLLM proxy's \"LiteLLM_SpendLogs\") or 'phoenix' (Arize Phoenix's spans), read in place",
    )
    source_schema: str | None = Field(
        None, description="the schema of LiteLLM's or Phoenix's tables (JUDGEFLOW_SOURCE litellm or phoenix); "
        "unset: the connection's search_path",
    )
    traces_table: str = "llm_traces"
    source_database_url: SecretStr | None = Field(
        None, description="read the traces from this database (a read replica, say) instead of "
        "JUDGEFLOW_DATABASE_URL; results, claims and alerts stay there. Unset: the traces are read there too",
    )
    source_lookback: str = Field(
        "1h", description="a nightly run reads the source from its watermark (the oldest trace without a result) "
        "minus this: a trace written this much later than traces older than it is still scored; one later than "
        "that only by `judgeflow backfill`",
    )
    phoenix_write_back: bool = Field(
        False, description="JUDGEFLOW_SOURCE=phoenix: also write each score to Phoenix as a span annotation "
        "(POST /v1/span_annotations at JUDGEFLOW_PHOENIX_URL); the results table stays the source of truth",
    )
    phoenix_url: str = Field("http://127.0.0.1:6006", description="Phoenix's base URL, for the write-back")
    phoenix_api_key: SecretStr | None = Field(None, description="Phoenix API key (a bearer token), if auth is on")
    phoenix_unwritten_max_age: str | None = Field(
        "1d", description="with the Phoenix write-back on: the phoenix_unwritten alert rule fires when a scored "
        "result the write-back failed to write is still unwritten this long after it was scored; empty disables it",
    )
    home: Path = Field(Path(".judgeflow"), description="embedded database and local state")
    embedded_database: str = Field(
        "judgeflow", pattern=r"^[a-z_][a-z0-9_]{0,62}$",
        description="with no JUDGEFLOW_DATABASE_URL: the database of the embedded PostgreSQL (under "
        "JUDGEFLOW_HOME) that holds the traces table and judgeflow's tables; `judgeflow demo` keeps its own, "
        "judgeflow_demo",
    )
    lease_timeout_s: float = Field(900.0, gt=0, description="a claim's lifetime")
    pool_mode: Literal["auto", "direct", "session", "transaction"] = Field(
        "auto", description="what sits between judgeflow and PostgreSQL: 'direct', a 'session' pool, a "
        "'transaction' pool (PgBouncer pool_mode = transaction, pgcat, Supavisor, RDS Proxy), or 'auto' to "
        "find out at each run's start (docs/deployment.md)",
    )

    # --- tasks -----------------------------------------------------------
    task_retries: int = Field(2, ge=0)
    task_retry_delay_s: float = Field(2.0, ge=0)

    # --- cost and time bounds -----------------------------------------------
    max_runs_per_pair: int = Field(
        3, ge=1,
        description="a (trace, metric) that ended 'failed' in this many runs is given up: the nightly run no "
        "longer retries it (`judgeflow score --retry-failed` and backfills do)",
    )
    max_run_duration: str = Field(
        "6h", description="a run's time budget: past it, it stops claiming, finishes what is in flight, ends",
    )

    # --- alerts ----------------------------------------------------------
    alert_window: str = "24h"
    failure_rate_max: float | None = Field(None, ge=0, le=1)
    dead_delivery_rate_max: float | None = Field(
        0.0, ge=0, le=1,
        description="maximum share of the alert deliveries ended in the window that are dead (0: any dead "
        "delivery fires the dead_delivery_rate rule); empty disables the rule",
    )
    alert_min_samples: int = Field(50, ge=1)
    alert_renotify: str | None = None
    alert_webhook_url: SecretStr | None = None
    alert_webhook_secret: SecretStr | None = None
    alert_slack_webhook_url: SecretStr | None = None
    alert_webhook_timeout_s: float = Field(10.0, gt=0, description="per attempt, webhook and Slack")
    alert_webhook_retries: int = Field(3, ge=0, description="retries after the first attempt (5xx, 429, timeouts)")
    alert_webhook_backoff_s: float = Field(1.0, ge=0, description="first retry delay; doubles each retry")
    alert_webhook_backoff_max_s: float = Field(30.0, ge=0)
    alert_redelivery_backoff_s: float = Field(
        60.0, ge=0,
        description="an undelivered notification is due again this long after a failed evaluation; doubles each time",
    )
    alert_redelivery_backoff_max_s: float = Field(3600.0, ge=0)
    alert_prefect_events: bool = Field(True, description="emit judgeflow.alert.* Prefect events")
    alert_event_confirm_timeout_s: float = Field(
        15.0, gt=0,
        description="how long an evaluation waits for the Prefect API to store the events it emitted (the "
        "server writes events in batches, every 5 s by default); an event not stored by then is emitted again later",
    )
    alert_dead_after: int = Field(
        6, ge=1,
        description="a delivery is dead (given up on, its queue moves on) after this many failed evaluations; "
        "a permanent 4xx (not 408, 425, 429) makes it dead at once",
    )
    alert_delivery_budget_s: float = Field(
        30.0, gt=0,
        description="total time one evaluation spends delivering notifications; what it does not attempt "
        "stays pending for the next evaluation",
    )
    alert_segment_by: str | None = Field(
        None,
        description="comma-separated keys of the traces' metadata (e.g. 'app,model'): every rate rule is also "
        "evaluated per value of each key (a file metric's own segment_by replaces them for its rules); the values "
        "are copied into eval_results.segment when a trace is scored",
    )
    alert_segment_top: int = Field(
        10, ge=1, le=200,
        description="per rule and key, the values with the most results (window + baseline) get their own "
        "segment; the rest are grouped as 'other'",
    )
    alert_hysteresis: float = Field(
        0.1, ge=0, lt=1,
        description="a firing rule resolves only once clearly back: a maximum rule below maximum*(1-h), a "
        "regression rule once its increase is below min_increase*(1-h) or no longer significant at "
        "JUDGEFLOW_REGRESSION_RESOLVE_ALPHA",
    )
    regression_baseline: str = Field("7d", description="the period just before the window a regression compares with")
    regression_alpha: float = Field(0.01, gt=0, lt=1, description=(
        "one-sided significance a regression must reach to fire; over segments, Holm-adjusted: the chance of any"
        " false regression alert of a rule in one evaluation"))
    regression_resolve_alpha: float = Field(
        0.05, gt=0, lt=1, description="a firing regression stays firing while significant at this looser level"
    )

    # --- schedule --------------------------------------------------------
    schedule_timezone: str = Field("UTC", description="IANA timezone of the nightly 02:00 schedule")

    @field_validator("schedule_timezone")
    @classmethod
    def _check_timezone(cls, value):
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"unknown timezone {value!r} (use an IANA name like Europe/Berlin)") from None
        return value

    @field_validator("database_url", "source_database_url", mode="before")
    @classmethod
    def _normalise_url(cls, value):
        if value is None or value == "":
            return None
        raw = value.get_secret_value() if isinstance(value, SecretStr) else str(value)
        return SecretStr(normalise_database_url(raw))

    @field_validator("settle_delay", mode="before")
    @classmethod
    def _check_settle_delay(cls, value):
        if value is None or str(value).strip() in ("", "0"):
            return "0s"
        parse_duration(str(value))
        return str(value).strip()

    @model_validator(mode="after")
    def _prices_come_in_pairs(self):
        if (self.judge_input_cost_per_mtok is None) != (self.judge_output_cost_per_mtok is None):
            raise ConfigError(
                "set both JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK and JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK, or neither"
            )
        if self.judge_cached_input_cost_per_mtok is not None and self.judge_input_cost_per_mtok is None:
            raise ConfigError(
                "JUDGEFLOW_JUDGE_CACHED_INPUT_COST_PER_MTOK is a discount on configured prices: set it with "
                "JUDGEFLOW_JUDGE_INPUT_COST_PER_MTOK and JUDGEFLOW_JUDGE_OUTPUT_COST_PER_MTOK, or not at all"
            )
        return self

    @model_validator(mode="after")
    def _read_the_served_metrics(self):
        self._metrics = served_metrics(self.metrics_file)
        return self

    @model_validator(mode="after")
    def _metric_segment_keys_are_the_sources(self):
        known = PRESET_METADATA_KEYS.get(self.source)
        fixed = catalogue().fixed()
        for name, spec in self.metric_specs().items() if known else ():
            unknown = [key for key in spec.segment_by or () if key not in known]
            if unknown:
                where = "metric plugin" if name in fixed else str(self.metrics_file)
                raise MetricError(f"{where}: metric {name}: segment_by: unknown metadata key {unknown[0]!r}: the "
                                  f"{self.source} source's traces carry {', '.join(known)}")
        return self

    @model_validator(mode="before")
    @classmethod
    def _fill_metric_settings(cls, data):
        if isinstance(data, dict):
            data = dict(data)
            # a run serves the metrics of the file its settings name, and no other file's
            data["metric_settings"] = _metric_values(data, served_metrics(data.get("metrics_file") or None))
        return data

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        return (init_settings, _MetricVariables(settings_cls, env_settings),
                _MetricVariables(settings_cls, dotenv_settings), file_secret_settings)

    def metric(self, name: str) -> Any:
        """Metric ``name``'s own settings (its spec's model, a ``MetricSettings``)."""
        try:
            return self.metric_settings[name]
        except KeyError:
            raise ConfigError(f"no settings for metric {name!r}: it was registered after these settings were "
                              "built, or is not registered") from None

    def metric_specs(self) -> dict[str, CataloguedMetric]:
        """The metrics these settings serve, by name, in order: the built-ins and plugins, then
        ``metrics_file``'s."""
        if self._metrics is None:
            self._metrics = served_metrics(self.metrics_file)
        return dict(self._metrics)

    @field_validator("source_schema")
    @classmethod
    def _check_source_schema(cls, value):
        if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", value):
            raise ConfigError(f"JUDGEFLOW_SOURCE_SCHEMA must be a plain schema name; refusing {value!r}")
        return value

    @field_validator("sample_budget_usd", mode="before")
    @classmethod
    def _check_sample_budget(cls, value):
        return usd_budget("JUDGEFLOW_SAMPLE_BUDGET_USD (--sample-budget-usd)", value)

    @field_validator("run_budget_usd", mode="before")
    @classmethod
    def _check_run_budget(cls, value):
        return usd_budget("JUDGEFLOW_RUN_BUDGET_USD (--budget-usd)", value)

    @field_validator("alert_segment_by", "stratify_by")
    @classmethod
    def _check_segment_by(cls, value):
        if value is None:
            return None
        keys = [k.strip() for k in value.split(",") if k.strip()]
        if len(keys) > 8 or any(len(k) > 100 for k in keys):
            raise ConfigError("JUDGEFLOW_ALERT_SEGMENT_BY and JUDGEFLOW_STRATIFY_BY take at most 8 metadata keys of up "
                              "to 100 characters")
        return ",".join(dict.fromkeys(keys)) or None

    @field_validator("alert_window", "alert_renotify", "max_run_duration", "regression_baseline", "source_lookback",
                     "judge_batch_window", "session_idle")
    @classmethod
    def _check_duration(cls, value):
        if value is not None:
            parse_duration(value)
        return value

    @field_validator("phoenix_unwritten_max_age", mode="before")
    @classmethod
    def _check_unwritten_max_age(cls, value):
        if value is None or not str(value).strip():
            return None  # empty: the rule is off
        parse_duration(str(value).strip())
        return str(value).strip()

    @property
    def uses_embedded_database(self) -> bool:
        return self.database_url is None

    @property
    def settle_delay_s(self) -> float:
        return parse_duration(self.settle_delay)

    @property
    def source_lookback_s(self) -> float:
        return parse_duration(self.source_lookback)

    @property
    def session_idle_s(self) -> float:
        return parse_duration(self.session_idle)

    @property
    def alert_window_s(self) -> float:
        return parse_duration(self.alert_window)

    @property
    def max_run_duration_s(self) -> float:
        return parse_duration(self.max_run_duration)

    @property
    def judge_batch_window_s(self) -> float:
        return parse_duration(self.judge_batch_window)

    @property
    def alert_segment_keys(self) -> tuple[str, ...]:
        """JUDGEFLOW_ALERT_SEGMENT_BY's keys; unset, the source preset's own (none for 'table')."""
        if self.alert_segment_by:
            return tuple(self.alert_segment_by.split(","))
        return PRESET_SEGMENT_KEYS.get(self.source, ())

    def metric_segment_keys(self, name: str) -> tuple[str, ...]:
        """The keys metric ``name``'s own rules and trend lines segment by: its own ``segment_by`` (a metrics
        file's), in place of JUDGEFLOW_ALERT_SEGMENT_BY's; without one, those."""
        specs = self.metric_specs()
        if name not in specs:
            raise MetricError(f"unknown metric {name!r}; choose from {', '.join(specs)}")
        own = specs[name].segment_by
        return self.alert_segment_keys if own is None else own

    @property
    def stored_segment_keys(self) -> tuple[str, ...]:
        """The keys whose values are copied into eval_results.segment when a trace is scored: the alert
        segment keys (the judge failure rate's, and every metric's without keys of its own) and every served
        metric's own, so each metric's rules can be counted per its keys from any result."""
        keys = dict.fromkeys(self.alert_segment_keys)
        for spec in self.metric_specs().values():
            keys.update(dict.fromkeys(spec.segment_by or ()))
        return tuple(keys)

    @property
    def stratify_keys(self) -> tuple[str, ...]:
        """JUDGEFLOW_STRATIFY_BY's keys; unset, the alert segment keys."""
        if self.stratify_by:
            return tuple(self.stratify_by.split(","))
        return self.alert_segment_keys

    @property
    def regression_baseline_s(self) -> float:
        return parse_duration(self.regression_baseline)

    @property
    def alert_renotify_s(self) -> float | None:
        return parse_duration(self.alert_renotify) if self.alert_renotify else None

    @property
    def phoenix_unwritten_max_age_s(self) -> float | None:
        return parse_duration(self.phoenix_unwritten_max_age) if self.phoenix_unwritten_max_age else None


# a budget above this is not a budget: it is refused rather than taken to mean "no limit"
MAX_BUDGET_USD = 1_000_000.0


def usd_budget(name: str, value):
    """``value`` as a budget in US dollars, or one clear line naming ``name``
    (a number above 0, finite, at most ``MAX_BUDGET_USD``)."""
    if value is None:
        return None
    try:
        usd = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be an amount of US dollars, such as 2.50; got {value!r}") from None
    if not math.isfinite(usd) or usd <= 0 or usd > MAX_BUDGET_USD:
        raise ConfigError(f"{name} must be above $0 and at most ${MAX_BUDGET_USD:,.0f}; got {value!r}")
    return usd


def load_settings(**overrides) -> Settings:
    """The entry point's settings, built once: the environment and ``.env``,
    with ``overrides`` winning over both; secret references resolved and the
    secrets registered for scrubbing."""
    try:
        settings = Settings(**overrides)
    except ConfigError:
        raise
    except Exception as exc:  # pydantic.ValidationError, with secrets already masked
        raise ConfigError(f"invalid judgeflow settings: {exc}") from exc
    log.debug("judgeflow settings read from the environment and .env")
    # secrets may be references to Prefect Secret blocks (prefect-secret://name);
    # Prefect is only contacted when one is present
    settings = resolve_secrets(settings)
    check_key_destinations(settings)  # no key over plain http to another host
    # from here on, what is secret in these settings is scrubbed from every log
    # record of the process (and from texts passed through judgeflow.config.scrub.scrub)
    register_settings(settings)
    install_log_scrubbing()
    _warn_of_open_key_file()
    return settings


def _warn_of_open_key_file() -> None:
    """A ``.env`` holding a key that other local users can read: said, with its fix."""
    from judgeflow.config.file_modes import key_file_warning

    secret = [f"JUDGEFLOW_{name}" for name, field in Settings.model_fields.items()
              if "SecretStr" in str(field.annotation)]
    warning = key_file_warning(Path.cwd() / ".env", secret)
    if warning:
        log.warning(warning)


def with_parameters(settings: Settings, **parameters) -> Settings:
    """``settings`` with a run's parameters on top (those not None), each
    validated as a value from the environment is; ``settings`` itself when
    none changes anything. Reads nothing from the environment and resolves
    no secret: the entry point did that once."""
    changed = {name: value for name, value in parameters.items()
               if value is not None and getattr(settings, name) != value}
    if not changed:
        return settings
    updated = settings.model_copy()
    try:
        for name, value in changed.items():
            setattr(updated, name, value)
    except ConfigError:
        raise
    except Exception as exc:  # pydantic.ValidationError
        raise ConfigError(f"invalid judgeflow settings: {exc}") from exc
    return updated


def setting_fields() -> dict[str, FieldInfo]:
    """Every setting by name (``JUDGEFLOW_`` + upper case in the environment):
    the fields of :class:`Settings` and those of each built-in or plugin metric."""
    fields = {name: field for name, field in Settings.model_fields.items() if name != "metric_settings"}
    for spec in catalogue().fixed().values():
        for setting, name in spec.setting_names().items():
            fields[setting] = spec.settings.model_fields[name]
    return fields
