"""What the incremental modes share: an incremental run replaces the rows of the keys (or days) it
recomputed, on the run's branch, and its rules judge this run's rows and, when they need the whole table, the
branch; or, when its input brought nothing new, the table stays as it is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from medallion_assets.catalog.models import Stage, Target
from medallion_assets.engine.observed import Observed
from medallion_assets.engine.stage.context import StageContext
from medallion_assets.engine.stage.outcome import StageOutcome
from medallion_assets.engine.stage.plan import Mode
from medallion_assets.engine.stage.publish import audit_and_publish
from medallion_assets.engine.stage.shape import counted_rejects
from medallion_assets.engine.validation import RuleOutcome, evaluate_rules, judges_per_key, reads_written_data
from medallion_assets.storage.lake.layout import TableRef, table_of


@dataclass(frozen=True)
class Replacement:
    """What an incremental run puts in its table: `rows` replace every row whose `key_columns` are one of
    `keys`' (a key without a row in `rows` loses its rows), made from `rows_read` input rows. `within`, a SQL
    condition, holds of every row those keys have in the table (None: they may be anywhere). Without `keys`,
    `rows` replace every row `within` holds (gold's days), each `key_columns` value's rows all among them."""

    rows: DataFrame
    keys: DataFrame | None
    key_columns: list[str]
    rejects: list[tuple[DataFrame, Observed]]
    rows_read: int
    within: str | None = None


def replace_keys(
    context: StageContext,
    stage: Stage,
    target: Target,
    plan: Mode,
    replacement: Replacement,
    input_snapshots: dict[str, int],
    rows_in: Callable[[], int],
) -> tuple[StageOutcome, DataFrame]:
    """Replace the rows of `replacement.keys` in the table by its rows on the run's branch, judge the
    rules there, and publish unless a blocking one failed. `rows_in` says, once the rows are written (the
    write counts them), how many rows the casts and rules judged: what the SQL, if any, made of the input
    rows read. Returns the outcome and the version written (published, or the staged branch)."""
    table = table_of(target)
    existing = context.lake.read(table).columns
    # This run's rows are few: cached by the write, then judged directly.
    rows = replacement.rows.cache()
    context.lake.ensure(table, rows.schema, target.lake_table)
    columns = [c for c in existing if c in rows.columns] + [c for c in rows.columns if c not in existing]
    branch = context.lake.stage_replacing(
        table,
        replacement.keys,
        rows.select(*[f"`{c}`" for c in columns]),
        replacement.key_columns,
        context.run_id,
        within=replacement.within,
    )
    # Counted by the write's commit, but for a table written whole (its other rows with them).
    written = context.lake.rows_staged(table, branch, context.run_id)
    if written is None:
        written = rows.count()
    quarantined, quarantine_branch = _append_rejected(context, table.quarantine(), replacement.rejects)
    outcome = StageOutcome(
        replacement.rows_read,
        written,
        quarantined,
        quarantine_branch=quarantine_branch,
        details={"rows_in": rows_in(), "rows_merged": written, "mode": plan.mode, "why": plan.why},
        read=list(input_snapshots),
        input_snapshots=input_snapshots,
    )
    outcome, version = audit_and_publish(
        context,
        stage,
        table,
        branch,
        columns,
        lambda staged: judge_merge(context, stage, target, rows, staged, replacement.key_columns),
        outcome,
    )
    rows.unpersist()
    if outcome.snapshot_id is not None:  # published
        # The dataset's size (Dagster's row count) is the table's, not this run's rows: read from metadata.
        outcome.details["rows_in_dataset"] = context.lake.total_rows(table, outcome.snapshot_id)
    return outcome, version


def replaced_days_to_load(
    context: StageContext,
    target: Target,
    outcome: StageOutcome,
    written: DataFrame,
    on_days: str,
    replaced_in: int | None,
) -> None:
    """For a warehouse target that merges, the keys of the days (`on_days`) a run replaced, before (in
    snapshot `replaced_in`) and after (`written`): the load upserts the days' rows and deletes the keys
    they lost, in one transaction."""
    if target.load_mode != "merge":
        return
    keys = [F.col(f"`{k}`") for k in target.keys]
    before = context.lake.read(table_of(target), snapshot_id=replaced_in).where(on_days).select(*keys)
    outcome.changed_groups = before.unionByName(written.where(on_days).select(*keys))
    outcome.groups_replaced_in = replaced_in


def nothing_new(
    context: StageContext, stage: Stage, target: Target, plan: Mode, end: int
) -> tuple[StageOutcome, DataFrame]:
    """The input brought nothing new since the last commit: the table stays as it is, and so do its
    rules' verdicts, those of its current version (`StageContext.verdicts_of_version`). Its row count comes
    from its metadata, no data file read."""
    table = table_of(target)
    snapshot_id = context.lake.current_snapshot(table)
    assert snapshot_id is not None, "an incremental run follows a commit of its table"
    current = context.lake.read(table, snapshot_id=snapshot_id)
    outcome = StageOutcome(
        # Rules without a kept verdict judge this run's rows (none) and, those that need it, the table: a
        # row count from its metadata, no data file read.
        rule_outcomes=context.verdicts_of_version(
            stage,
            snapshot_id,
            lambda: judge_merge(context, stage, target, current.limit(0), current, target.keys),
        ),
        snapshot_id=snapshot_id,
        unchanged_since=snapshot_id,
        details={
            "rows_in": 0,
            "rows_merged": 0,
            "rows_in_dataset": context.lake.total_rows(table, snapshot_id),
            "mode": plan.mode,
            "why": plan.why + ": none",
        },
        read=[stage.input_id],
        input_snapshots={stage.input_id: end},
    )
    return outcome, current


def rows_under(context: StageContext, dataset: Target, snapshot_id: int, floor: int) -> int | None:
    """The rows `dataset` holds at `snapshot_id`, from its snapshot's summary (no job), when fewer than
    `floor`, under which an incremental mode costs more than a recompute; None when not, or it cannot
    tell."""
    rows = context.lake.total_rows(table_of(dataset), snapshot_id)
    return rows if rows is not None and rows < floor else None


def judge_merge(
    context: StageContext,
    stage: Stage,
    target: Target,
    rows: DataFrame,
    staged: DataFrame,
    key_columns: list[str],
) -> list[RuleOutcome]:
    """The stage's rules on this run's `rows`, which are every row the table now has of the keys
    (`key_columns`) the run replaced; those that need the whole table on the staged branch (a row count is
    the dataset's, not the run's). A rule that judges each key's rows apart (a type 2 history's checks, a
    unique rule over columns holding the keys) needs only the replaced keys' rows: this run's."""
    rules = context.rules(stage)
    unique_on = [] if target.scd_type == 2 else target.keys
    whole = {
        i
        for i, rule in enumerate(rules)
        if (rule.type == "row_count" or reads_written_data(rule, unique_on))
        and not judges_per_key(rule, key_columns)
    }
    on_rows = evaluate_rules(rows, [rule for i, rule in enumerate(rules) if i not in whole])
    on_table = evaluate_rules(staged, [rule for i, rule in enumerate(rules) if i in whole])
    ordered = iter(on_rows), iter(on_table)
    return [next(ordered[1] if i in whole else ordered[0]) for i in range(len(rules))]


def _append_rejected(
    context: StageContext, quarantine: TableRef, rejects: list[tuple[DataFrame, Observed]]
) -> tuple[int, str | None]:
    """Add this run's rejects to the dataset's quarantine on the run's branch of it, published with the
    stage; call after the write of the kept rows, which counted each kind. Returns their count and the
    branch (None: no rejects)."""
    rejected = counted_rejects(rejects)
    if rejected is None:
        return 0, None
    branch = context.lake.stage_quarantine(quarantine, rejected.frame, context.run_id, replace=False)
    return int(rejected.result["rows"]), branch
