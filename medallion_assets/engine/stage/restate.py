"""A restatement: the days a user named (engine/restatement.py) of a table partitioned by day, recomputed
from its inputs' current versions as a full build computes them, and only those days' partitions rewritten,
in one commit, judged on the run's branch and published."""

from __future__ import annotations

from pyspark.sql import DataFrame

from medallion_assets.catalog.models import Stage, Target
from medallion_assets.engine import changes
from medallion_assets.engine.stage.context import StageContext
from medallion_assets.engine.stage.inputs import readable_inputs
from medallion_assets.engine.stage.outcome import StageOutcome
from medallion_assets.engine.stage.plan import Mode
from medallion_assets.engine.stage.replace import Replacement, replace_keys, replaced_days_to_load
from medallion_assets.engine.stage.shape import rows_made, shape
from medallion_assets.naming import INGESTION_COLUMNS
from medallion_assets.storage.lake.layout import table_of


def build(context: StageContext, stage: Stage, target: Target, plan: Mode) -> tuple[StageOutcome, DataFrame]:
    """Recompute the restated days of the table's partition column (`plan.restated_by`): the stage's rows
    made from its inputs whole (SQL, casts, deduplication and rules, as a full build makes them), those of
    the days kept, and on the run's branch the days' partitions overwritten by them (a day left without rows
    loses its rows; other days' files are not touched). Checked there, then published.

    The commit records the input versions the table's last commit recorded: the other days are still made
    of those, and the next run goes on from them. The quarantine is left as it is: the rows the rules reject
    on those days were quarantined when they came."""
    assert context.restatement is not None and plan.restated_by is not None
    column = plan.restated_by
    inputs, read = readable_inputs(context, stage)
    rows = shape(context, stage, target, inputs).frame.drop(*INGESTION_COLUMNS)
    within = changes.on_days(column, rows.schema[column].dataType, context.restatement.days)
    assert within is not None, "a table is partitioned by the days of a date or timestamp column"
    rows_read = sum(frame.count() for frame in inputs.values())
    last = context.last_publish(target)
    assert last is not None, "the plan restates only a table its stage has published"
    bookmarks = last.get("inputs") or {}
    table = table_of(target)
    replaced_in = context.lake.current_snapshot(table)
    outcome, written = replace_keys(
        context,
        stage,
        target,
        plan,
        Replacement(rows.where(within), None, [column], [], rows_read, within=within, partitions=True),
        {dataset: int(bookmarks[dataset]) for dataset in read if dataset in bookmarks},
        rows_in=rows_made(context, stage, inputs) if stage.transform_sql else rows_read,
    )
    outcome.details["days_restated"] = len(context.restatement.days)
    replaced_days_to_load(context, target, outcome, written, within, replaced_in)
    return outcome, written
