"""Running one stage end to end without Dagster: read inputs, transform, apply row rules, write, check, load.

Silver and gold are written whole to a branch of their lake table named after the run, their rules are judged
on that branch, and only when no blocking rule fails is the table's `main` fast-forwarded to it
(write-audit-publish): no reader ever sees unchecked data, and a failed run leaves the previous version.

The asset factory wraps `run_stage`; the CLI, benchmarks and tests can call it directly.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import reduce
from itertools import islice
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType
from sqlglot import exp

from medallion_assets import config
from medallion_assets.catalog.days import NotDaywise, day_column, declared_schemas, gold_day_source
from medallion_assets.catalog.loader import declared_columns
from medallion_assets.catalog.models import Incremental, Rule, Source, Stage, Target, history_rules
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.versions import stage_fingerprint
from medallion_assets.engine import changes, staging_writer
from medallion_assets.engine.ingest import bronze_schema, complete_quarantine, ingest
from medallion_assets.engine.refresh import FullRefresh
from medallion_assets.engine.services import Ledger, Recovery, Throttle
from medallion_assets.engine.transform import (
    NotGroupwise,
    conform,
    counted,
    deduplicate,
    describe_groups,
    group_key_column,
    group_keys,
    row_by_row,
    run_sql,
    with_group_keys,
)
from medallion_assets.engine.validation import (
    RuleOutcome,
    evaluate_rules,
    evaluate_rules_and_count,
    judges_per_key,
    observe_rules,
    reads_written_data,
    row_violation,
)
from medallion_assets.errors import StageHalted
from medallion_assets.naming import INGESTION_COLUMNS
from medallion_assets.storage.lake.layout import TableRef, table_of
from medallion_assets.storage.lake.tables import LakeTables
from medallion_assets.storage.objects import ObjectInfo, configured_endpoint, list_objects
from medallion_assets.storage.warehouse import DELETE_FLAG, LoadResult, StagedParquet, Warehouse

# Why a stage runs in full when its target says so.
ASKED_FULL = "its catalog row asks for a full recompute on every run (incremental: full)"

# Rows per Arrow batch when a load streams partition by partition (after healing asked for smaller batches).
_ROWS_PER_BATCH = 50_000


@dataclass
class StageOutcome:
    rows_read: int = 0
    rows_written: int = 0
    rows_quarantined: int = 0
    rule_outcomes: list[RuleOutcome] = field(default_factory=list)
    load: LoadResult | None = None
    table: str = ""  # the lake table written
    snapshot_id: int | None = None  # its version this stage committed; None when nothing was published
    staged_branch: str | None = None  # where an unpublished version waits for inspection
    input_snapshots: dict[str, int] = field(default_factory=dict)  # each lake input's version read
    columns: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    duration_sec: float = 0.0
    read: list[str] = field(default_factory=list)  # the datasets actually read, after any re-route
    # Of a gold stage that recomputed only some groups: their keys (gold's columns), whose rows it replaced in
    # the version `groups_replaced_in`.
    changed_groups: DataFrame | None = None
    groups_replaced_in: int | None = None

    def blocking_failures(self) -> list[RuleOutcome]:
        return [o for o in self.rule_outcomes if not o.passed and o.rule.severity == "error"]

    def blocking_error(self) -> str | None:
        failures = self.blocking_failures()
        return "blocking rule(s) failed: " + "; ".join(o.message for o in failures) if failures else None


@dataclass(frozen=True)
class Adjustments:
    """How healing changed a stage's next attempt (see control/actions.py, which asks for them)."""

    evolve_warehouse_schema: bool = False
    load_partitions: int | None = None


@dataclass(frozen=True)
class Shaped:
    """A stage's rows before they are written, and what the write will count: rows in, each kind of reject."""

    frame: DataFrame
    counts: Observation  # holds `rows_in_metric`, the rows the transformation made
    rejects: list[tuple[DataFrame, Observation]]
    rows_in_metric: str = "rows"

    def rows_in(self) -> int:
        return int(self.counts.get[self.rows_in_metric])


@dataclass(frozen=True)
class Replacement:
    """What an incremental run puts in its table: `rows` replace every row whose `key_columns` are one of
    `keys`' (a key without a row in `rows` loses its rows), made from `rows_read` input rows. `within`, a SQL
    condition, holds of every row those keys have in the table (None: they may be anywhere). Without `keys`,
    `rows` replace every row `within` holds (gold's days), each `key_columns` value's rows all among them."""

    rows: DataFrame
    keys: DataFrame | None
    key_columns: list[str]
    rejects: list[tuple[DataFrame, Observation]]
    rows_read: int
    within: str | None = None


@dataclass(frozen=True)
class Days:
    """How a gold stage declared `incremental: {by, lookback}` recomputes its days: by the days of its main
    input's `event_column`, which its `by` is the day of, reading each dimension input whole at the snapshot
    its last commit read (`dimensions`)."""

    event_column: str
    dimensions: dict[str, int]


@dataclass(frozen=True)
class Mode:
    """How a silver or gold stage builds its dataset this run, and why: `full` (recomputed from its inputs'
    current versions) or `incremental`: silver from the rows its bronze input appended after snapshot
    `since`, gold by recomputing the groups (`groups`: output column → its key's expression over the input's
    columns) that its silver input's changes after snapshot `since` touched, or the days (`days`) its main
    input's changes after snapshot `since` touched."""

    mode: str
    why: str
    since: int | None = None
    groups: dict[str, exp.Expr] = field(default_factory=dict)
    days: Days | None = None


