"""Running one stage end to end without Dagster: read inputs, transform, apply row rules, write, check, load.

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

from medallion_assets.catalog.models import Rule, Source, Stage, Target
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.engine import staging_writer
from medallion_assets.engine.ingest import bronze_schema, ingest
from medallion_assets.engine.services import Ledger, Recovery, Throttle
from medallion_assets.engine.transform import conform, counted, deduplicate, run_sql
from medallion_assets.engine.validation import (
    RuleOutcome,
    evaluate_rules_and_count,
    observe_rules,
    row_violation,
)
from medallion_assets.errors import StageHalted
from medallion_assets.naming import INGESTION_COLUMNS, lake_path, quarantine_path
from medallion_assets.storage.objects import configured_endpoint, list_objects
from medallion_assets.storage.warehouse import LoadResult, StagedParquet, Warehouse

# Rows per Arrow batch when a load streams partition by partition (after healing asked for smaller batches).
_ROWS_PER_BATCH = 50_000


@dataclass
class StageOutcome:
    rows_read: int = 0
    rows_written: int = 0
    rows_quarantined: int = 0
    rule_outcomes: list[RuleOutcome] = field(default_factory=list)
    load: LoadResult | None = None
    output_path: str = ""
    columns: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    duration_sec: float = 0.0
    read: list[str] = field(default_factory=list)  # the datasets actually read, after any re-route

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


@dataclass
class StageRunner:
    """What a stage needs from the outside world; one per run, shared by its stages. `store` is the ledger it
    records bookmarks and audit entries in; `throttle` and `recovery` are given by the asset layer (see
    engine/services.py)."""

    spark: SparkSession
    snapshot: CatalogSnapshot
    store: Ledger
    lake_root: str
    warehouse: Warehouse | None = None
    halt_reason: Callable[[Stage], str | None] = lambda stage: None
    adjustments: Adjustments = field(default_factory=Adjustments)
    throttle: Throttle = field(kw_only=True)
    recovery: Recovery = field(kw_only=True)

    def read_dataset(self, target_id: str) -> DataFrame:
        target = self.snapshot.targets[target_id]
        path = lake_path(self.lake_root, target.layer, target_id)
        if target.layer != "bronze":
            return self.spark.read.parquet(path)
        # Read with the catalog's schema: batches ingested before the source gained a column read it as null,
        # and no Spark job has to merge the footers of every batch.
        producer = self.snapshot.stage_producing(target_id)
        assert producer is not None, "a bronze target is made by the stage that ingests its source"
        source = self.snapshot.sources[producer.input_id]
        return self.spark.read.schema(bronze_schema(source)).parquet(path)

    def rules(self, stage: Stage) -> list[Rule]:
        if not stage.validation_set_id:
            return []
        return self.snapshot.rule_sets[stage.validation_set_id].check_def

    def run_stage(self, stage: Stage) -> StageOutcome:
        started = time.perf_counter()
        target = self.snapshot.targets[stage.target_id]
        output = lake_path(self.lake_root, target.layer, target.target_id)
        if target.layer == "bronze":
            outcome = self._ingest(stage, self.recovery.readable_source(stage), output)
            written = self.read_dataset(target.target_id)
            # Bronze rules judge the whole dataset, not only this batch, and so does its row count, counted by
            # the same aggregation, or it would contradict its checks.
            outcome.rule_outcomes, outcome.details["rows_in_dataset"] = evaluate_rules_and_count(
                written, self.rules(stage)
            )
        else:
            outcome, written = self._transform(stage, target, output)
        outcome.output_path = output
        outcome.columns = {f.name: f.dataType.simpleString() for f in written.schema.fields}
        # A failed rule of severity error keeps the data out of the warehouse; the caller reports it.
        if target.kind == "warehouse" and not outcome.blocking_failures():
            reason = self.halt_reason(stage)
            if reason:
                raise StageHalted(reason)
            outcome.load = self._load(target, written)
        outcome.duration_sec = time.perf_counter() - started
        return outcome

    def _ingest(self, stage: Stage, source: Source, output: str) -> StageOutcome:
        objects = list_objects(source.s3_path, source.source_id)
        processed = self.store.processed_objects(source.source_id)
        new = [o for o in objects if processed.get(o.url) != o.etag]
        audit = dict(pipeline_id=stage.pipeline_id, stage_name=stage.stage_name, dataset=stage.target_id)
        self.throttle.take_from_source(source, {"bytes_per_hour": sum(o.size for o in new)}, **audit)
        batch_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
        result = ingest(
            self.spark, source, new, output, quarantine_path(self.lake_root, stage.target_id), batch_id
        )
        self.store.record_bookmarks(source.source_id, [(o.url, o.etag, o.size) for o in new], batch_id)
        # Rows are known once parsed: they count against the source now and hold back its next batch.
        self.throttle.take_from_source(source, {"rows_per_minute": result.rows_read}, **audit)
        return StageOutcome(
            result.rows_read,
            result.rows_written,
            result.rows_quarantined,
            details={
                "batch_id": batch_id,
                "source": source.source_id,
                "objects_new": len(new),
                "objects_seen": len(objects),
            },
            read=[source.source_id],
        )

    def readable_inputs(self, stage: Stage) -> tuple[dict[str, DataFrame], list[str]]:
        """The inputs of a silver or gold stage, and the datasets actually read for them.

        An input an operator marked unavailable (an `available` flag) is rebuilt from the layer above it: its
        own stage's transformation over that stage's inputs, recursively, computed in this run and never
        written. Each rebuild is audited; when the rebuild would need a bronze dataset that is down, the error
        lists every path and why it is down.
        """
        down = self.recovery.flagged(self._lake_ancestry(stage))
        read: list[str] = []
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

    def _input_frame(self, stage: Stage, dataset: str, down: dict[str, str], read: list[str]) -> DataFrame:
        if dataset not in down:
            read.append(dataset)
            return self.read_dataset(dataset)
        producer = self.snapshot.stage_producing(dataset)
        target = self.snapshot.targets[dataset]
        if (
            producer is None or target.layer == "bronze"
        ):  # bronze is rebuilt only by ingesting its source again
            raise self.recovery.no_path(stage, down)
        inputs = {i: self._input_frame(producer, i, down, read) for i in producer.input_ids()}
        self.store.record_audit(
            pipeline_id=stage.pipeline_id,
            stage_name=stage.stage_name,
            dataset=stage.target_id,
            event="reroute",
            status="rebuilt",
            error=down[dataset],
            details={
                "dataset": dataset,
                "rebuilt_by": f"{producer.pipeline_id}.{producer.stage_name}",
                "from": producer.input_ids(),
            },
        )
        return self._shape(producer, target, inputs).frame.drop(*INGESTION_COLUMNS)

    def _shape(self, stage: Stage, target: Target, inputs: dict[str, DataFrame]) -> Shaped:
        """The stage's transformation: SQL over its inputs (or its main input), casts to the declared schema,
        deduplication, and the rows drop or quarantine rules take out."""
        source_frame = (
            run_sql(self.spark, inputs, stage.transform_sql, stage.sql_dialect)
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
        return Shaped(frame, counts, rejects, rows_in_metric)

    def _transform(self, stage: Stage, target: Target, output: str) -> tuple[StageOutcome, DataFrame]:
        """Compute, write and check a silver or gold dataset. Returns the outcome and the files just written,
        read with the schema they were written with: what Spark would infer from their footers (every column
        nullable), without the job that reads them."""
        inputs, read = self.readable_inputs(stage)
        # Every count and rule is observed while the write computes the rows, instead of in a pass of its own.
        shaped = self._shape(stage, target, inputs)
        frame, rejects = shaped.frame, shaped.rejects
        # After deduplication, a unique rule on the keys holds by construction and needs no distinct count.
        # The rules' observation counts the rows written too.
        observed, judge, written_rows = observe_rules(
            frame.drop(*INGESTION_COLUMNS), self.rules(stage), unique_on=target.keys
        )
        observed.write.mode("overwrite").parquet(output)
        quarantined = self._write_rejected(target.target_id, rejects)
        written_files = self.spark.read.schema(observed.schema).parquet(output)
        # Scanned only for rules an observation cannot compute.
        rule_outcomes = judge(written_files)
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
        outcome = StageOutcome(
            rows_read,
            written,
            quarantined,
            rule_outcomes,
            details={"rows_in": rows_in, "rows_removed": rows_in - written - quarantined},
            read=read,
        )
        return outcome, written_files

    def _write_rejected(self, target_id: str, rejects: list[tuple[DataFrame, Observation]]) -> int:
        """Replace the dataset's quarantine with this run's rejects (silver and gold are recomputed whole).

        Call after the write of the kept rows, which counted each kind of reject: kinds without rows are left
        out, so that their part of the plan is not computed again, and with no rejects at all the quarantine
        is only emptied. The rows written are counted during this write, so the count is the quarantine's.
        """
        path = quarantine_path(self.lake_root, target_id)
        if not rejects:
            return 0
        present = [frame for frame, rows in rejects if rows.get["rows"]]
        if not present:
            rejects[0][0].limit(0).write.mode("overwrite").parquet(path)
            return 0
        combined = reduce(lambda left, right: left.unionByName(right, allowMissingColumns=True), present)
        combined, quarantined = counted(combined)
        combined.write.mode("overwrite").parquet(path)
        rows_quarantined: int = quarantined.get["rows"]
        return rows_quarantined

    def _load(self, target: Target, written: DataFrame) -> LoadResult:
        if self.warehouse is None:
            raise RuntimeError(
                f"target {target.target_id} loads into the warehouse, but no warehouse is configured"
            )
        table = target.location
        assert table is not None, "a warehouse target has a location (Target checks it)"
        partitions = self.adjustments.load_partitions
        prefix = self.warehouse.staging_prefix(table)
        staged = staged_on_executors(written, prefix) if prefix else None
        data = staged or (written.toArrow() if partitions is None else arrow_batches(written, partitions))
        data = self.throttle.stream_to_target(data, target, dataset=target.target_id)
        return self.warehouse.load(
            table,
            data,
            target.load_mode,
            target.keys,
            evolve=self.adjustments.evolve_warehouse_schema,
        )


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
