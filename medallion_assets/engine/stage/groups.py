"""Gold by groups: a gold table brought up to date by recomputing only the groups its silver input's
changes touched (see `plan.gold_groups` for when a stage can be)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from sqlglot import exp

from medallion_assets import config
from medallion_assets.catalog.days import day_column
from medallion_assets.catalog.models import Stage, Target
from medallion_assets.engine import changes
from medallion_assets.engine.stage.context import StageContext
from medallion_assets.engine.stage.outcome import StageOutcome
from medallion_assets.engine.stage.plan import Mode
from medallion_assets.engine.stage.replace import Replacement, nothing_new, replace_keys, rows_under
from medallion_assets.engine.stage.shape import shape
from medallion_assets.engine.transform import group_key_column, with_group_keys
from medallion_assets.naming import INGESTION_COLUMNS
from medallion_assets.storage.lake.layout import TableRef, table_of

# Recomputing every group the incremental way took 2.7 times a recompute of the whole table (gold of
# bench/incremental.py, day 4: 9.5 s against 3.5 s: the changelog read, the semi join of silver's rows and
# a delete with an append against one overwrite), so it pays only while the touched groups are under about
# 1/2.7 of them: from a third on (a margin for groups of unequal size) the stage is recomputed whole.
RECOMPUTE_FROM_SHARE = 1 / 3


def build(
    context: StageContext, stage: Stage, target: Target, plan: Mode
) -> tuple[StageOutcome, DataFrame] | Mode:
    """Bring a gold table up to date by recomputing the groups its silver input's changes since
    `plan.since` touched: the group-key values of every row the changes deleted or inserted (Iceberg's
    changelog: both images; each key's expression evaluated on them), recomputed from the silver rows of
    those groups alone (the rows whose keys' values are a touched group's, a null matching a null). On
    the run's branch the groups' rows are replaced by the recomputed ones, so a group that vanished is
    deleted; checked there, then published. The touched groups stay on the outcome for the warehouse
    load. When silver is so small, or the changes touched so many of gold's groups, that a recompute costs
    less, the full mode instead, saying why (unless the target says `incremental: when_possible`)."""
    assert plan.since is not None
    silver = stage.input_id
    source = context.snapshot.targets[silver]
    silver_table = table_of(source)
    end = context.lake.current_snapshot(silver_table)
    assert end is not None, "the plan found silver's current snapshot"
    if end == plan.since:
        return nothing_new(context, stage, target, plan, end)
    when_possible = target.incremental == "when_possible"
    too_small = None if when_possible else _too_small_for_groups(context, source, end)
    # Rows appended, or a row count that changed (silver rebuilt with new rows), touch a group at least:
    # before reading the changelog, a silver too small for gold by groups is known to need a recompute from
    # its snapshots' summaries alone.
    if too_small and _rows_changed(context, silver_table, plan.since, end):
        return Mode("full", too_small)
    helpers = [group_key_column(output) for output in plan.groups]
    with context.lake.changelog(silver_table, plan.since, end) as changed:
        # Cached and counted here: the changelog is read once, and its view does not outlive this block.
        touched = (
            with_group_keys(context.spark, changed, silver, plan.groups, stage.sql_dialect)
            .select(*[F.col(f"`{helper}`") for helper in helpers])
            .distinct()
            .cache()
        )
        groups = touched.count()
    if not groups:
        touched.unpersist()
        return nothing_new(context, stage, target, plan, end)
    table = table_of(target)
    replaced_in = context.lake.current_snapshot(table)
    costlier = (
        None
        if when_possible
        else too_small
        or _costlier_than_recompute(
            context.lake.total_rows(table, replaced_in) if replaced_in is not None else None, groups
        )
    )
    if costlier:
        touched.unpersist()
        return Mode("full", costlier)
    silver_rows = context.read_dataset(silver, end)
    within = _groups_window(plan.groups, touched, silver_rows)
    rows = with_group_keys(
        context.spark, silver_rows.where(within or "TRUE"), silver, plan.groups, stage.sql_dialect
    )
    # Cached: read by the count of rows read and by the SQL.
    of_groups = changes.rows_of_keys(rows, touched, helpers).drop(*helpers).cache()
    shaped = shape(context, stage, target, {silver: of_groups})
    # The groups' keys named and typed as the gold table's columns, so that their rows are found there;
    # kept until the warehouse load (`run_stage` lets them go).
    types = {f.name.lower(): f.dataType for f in context.lake.read(table).schema.fields}
    keys = touched.select(
        *[
            F.col(f"`{helper}`").cast(types[output.lower()]).alias(output)
            if output.lower() in types
            else F.col(f"`{helper}`").alias(output)
            for output, helper in zip(plan.groups, helpers, strict=True)
        ]
    ).cache()
    outcome, written = replace_keys(
        context,
        stage,
        target,
        plan,
        Replacement(
            shaped.frame.drop(*INGESTION_COLUMNS), keys, list(plan.groups), shaped.rejects, of_groups.count()
        ),
        {silver: end},
        rows_in=shaped.rows_in,
    )
    touched.unpersist()
    of_groups.unpersist()
    outcome.details["groups_recomputed"] = groups
    outcome.changed_groups, outcome.groups_replaced_in = keys, replaced_in
    return outcome, written


def _rows_changed(context: StageContext, table: TableRef, since: int, end: int) -> bool:
    """Whether silver's rows changed after `since` up to `end`, as its snapshots' summaries say (no data
    file read): its commits only appended rows, and some, or it holds another number of rows. A silver
    rewritten with as many rows may hold the same ones: only its changelog can tell."""
    if context.lake.appended_between(table, since, end) is None:
        return bool(context.lake.rows_appended(table, since, end))
    before, after = context.lake.total_rows(table, since), context.lake.total_rows(table, end)
    return before is not None and after is not None and before != after


def _too_small_for_groups(context: StageContext, source: Target, end: int) -> str | None:
    """Why silver, at snapshot `end`, is too small for gold by groups to cost less than a recompute, whatever
    a batch touches (`config.gold_groups_from_rows`), from its snapshot's summary; None when it is not, or
    cannot tell. Acted on only once silver is known to hold new rows, appended or in the changelog: a
    silver rewritten with the same rows (a rebuild of a stage that reads two bronze tables, a compaction)
    leaves gold as it is."""
    floor = config.gold_groups_from_rows()
    rows = rows_under(context, source, end, floor)
    if rows is None:
        return None
    return (
        f"{source.target_id} holds {rows:,} rows, fewer than the {floor:,} from which recomputing only the "
        f"touched groups costs less than recomputing the whole table ({config.GROUPS_FROM_ROWS_ENV})"
    )


def _costlier_than_recompute(rows: int | None, groups: int) -> str | None:
    """Why recomputing `groups` of a gold table of `rows` rows costs more than recomputing it whole (None: it
    does not, or its snapshot summary cannot tell its rows): they are at least `RECOMPUTE_FROM_SHARE` of its
    rows, one a group."""
    if not rows or groups < rows * RECOMPUTE_FROM_SHARE:
        return None
    return (
        f"silver's changes touched {groups} group{'s' if groups > 1 else ''}, {min(groups / rows, 1):.0%} "
        f"of the {rows} row{'s' if rows > 1 else ''} gold holds: recomputed whole, which costs less than "
        "recomputing a third or more of its groups (incremental: when_possible keeps such runs incremental)"
    )


def _groups_window(groups: dict[str, exp.Expr], touched: DataFrame, silver: DataFrame) -> str | None:
    """Where the rows of the `touched` groups lie in silver, as far as their keys say: each key that is a
    date or timestamp column, or the day of one, bounds its column to the touched groups' days, which
    the scan prunes to (None: anywhere)."""
    types = {f.name.lower(): f.dataType for f in silver.schema.fields}
    windows = []
    for output, key in groups.items():
        column = day_column(key)
        if column is None or column.lower() not in types:
            continue
        window = changes.window_of(touched, group_key_column(output), column, types[column.lower()])
        if window is not None:
            windows.append(f"({window})")
    return " AND ".join(windows) or None
