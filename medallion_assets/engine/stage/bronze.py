"""Bronze ingest: a source's new objects ingested as one snapshot of its bronze table, bookmarked so that
nothing is read twice or lost, and the stage's rules judged on the whole dataset."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from pyspark.sql import DataFrame

from medallion_assets.catalog.models import Source, Stage, Target
from medallion_assets.engine.ingest import complete_quarantine, ingest
from medallion_assets.engine.stage.context import StageContext
from medallion_assets.engine.stage.outcome import StageOutcome
from medallion_assets.engine.timing import StageTimes
from medallion_assets.engine.validation import evaluate_rules, evaluate_rules_and_count
from medallion_assets.storage.lake.layout import TableRef, table_of
from medallion_assets.storage.objects import ObjectInfo, list_objects


def build(context: StageContext, stage: Stage, target: Target) -> tuple[StageOutcome, DataFrame]:
    """Ingest the stage's source, as readable now (see engine/services.py), and judge its rules on the
    whole dataset. Returns the outcome and the version written."""
    outcome = _ingest(context, stage, context.recovery.readable_source(stage), target)
    written = context.read_dataset(target.target_id, outcome.snapshot_id)
    if not outcome.details["objects_new"] and outcome.snapshot_id is not None:
        # Nothing new: the table and its verdicts stay as they were.
        outcome.unchanged_since = outcome.snapshot_id
        outcome.rule_outcomes = context.verdicts_of_version(
            stage, outcome.snapshot_id, lambda: evaluate_rules(written, context.rules(stage))
        )
        outcome.details["rows_in_dataset"] = context.lake.total_rows(table_of(target), outcome.snapshot_id)
        return outcome, written
    # Bronze rules judge the whole dataset, not only this batch, and so does its row count, counted by
    # the same aggregation, or it would contradict its checks.
    outcome.rule_outcomes, outcome.details["rows_in_dataset"] = evaluate_rules_and_count(
        written, context.rules(stage)
    )
    return outcome, written


def _ingest(context: StageContext, stage: Stage, source: Source, target: Target) -> StageOutcome:
    """Ingest the source's new objects as one snapshot of the bronze table.

    The objects are bookmarked `pending` before the commit and settled with its snapshot after it. A run
    stopped in between leaves them pending, and the next run asks the table whether that batch was
    committed (its snapshot carries the batch id): so a crash at any point ingests nothing twice and loses
    nothing."""
    table = table_of(target)
    completed = _settle_pending(context, source, table)
    objects = list_objects(source.s3_path, source.source_id)
    processed = context.store.processed_objects(source.source_id)
    new = [o for o in objects if processed.get(o.url) != o.etag]
    audit = dict(pipeline_id=stage.pipeline_id, stage_name=stage.stage_name, dataset=stage.target_id)
    context.throttle.take_from_source(source, {"bytes_per_hour": sum(o.size for o in new)}, **audit)
    batch_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:8]
    marks = [(o.url, o.etag, o.size) for o in new]
    context.store.record_bookmarks(source.source_id, marks, batch_id, state="pending")
    try:
        result = ingest(context.lake, source, new, (table, target.lake_table), batch_id)
    except Exception:
        # A batch bronze never committed is forgotten, and its objects ingested again next time. One that
        # failed after bronze's commit (in the quarantine's write) stays pending: the next run completes
        # its quarantine before settling it, so its rejects are not lost and its rows not ingested twice.
        if new and not context.lake.batch_snapshots(table, [batch_id]):
            context.store.settle_batch(source.source_id, batch_id, None)
        raise
    times = StageTimes()
    with times.committing():
        snapshot_id = context.lake.batch_snapshots(table, [batch_id]).get(batch_id) if new else None
        context.store.settle_batch(source.source_id, batch_id, snapshot_id)
        if snapshot_id is not None:
            context.record_commit(stage, snapshot_id, "append", {})
    # Rows are known once parsed: they count against the source now and hold back its next batch.
    context.throttle.take_from_source(source, {"rows_per_minute": result.rows_read}, **audit)
    return StageOutcome(
        result.rows_read,
        result.rows_written,
        result.rows_quarantined,
        snapshot_id=snapshot_id if snapshot_id is not None else context.lake.current_snapshot(table),
        details={
            "batch_id": batch_id,
            "source": source.source_id,
            "objects_new": len(new),
            "objects_seen": len(objects),
            # Rejects of an earlier run's committed batch, quarantined by this one (see _settle_pending).
            **({"quarantine_completed": completed} if completed else {}),
        },
        read=[source.source_id],
        times=times,
    )


def _settle_pending(context: StageContext, source: Source, table: TableRef) -> dict[str, int]:
    """Batches an earlier run began and never settled: committed ones get their quarantine completed and
    are bookmarked with their snapshot, the others are forgotten, so their objects are ingested again.
    Returns the rows quarantined now, by batch, for those that had rejects."""
    pending = context.store.pending_batches(source.source_id)
    committed = context.lake.batch_snapshots(table, pending)
    completed = {}
    for batch_id in pending:
        if batch_id in committed:
            objects = [
                ObjectInfo(url, size, etag)
                for url, etag, size in context.store.batch_objects(source.source_id, batch_id)
            ]
            try:
                completed[batch_id] = complete_quarantine(
                    context.lake, source, objects, (table.quarantine(), batch_id)
                )
            except Exception as error:
                raise RuntimeError(
                    f"batch {batch_id} of source {source.source_id} is in {table} (snapshot "
                    f"{committed[batch_id]}) but its rejected records could not be quarantined: {error}"
                ) from error
        context.store.settle_batch(source.source_id, batch_id, committed.get(batch_id))
    return {batch_id: rows for batch_id, rows in completed.items() if rows}
