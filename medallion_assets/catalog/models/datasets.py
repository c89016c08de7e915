"""Datasets: raw `sources` and the `targets` stages write, with how a target is kept (keys, CDC, history,
incremental merges, its lake table)."""

from __future__ import annotations

import re
import warnings
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from medallion_assets.catalog.models.base import (
    Columns,
    Compression,
    DeprecatedName,
    FileFormat,
    Identifier,
    Layer,
    Row,
    _renamed,
)
from medallion_assets.catalog.models.monitoring import Sla
from medallion_assets.naming import split_qualified
from medallion_assets.sql_safety import UnsafeSql, checked_condition


class Source(Row):
    key_fields = ("source_id",)
    source_id: Identifier
    s3_path: str = Field(description="s3://bucket/prefix/ or a local folder holding the raw files")
    file_format: FileFormat
    compression: Compression = Field(
        default="auto",
        description="how jsonl and csv objects are compressed; auto: by the key's ending (.gz, .bz2, .zst)",
    )
    columns: Columns = Field(description="the raw schema: column name → type, in file order")
    options: dict[str, Any] = Field(default_factory=dict, description="reader options, e.g. csv delimiter")
    system: Identifier | None = Field(
        default=None, description="source system for throttles; default: the bucket"
    )
    owner: str = ""
    description: str = ""

    def system_id(self) -> str:
        """The system throttles count against: declared, or the bucket (or folder) the files live in."""
        if self.system:
            return self.system
        if not self.s3_path.startswith("s3://"):
            return "local_files"
        return re.sub(r"[^A-Za-z0-9_]", "_", self.s3_path.removeprefix("s3://").split("/")[0])


def _condition(value: str | None) -> str | None:
    """A CDC condition: one SQL boolean expression over the event's columns (sql_safety.checked_condition)."""
    if value is not None:
        try:
            checked_condition(value)
        except UnsafeSql as error:
            raise ValueError(f"condition {value!r} {error}") from None
    return value


Condition = Annotated[str, AfterValidator(_condition)]


class Cdc(BaseModel):
    """How a target applies a change feed: each input row is an event on the row of its keys; or, with
    `from_snapshot`, a row of one of the table's whole snapshots, whose changes are derived."""

    model_config = ConfigDict(extra="forbid")
    sequence_by: Identifier = Field(
        description=(
            "the events' order; ties are broken by ingestion order, then by the row's content. With "
            "from_snapshot: which snapshot a row belongs to (e.g. its export time), and their order"
        )
    )
    from_snapshot: bool = Field(
        default=False,
        description=(
            "the input holds whole snapshots of the table, each the rows sharing one sequence_by value; "
            "consecutive snapshots are compared: a key's row in a snapshot upserts it, a key missing from "
            "the snapshot after one that held it is deleted there"
        ),
    )
    apply_as_deletes: Condition | None = Field(
        default=None, description="SQL condition of an event that deletes its key, e.g. op = 'D'"
    )
    apply_as_truncates: Condition | None = Field(
        default=None, description="SQL condition of an event that empties the table (type 1 only)"
    )
    ignore_null_updates: bool = Field(
        default=False, description="a null in an update keeps the key's previous value of that column"
    )
    except_columns: list[Identifier] = Field(
        default_factory=list, description="event columns kept out of the target, e.g. op"
    )


class ValidityColumns(BaseModel):
    """The names of a type 2 target's validity columns."""

    model_config = ConfigDict(extra="forbid")
    valid_from: Identifier = "__valid_from"
    valid_to: Identifier = "__valid_to"
    is_current: Identifier = "__is_current"


# The longest lookback a gold target may declare: a year and a day (a leap year's days, and one more).
MAX_LOOKBACK_DAYS = 366


class Incremental(BaseModel):
    """How a keyed silver target's merges find the rows that new input may replace; how a gold target is
    recomputed day by day (dbt microbatch's idea: the days its main input's changes fall on, with a
    lookback)."""

    model_config = ConfigDict(extra="forbid")
    by: Identifier = Field(
        description=(
            "a date or timestamp column whose day all rows of a key share (an event's time). Silver: a merge "
            "searches only the days its new rows fall on, which a table partitioned by days(by) prunes to. "
            "Gold: the day column its SQL makes from an event time of its main input; a run recomputes the "
            "days that input's changes touched"
        )
    )
    lookback: int = Field(
        default=0,
        description=(
            f"gold: how many days before its own a day of gold is made from, 0 to {MAX_LOOKBACK_DAYS} (a "
            "window over the last days): a touched day's change reaches that many days after it too"
        ),
    )