@dataclass
class StageRunner:
    """What a stage needs from the outside world; one per run, shared by its stages. `store` is the ledger it
    records bookmarks and audit entries in; `throttle` and `recovery` are given by the asset layer (see
    engine/services.py); `full_refresh` is the one the run's user asked for, if any (engine/refresh.py)."""

    spark: SparkSession
    snapshot: CatalogSnapshot
    store: Ledger
    lake_root: str
    warehouse: Warehouse | None = None
    halt_reason: Callable[[Stage], str | None] = lambda stage: None
    adjustments: Adjustments = field(default_factory=Adjustments)
    throttle: Throttle = field(kw_only=True)
    recovery: Recovery = field(kw_only=True)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex, kw_only=True)
    full_refresh: FullRefresh | None = field(default=None, kw_only=True)
    lake: LakeTables = field(init=False)

    def __post_init__(self) -> None:
        self.lake = LakeTables(self.spark, self.lake_root)

    def read_dataset(
        self, target_id: str, snapshot_id: int | None = None, appended_after: int | None = None
    ) -> DataFrame:
        """A lake dataset as of `snapshot_id`, or its current version; of bronze, with `appended_after`, only
        the rows appended after that snapshot."""
        target = self.snapshot.targets[target_id]
        table = table_of(target)
        if target.layer != "bronze":
            return self.lake.read(table, snapshot_id=snapshot_id)
        # Read with the catalog's schema: its columns in its order, whatever the table gained meanwhile.
        producer = self.snapshot.stage_producing(target_id)
        assert producer is not None, "a bronze target is made by the stage that ingests its source"
        schema = StructType.fromDDL(bronze_schema(self.snapshot.sources[producer.input_id]))
        assert isinstance(schema, StructType)
        return self.lake.read_columns(table, schema, snapshot_id=snapshot_id, appended_after=appended_after)

    def rules(self, stage: Stage) -> list[Rule]:
        """The stage's rule set, and the checks its target's kind implies (a type 2 history's)."""
        implied = history_rules(self.snapshot.targets[stage.target_id])
        if not stage.validation_set_id:
            return implied
        return [*self.snapshot.rule_sets[stage.validation_set_id].check_def, *implied]

    def run_stage(self, stage: Stage) -> StageOutcome:
        started = time.perf_counter()
        target = self.snapshot.targets[stage.target_id]
        # What the warehouse holds before this run: an incremental load applies to exactly that version.
        held = (
            self.store.warehouse_snapshot(target.target_id, repr(self.warehouse))
            if target.kind == "warehouse" and self.warehouse is not None
            else None
        )
        if target.layer == "bronze":
            outcome = self._ingest(stage, self.recovery.readable_source(stage), target)
            written = self.read_dataset(target.target_id, outcome.snapshot_id)
            # Bronze rules judge the whole dataset, not only this batch, and so does its row count, counted by
            # the same aggregation, or it would contradict its checks.
            outcome.rule_outcomes, outcome.details["rows_in_dataset"] = evaluate_rules_and_count(
                written, self.rules(stage)
            )
        else:
            outcome, written = self._transform(stage, target)
        outcome.table = str(table_of(target))
        # The lake's facts go where the stage's other details go: the audit row and the asset's metadata.
        outcome.details["table"] = outcome.table
        if outcome.snapshot_id is not None:
            outcome.details["snapshot_id"] = str(outcome.snapshot_id)
        if outcome.input_snapshots:
            outcome.details["input_snapshots"] = {k: str(v) for k, v in outcome.input_snapshots.items()}
        if outcome.staged_branch:
            outcome.details["staged_branch"] = outcome.staged_branch
        outcome.columns = {f.name: f.dataType.simpleString() for f in written.schema.fields}
        # A failed rule of severity error keeps the data out of the warehouse; the caller reports it.
        if target.kind == "warehouse" and not outcome.blocking_failures():
            reason = self.halt_reason(stage)
            if reason:
                raise StageHalted(reason)
            outcome.load = self._load(stage, target, written, outcome, held)
        if outcome.changed_groups is not None:
            outcome.changed_groups.unpersist()
        outcome.duration_sec = time.perf_counter() - started
        return outcome

    def _ingest(self, stage: Stage, source: Source, target: Target) -> StageOutcome:
        """Ingest the source's new objects as one snapshot of the bronze table.

        The objects are bookmarked `pending` before the commit and settled with its snapshot after it. A run
        stopped in between leaves them pending, and the next run asks the table whether that batch was
        committed (its snapshot carries the batch id): so a crash at any point ingests nothing twice and loses
        nothing."""
        table = table_of(target)
        completed = self._settle_pending(source, table)
        objects = list_objects(source.s3_path, source.source_id)
        processed = self.store.processed_objects(source.source_id)
        new = [o for o in objects if processed.get(o.url) != o.etag]
        audit = dict(pipeline_id=stage.pipeline_id, stage_name=stage.stage_name, dataset=stage.target_id)
        self.throttle.take_from_source(source, {"bytes_per_hour": sum(o.size for o in new)}, **audit)
        batch_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
        marks = [(o.url, o.etag, o.size) for o in new]
        self.store.record_bookmarks(source.source_id, marks, batch_id, state="pending")
        try:
            result = ingest(self.lake, source, new, (table, target.lake_table), batch_id)
        except Exception:
            # A batch bronze never committed is forgotten, and its objects ingested again next time. One that
            # failed after bronze's commit (in the quarantine's write) stays pending: the next run completes
            # its quarantine before settling it, so its rejects are not lost and its rows not ingested twice.
            if new and not self.lake.batch_snapshots(table, [batch_id]):
                self.store.settle_batch(source.source_id, batch_id, None)
            raise
        snapshot_id = self.lake.batch_snapshots(table, [batch_id]).get(batch_id) if new else None
        self.store.settle_batch(source.source_id, batch_id, snapshot_id)
        if snapshot_id is not None:
            self._record_commit(stage, snapshot_id, "append", {})
        # Rows are known once parsed: they count against the source now and hold back its next batch.
        self.throttle.take_from_source(source, {"rows_per_minute": result.rows_read}, **audit)
        return StageOutcome(
            result.rows_read,
            result.rows_written,
            result.rows_quarantined,
            snapshot_id=snapshot_id if snapshot_id is not None else self.lake.current_snapshot(table),
            details={
                "batch_id": batch_id,
                "source": source.source_id,
                "objects_new": len(new),
                "objects_seen": len(objects),
                # Rejects of an earlier run's committed batch, quarantined by this one (see _settle_pending).
                **({"quarantine_completed": completed} if completed else {}),
            },
            read=[source.source_id],
        )

    def _settle_pending(self, source: Source, table: TableRef) -> dict[str, int]:
        """Batches an earlier run began and never settled: committed ones get their quarantine completed and
        are bookmarked with their snapshot, the others are forgotten, so their objects are ingested again.
        Returns the rows quarantined now, by batch, for those that had rejects."""
        pending = self.store.pending_batches(source.source_id)
        committed = self.lake.batch_snapshots(table, pending)
        completed = {}
        for batch_id in pending:
            if batch_id in committed:
                objects = [
                    ObjectInfo(url, size, etag)
                    for url, etag, size in self.store.batch_objects(source.source_id, batch_id)
                ]
                try:
                    completed[batch_id] = complete_quarantine(
                        self.lake, source, objects, (table.quarantine(), batch_id)
                    )
                except Exception as error:
                    raise RuntimeError(
                        f"batch {batch_id} of source {source.source_id} is in {table} (snapshot "
                        f"{committed[batch_id]}) but its rejected records could not be quarantined: {error}"
                    ) from error
            self.store.settle_batch(source.source_id, batch_id, committed.get(batch_id))
        return {batch_id: rows for batch_id, rows in completed.items() if rows}

    def _record_commit(self, stage: Stage, snapshot_id: int, operation: str, inputs: dict[str, int]) -> None:
        target = self.snapshot.targets[stage.target_id]
        self.store.record_commit(
            fingerprint=stage_fingerprint(stage, target, self.snapshot),
            dataset=stage.target_id,
            snapshot_id=snapshot_id,
            run_id=self.run_id,
            pipeline_id=stage.pipeline_id,
            stage_name=stage.stage_name,
            operation=operation,
            inputs=inputs,
        )

    def readable_inputs(self, stage: Stage) -> tuple[dict[str, DataFrame], dict[str, int | None]]:
        """The inputs of a silver or gold stage, and the datasets actually read for them, each with the
        version read (None: a table not yet written).

        An input an operator marked unavailable (an `available` flag) is rebuilt from the layer above it: its
        own stage's transformation over that stage's inputs, recursively, computed in this run and never
        written. One that cannot be rebuilt (it is bronze, or its rebuild needs a bronze dataset that is down)
        is read as it was before it was marked: its last version committed before the flag (time travel).
        Each rebuild and time travel is audited; when neither is possible, the error lists every path and
        why it is down.
        """
        down = self.recovery.flagged(self._lake_ancestry(stage))
        read: dict[str, int | None] = {}
        frames = {input_id: self._input_frame(stage, input_id, down, read) for input_id in stage.input_ids()}
        return frames, read

    def _lake_ancestry(self, stage: Stage) -> set[str]:
        """Every lake dataset the stage's inputs are made from, the inputs included."""
        found, frontier = set(), list(stage.input_ids())
        while frontier:
            dataset = frontier.pop()
            if dataset in self.snapshot.targets and dataset not in found:
                found.add(dataset)
                producer = self.snapshot.stage_producing(dataset)
                frontier += producer.input_ids() if producer else []
        return found

    def _input_frame(
        self, stage: Stage, dataset: str, down: dict[str, str], read: dict[str, int | None]
    ) -> DataFrame:
        """The dataset as read for `stage`, at the version current now (`read` records which), so that one
        run reads one version of it however long it takes."""
        if dataset not in down:
            read[dataset] = self.lake.current_snapshot(table_of(self.snapshot.targets[dataset]))
            return self.read_dataset(dataset, read[dataset])
        if not self._rebuildable(dataset, down):
            return self._as_before(stage, dataset, down, read)
        producer = self.snapshot.stage_producing(dataset)
        assert producer is not None, "a rebuildable dataset has a producing stage"
        target = self.snapshot.targets[dataset]
        inputs = {i: self._input_frame(producer, i, down, read) for i in producer.input_ids()}
        rebuilt_by = f"{producer.pipeline_id}.{producer.stage_name}"
        self._audit_reroute(
            stage, dataset, "rebuilt", down[dataset], rebuilt_by=rebuilt_by, **{"from": producer.input_ids()}
        )
        return self._shape(producer, target, inputs).frame.drop(*INGESTION_COLUMNS)

    def _audit_reroute(self, stage: Stage, dataset: str, status: str, why: str, **details: Any) -> None:
        """How `stage` read `dataset`, which is down: rebuilt from the layer above, or as it was before."""
        self.store.record_audit(
            pipeline_id=stage.pipeline_id,
            stage_name=stage.stage_name,
            dataset=stage.target_id,
            event="reroute",
            status=status,
            error=why,
            details={"dataset": dataset, **details},
        )

    def _rebuildable(self, dataset: str, down: dict[str, str]) -> bool:
        """Whether a down dataset can be computed from the layer above: a bronze one only by ingesting its
        source again, which a run does not do for a reader; a lake input of its stage that is down must be
        rebuildable or readable as it was."""
        producer = self.snapshot.stage_producing(dataset)
        if producer is None or self.snapshot.targets[dataset].layer == "bronze":
            return False
        return all(
            i not in down or self._rebuildable(i, down) or self.recovery.last_good_version(i) is not None
            for i in producer.input_ids()
        )

    def _as_before(
        self, stage: Stage, dataset: str, down: dict[str, str], read: dict[str, int | None]
    ) -> DataFrame:
        """A down dataset as it was before it was marked: time travel to its last good version."""
        version = self.recovery.last_good_version(dataset)
        if version is None:  # the paths to the dataset that cannot be read, and why each is down
            raise self.recovery.no_path(self.snapshot.stage_producing(dataset) or stage, down)
        self._audit_reroute(stage, dataset, "time_travel", down[dataset], snapshot_id=str(version))
        read[dataset] = version
        return self.read_dataset(dataset, version)

    def _shape(
        self, stage: Stage, target: Target, inputs: dict[str, DataFrame], apply: bool = True
    ) -> Shaped:
        """The stage's transformation: SQL over its inputs (or its main input), casts to the declared schema,
        deduplication, and the rows drop or quarantine rules take out; of a change feed, the events those
        rules keep, applied to the keys' rows unless `apply` is false."""
        source_frame = (
            run_sql(self.spark, inputs, stage.transform_sql, stage.sql_dialect, list(target.columns or ()))
            if stage.transform_sql
            else inputs[stage.input_id]
        )
        rejects: list[
            tuple[DataFrame, Observation]
        ] = []  # each kind of rejected rows, with its observed count
        if target.columns:  # conform counts the rows in too: one observation fewer
            conformed = conform(source_frame, target.columns)
            frame, counts, rows_in_metric = conformed.valid, conformed.counts, "rows in"
            rejects.append((conformed.rejected, conformed.counts))
        else:
            (frame, counts), rows_in_metric = counted(source_frame), "rows"
        if target.cdc is None:  # a change feed keeps every event until they are applied
            frame = deduplicate(frame, target.keys, target.keep_latest_by)
        for rule in self.rules(stage):
            violation = row_violation(rule)
            if violation is None or rule.action not in ("drop", "quarantine"):
                continue
            if rule.action == "quarantine":
                rejected = frame.where(violation).select(
                    *[c for c in INGESTION_COLUMNS if c in frame.columns],
                    F.lit(f"rule {rule.name} failed").alias("reason"),
                    F.to_json(F.struct(*frame.columns)).alias("raw"),
                )
                frame, violations = counted(frame, violation)
                rejects.append((rejected, violations))
            frame = frame.where(~violation)
        if target.cdc is not None and apply:
            frame = changes.apply_changes(changes.events_of(frame, target, frame), target)
        return Shaped(frame, counts, rejects, rows_in_metric)

    def _transform(self, stage: Stage, target: Target) -> tuple[StageOutcome, DataFrame]:
        """Compute, stage, check and publish a silver or gold dataset. Returns the outcome and the version
        written: the published one, or the staged branch when a blocking rule failed (main is untouched).

        A keyed silver dataset fed by one bronze table is brought up to date from the rows bronze appended
        since its last commit (`_plan` says whether it can be, and why not)."""
        plan = self._plan(stage, target)
        if plan.since is not None and plan.days is not None:
            return self._recompute_days(stage, target, plan)
        if plan.since is not None and plan.groups:
            return self._recompute_groups(stage, target, plan)
        if plan.since is not None:
            incremental = self._merge_new_rows(stage, target, plan)
            if not isinstance(incremental, Mode):
                return incremental
            plan = incremental
        outcome, written = self._recompute(stage, target)
        outcome.details.update(mode=plan.mode, why=plan.why)
        return outcome, written

    def _plan(self, stage: Stage, target: Target) -> Mode:
        """Whether the stage may bring its dataset up to date from what its input changed since its last
        commit, and why: silver from the rows bronze appended, gold by recomputing the groups they touch. A
        full refresh the user asked for comes first: it is why the stage runs in full, whatever else holds."""
        if self.full_refresh and self.full_refresh.reaches(target.target_id, self._lake_ancestry(stage)):
            return Mode("full", f"a full refresh was asked for by {self.full_refresh.asked_by}")
        if target.incremental == "full":
            return Mode("full", ASKED_FULL)
        if target.layer == "gold":
            if isinstance(target.incremental, Incremental):
                return self._plan_days(stage, target)
            return self._plan_groups(stage, target)
        source = self.snapshot.targets.get(stage.input_id)
        rules = self.rules(stage)
        if not target.keys:
            return Mode("full", "the target has no keys to merge new rows on")
        if stage.inputs or source is None or source.layer != "bronze":
            return Mode("full", "the stage reads more than one bronze table")
        if stage.transform_sql and not row_by_row(stage.transform_sql, stage.sql_dialect, [stage.input_id]):
            return Mode("full", "its SQL does not make each row from one input row (a join, aggregate, …)")
        if target.cdc is None and any(
            r.action in ("drop", "quarantine") and row_violation(r) is not None for r in rules
        ):
            return Mode("full", "rules drop rows after deduplication: a later batch could bring back a key")
        resumed = self._resumed(stage, target, source, self.lake.appended_between)
        if resumed.since is None:
            return resumed
        since = resumed.since
        return Mode("incremental", f"reads the rows bronze appended after snapshot {since}", since)

    def _plan_groups(self, stage: Stage, target: Target) -> Mode:
        """Whether a gold stage may recompute only the groups its silver input's changes touched
        (`gold_groups`), from its last commit on, and why."""
        source = self.snapshot.targets.get(stage.input_id)
        try:
            groups = gold_groups(stage, target, self.snapshot, self._columns_of(source) if source else [])
        except NotGroupwise as not_groupwise:
            return Mode("full", str(not_groupwise))
        assert source is not None, "gold_groups found one silver input"
        resumed = self._resumed(stage, target, source, self.lake.changed_between)
        if resumed.since is None:
            return resumed
        since = resumed.since
        described = describe_groups(groups, stage.sql_dialect)
        touched = f"the groups ({described}) that silver's changes after snapshot {since} touched"
        return Mode("incremental", "recomputes " + touched, since, groups)

    def _plan_days(self, stage: Stage, target: Target) -> Mode:
        """Whether a gold stage declared `incremental: {by, lookback}` may recompute only the days its main
        input's changes touched, from its last commit on, and why: its `by` must be the day of an event time
        of the main input (`gold_day_source`), and its dimension inputs unchanged since that commit, as a
        change to one may touch any day."""
        assert isinstance(target.incremental, Incremental)
        try:
            event_column = gold_day_source(stage, target, self._input_schemas(stage))
        except NotDaywise as not_daywise:
            return Mode("full", str(not_daywise))
        main = stage.input_id
        resumed = self._resumed(stage, target, self.snapshot.targets[main], self.lake.changed_between)
        if resumed.since is None:
            return resumed
        last = self._last_publish(target)
        assert last is not None, "the stage resumes from its last publish"
        read_then = last.get("inputs") or {}
        dimensions: dict[str, int] = {}
        for dimension in stage.inputs:
            if dimension not in read_then:
                return Mode("full", f"the last commit does not say which snapshot of {dimension} it read")
            current = self.lake.current_snapshot(table_of(self.snapshot.targets[dimension]))
            if current != int(read_then[dimension]):
                return Mode("full", f"the dimension input {dimension} changed since the last commit")
            dimensions[dimension] = current
        why = (
            f"recomputes the days of {target.incremental.by} that the changes of {main} after snapshot "
            f"{resumed.since} touched, {_lookback(main, target.incremental.lookback)}"
        )
        return Mode("incremental", why, resumed.since, days=Days(event_column, dimensions))

    def _input_schemas(self, stage: Stage) -> dict[str, dict[str, str]]:
        """Each input's columns (name → Spark type) as the stage reads them: its table's, or before it is
        written its declared ones (none when undeclared)."""
        schemas = {}
        for input_id in stage.input_ids():
            if self.lake.exists(table_of(self.snapshot.targets[input_id])):
                fields = self.read_dataset(input_id).schema.fields
                schemas[input_id] = {f.name: f.dataType.simpleString() for f in fields}
            else:
                schemas[input_id] = declared_columns(self.snapshot, input_id) or {}
        return schemas

    def _columns_of(self, dataset: Target) -> list[str]:
        """A lake dataset's columns: those its catalog row declares, else its table's."""
        if dataset.columns:
            return list(dataset.columns)
        table = table_of(dataset)
        return self.lake.read(table).columns if self.lake.exists(table) else []

    def _resumed(
        self,
        stage: Stage,
        target: Target,
        source: Target,
        readable: Callable[[TableRef, int, int | None], str | None],
    ) -> Mode:
        """Whether the stage can go on from its last commit, as every incremental plan needs: its inputs
        available, the same definition, its table untouched since, the input snapshot it read known, and what
        `source` changed since then `readable` (the lake's check of what the plan reads: why not, or None).
        Returns `since` (that snapshot) when it can, else the full mode and why."""
        if self.recovery.flagged(self._lake_ancestry(stage)):
            return Mode("full", "an input is unavailable and rebuilt from its own inputs")
        last, table = self._last_publish(target), table_of(target)
        if last is None:
            return Mode("full", "first build: no earlier commit of this stage")
        fingerprint = stage_fingerprint(stage, target, self.snapshot)
        if last.get("fingerprint") != fingerprint:
            return Mode("full", f"the stage's definition changed ({last.get('fingerprint')} → {fingerprint})")
        if self.lake.current_snapshot(table) != last["snapshot_id"]:
            return Mode(
                "full", "the table changed since this stage's last commit (a rollback or another writer)"
            )
        since = (last.get("inputs") or {}).get(stage.input_id)
        if since is None:
            return Mode("full", "the last commit does not say which input snapshot it read")
        input_table = table_of(source)
        refused = readable(input_table, int(since), self.lake.current_snapshot(input_table))
        if refused:
            return Mode("full", refused)
        return Mode("incremental", "", int(since))

    def _last_publish(self, target: Target) -> dict[str, Any] | None:
        """The ledger's row of the last version of the target's table this stage published, if any."""
        commits = [c for c in self.store.lake_commits(target.target_id) if c["operation"] == "publish"]
        return commits[-1] if commits else None

    def _merge_new_rows(
        self, stage: Stage, target: Target, plan: Mode
    ) -> tuple[StageOutcome, DataFrame] | Mode:
        """Bring the table up to date from the rows its bronze input appended since `plan.since`: new rows
        replace older ones of their keys (a change feed: the keys it touches are recomputed from their own
        events), on the run's branch, checked there, then published. When the new rows may change every key
        (a truncate event, a late snapshot), the full mode instead, saying why."""
        assert plan.since is not None
        bronze = stage.input_id
        end = self.lake.current_snapshot(table_of(self.snapshot.targets[bronze]))
        assert end is not None, "the plan found bronze's current snapshot"
        new_rows = self.read_dataset(bronze, end, appended_after=plan.since)
        # Checked first: Spark plans an empty read away, and the counts observed on it with it.
        if end == plan.since or new_rows.isEmpty():
            return self._nothing_new(stage, target, plan, end)
        shaped = self._shape(stage, target, {bronze: new_rows}, apply=False)
        # The new rows are computed once, here, by an action that completes their counts (observations, which
        # a read inside the write's delete would not): the write reads them twice (their keys, their rows).
        increment = shaped.frame.cache()
        increment.count()
        try:
            return self._merge_increment(
                stage, target, plan, shaped, without_observations(increment), new_rows, end
            )
        finally:
            increment.unpersist()

    def _nothing_new(
        self, stage: Stage, target: Target, plan: Mode, end: int
    ) -> tuple[StageOutcome, DataFrame]:
        """The input brought nothing new since the last commit: the table stays as it is. As in any
        incremental run, the rules judge this run's rows (none), and those that need the whole table judge
        it: a row count from its metadata, no data file read."""
        table = table_of(target)
        snapshot_id = self.lake.current_snapshot(table)
        current = self.lake.read(table, snapshot_id=snapshot_id)
        outcome = StageOutcome(
            rule_outcomes=self._judge_merge(stage, target, current.limit(0), current, target.keys),
            snapshot_id=snapshot_id,
            details={
                "rows_in": 0,
                "rows_merged": 0,
                "rows_in_dataset": self.lake.total_rows(table, snapshot_id) if snapshot_id else 0,
                "mode": plan.mode,
                "why": plan.why + ": none",
            },
            read=[stage.input_id],
            input_snapshots={stage.input_id: end},
        )
        return outcome, current

    def _merge_increment(
        self,
        stage: Stage,
        target: Target,
        plan: Mode,
        shaped: Shaped,
        increment: DataFrame,
        new_rows: DataFrame,
        end: int,
    ) -> tuple[StageOutcome, DataFrame] | Mode:
        bronze, table = stage.input_id, table_of(target)
        current = self.lake.current_snapshot(table)
        existing = self.lake.read(table, snapshot_id=current)
        within = None
        if target.cdc is not None:
            events = changes.flag_events(increment, target)
            if target.cdc.apply_as_truncates and changes.truncates(events).limit(1).count():
                return Mode("full", "a truncate event arrived: every key may change")
            keys = events.select(*[F.col(f"`{k}`") for k in target.keys]).distinct()
            if target.cdc.from_snapshot:
                touched = self._snapshot_keys(stage, target, plan, keys, events)
                if isinstance(touched, Mode):
                    return touched
                keys = touched
            # Every row of those keys, read from the same bronze version, shaped as in a full build.
            history = self._shape(stage, target, {bronze: self.read_dataset(bronze, end)}, apply=False)
            # Only the touched keys' events are flagged (a tie-breaker made of each whole row), not all.
            of_keys = changes.events_of(
                changes.rows_of_keys(history.frame, keys, target.keys), target, history.frame
            )
            if target.cdc.apply_as_truncates:
                of_keys = of_keys.unionByName(changes.truncates(changes.flag_events(history.frame, target)))
            rows = changes.apply_changes(of_keys, target)
        else:
            incoming = increment.drop(*INGESTION_COLUMNS)
            within = self._merge_window(target, incoming)
            rows = changes.newer_wins(
                changes.rows_of_keys(
                    existing if within is None else existing.where(within), incoming, target.keys
                ),
                incoming,
                target.keys,
                target.keep_latest_by,
            )
            keys = rows
        rows_read = new_rows.count()
        return self._replace_keys(
            stage,
            target,
            plan,
            Replacement(rows, keys, target.keys, shaped.rejects, rows_read, within),
            {bronze: end},
            rows_in=self._rows_made(stage, {bronze: new_rows}) if stage.transform_sql else rows_read,
        )

    def _snapshot_keys(
        self, stage: Stage, target: Target, plan: Mode, new_keys: DataFrame, new_rows: DataFrame
    ) -> DataFrame | Mode:
        """The keys that new snapshots (`new_rows`, holding `new_keys`) may change: theirs, and those of the
        latest snapshot applied before, which are deleted where missing from the first new one. A new snapshot
        not after that one (a late snapshot, or the rest of one split across batches) may change the keys of
        any snapshot after it: then the full mode, saying why."""
        assert target.cdc is not None and plan.since is not None
        sequence = F.col(f"`{target.cdc.sequence_by}`")
        bronze = stage.input_id
        applied = self._shape(
            stage, target, {bronze: self.read_dataset(bronze, plan.since)}, apply=False
        ).frame
        latest = applied.agg(F.max(sequence).alias("cdc latest applied"))
        earliest_new, latest_applied = new_rows.agg(F.min(sequence)).crossJoin(latest).first() or (None, None)
        if earliest_new is None or latest_applied is None:
            return new_keys  # no new snapshot, or none before it to compare with
        if earliest_new <= latest_applied:
            return Mode(
                "full",
                f"a snapshot arrived late ({target.cdc.sequence_by} {earliest_new} is not after "
                f"{latest_applied}, the latest applied): every key of the snapshots after it may change",
            )
        # Compared in Spark, not with the value collected: a timestamp need not survive the round trip.
        previous_keys = (
            applied.crossJoin(latest)
            .where(sequence == F.col("`cdc latest applied`"))
            .select(*[F.col(f"`{k}`") for k in target.keys])
        )
        return new_keys.unionByName(previous_keys).distinct()

    @staticmethod
    def _merge_window(target: Target, incoming: DataFrame) -> str | None:
        """Where a merge of `incoming` searches the table for its keys' rows: the days of the target's
        `incremental.by` that the incoming rows fall on, since a key's rows all share that day (None: the
        whole table)."""
        if not isinstance(target.incremental, Incremental):
            return None
        by = target.incremental.by
        return changes.window_of(incoming, by, by, incoming.schema[by].dataType)

    def _recompute_groups(self, stage: Stage, target: Target, plan: Mode) -> tuple[StageOutcome, DataFrame]:
        """Bring a gold table up to date by recomputing the groups its silver input's changes since
        `plan.since` touched: the group-key values of every row the changes deleted or inserted (Iceberg's
        changelog: both images; each key's expression evaluated on them), recomputed from the silver rows of
        those groups alone (the rows whose keys' values are a touched group's, a null matching a null). On
        the run's branch the groups' rows are replaced by the recomputed ones, so a group that vanished is
        deleted; checked there, then published. The touched groups stay on the outcome for the warehouse
        load."""
        assert plan.since is not None
        silver = stage.input_id
        silver_table = table_of(self.snapshot.targets[silver])
        end = self.lake.current_snapshot(silver_table)
        assert end is not None, "the plan found silver's current snapshot"
        if end == plan.since:
            return self._nothing_new(stage, target, plan, end)
        helpers = [group_key_column(output) for output in plan.groups]
        with self.lake.changelog(silver_table, plan.since, end) as changed:
            # Cached and counted here: the changelog is read once, and its view does not outlive this block.
            touched = (
                with_group_keys(self.spark, changed, silver, plan.groups, stage.sql_dialect)
                .select(*[F.col(f"`{helper}`") for helper in helpers])
                .distinct()
                .cache()
            )
            groups = touched.count()
        if not groups:
            touched.unpersist()
            return self._nothing_new(stage, target, plan, end)
        silver_rows = self.read_dataset(silver, end)
        within = self._groups_window(plan.groups, touched, silver_rows)
        rows = with_group_keys(
            self.spark,
            silver_rows.where(within or "TRUE"),
            silver,
            plan.groups,
            stage.sql_dialect,
        )
        # Cached: read by the count of rows read, by the count of what the SQL makes of them, and by the SQL.
        of_groups = changes.rows_of_keys(rows, touched, helpers).drop(*helpers).cache()
        shaped = self._shape(stage, target, {silver: of_groups})
        table = table_of(target)
        replaced_in = self.lake.current_snapshot(table)
        # The groups' keys named and typed as the gold table's columns, so that their rows are found there;
        # kept until the warehouse load (`run_stage` lets them go).
        types = {f.name.lower(): f.dataType for f in self.lake.read(table).schema.fields}
        keys = touched.select(
            *[
                F.col(f"`{helper}`").cast(types[output.lower()]).alias(output)
                if output.lower() in types
                else F.col(f"`{helper}`").alias(output)
                for output, helper in zip(plan.groups, helpers, strict=True)
            ]
        ).cache()
        outcome, written = self._replace_keys(
            stage,
            target,
            plan,
            Replacement(
                shaped.frame.drop(*INGESTION_COLUMNS),
                keys,
                list(plan.groups),
                shaped.rejects,
                of_groups.count(),
            ),
            {silver: end},
            rows_in=self._rows_made(stage, {silver: of_groups}),
        )
        touched.unpersist()
        of_groups.unpersist()
        outcome.details["groups_recomputed"] = groups
        outcome.changed_groups, outcome.groups_replaced_in = keys, replaced_in
        return outcome, written

    def _recompute_days(self, stage: Stage, target: Target, plan: Mode) -> tuple[StageOutcome, DataFrame]:
        """Bring a gold table up to date by recomputing the days of its `incremental.by` that its main
        input's changes since `plan.since` touched (the days of the event column of every row the changes
        deleted or inserted: Iceberg's changelog, both images), and the `lookback` days after each, which a
        touched day reaches (a day of gold is made from the main input's rows of that day and the `lookback`
        days before). Its SQL runs over the main input's rows of those days and the `lookback` days before
        them, and each dimension input whole, at the version its last commit read; on the run's branch,
        gold's rows of the recomputed days are replaced by the rows made of them (a day left without rows
        loses its rows); checked there, then published. The keys of those days' rows, before and after, stay
        on the outcome for the warehouse load."""
        assert plan.since is not None and plan.days is not None
        assert isinstance(target.incremental, Incremental)
        main, event_column = stage.input_id, plan.days.event_column
        main_table = table_of(self.snapshot.targets[main])
        end = self.lake.current_snapshot(main_table)
        assert end is not None, "the plan found the main input's current snapshot"
        if end == plan.since:
            return self._nothing_new(stage, target, plan, end)
        with self.lake.changelog(main_table, plan.since, end) as changed:
            touched = changes.days_of(changed, event_column)
        if not touched:
            return self._nothing_new(stage, target, plan, end)
        lookback = target.incremental.lookback
        days = changes.spread(touched, 0, lookback)
        main_rows = self.read_dataset(main, end)
        read_days = changes.spread(days, lookback, 0)
        on_event_days = changes.on_days(event_column, main_rows.schema[event_column].dataType, read_days)
        assert on_event_days is not None, "the event column is a date or timestamp (day_source)"
        # Cached, as the groups' rows are: read by the count of rows read, by the count of what the SQL makes
        # of them, and by the SQL.
        of_days = main_rows.where(on_event_days).cache()
        inputs = {
            main: of_days,
            **{
                dimension: self.read_dataset(dimension, read)
                for dimension, read in plan.days.dimensions.items()
            },
        }
        shaped = self._shape(stage, target, inputs)
        by = target.incremental.by
        on_days = changes.on_days(by, shaped.frame.schema[by].dataType, days)
        assert on_days is not None, "a gold target's incremental.by is a declared date or timestamp"
        table = table_of(target)
        replaced_in = self.lake.current_snapshot(table)
        # A row made of a day only read, for the lookback of the days after it, is not this run's to write,
        # nor one outside every day read (a null `by` of an outer join's row, when no null day was touched):
        # gold keeps its own rows of the days it does not recompute.
        rows = shaped.frame.drop(*INGESTION_COLUMNS).where(on_days)
        outcome, written = self._replace_keys(
            stage,
            target,
            plan,
            Replacement(
                rows,
                None,
                [by],
                shaped.rejects,
                sum(frame.count() for frame in inputs.values()),
                within=on_days,
            ),
            {main: end, **plan.days.dimensions},
            rows_in=self._rows_made(stage, inputs),
        )
        of_days.unpersist()
        outcome.details["days_recomputed"] = len(days)
        if target.load_mode == "merge":
            # The warehouse merges by the target's keys, which hold `by`: the days' keys before and after.
            keys = [F.col(f"`{k}`") for k in target.keys]
            before = self.lake.read(table, snapshot_id=replaced_in).where(on_days).select(*keys)
            outcome.changed_groups = before.unionByName(written.where(on_days).select(*keys))
            outcome.groups_replaced_in = replaced_in
        return outcome, written

    @staticmethod
    def _groups_window(groups: dict[str, exp.Expr], touched: DataFrame, silver: DataFrame) -> str | None:
        """Where the rows of the `touched` groups lie in silver, as far as their keys say: each key that is a
        date or timestamp column, or the day of one, bounds its column to the touched groups' days, which
        the scan prunes to (None: anywhere)."""
        types = {f.name.lower(): f.dataType for f in silver.schema.fields}
        windows = []
        for output, key in groups.items():
            column = day_column(key)
            if column is None or column.lower() not in types:
                continue
            window = changes.window_of(touched, group_key_column(output), column, types[column.lower()])
            if window is not None:
                windows.append(f"({window})")
        return " AND ".join(windows) or None

    def _rows_made(self, stage: Stage, inputs: dict[str, DataFrame]) -> int:
        """The rows the stage's SQL makes of an incremental run's `inputs` (few), counted: the observation
        `_shape` makes of them is lost when Spark plans an empty result away (see `_replace_keys`)."""
        assert stage.transform_sql, "only a stage with SQL makes rows other than those it reads"
        declared = self.snapshot.targets[stage.target_id].columns or ()
        return run_sql(self.spark, inputs, stage.transform_sql, stage.sql_dialect, list(declared)).count()

    def _replace_keys(
        self,
        stage: Stage,
        target: Target,
        plan: Mode,
        replacement: Replacement,
        input_snapshots: dict[str, int],
        rows_in: int,
    ) -> tuple[StageOutcome, DataFrame]:
        """Replace the rows of `replacement.keys` in the table by its rows on the run's branch, judge the
        rules there, and publish unless a blocking one failed. `rows_in` are the rows the casts and rules
        judged: what the SQL, if any, made of the input rows read. Returns the outcome and the version
        written (published, or the staged branch)."""
        table = table_of(target)
        existing = self.lake.read(table).columns
        # This run's rows are few: counted and judged directly, not observed during the write. An observation
        # is lost when Spark plans an empty result away (a batch whose every row was rejected).
        rows = replacement.rows.cache()
        written = rows.count()
        self.lake.ensure(table, rows.schema, target.lake_table)
        columns = [c for c in existing if c in rows.columns] + [c for c in rows.columns if c not in existing]
        branch = self.lake.stage_replacing(
            table,
            replacement.keys,
            rows.select(*[f"`{c}`" for c in columns]),
            replacement.key_columns,
            self.run_id,
            within=replacement.within,
        )
        quarantined = self._append_rejected(table.quarantine(), replacement.rejects)
        staged = self.lake.read(table, branch=branch).select(*[f"`{c}`" for c in columns])
        rule_outcomes = self._judge_merge(stage, target, rows, staged, replacement.key_columns)
        rows.unpersist()
        outcome = StageOutcome(
            replacement.rows_read,
            written,
            quarantined,
            rule_outcomes,
            details={"rows_in": rows_in, "rows_merged": written, "mode": plan.mode, "why": plan.why},
            read=list(input_snapshots),
            input_snapshots=input_snapshots,
        )
        if outcome.blocking_failures():
            outcome.staged_branch = branch
            return outcome, staged
        outcome.snapshot_id = self.lake.publish(table, branch)
        self._record_commit(stage, outcome.snapshot_id, "publish", outcome.input_snapshots)
        # The dataset's size (Dagster's row count) is the table's, not this run's rows: read from metadata.
        outcome.details["rows_in_dataset"] = self.lake.total_rows(table, outcome.snapshot_id)
        published = self.lake.read(table, snapshot_id=outcome.snapshot_id)
        return outcome, published.select(*[f"`{c}`" for c in columns])

    def _recompute(self, stage: Stage, target: Target) -> tuple[StageOutcome, DataFrame]:
        """The dataset computed whole from its inputs' current versions."""
        inputs, read = self.readable_inputs(stage)
        # Every count and rule is observed while the write computes the rows, instead of in a pass of its own.
        shaped = self._shape(stage, target, inputs)
        frame, rejects = shaped.frame, shaped.rejects
        # After deduplication, a unique rule on the keys holds by construction and needs no distinct count.
        # The rules' observation counts the rows written too.
        observed, judge, written_rows = observe_rules(
            frame.drop(*INGESTION_COLUMNS),
            self.rules(stage),
            unique_on=[] if target.scd_type == 2 else target.keys,
        )
        table = table_of(target)
        self.lake.ensure(table, observed.schema, target.lake_table)
        branch = self.lake.stage(table, observed, self.run_id)
        quarantined = self._write_rejected(table.quarantine(), rejects)
        staged = self.lake.read(table, branch=branch).select(*[f"`{c}`" for c in observed.columns])
        # Scanned only for rules an observation cannot compute.
        rule_outcomes = judge(staged)
        rows_in, written = shaped.rows_in(), written_rows()
        # Rows read are the inputs' rows. A lone input without SQL is what the write read whole; SQL may read
        # only part of its inputs, so those are counted from their files. Rows in are what the SQL (if any)
        # made of the inputs, which the written, quarantined and removed (duplicate or dropped) rows account
        # for.
        rows_read = (
            rows_in
            if not stage.transform_sql and len(inputs) == 1
            else sum(input_frame.count() for input_frame in inputs.values())
        )
        input_snapshots = {dataset: version for dataset, version in read.items() if version is not None}
        outcome = StageOutcome(
            rows_read,
            written,
            quarantined,
            rule_outcomes,
            details={"rows_in": rows_in, "rows_removed": rows_in - written - quarantined},
            read=list(read),
            input_snapshots=input_snapshots,
        )
        if outcome.blocking_failures():
            outcome.staged_branch = branch
            return outcome, staged
        outcome.snapshot_id = self.lake.publish(table, branch)
        self._record_commit(stage, outcome.snapshot_id, "publish", input_snapshots)
        published = self.lake.read(table, snapshot_id=outcome.snapshot_id)
        return outcome, published.select(*[f"`{c}`" for c in observed.columns])

    def _judge_merge(
        self, stage: Stage, target: Target, rows: DataFrame, staged: DataFrame, key_columns: list[str]
    ) -> list[RuleOutcome]:
        """The stage's rules on this run's `rows`, which are every row the table now has of the keys
        (`key_columns`) the run replaced; those that need the whole table on the staged branch (a row count is
        the dataset's, not the run's). A rule that judges each key's rows apart (a type 2 history's checks, a
        unique rule over columns holding the keys) needs only the replaced keys' rows: this run's."""
        rules = self.rules(stage)
        unique_on = [] if target.scd_type == 2 else target.keys
        whole = {
            i
            for i, rule in enumerate(rules)
            if (rule.type == "row_count" or reads_written_data(rule, unique_on))
            and not judges_per_key(rule, key_columns)
        }
        on_rows = evaluate_rules(rows, [rule for i, rule in enumerate(rules) if i not in whole])
        on_table = evaluate_rules(staged, [rule for i, rule in enumerate(rules) if i in whole])
        ordered = iter(on_rows), iter(on_table)
        return [next(ordered[1] if i in whole else ordered[0]) for i in range(len(rules))]

    def _append_rejected(self, quarantine: TableRef, rejects: list[tuple[DataFrame, Observation]]) -> int:
        """Add this run's rejects to the dataset's quarantine, counted directly (see `_merge_increment`)."""
        if not rejects:
            return 0
        frames = [frame for frame, _ in rejects]
        combined = reduce(
            lambda left, right: left.unionByName(right, allowMissingColumns=True), frames
        ).cache()
        rows = combined.count()
        if rows:
            self.lake.append_quarantine(quarantine, combined)
        combined.unpersist()
        return rows

    def _write_rejected(self, quarantine: TableRef, rejects: list[tuple[DataFrame, Observation]]) -> int:
        """Replace the dataset's quarantine with this run's rejects (silver and gold are recomputed whole).

        Call after the write of the kept rows, which counted each kind of reject: kinds without rows are left
        out, so that their part of the plan is not computed again, and with no rejects at all the quarantine
        is only emptied. The rows written are counted during this write, so the count is the quarantine's.
        """
        if not rejects:
            return 0
        present = [frame for frame, rows in rejects if rows.get["rows"]]
        if not present:
            self.lake.replace_quarantine(quarantine, rejects[0][0].limit(0))
            return 0
        combined = reduce(lambda left, right: left.unionByName(right, allowMissingColumns=True), present)
        combined, quarantined = counted(combined)
        self.lake.replace_quarantine(quarantine, combined)
        rows_quarantined: int = quarantined.get["rows"]
        return rows_quarantined

    def _load(
        self, stage: Stage, target: Target, written: DataFrame, outcome: StageOutcome, held: int | None
    ) -> LoadResult | None:
        """Bring the warehouse table to the version the stage `written`, in one transaction, and record which
        version it now holds (a `warehouse_load` audit row naming the warehouse, so that another warehouse
        is never taken to hold it). Nothing when it already `held` that version. A
        target that merges gets the rows of the groups that changed since the version it holds, upserted, and
        the groups that vanished, deleted by gold's keys: the groups the stage recomputed when it built on
        that version, else every group of both versions (after a failed load, or a full recompute). A
        `replace` target, or one whose version held is unknown or expired, gets the whole table, and so does
        a table gone since its last load (dropped by hand), as dbt builds an incremental model whose table is
        missing."""
        if self.warehouse is None:
            raise RuntimeError(
                f"target {target.target_id} loads into the warehouse, but no warehouse is configured"
            )
        table = target.location
        assert table is not None, "a warehouse target has a location (Target checks it)"
        if held is not None and not self.warehouse.has_table(table):
            held = None
        if held is not None and held == outcome.snapshot_id:
            outcome.details["warehouse_load"] = f"none: the warehouse holds snapshot {held} already"
            return None
        changed_groups = outcome.changed_groups if held == outcome.groups_replaced_in else None
        lake_table = table_of(target)
        if (
            changed_groups is None
            and target.load_mode == "merge"
            and held is not None
            and self.lake.has_snapshot(lake_table, held)
        ):
            # The version the warehouse holds is known: its groups that are gone since go too.
            keys = [F.col(f"`{k}`") for k in target.keys]
            before = self.lake.read(lake_table, snapshot_id=held).select(*keys)
            changed_groups = before.unionByName(written.select(*keys))
        delete_flag = None
        if changed_groups is not None and target.load_mode == "merge":
            written, delete_flag = changes_of_groups(written, changed_groups, target.keys), DELETE_FLAG
        partitions = self.adjustments.load_partitions
        prefix = self.warehouse.staging_prefix(table)
        staged = staged_on_executors(written, prefix) if prefix else None
        data = staged or (written.toArrow() if partitions is None else arrow_batches(written, partitions))
        data = self.throttle.stream_to_target(data, target, dataset=target.target_id)
        loaded = self.warehouse.load(
            table,
            data,
            target.load_mode,
            target.keys,
            evolve=self.adjustments.evolve_warehouse_schema,
            delete_flag=delete_flag,
        )
        self.store.record_audit(
            pipeline_id=stage.pipeline_id,
            stage_name=stage.stage_name,
            dataset=target.target_id,
            event="warehouse_load",
            status="success",
            rows_written=loaded.rows_loaded,
            details={
                "snapshot_id": str(outcome.snapshot_id),
                "table": table,
                "warehouse": repr(self.warehouse),  # its kind and place, never a password
                "groups_only": bool(delete_flag),
            },
        )
        return loaded


