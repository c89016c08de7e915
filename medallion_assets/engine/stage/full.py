"""Silver full and gold full: the dataset recomputed whole from its inputs' current versions, every count and
rule observed while the write computes the rows, and its quarantine replaced by this run's rejects."""

from __future__ import annotations

from pyspark.sql import DataFrame

from medallion_assets.catalog.models import Stage, Target
from medallion_assets.engine.observed import Observed
from medallion_assets.engine.stage.context import StageContext
from medallion_assets.engine.stage.inputs import readable_inputs, rows_read
from medallion_assets.engine.stage.outcome import StageOutcome
from medallion_assets.engine.stage.plan import Mode
from medallion_assets.engine.stage.publish import audit_and_publish
from medallion_assets.engine.stage.shape import counted_rejects, shape
from medallion_assets.engine.validation import observe_rules
from medallion_assets.naming import INGESTION_COLUMNS
from medallion_assets.storage.lake.layout import TableRef, table_of


def build(context: StageContext, stage: Stage, target: Target, plan: Mode) -> tuple[StageOutcome, DataFrame]:
    """The dataset computed whole from its inputs' current versions, written to the run's branch, judged
    there and published; its outcome says which mode and why (`plan`)."""
    inputs, read = readable_inputs(context, stage)
    # Every count and rule is observed while the write computes the rows, instead of in a pass of its own.
    shaped = shape(context, stage, target, inputs)
    # After deduplication, a unique rule on the keys holds by construction and needs no distinct count.
    # The rules' observation counts the rows written too.
    observed, judge, written_rows = observe_rules(
        shaped.frame.drop(*INGESTION_COLUMNS),
        context.rules(stage),
        unique_on=[] if target.scd_type == 2 else target.keys,
    )
    table = table_of(target)
    context.lake.ensure(table, observed.schema, target.lake_table)
    branch = context.lake.stage(table, observed, context.run_id)
    quarantined, quarantine_branch = _write_rejected(context, table.quarantine(), shaped.rejects)
    rows_in, written = shaped.rows_in(), written_rows()
    # Rows read are the inputs' rows. A lone input without SQL is what the write read whole. Rows in are
    # what the SQL (if any) made of the inputs, which the written, quarantined and removed (duplicate or
    # dropped) rows account for.
    outcome = StageOutcome(
        rows_in if not stage.transform_sql and len(inputs) == 1 else rows_read(context, inputs, read),
        written,
        quarantined,
        details={"rows_in": rows_in, "rows_removed": rows_in - written - quarantined},
        read=list(read),
        input_snapshots={dataset: version for dataset, version in read.items() if version is not None},
        quarantine_branch=quarantine_branch,
    )
    # The staged rows are scanned only for rules an observation cannot compute.
    outcome, version = audit_and_publish(context, stage, table, branch, observed.columns, judge, outcome)
    outcome.details.update(mode=plan.mode, why=plan.why)
    return outcome, version


def _write_rejected(
    context: StageContext, quarantine: TableRef, rejects: list[tuple[DataFrame, Observed]]
) -> tuple[int, str | None]:
    """Replace the dataset's quarantine with this run's rejects (silver and gold are recomputed whole), on
    the run's branch of it, published with the stage. Returns their count and the branch (None: no rules
    reject rows, or none did and it holds no rows: the quarantine stays as it is, or is created empty).

    Call after the write of the kept rows, which counted each kind of reject: kinds without rows are left
    out, so that their part of the plan is not computed again, and with no rejects at all the quarantine
    is only emptied. The rows written are counted during this write, so the count is the quarantine's.
    """
    if not rejects:
        return 0, None
    rejected = counted_rejects(rejects)
    if rejected is None:
        if context.lake.holds_no_rows(quarantine):
            # Already what this run would make it: an empty replacement staged, branched and published cost
            # a stage about 0.5 s (bench/tpch.py) to change nothing.
            return 0, None
        empty = rejects[0][0].limit(0)
        if not context.lake.exists(quarantine):
            # A first build that rejected nothing: the quarantine is created empty (no version), the same
            # saving.
            context.lake.ensure(quarantine, empty.schema, None)
            return 0, None
        return 0, context.lake.stage_quarantine(quarantine, empty, context.run_id, replace=True)
    branch = context.lake.stage_quarantine(quarantine, rejected.frame, context.run_id, replace=True)
    return int(rejected.result["rows"]), branch
