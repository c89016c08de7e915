"""A restatement: the days a user named (engine/restatement.py) of a table partitioned by day, recomputed
from its inputs' current versions as a full build computes them, and only those days' partitions rewritten,
in one commit, judged on the run's branch and published."""

from __future__ import annotations

from pyspark.sql import DataFrame

from medallion_assets.catalog.models import Stage, Target
from medallion_assets.engine import changes
from medallion_assets.engine.stage.context import StageContext
from medallion_assets.engine.stage.inputs import readable_inputs, rows_read
from medallion_assets.engine.stage.outcome import StageOutcome
from medallion_assets.engine.stage.plan import Mode
from medallion_assets.engine.stage.publish import audit_and_publish
from medallion_assets.engine.stage.replace import replaced_days_to_load
from medallion_assets.engine.stage.shape import shape
from medallion_assets.engine.validation import RuleOutcome, evaluate_rules, observe_rules
from medallion_assets.naming import INGESTION_COLUMNS
from medallion_assets.storage.lake.layout import table_of


def build(context: StageContext, stage: Stage, target: Target, plan: Mode) -> tuple[StageOutcome, DataFrame]:
    """Recompute the restated days of the table's partition column (`plan.restated_by`): the stage's rows
    made from its inputs whole (SQL, casts, deduplication and rules, as a full build makes them), those of
    the days kept, and on the run's branch the days' partitions overwritten by them in one write (a day left
    without rows loses its rows; other days' files are not touched). The rules are observed during that
    write on the days' rows, a row count judged on the whole staged table; then published.

    The commit records the input versions the table's last commit recorded: the other days are still made
    of those, and the next run goes on from them. The quarantine is left as it is: the rows the rules reject
    on those days were quarantined when they came."""
    assert context.restatement is not None and plan.restated_by is not None
    last = context.last_publish(target)
    assert last is not None, "the plan restates only a table its stage has published"
    inputs, read = readable_inputs(context, stage)
    shaped = shape(context, stage, target, inputs)
    frame = shaped.frame.drop(*INGESTION_COLUMNS)
    days = changes.on_days(
        plan.restated_by, frame.schema[plan.restated_by].dataType, context.restatement.days
    )
    assert days is not None, "a table is partitioned by the days of a date or timestamp column"
    rules = context.rules(stage)
    observed, judge_days, written_rows = observe_rules(
        frame.where(days),
        [rule for rule in rules if rule.type != "row_count"],
        unique_on=[] if target.scd_type == 2 else target.keys,
    )
    table = table_of(target)
    replaced_in = context.lake.current_snapshot(table)
    context.lake.ensure(table, observed.schema, target.lake_table)
    branch = context.lake.stage_replacing(
        table, None, observed, [plan.restated_by], context.run_id, within=days, partitions=True
    )

    def judge(staged: DataFrame) -> list[RuleOutcome]:
        """A row count is the table's; every other rule judges the days' rows."""
        on_days = iter(judge_days(staged.where(days)))
        on_table = iter(evaluate_rules(staged, [rule for rule in rules if rule.type == "row_count"]))
        return [next(on_table if rule.type == "row_count" else on_days) for rule in rules]

    rows_in, written = shaped.rows_in(), written_rows()
    bookmarks = last.get("inputs") or {}
    outcome = StageOutcome(
        rows_in if not stage.transform_sql and len(inputs) == 1 else rows_read(context, inputs, read),
        written,
        details={
            "rows_in": rows_in,
            "rows_merged": written,
            "days_restated": len(context.restatement.days),
            "mode": plan.mode,
            "why": plan.why,
        },
        read=list(read),
        input_snapshots={dataset: int(bookmarks[dataset]) for dataset in read if dataset in bookmarks},
    )
    outcome, version = audit_and_publish(context, stage, table, branch, observed.columns, judge, outcome)
    if outcome.snapshot_id is not None:  # published
        outcome.details["rows_in_dataset"] = context.lake.total_rows(table, outcome.snapshot_id)
    replaced_days_to_load(context, target, outcome, version, days, replaced_in)
    return outcome, version
