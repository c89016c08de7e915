"""The warehouse load: a warehouse target brought to the lake version its stage wrote, in one transaction,
and the version it now holds recorded."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from medallion_assets.catalog.models import Stage, Target
from medallion_assets.engine import changes, staging_writer
from medallion_assets.engine.stage.context import StageContext
from medallion_assets.engine.stage.outcome import StageOutcome
from medallion_assets.storage.lake.layout import table_of
from medallion_assets.storage.objects import configured_endpoint
from medallion_assets.storage.warehouse import DELETE_FLAG, LoadResult, StagedParquet

# Rows per Arrow batch when a load streams partition by partition (after healing asked for smaller batches).
_ROWS_PER_BATCH = 50_000


def load(
    context: StageContext,
    stage: Stage,
    target: Target,
    written: DataFrame,
    outcome: StageOutcome,
    held: int | None,
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
    if context.warehouse is None:
        raise RuntimeError(
            f"target {target.target_id} loads into the warehouse, but no warehouse is configured"
        )
    table = target.warehouse_table()
    assert table is not None, "a warehouse target has a location (Target checks it)"
    if held is not None and not context.warehouse.has_table(table):
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
        and context.lake.has_snapshot(lake_table, held)
    ):
        # The version the warehouse holds is known: its groups that are gone since go too.
        keys = [F.col(f"`{k}`") for k in target.keys]
        before = context.lake.read(lake_table, snapshot_id=held).select(*keys)
        changed_groups = before.unionByName(written.select(*keys))
    delete_flag = None
    if changed_groups is not None and target.load_mode == "merge":
        written, delete_flag = changes_of_groups(written, changed_groups, target.keys), DELETE_FLAG
    partitions = context.adjustments.load_partitions
    prefix = context.warehouse.staging_prefix(table)
    staged = staged_on_executors(written, prefix) if prefix else None
    data = staged or (written.toArrow() if partitions is None else arrow_batches(written, partitions))
    data = context.throttle.stream_to_target(data, target, dataset=target.target_id)
    loaded = context.warehouse.load(
        table,
        data,
        target.load_mode,
        target.keys,
        evolve=context.adjustments.evolve_warehouse_schema,
        delete_flag=delete_flag,
    )
    _record_load(context, stage, target, outcome, loaded, groups_only=bool(delete_flag))
    return loaded


def take(
    context: StageContext, stage: Stage, target: Target, source: str, outcome: StageOutcome
) -> LoadResult | None:
    """Bring the warehouse table to the version `outcome` published by taking the rows of `source`, a table
    of the same warehouse that holds that version (an environment's), in one transaction: no lake data is
    read. Recorded as `load` records it. None, with nothing done, when the warehouse cannot take them
    (`Warehouse.take`): the caller then `load`s."""
    table = target.warehouse_table()
    assert table is not None and outcome.snapshot_id is not None
    rows = context.lake.total_rows(table_of(target), outcome.snapshot_id)
    if context.warehouse is None or rows is None:
        return None
    taken = context.warehouse.take(table, source, rows)
    if taken is not None:
        _record_load(context, stage, target, outcome, taken, groups_only=False)
    return taken


def _record_load(
    context: StageContext,
    stage: Stage,
    target: Target,
    outcome: StageOutcome,
    loaded: LoadResult,
    groups_only: bool,
) -> None:
    """The `warehouse_load` audit row: which version of the lake table the warehouse's table now holds."""
    context.store.record_audit(
        pipeline_id=stage.pipeline_id,
        stage_name=stage.stage_name,
        dataset=target.target_id,
        event="warehouse_load",
        status="success",
        rows_written=loaded.rows_loaded,
        details={
            "snapshot_id": str(outcome.snapshot_id),
            "table": loaded.table,
            "warehouse": repr(context.warehouse),  # its kind and place, never a password
            "groups_only": groups_only,
        },
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
