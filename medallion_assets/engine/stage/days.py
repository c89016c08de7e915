"""Gold by day: a gold table declared `incremental: {by, lookback}` brought up to date by recomputing only
the days of its `by` that its main input's changes touched, and the `lookback` days after each."""

from __future__ import annotations

from pyspark.sql import DataFrame

from medallion_assets.catalog.models import Incremental, Stage, Target
from medallion_assets.engine import changes
from medallion_assets.engine.stage.context import StageContext
from medallion_assets.engine.stage.outcome import StageOutcome
from medallion_assets.engine.stage.plan import Mode
from medallion_assets.engine.stage.replace import (
    Replacement,
    nothing_new,
    replace_keys,
    replaced_days_to_load,
)
from medallion_assets.engine.stage.shape import shape
from medallion_assets.naming import INGESTION_COLUMNS
from medallion_assets.storage.lake.layout import table_of


def build(context: StageContext, stage: Stage, target: Target, plan: Mode) -> tuple[StageOutcome, DataFrame]:
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
    main_table = table_of(context.snapshot.targets[main])
    end = context.lake.current_snapshot(main_table)
    assert end is not None, "the plan found the main input's current snapshot"
    if end == plan.since:
        return nothing_new(context, stage, target, plan, end)
    with context.lake.changelog(main_table, plan.since, end) as changed:
        touched = changes.days_of(changed, event_column)
    if not touched:
        return nothing_new(context, stage, target, plan, end)
    lookback = target.incremental.lookback
    days = changes.spread(touched, 0, lookback)
    main_rows = context.read_dataset(main, end)
    read_days = changes.spread(days, lookback, 0)
    on_event_days = changes.on_days(event_column, main_rows.schema[event_column].dataType, read_days)
    assert on_event_days is not None, "the event column is a date or timestamp (day_source)"
    # Cached, as the groups' rows are: read by the count of rows read and by the SQL.
    of_days = main_rows.where(on_event_days).cache()
    inputs = {
        main: of_days,
        **{
            dimension: context.read_dataset(dimension, read)
            for dimension, read in plan.days.dimensions.items()
        },
    }
    shaped = shape(context, stage, target, inputs)
    by = target.incremental.by
    on_days = changes.on_days(by, shaped.frame.schema[by].dataType, days)
    assert on_days is not None, "a gold target's incremental.by is a declared date or timestamp"
    table = table_of(target)
    replaced_in = context.lake.current_snapshot(table)
    # A row made of a day only read, for the lookback of the days after it, is not this run's to write,
    # nor one outside every day read (a null `by` of an outer join's row, when no null day was touched):
    # gold keeps its own rows of the days it does not recompute.
    rows = shaped.frame.drop(*INGESTION_COLUMNS).where(on_days)
    outcome, written = replace_keys(
        context,
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
        rows_in=shaped.rows_in,
    )
    of_days.unpersist()
    outcome.details["days_recomputed"] = len(days)
    replaced_days_to_load(context, target, outcome, written, on_days, replaced_in)
    return outcome, written
