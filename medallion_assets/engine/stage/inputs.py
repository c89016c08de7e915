"""The inputs of a silver or gold stage as read this run, including those an operator marked unavailable:
rebuilt from the layer above, or read as they were before they were marked."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame

from medallion_assets.catalog.models import Stage
from medallion_assets.engine.stage.context import StageContext
from medallion_assets.engine.stage.shape import shape
from medallion_assets.naming import INGESTION_COLUMNS
from medallion_assets.storage.lake.layout import table_of


def readable_inputs(
    context: StageContext, stage: Stage
) -> tuple[dict[str, DataFrame], dict[str, int | None]]:
    """The inputs of a silver or gold stage, and the datasets actually read for them, each with the
    version read (None: a table not yet written).

    An input an operator marked unavailable (an `available` flag) is rebuilt from the layer above it: its
    own stage's transformation over that stage's inputs, recursively, computed in this run and never
    written. One that cannot be rebuilt (it is bronze, or its rebuild needs a bronze dataset that is down)
    is read as it was before it was marked: its last version committed before the flag (time travel).
    Each rebuild and time travel is audited; when neither is possible, the error lists every path and
    why it is down.
    """
    down = context.recovery.flagged(context.lake_ancestry(stage))
    read: dict[str, int | None] = {}
    frames = {input_id: _input_frame(context, stage, input_id, down, read) for input_id in stage.input_ids()}
    return frames, read


def rows_read(context: StageContext, inputs: dict[str, DataFrame], read: dict[str, int | None]) -> int:
    """The rows of a stage's inputs as they were read whole: of a version read, from its snapshot's summary
    (no Spark job: SQL may read only part of an input, and counting each input cost a gold stage about
    0.5 s); of an input rebuilt in this run (never written), or whose summary cannot tell, counted."""

    def rows(dataset: str, frame: DataFrame) -> int:
        version = read.get(dataset)
        table = table_of(context.snapshot.targets[dataset])
        total = context.lake.total_rows(table, version) if version is not None else None
        return frame.count() if total is None else total

    return sum(rows(dataset, frame) for dataset, frame in inputs.items())


def _input_frame(
    context: StageContext, stage: Stage, dataset: str, down: dict[str, str], read: dict[str, int | None]
) -> DataFrame:
    """The dataset as read for `stage`, at the version current now (`read` records which), so that one
    run reads one version of it however long it takes."""
    if dataset not in down:
        read[dataset] = context.lake.current_snapshot(table_of(context.snapshot.targets[dataset]))
        return context.read_dataset(dataset, read[dataset])
    if not _rebuildable(context, dataset, down):
        return _as_before(context, stage, dataset, down, read)
    producer = context.snapshot.stage_producing(dataset)
    assert producer is not None, "a rebuildable dataset has a producing stage"
    target = context.snapshot.targets[dataset]
    inputs = {i: _input_frame(context, producer, i, down, read) for i in producer.input_ids()}
    rebuilt_by = f"{producer.pipeline_id}.{producer.stage_name}"
    _audit_reroute(
        context,
        stage,
        dataset,
        "rebuilt",
        down[dataset],
        rebuilt_by=rebuilt_by,
        **{"from": producer.input_ids()},
    )
    return shape(context, producer, target, inputs).frame.drop(*INGESTION_COLUMNS)


def _audit_reroute(
    context: StageContext, stage: Stage, dataset: str, status: str, why: str, **details: Any
) -> None:
    """How `stage` read `dataset`, which is down: rebuilt from the layer above, or as it was before."""
    context.store.record_audit(
        pipeline_id=stage.pipeline_id,
        stage_name=stage.stage_name,
        dataset=stage.target_id,
        event="reroute",
        status=status,
        error=why,
        details={"dataset": dataset, **details},
    )


def _rebuildable(context: StageContext, dataset: str, down: dict[str, str]) -> bool:
    """Whether a down dataset can be computed from the layer above: a bronze one only by ingesting its
    source again, which a run does not do for a reader; a lake input of its stage that is down must be
    rebuildable or readable as it was."""
    producer = context.snapshot.stage_producing(dataset)
    if producer is None or context.snapshot.targets[dataset].layer == "bronze":
        return False
    return all(
        i not in down or _rebuildable(context, i, down) or context.recovery.last_good_version(i) is not None
        for i in producer.input_ids()
    )


def _as_before(
    context: StageContext, stage: Stage, dataset: str, down: dict[str, str], read: dict[str, int | None]
) -> DataFrame:
    """A down dataset as it was before it was marked: time travel to its last good version."""
    version = context.recovery.last_good_version(dataset)
    if version is None:  # the paths to the dataset that cannot be read, and why each is down
        raise context.recovery.no_path(context.snapshot.stage_producing(dataset) or stage, down)
    _audit_reroute(context, stage, dataset, "time_travel", down[dataset], snapshot_id=str(version))
    read[dataset] = version
    return context.read_dataset(dataset, version)