def gold_groups(
    stage: Stage, target: Target, snapshot: CatalogSnapshot, input_columns: list[str]
) -> dict[str, exp.Expr]:
    """The groups a gold stage can be recomputed by, from its definition alone: output column → its key's
    expression over silver's columns (see `group_keys`). Raises NotGroupwise, saying why, unless it aggregates
    exactly one silver table by columns of it or deterministic expressions of them, each an output column, and
    its keys, if any, are those output columns, by which a group's rows are found in the table and in the
    warehouse."""
    source = snapshot.targets.get(stage.input_id)
    if stage.inputs or source is None or source.layer != "silver":
        raise NotGroupwise("the stage does not read exactly one silver table")
    if not stage.transform_sql:
        raise NotGroupwise("it has no SQL aggregation: a copy of its input")
    if target.cdc is not None:
        raise NotGroupwise("a change feed's target is rebuilt from its events")
    groups = group_keys(stage.transform_sql, stage.sql_dialect, stage.input_id, input_columns)
    declared = {column.lower() for column in target.columns or ()}
    undeclared = [group for group in groups if declared and group.lower() not in declared]
    if undeclared:
        raise NotGroupwise(f"its GROUP BY columns ({', '.join(undeclared)}) are not declared columns")
    if target.keys and {k.lower() for k in target.keys} != {g.lower() for g in groups}:
        raise NotGroupwise(
            f"its keys ({', '.join(target.keys)}) are not its GROUP BY columns ({', '.join(groups)})"
        )
    return groups