class LakeTable(BaseModel):
    """Where and how a lake target is kept as a table: `<catalog>.<namespace>.<name>`, by default
    `lake.<layer>.<dataset>`, and its layout. Partition and sort entries and property values are checked
    against the table format's rules when the catalog is validated (storage/lake/layout.py)."""

    model_config = ConfigDict(extra="forbid")
    catalog: Identifier = Field(
        default="lake", description="the lake catalog it lives in (MEDALLION_LAKE_CATALOG[__NAME])"
    )
    namespace: Identifier | None = Field(default=None, description="its namespace; the layer by default")
    name: Identifier | None = Field(default=None, description="its name; the dataset's by default")
    partition_by: list[str] = Field(
        default_factory=list,
        description="partition transforms, e.g. days(event_ts), bucket(16, user_id), or a column",
    )
    sort_by: list[str] = Field(
        default_factory=list, description="write order, e.g. 'user_id', 'event_ts DESC NULLS LAST'"
    )
    properties: dict[str, str] = Field(
        default_factory=dict,
        description="table properties, e.g. format-version: '2', write.target-file-size-bytes: '134217728'",
    )


class Target(Row):
    key_fields = ("target_id",)
    target_id: Identifier
    layer: Layer
    kind: Literal["lake", "warehouse"] = Field(
        default="lake",
        description=(
            "lake (a table of the lake) or warehouse (also loaded into the warehouse table "
            "`location`, whichever MEDALLION_WAREHOUSE_URL names: DuckDB, PostgreSQL or Redshift). "
            "Deprecated: the field name `type`, and its value `redshift` for warehouse"
        ),
    )
    location: str | None = Field(default=None, description="schema.table for warehouse targets")
    version: int | None = Field(
        default=None,
        ge=1,
        description="warehouse targets: the version of the columns' contract; from 2 on, the table "
        "`<location>_v<N>` is built beside the earlier versions' tables, which are left to their readers",
    )
    columns: Columns | None = Field(default=None, description="declared schema; silver casts to it")
    column_descriptions: dict[Identifier, str] | None = Field(
        default=None, description="what a declared column means, by name; shown in the Dagster UI"
    )
    keys: list[Identifier] = Field(default_factory=list, description="deduplication and merge keys")
    keep_latest_by: Identifier | None = Field(
        default=None, description="which duplicate survives: the latest by"
    )
    load_mode: Literal["replace", "merge"] = "replace"
    system: Identifier | None = Field(default=None, description="target system for throttles")
    owner: str = ""
    description: str = ""
    sla: Sla | None = Field(default=None, description="freshness the dataset owes; overrides its pipeline's")
    lake_table: LakeTable | None = Field(
        default=None, description="the lake table's catalog, namespace, name, partitioning, order, properties"
    )
    cdc: Cdc | None = Field(
        default=None, description="apply the input as a change feed on the keys (silver): sequence, deletes"
    )
    scd_type: Annotated[int, Field(ge=1, le=2)] | None = Field(
        default=None, description="with cdc: 1 keeps the latest row per key, 2 keeps every version (history)"
    )
    track_history_columns: list[Identifier] | None = Field(
        default=None, description="type 2: the columns whose change makes a new version (default: all)"
    )
    track_history_except: list[Identifier] | None = Field(
        default=None, description="type 2: the columns whose change does not make a new version"
    )
    validity_columns: ValidityColumns | None = Field(
        default=None,
        description="type 2: names of the validity columns (__valid_from, __valid_to, __is_current)",
    )
    incremental: Incremental | Literal["full", "when_possible"] | None = Field(
        default=None,
        description=(
            "full: recompute the dataset whole on every run; {by: COLUMN} (keyed silver): merges search only "
            "the days of `by` their new rows fall on; {by: COLUMN, lookback: DAYS} (gold): recompute the "
            "days its main input's changes fall on, and the lookback's days after them; when_possible "
            "(gold by groups): incremental whenever the definition allows, even where a recompute would "
            "cost less (a small silver table, a third of the groups touched); by default, what the "
            "definition allows, and costs less"
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _deprecated_names(cls, data: Any) -> Any:
        written_as = "type" if isinstance(data, dict) and "type" in data else "kind"
        data = _renamed(data, "targets", "type", "kind")
        if isinstance(data, dict) and data.get("kind") == "redshift":
            warnings.warn(
                DeprecatedName(
                    f"target {data.get('target_id')}: kind 'redshift' is deprecated, write "
                    "'warehouse' (the warehouse may be DuckDB, PostgreSQL or Redshift)",
                    written_as,
                ),
                stacklevel=2,
            )
            return {**data, "kind": "warehouse"}
        return data

    @model_validator(mode="after")
    def _warehouse_needs_table(self) -> Target:
        if self.kind == "warehouse":
            if not self.location:
                raise ValueError("location (schema.table) is required for a warehouse target")
            split_qualified(self.location)
        if self.load_mode == "merge" and not self.keys:
            raise ValueError("load_mode merge needs keys")
        undeclared = sorted(set(self.column_descriptions or ()) - set(self.columns or ()))
        if undeclared:
            raise ValueError(f"column_descriptions name undeclared column(s): {', '.join(undeclared)}")
        self._check_changes()
        self._check_incremental()
        return self

    def warehouse_table(self) -> str | None:
        """The warehouse table the target loads: `location`, or from version 2 on `<location>_v<N>`."""
        if self.location is None or (self.version or 1) == 1:
            return self.location
        return f"{self.location}_v{self.version}"

    def _check_incremental(self) -> None:
        """A merge window needs a keyed silver merge and a day to search by; gold's days, a declared day
        column that holds each key's rows to one day."""
        if self.incremental == "when_possible" and self.layer != "gold":
            raise ValueError(
                "incremental: when_possible is for gold targets (a silver merge is kept at any size by "
                "MEDALLION_SILVER_MERGE_FROM_ROWS=0)"
            )
        if not isinstance(self.incremental, Incremental):
            return
        by, lookback = self.incremental.by, self.incremental.lookback
        if self.layer == "bronze":
            raise ValueError("incremental.by is for silver and gold targets")
        if self.layer == "silver":
            if not self.keys or self.cdc is not None:
                raise ValueError("incremental.by is for keyed silver targets without cdc (their merges)")
            if lookback:
                raise ValueError(
                    "incremental.lookback is for gold targets: a silver merge searches exactly the days of "
                    "its new rows"
                )
        if not 0 <= lookback <= MAX_LOOKBACK_DAYS:
            raise ValueError(
                f"incremental.lookback is {lookback}: give a number of days from 0 to {MAX_LOOKBACK_DAYS}"
            )
        if self.layer == "gold":
            if not self.columns:
                raise ValueError("incremental.by of a gold target names one of its columns: declare them")
            # Gold replaces whole days: a key with rows on two days would keep one of them twice.
            if self.keys and by not in self.keys:
                raise ValueError(
                    f"incremental.by column {by!r} is not one of the keys ({', '.join(self.keys)}): a key's "
                    "rows must share one day"
                )
        if self.columns:
            if by not in self.columns:
                raise ValueError(f"incremental.by names undeclared column {by!r}")
            if self.columns[by].lower() not in ("date", "timestamp", "timestamp_ntz"):
                raise ValueError(
                    f"incremental.by column {by!r} is {self.columns[by]}, not a date or timestamp"
                )

    def _check_changes(self) -> None:
        """CDC and SCD fields make sense together."""
        history = self.track_history_columns is not None or self.track_history_except is not None
        if self.cdc is None:
            if self.scd_type is not None or history or self.validity_columns is not None:
                raise ValueError("scd_type, track_history_* and validity_columns need cdc")
            return
        if not self.keys:
            raise ValueError("cdc needs keys: the events apply to the row of their keys")
        if self.layer != "silver":
            raise ValueError("cdc applies change feeds in silver")
        if self.track_history_columns is not None and self.track_history_except is not None:
            raise ValueError("give track_history_columns or track_history_except, not both")
        if self.scd_type != 2 and (history or self.validity_columns is not None):
            raise ValueError("track_history_* and validity_columns are for scd_type 2")
        if self.scd_type == 2 and self.cdc.apply_as_truncates:
            raise ValueError("apply_as_truncates is for scd_type 1: a type 2 history is never truncated")
        if self.cdc.from_snapshot:
            self._check_snapshots(self.cdc)
        if self.columns:
            named = [self.cdc.sequence_by, *self.cdc.except_columns]
            named += [*(self.track_history_columns or ()), *(self.track_history_except or ())]
            unknown = sorted(set(named) - set(self.columns))
            if unknown:
                raise ValueError(f"cdc names undeclared column(s): {', '.join(unknown)}")
            if self.cdc.sequence_by in self.cdc.except_columns:
                raise ValueError("except_columns cannot hold sequence_by")

    @staticmethod
    def _check_snapshots(cdc: Cdc) -> None:
        """Snapshots carry whole rows and no operation: what a change feed's events say, comparing does."""
        if cdc.apply_as_deletes:
            raise ValueError(
                "apply_as_deletes is for change feeds: with from_snapshot, a key missing from a snapshot is "
                "deleted"
            )
        if cdc.apply_as_truncates:
            raise ValueError(
                "apply_as_truncates is for change feeds: with from_snapshot, a snapshot holds every row"
            )
        if cdc.ignore_null_updates:
            raise ValueError(
                "ignore_null_updates is for change feeds: with from_snapshot, a null is the column's value"
            )
