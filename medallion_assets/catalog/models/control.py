"""Rows that steer a running catalog: retry policies, healing rules, kill switches, profiles, throttles,
notifications and table maintenance."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from medallion_assets.catalog.models.base import Identifier, Layer, Row
from medallion_assets.patterns import compiled


class RetryPolicy(Row):
    key_fields = ("retry_id",)
    retry_id: Identifier
    max_retries: int = Field(ge=0, le=100)
    backoff_sec: float = Field(ge=0, le=86_400, description="seconds; at most a day")
    backoff: Literal["fixed", "exponential"] = "fixed"
    jitter_sec: float = Field(default=0, ge=0, le=3_600)
    max_delay_sec: float | None = Field(default=None, ge=0, le=86_400)


class HealingAction(Row):
    key_fields = ("healing_id",)
    healing_id: Identifier
    error_code: str | None = Field(default=None, description="error code or exception class name")
    message_pattern: str | None = None
    layer: Layer | None = None
    pipeline_id: Identifier | None = None
    stage_name: Identifier | None = None
    action: Identifier = Field(
        description="name of a registered healing function (medallion healing actions)"
    )
    params: dict[str, Any] = Field(default_factory=dict)
    enabled: bool = True

    @field_validator("message_pattern")
    @classmethod
    def _valid_pattern(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            compiled(pattern)
        return pattern

    @model_validator(mode="after")
    def _has_signature(self) -> HealingAction:
        if self.error_code is None and self.message_pattern is None:
            raise ValueError("a healing rule needs an error_code or a message_pattern to match")
        return self


class ControlFlag(Row):
    key_fields = ("entity_type", "entity_id", "flag_name")
    entity_type: Literal["global", "pipeline", "stage", "dataset", "source", "target"]
    entity_id: str
    flag_name: Identifier = "enabled"
    flag_value: bool
    reason: str = ""
    updated_by: str = ""


class Profile(Row):
    key_fields = ("profile_id",)
    profile_id: Literal["balanced", "focus"]
    description: str = ""
    is_default: bool = False


class PipelineProfile(Row):
    key_fields = ("pipeline_id",)
    pipeline_id: Identifier
    profile_id: Literal["balanced", "focus"]


class ProfileSetting(Row):
    key_fields = ("profile_id", "setting")
    profile_id: Literal["balanced", "focus"]
    setting: Identifier
    value: float


class Throttle(Row):
    key_fields = ("system_kind", "system_id", "metric")
    system_kind: Literal["source", "target"]
    system_id: Identifier
    metric: Literal["concurrency", "rows_per_minute", "bytes_per_hour"]
    limit_value: float = Field(gt=0)


NOTIFICATION_EVENTS = (
    "run_failed",
    "stage_halted",
    "healing_gave_up",
    "circuit_breaker_tripped",
    "sla_missed",
    "check_failed",
    "check_warned",
    "volume_anomaly",
)


class Notification(Row):
    """Who hears of what: events in a scope go to a registered channel (`medallion notify channels`).

    Secrets never live here: a channel's params name the environment variables that hold them.
    """

    key_fields = ("notification_id",)
    notification_id: Identifier
    events: list[Literal[NOTIFICATION_EVENTS]] = Field(min_length=1)  # type: ignore[valid-type]
    scope: Literal["global", "pipeline", "owner"] = "global"
    scope_id: str | None = Field(default=None, description="the pipeline id, or the owner, the scope names")
    channel: Identifier = Field(description="name of a registered channel: sns, webhook, email")
    params: dict[str, Any] = Field(default_factory=dict, description="checked by the channel's own model")
    max_attempts: int = Field(default=5, ge=1, le=50, description="deliveries tried before giving up")
    backoff_sec: float = Field(
        default=30, ge=0, le=86_400, description="wait before the first retry; doubles"
    )
    enabled: bool = True

    @model_validator(mode="after")
    def _scope_named(self) -> Notification:
        if (self.scope == "global") != (self.scope_id is None):
            raise ValueError("scope_id names the pipeline or owner, and only for those scopes")
        return self


class TableMaintenance(Row):
    """How lake tables are kept in shape, off the pipelines' path: compaction of small files, expiry of old
    snapshots, removal of files no snapshot references. A row per dataset, or `dataset: default` for every
    lake table without a row of its own. Runs on its schedule under the target system's pool, audited."""

    key_fields = ("dataset",)
    dataset: Identifier = Field(description="a lake target's id, or `default`")
    compaction: Literal["none", "binpack", "sort"] = Field(
        default="binpack", description="rewrite small files: binpack, sort (by the table's sort order), none"
    )
    target_file_size_bytes: int | None = Field(
        default=None, gt=0, description="the size compaction aims at; the table's own setting by default"
    )
    expire_after_days: float = Field(default=7, gt=0, le=3650, description="snapshots older than this expire")
    keep_snapshots: int = Field(default=10, ge=1, le=100_000, description="...but at least this many stay")
    remove_orphans_after_days: float | None = Field(
        default=3,
        ge=1,
        le=3650,
        description="remove files no snapshot references once older than this (never younger than a day: a "
        "running write's files are not referenced yet); null to keep them",
    )
    schedule: str = Field(default="0 3 * * *", description="cron expression for when it runs (UTC)")
    enabled: bool = True
