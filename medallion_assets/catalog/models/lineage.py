"""Lineage rows: dataset edges (stages, SQL, alternates), column edges, and edges other tools report."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from medallion_assets.catalog.models.base import Identifier, Row


class DatasetLineage(Row):
    key_fields = ("upstream", "downstream", "via")
    upstream: Identifier
    downstream: Identifier
    via: str = Field(description="the stage (pipeline_id.stage_name), query or alternate that makes the edge")
    kind: Literal["stage", "sql", "alternate"] = "stage"
    cost: float = Field(default=1.0, ge=0)
    is_default: bool = True


class ColumnLineage(Row):
    key_fields = ("downstream", "downstream_column", "upstream", "upstream_column")
    downstream: str
    downstream_column: str
    upstream: str
    upstream_column: str
    transformation: Literal["identity", "expression", "aggregate", "filter", "join_key"] = "identity"


class ExternalLineage(Row):
    """An edge another tool (Airflow, dbt, Spark…) reported in OpenLineage events, through `medallion lineage
    ingest` or `serve`: its job read `upstream` to write `downstream`. A dataset is named by its catalog id
    when it is one of Medallion's, else by its OpenLineage namespace and name as `namespace/name`."""

    key_fields = ("upstream", "downstream", "job")
    upstream: str
    downstream: str
    job: str = Field(description="the job that made the edge: its OpenLineage namespace/name")
    producer: str = Field(default="", description="the tool that reported it: the event's producer")
    run_id: str | None = None
    event_time: str | None = Field(default=None, description="when the reporting run last said so (ISO 8601)")
    cost: float = Field(default=1.0, ge=0)