def gold_mode_description(stage: Stage, target: Target, snapshot: CatalogSnapshot) -> str:
    """How a gold stage builds its dataset, as far as its definition says (the asset's description)."""
    if target.incremental == "full":
        return f"Recomputed whole on every run: {ASKED_FULL}."
    if isinstance(target.incremental, Incremental):
        try:
            event_column = gold_day_source(stage, target, declared_schemas(stage, snapshot))
        except NotDaywise as not_daywise:
            return f"Recomputed whole on every run: {not_daywise}."
        dimensions = (
            f" Its dimension inputs ({', '.join(stage.inputs)}) are read whole; a change to one recomputes "
            "it whole."
            if stage.inputs
            else ""
        )
        return (
            f"Incremental by day: recomputes the days of {target.incremental.by} (the days of "
            f"{stage.input_id}.{event_column}) that changes of {stage.input_id} touch, "
            f"{_lookback(stage.input_id, target.incremental.lookback)} (whole on a first build, after a "
            f"definition change or a rollback).{dimensions}"
        )
    source = snapshot.targets.get(stage.input_id)
    try:
        groups = gold_groups(stage, target, snapshot, list(source.columns or ()) if source else [])
    except NotGroupwise as not_groupwise:
        return f"Recomputed whole on every run: {not_groupwise}."
    described = describe_groups(groups, stage.sql_dialect)
    return (
        f"Incremental: recomputes only the groups ({described}) that silver's changes touch "
        "(whole on a first build, after a definition change or a rollback)."
    )


