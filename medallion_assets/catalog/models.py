"""The catalog's row format, one pydantic model per table: the documentation of record for metadata_seed/.

Every model forbids unknown fields, so a YAML typo is an error that names the field, never a silent default.
"""

from __future__ import annotations

import re
import typing
import warnings
from typing import Annotated, Any, ClassVar, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from medallion_assets.naming import check_identifier, split_qualified
from medallion_assets.patterns import compiled
from medallion_assets.sql_safety import UnsafeSql, checked_condition

Identifier = Annotated[str, AfterValidator(check_identifier)]
QualifiedName = Annotated[str, AfterValidator(lambda value: ".".join(split_qualified(value)) and value)]

COLUMN_TYPE = re.compile(
    r"(string|int|bigint|long|double|float|boolean|date|timestamp|decimal\(\d{1,2},\s*\d{1,2}\))"
)
Layer = Literal["bronze", "silver", "gold"]
FileFormat = Literal["jsonl", "csv", "parquet"]
Compression = Literal["auto", "none", "gzip", "bzip2", "zstd"]
RuleType = Literal[
    "row_count",
    "not_null",
    "unique",
    "accepted_values",
    "range",
    "regex",
    "schema_match",
    "freshness",
    "great_expectations",
    "scd2_one_current",
    "scd2_no_overlap",
]
# Rules on a type 2 history: `columns` are the keys, `kwargs` may rename the validity columns.
HISTORY_RULE_TYPES = frozenset({"scd2_one_current", "scd2_no_overlap"})
RULE_TYPES: tuple[RuleType, ...] = typing.get_args(RuleType)


def _check_columns(columns: dict[str, str]) -> dict[str, str]:
    for name, type_name in columns.items():
        check_identifier(name, "column")
        if not COLUMN_TYPE.fullmatch(type_name):
            raise ValueError(f"column {name!r} has unknown type {type_name!r}")
    return columns


Columns = Annotated[dict[str, str], AfterValidator(_check_columns)]


class Row(BaseModel):
    """A catalog row. `key_fields` name the primary key, used for upserts and in every error message."""

    model_config = ConfigDict(extra="forbid")
    key_fields: ClassVar[tuple[str, ...]]

    def key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.key_fields)


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


class DeprecatedName(FutureWarning):
    """A catalog field or value spelled the old way; it still loads, under its new spelling. Shown by default.

    `field` is the old spelling's field, so the loader can point at its file and line."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def _renamed(data: Any, table: str, old: str, new: str) -> Any:
    """A YAML row with the deprecated field `old` spelled as `new`, with a DeprecatedName warning."""
    if not isinstance(data, dict) or old not in data:
        return data
    if new in data:
        raise ValueError(f"{old} is the deprecated name of {new}: write only {new}")
    warnings.warn(DeprecatedName(f"{table}: field {old!r} is deprecated, write {new!r}", old), stacklevel=3)
    return {(new if name == old else name): value for name, value in data.items()}


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
    incremental: Incremental | Literal["full"] | None = Field(
        default=None,
        description=(
            "full: recompute the dataset whole on every run; {by: COLUMN} (keyed silver): merges search only "
            "the days of `by` their new rows fall on; {by: COLUMN, lookback: DAYS} (gold): recompute the "
            "days its main input's changes fall on, and the lookback's days after them; by default, what "
            "the definition allows"
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


class Rule(BaseModel):
    """One validation rule. Severity error makes a blocking asset check; its action says what befalls rows."""

    model_config = ConfigDict(extra="forbid")
    type: RuleType
    name: Identifier | None = None
    column: Identifier | None = None
    columns: list[Identifier] | None = None
    severity: Literal["warn", "error"] = "error"
    action: Literal["warn", "drop", "quarantine", "fail"] | None = None
    min: float | None = None
    max: float | None = None
    values: list[Any] | None = None
    pattern: str | None = None
    max_age_hours: float | None = None
    expected: Columns | None = None
    expectation: str | None = Field(
        default=None, description="Great Expectations class, e.g. ExpectColumnValuesToBeBetween"
    )
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _complete(self) -> Rule:
        needs = {
            "not_null": ("column",),
            "accepted_values": ("column", "values"),
            "range": ("column",),
            "regex": ("column", "pattern"),
            "schema_match": ("expected",),
            "freshness": ("column", "max_age_hours"),
            "great_expectations": ("expectation",),
        }
        missing = [name for name in needs.get(self.type, ()) if getattr(self, name) is None]
        if self.type == "unique" and not (self.column or self.columns):
            missing.append("column")
        if self.type in HISTORY_RULE_TYPES:
            if not self.columns:
                missing.append("columns")
            ValidityColumns(**self.kwargs)  # kwargs may only rename the validity columns
        if missing:
            raise ValueError(f"rule type {self.type} needs {', '.join(missing)}")
        if self.type == "regex":
            compiled(self.pattern)
        if self.action is None:
            self.action = "fail" if self.severity == "error" else "warn"
        if self.name is None:
            subject = self.column or "_".join(self.columns or []) or (self.expectation or "").lower()
            self.name = check_identifier("_".join(part for part in (self.type, subject) if part), "rule name")
        return self

    def subject_columns(self) -> list[str]:
        return [self.column] if self.column else list(self.columns or [])


class ValidationRuleSet(Row):
    key_fields = ("rule_set_id",)
    rule_set_id: Identifier
    description: str = ""
    check_def: list[Rule]

    @field_validator("check_def")
    @classmethod
    def _unique_names(cls, rules: list[Rule]) -> list[Rule]:
        # Each rule's own validator (_complete) has named it by now.
        names = [rule.name for rule in rules if rule.name is not None]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"rule names must be unique within a set: {', '.join(duplicates)}")
        return rules


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


# The tables a YAML file may fill, in the order that upserts respect references.
LOADABLE: dict[str, type[Row]] = {
    "retry_policies": RetryPolicy,
    "pipelines": Pipeline,
    "sources": Source,
    "targets": Target,
    "validation_rules": ValidationRuleSet,
    "stages": Stage,
    "healing_actions": HealingAction,
    "control_flags": ControlFlag,
    "profiles": Profile,
    "pipeline_profiles": PipelineProfile,
    "profile_settings": ProfileSetting,
    "throttles": Throttle,
    "dataset_lineage": DatasetLineage,
    "column_lineage": ColumnLineage,
    "external_lineage": ExternalLineage,
    "notifications": Notification,
    "table_maintenance": TableMaintenance,
}


def history_rules(target: Target) -> list[Rule]:
    """The checks every type 2 target gets: at most one current row per key, no overlapping validity
    intervals, and (keys, valid_from) unique."""
    if target.scd_type != 2:
        return []
    names = target.validity_columns or ValidityColumns()
    validity = names.model_dump()
    return [
        Rule(type="scd2_one_current", name="scd2_one_current_row", columns=target.keys, kwargs=validity),
        Rule(
            type="scd2_no_overlap", name="scd2_no_overlapping_validity", columns=target.keys, kwargs=validity
        ),
        Rule(type="unique", name="scd2_unique_valid_from", columns=[*target.keys, names.valid_from]),
    ]
