"""Pipelines and their stages: what runs, in which order, from which inputs to which target."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from medallion_assets.catalog.models.base import Identifier, Row, _renamed
from medallion_assets.catalog.models.monitoring import Sla, VolumeBand


class Pipeline(Row):
    key_fields = ("pipeline_id",)
    pipeline_id: Identifier
    description: str = ""
    owner: str = ""
    enabled: bool = True
    default_retry_id: Identifier | None = None
    criticality: Literal["critical", "high", "normal", "low"] = "normal"
    expected_cost: float = Field(default=1.0, ge=0)
    schedule: str | None = Field(default=None, description="cron expression for when the pipeline is due")
    sla: Sla | None = Field(
        default=None, description="freshness every dataset of the pipeline owes, unless its own"
    )
    volume_band: VolumeBand | None = Field(default=None, description="set (even to {}) to check volumes")
    min_dq_rate: float = Field(
        default=0.99,  # the design's data quality above 99%
        gt=0,
        le=1,
        description="share of the rows each stage judges that no rule rejects; below it the stage's dq_rate "
        "check fails, with dq_severity",
    )
    dq_severity: Literal["warn", "error"] = Field(
        default="warn",
        description="warn: a run below min_dq_rate succeeds with warnings; error: its check fails, an error",
    )
    domain: Identifier = Field(
        default="main",
        description="the Dagster code location the pipeline's assets load "
        "in: one per domain (`medallion workspace`)",
    )


class Stage(Row):
    key_fields = ("pipeline_id", "stage_order")
    pipeline_id: Identifier
    stage_order: int = Field(ge=1)
    stage_name: Identifier
    input_id: Identifier = Field(
        description="the stage's main input: a raw source (bronze), or an upstream target "
        "(silver, gold); deprecated name: source_id"
    )
    inputs: list[Identifier] = Field(
        default_factory=list, description="further upstream targets, e.g. for joins"
    )
    target_id: Identifier
    transform_sql: str | None = Field(default=None, description="SQL over the inputs, named by their ids")
    sql_dialect: str = Field(default="spark", description="dialect of transform_sql; transpiled to Spark SQL")
    validation_set_id: Identifier | None = None
    retry_id: Identifier | None = None
    enabled: bool = True

    @model_validator(mode="before")
    @classmethod
    def _deprecated_names(cls, data: Any) -> Any:
        return _renamed(data, "stages", "source_id", "input_id")

    def input_ids(self) -> list[str]:
        return [self.input_id, *self.inputs]