def _lookback(main_input: str, lookback: int) -> str:
    """What a gold stage's `incremental.lookback` makes a run recompute, and read, in words."""
    if not lookback:
        return "with no lookback"
    days = f"{lookback} day" if lookback == 1 else f"{lookback} days"
    return (
        f"and the {days} after each (a lookback of {days}: a day is made from the rows of {main_input} of "
        f"that day and the {days} before)"
    )


def changes_of_groups(table: DataFrame, groups: DataFrame, keys: list[str]) -> DataFrame:
    """What a warehouse merge applies for the `groups` (by `keys`) an incremental gold run replaced: the
    table's rows of those groups, and a row of only the keys, flagged `DELETE_FLAG`, for each group that no
    longer has any. A group with a null key is no row of the warehouse (a merge refuses null keys): it has
    nothing to delete there."""
    kept = changes.rows_of_keys(table, groups, keys)
    vanished = changes.keys_without_rows(groups, table, keys).dropna(subset=keys)
    return kept.withColumn(DELETE_FLAG, F.lit(False)).unionByName(
        vanished.withColumn(DELETE_FLAG, F.lit(True)), allowMissingColumns=True
    )


def without_observations(computed: DataFrame) -> DataFrame:
    """`computed` (cached, its observations complete) as a plan that carries them no more, through Spark
    Connect: PySpark 4.1's Connect client gathers a plan's observations with dict(**a, **b), which raises when
    both sides of a join or union carry the same one, as a merge's plans do. A local checkpoint of the cached
    rows is such a plan. A classic session has no such limit, and keeps the cache alone."""
    return computed.localCheckpoint() if config.spark_remote() else computed


