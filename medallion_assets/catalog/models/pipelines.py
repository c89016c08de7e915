"""Pipelines and their stages: what runs, in which order, from which inputs to which target."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from medallion_assets.catalog.models.base import Identifier, Row, _renamed
from medallion_assets.catalog.models.monitoring import Sla, VolumeBand
from medallion_assets.paths import UnsafePath, path_under


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


# A unit test's rows: inline, a mapping of column → value each, or the name of a CSV file beside the YAML
# file (the loader reads it in, so a loaded test holds its rows).
TestRows = list[dict[str, Any]] | str


class StageTest(Row):
    """A unit test of a silver or gold stage, as dbt's: rows for each of its inputs, and the rows the stage
    must make of them (compared on the columns the expected rows name) or the quarantine reasons it must
    give. `medallion test` runs it through the stage's own transformation on local Spark, writing nothing."""

    key_fields = ("pipeline_id", "stage_name", "test_name")
    pipeline_id: Identifier
    stage_name: Identifier
    test_name: Identifier
    description: str = ""
    given: dict[str, TestRows] = Field(description="each input of the stage (its id) → its rows")
    expect_rows: TestRows | None = Field(default=None, description="the rows the stage makes, in any order")
    expect_quarantined: list[str] | None = Field(
        default=None, description="the reason of every row the stage quarantines, in any order"
    )

    @model_validator(mode="after")
    def _expects_something(self) -> StageTest:
        if self.expect_rows is None and self.expect_quarantined is None:
            raise ValueError("a stage test sets expect_rows, expect_quarantined or both")
        return self

    def with_csv_rows(self, folder: Path) -> tuple[StageTest, list[tuple[str, str]]]:
        """The test with the rows of each CSV file it names read in (an empty cell is a null), and a
        (field, message) for each file that cannot be: one outside `folder` (the YAML file's) is refused."""
        unread: list[tuple[str, str]] = []

        def read(field: str, rows: TestRows) -> list[dict[str, Any]]:
            if not isinstance(rows, str):
                return rows
            try:
                with Path(path_under(str(folder), rows)).open(newline="") as file:
                    return [{k: v or None for k, v in row.items()} for row in csv.DictReader(file)]
            except (UnsafePath, OSError) as error:
                unread.append((field, f"cannot read CSV file {rows!r}: {error}"))
                return []

        given = {input_id: read(f"given.{input_id}", rows) for input_id, rows in self.given.items()}
        expected = None if self.expect_rows is None else read("expect_rows", self.expect_rows)
        return self.model_copy(update={"given": given, "expect_rows": expected}), unread
