"""Write-audit-publish, the ending every silver and gold mode shares: the run's rows are written to a branch
of the lake table named after the run, the stage's rules judge that branch, and only when no blocking rule
fails is the table's `main` fast-forwarded to it. No reader ever sees unchecked data, and a failed run leaves
the previous version, its own waiting on the branch for inspection. The rejects the run took out wait on the
same branch of the quarantine table and are published with the stage, so that a failed run, run again, does
not quarantine them twice."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame

from medallion_assets.catalog.models import Stage
from medallion_assets.engine.stage.context import StageContext
from medallion_assets.engine.stage.outcome import StageOutcome
from medallion_assets.engine.validation import RuleOutcome
from medallion_assets.storage.lake.layout import TableRef


def audit_and_publish(
    context: StageContext,
    stage: Stage,
    table: TableRef,
    branch: str,
    columns: list[str],
    judge: Callable[[DataFrame], list[RuleOutcome]],
    outcome: StageOutcome,
) -> tuple[StageOutcome, DataFrame]:
    """Judge the rules (`judge`) on the `branch` this run wrote, and publish it unless a blocking one failed,
    recording the commit with the inputs' versions read. Returns the outcome and the version written, as
    `columns`: the published one, or the staged branch (main untouched)."""
    selected = [f"`{c}`" for c in columns]
    staged = context.lake.read(table, branch=branch).select(*selected)
    outcome.rule_outcomes = judge(staged)
    if outcome.blocking_failures():
        outcome.staged_branch = branch
        return outcome, staged
    with outcome.times.committing():
        outcome.snapshot_id = context.lake.publish(table, branch)
        if outcome.quarantine_branch:
            context.lake.publish(table.quarantine(), outcome.quarantine_branch)
            outcome.quarantine_branch = None
        context.record_commit(stage, outcome.snapshot_id, "publish", outcome.input_snapshots)
    return outcome, context.lake.read(table, snapshot_id=outcome.snapshot_id).select(*selected)
