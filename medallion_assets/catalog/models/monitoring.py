"""What a pipeline or dataset owes: freshness (an SLA) and steady volumes (a band)."""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Sla(BaseModel):
    """When data must be fresh: at most `max_stale_minutes` old, or updated daily by `expected_by` (HH:MM).

    Becomes Dagster's freshness policy on the asset (a time window, or a daily cron deadline), and the
    notification sensor's "SLA missed" event.
    """

    model_config = ConfigDict(extra="forbid")
    max_stale_minutes: int | None = Field(default=None, ge=1, le=525_600)
    warn_stale_minutes: int | None = Field(
        default=None, ge=1, description="warn (late) before failing (stale)"
    )
    expected_by: str | None = Field(
        default=None,
        pattern=r"^([01]\d|2[0-3]):[0-5]\d$",
        description="time of day (HH:MM) the day's data must be in by",
    )
    window_minutes: int = Field(
        default=1440,
        ge=1,
        le=1440,
        description="with expected_by: an update this long before the deadline counts",
    )
    timezone: str = Field(default="UTC", description="IANA time zone of expected_by")

    @model_validator(mode="after")
    def _one_kind(self) -> Sla:
        if (self.max_stale_minutes is None) == (self.expected_by is None):
            raise ValueError("an SLA sets exactly one of max_stale_minutes and expected_by")
        if self.warn_stale_minutes is not None and (
            self.max_stale_minutes is None or self.warn_stale_minutes >= self.max_stale_minutes
        ):
            raise ValueError("warn_stale_minutes needs max_stale_minutes, and must be below it")
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {self.timezone!r}") from None
        return self


class VolumeBand(BaseModel):
    """Volume anomaly detection: rows outside median ± k·MAD of the last `runs` successful runs warn."""

    model_config = ConfigDict(extra="forbid")
    k: float = Field(default=5.0, gt=0, le=100)
    runs: int = Field(default=14, ge=3, le=1000, description="how many recent successful runs make the band")
    min_runs: int = Field(default=5, ge=3, le=1000, description="fewer runs of history: no verdict, said so")