def staged_on_executors(frame: DataFrame, prefix: str) -> StagedParquet | None:
    """The frame staged as parquet under the S3 `prefix` by the executors, one object per partition, for a
    warehouse that COPYs from S3 (Redshift); None when there are no rows, which need no staging."""
    schema = to_arrow_schema(frame.schema)
    write = staging_writer.parts_task(prefix, schema, configured_endpoint())
    parts = frame.mapInArrow(write, staging_writer.PARTS_SCHEMA).collect()
    rows = sum(part.rows for part in parts)
    return StagedParquet(prefix, schema, rows, sum(part.nbytes for part in parts)) if rows else None


def arrow_batches(frame: DataFrame, partitions: int) -> pa.RecordBatchReader:
    """The frame's rows as a stream of Arrow batches, one Spark job per partition: no single result has to fit
    in the driver. A reader, not a bare generator, so an empty result still carries its schema."""
    schema = to_arrow_schema(frame.schema)
    rows = frame.repartition(partitions).toLocalIterator(prefetchPartitions=False)

    def batches() -> Iterator[pa.RecordBatch]:
        while chunk := list(islice(rows, _ROWS_PER_BATCH)):
            yield pa.RecordBatch.from_pylist([row.asDict() for row in chunk], schema=schema)

    return pa.RecordBatchReader.from_batches(schema, batches())
