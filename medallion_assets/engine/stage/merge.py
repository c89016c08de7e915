"""Silver merge or CDC: a keyed silver table brought up to date from the rows its bronze input appended since
its last commit. New rows replace older ones of their keys; of a change feed, the keys its new events touch
are recomputed from their own events. When the new rows may change every key (a truncate event, a late
snapshot), the full mode instead, saying why."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from medallion_assets import config
from medallion_assets.catalog.models import Incremental, Stage, Target
from medallion_assets.engine import changes
from medallion_assets.engine.stage.context import StageContext
from medallion_assets.engine.stage.outcome import StageOutcome
from medallion_assets.engine.stage.plan import Mode
from medallion_assets.engine.stage.replace import Replacement, nothing_new, replace_keys, rows_under
from medallion_assets.engine.stage.shape import Shaped, shape
from medallion_assets.naming import INGESTION_COLUMNS
from medallion_assets.storage.lake.layout import table_of


def build(
    context: StageContext, stage: Stage, target: Target, plan: Mode
) -> tuple[StageOutcome, DataFrame] | Mode:
    """Bring the table up to date from the rows its bronze input appended since `plan.since`: new rows
    replace older ones of their keys (a change feed: the keys it touches are recomputed from their own
    events), on the run's branch, checked there, then published. When the new rows may change every key
    (a truncate event, a late snapshot), the full mode instead, saying why."""
    assert plan.since is not None
    bronze = stage.input_id
    end = context.lake.current_snapshot(table_of(context.snapshot.targets[bronze]))
    assert end is not None, "the plan found bronze's current snapshot"
    # Counted from the appends' summaries, no data file read; checked first: Spark plans an empty read away,
    # and the counts observed on it with it.
    rows_read = context.lake.rows_appended(table_of(context.snapshot.targets[bronze]), plan.since, end)
    if not rows_read:
        return nothing_new(context, stage, target, plan, end)
    too_small = None if target.cdc is not None else _too_small_to_merge(context, stage, end)
    if too_small:
        return Mode("full", too_small)
    new_rows = context.read_dataset(bronze, end, appended_after=plan.since)
    shaped = shape(context, stage, target, {bronze: new_rows}, apply=False)
    # The new rows are computed once, here, by an action that completes their counts (observations, which
    # a read inside the write's delete would not): the write reads them twice (their keys, their rows).
    increment = shaped.frame.cache()
    increment.count()
    try:
        return merge_increment(
            context, stage, target, plan, shaped, without_observations(increment), rows_read, end
        )
    finally:
        increment.unpersist()


def merge_increment(
    context: StageContext,
    stage: Stage,
    target: Target,
    plan: Mode,
    shaped: Shaped,
    increment: DataFrame,
    rows_read: int,
    end: int,
) -> tuple[StageOutcome, DataFrame] | Mode:
    bronze, table = stage.input_id, table_of(target)
    current = context.lake.current_snapshot(table)
    existing = context.lake.read(table, snapshot_id=current)
    within, winners = None, None
    if target.cdc is not None:
        events = changes.flag_events(increment, target)
        if target.cdc.apply_as_truncates and changes.truncates(events).limit(1).count():
            return Mode("full", "a truncate event arrived: every key may change")
        keys = events.select(*[F.col(f"`{k}`") for k in target.keys]).distinct()
        if target.cdc.from_snapshot:
            touched = _snapshot_keys(context, stage, target, plan, keys, events)
            if isinstance(touched, Mode):
                return touched
            keys = touched
        # Every row of those keys, read from the same bronze version, shaped as in a full build.
        history = shape(context, stage, target, {bronze: context.read_dataset(bronze, end)}, apply=False)
        # Only the touched keys' events are flagged (a tie-breaker made of each whole row), not all.
        of_keys = changes.events_of(
            changes.rows_of_keys(history.frame, keys, target.keys), target, history.frame
        )
        if target.cdc.apply_as_truncates:
            of_keys = of_keys.unionByName(changes.truncates(changes.flag_events(history.frame, target)))
        rows = changes.apply_changes(of_keys, target)
    else:
        incoming = increment.drop(*INGESTION_COLUMNS)
        within = _merge_window(target, incoming)
        # Cached: the rows written and the keys deleted are both read from it, the table searched once.
        winners = changes.newer_wins(
            changes.rows_of_keys(
                existing if within is None else existing.where(within), incoming, target.keys
            ),
            incoming,
            target.keys,
            target.keep_latest_by,
        ).cache()
        rows = winners.drop(changes.REPLACES)
        # Only the keys that had a row lose it: a batch of new keys alone is an append, no file rewritten.
        keys = winners.where(F.col(f"`{changes.REPLACES}`"))
    try:
        return replace_keys(
            context,
            stage,
            target,
            plan,
            Replacement(rows, keys, target.keys, shaped.rejects, rows_read, within),
            {bronze: end},
            rows_in=shaped.rows_in if stage.transform_sql else lambda: rows_read,
        )
    finally:
        if winners is not None:
            winners.unpersist()


def _snapshot_keys(
    context: StageContext, stage: Stage, target: Target, plan: Mode, new_keys: DataFrame, new_rows: DataFrame
) -> DataFrame | Mode:
    """The keys that new snapshots (`new_rows`, holding `new_keys`) may change: theirs, and those of the
    latest snapshot applied before, which are deleted where missing from the first new one. A new snapshot
    not after that one (a late snapshot, or the rest of one split across batches) may change the keys of
    any snapshot after it: then the full mode, saying why."""
    assert target.cdc is not None and plan.since is not None
    sequence = F.col(f"`{target.cdc.sequence_by}`")
    bronze = stage.input_id
    applied = shape(
        context, stage, target, {bronze: context.read_dataset(bronze, plan.since)}, apply=False
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


def _too_small_to_merge(context: StageContext, stage: Stage, end: int) -> str | None:
    """Why rebuilding silver from its bronze input, at snapshot `end`, costs less than merging the new rows
    (`config.silver_merge_from_rows`), from bronze's snapshot summary; None when it does not, or cannot tell.
    Asked once bronze is known to hold new rows: with none, the table stays as it is."""
    floor = config.silver_merge_from_rows()
    rows = rows_under(context, context.snapshot.targets[stage.input_id], end, floor)
    if rows is None:
        return None
    return (
        f"{stage.input_id} holds {rows:,} rows, fewer than the {floor:,} from which merging only its new "
        f"rows costs less than rebuilding the table whole ({config.SILVER_MERGE_FROM_ROWS_ENV})"
    )


def _merge_window(target: Target, incoming: DataFrame) -> str | None:
    """Where a merge of `incoming` searches the table for its keys' rows: the days of the target's
    `incremental.by` that the incoming rows fall on, since a key's rows all share that day (None: the
    whole table)."""
    if not isinstance(target.incremental, Incremental):
        return None
    by = target.incremental.by
    return changes.window_of(incoming, by, by, incoming.schema[by].dataType)


def without_observations(computed: DataFrame) -> DataFrame:
    """`computed` (cached, its observations complete) as a plan that carries them no more, through Spark
    Connect: PySpark 4.1's Connect client gathers a plan's observations with dict(**a, **b), which raises when
    both sides of a join or union carry the same one, as a merge's plans do. A local checkpoint of the cached
    rows is such a plan. A classic session has no such limit, and keeps the cache alone."""
    return computed.localCheckpoint() if config.spark_remote() else computed
