"""The plan: what a silver or gold stage will do this run (its mode, the inputs and bookmarks it builds on),
and why. A full refresh the user asked for comes first, then a restatement of a range of days; then what
the target's definition allows; then whether the stage can go on from its last commit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import exp

from medallion_assets import config
from medallion_assets.catalog.days import NotDaywise, declared_schemas, gold_day_source
from medallion_assets.catalog.loader import declared_columns
from medallion_assets.catalog.models import Incremental, Stage, Target
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.versions import stage_fingerprint
from medallion_assets.engine.stage.context import StageContext
from medallion_assets.engine.transform import NotGroupwise, describe_groups, group_keys, row_by_row
from medallion_assets.engine.validation import row_violation
from medallion_assets.storage.lake.layout import TableRef, day_partition, table_of

# Why a stage runs in full when its target says so.
ASKED_FULL = "its catalog row asks for a full recompute on every run (incremental: full)"


@dataclass(frozen=True)
class Days:
    """How a gold stage declared `incremental: {by, lookback}` recomputes its days: by the days of its main
    input's `event_column`, which its `by` is the day of, reading each dimension input whole at the snapshot
    its last commit read (`dimensions`)."""

    event_column: str
    dimensions: dict[str, int]


@dataclass(frozen=True)
class Mode:
    """How a silver or gold stage builds its dataset this run, and why: `full` (recomputed from its inputs'
    current versions) or `incremental`: silver from the rows its bronze input appended after snapshot
    `since`, gold by recomputing the groups (`groups`: output column → its key's expression over the input's
    columns) that its silver input's changes after snapshot `since` touched, or the days (`days`) its main
    input's changes after snapshot `since` touched; or `restatement`: the days the run's restatement
    names recomputed from its inputs' current versions, in the table's partition column `restated_by`."""

    mode: str
    why: str
    since: int | None = None
    groups: dict[str, exp.Expr] = field(default_factory=dict)
    days: Days | None = None
    restated_by: str | None = None

    @property
    def strategy(self) -> str:
        """The strategy that builds the dataset so (see the runner's `STRATEGIES`)."""
        if self.restated_by is not None:
            return "restatement"
        if self.since is None:
            return "full"
        if self.days is not None:
            return "gold by day"
        return "gold by groups" if self.groups else "silver merge"


def plan_stage(context: StageContext, stage: Stage, target: Target) -> Mode:
    """Whether the stage may bring its dataset up to date from what its input changed since its last
    commit, and why: silver from the rows bronze appended, gold by recomputing the groups they touch. A
    full refresh the user asked for comes first: it is why the stage runs in full, whatever else holds."""
    refresh, restatement = context.full_refresh, context.restatement
    if refresh and refresh.reaches(target.target_id, context.lake_ancestry(stage)):
        return Mode("full", f"a full refresh was asked for by {refresh.asked_by}")
    restated_by = day_partition(target)
    if restatement and restated_by and restatement.reaches(target.target_id, context.lake_ancestry(stage)):
        asked = restatement.asked
        # Only a table built by this definition, up to its last commit, may have some of its days replaced.
        refused = _unresumable(context, stage, target)
        if refused:
            return Mode("full", f"{asked}, and {refused}: recomputed whole")
        return Mode(
            "restatement", f"{asked}: recomputes those days of {restated_by}", restated_by=restated_by
        )
    if target.incremental == "full":
        return Mode("full", ASKED_FULL)
    if target.layer == "gold":
        if isinstance(target.incremental, Incremental):
            return _plan_days(context, stage, target)
        return _plan_groups(context, stage, target)
    source = context.snapshot.targets.get(stage.input_id)
    rules = context.rules(stage)
    if not target.keys:
        return Mode("full", "the target has no keys to merge new rows on")
    if stage.inputs or source is None or source.layer != "bronze":
        return Mode("full", "the stage reads more than one bronze table")
    if stage.transform_sql and not row_by_row(stage.transform_sql, stage.sql_dialect, [stage.input_id]):
        return Mode("full", "its SQL does not make each row from one input row (a join, aggregate, …)")
    if target.cdc is None and any(
        r.action in ("drop", "quarantine") and row_violation(r) is not None for r in rules
    ):
        return Mode("full", "rules drop rows after deduplication: a later batch could bring back a key")
    resumed = _resumed(context, stage, target, source, context.lake.appended_between)
    if resumed.since is None:
        return resumed
    since = resumed.since
    return Mode("incremental", f"reads the rows bronze appended after snapshot {since}", since)


def _plan_groups(context: StageContext, stage: Stage, target: Target) -> Mode:
    """Whether a gold stage may recompute only the groups its silver input's changes touched
    (`gold_groups`), from its last commit on, and why."""
    source = context.snapshot.targets.get(stage.input_id)
    try:
        groups = gold_groups(stage, target, context.snapshot, _columns_of(context, source) if source else [])
    except NotGroupwise as not_groupwise:
        return Mode("full", str(not_groupwise))
    assert source is not None, "gold_groups found one silver input"
    resumed = _resumed(context, stage, target, source, context.lake.changed_between)
    if resumed.since is None:
        return resumed
    since = resumed.since
    described = describe_groups(groups, stage.sql_dialect)
    touched = f"the groups ({described}) that silver's changes after snapshot {since} touched"
    return Mode("incremental", "recomputes " + touched, since, groups)


def _plan_days(context: StageContext, stage: Stage, target: Target) -> Mode:
    """Whether a gold stage declared `incremental: {by, lookback}` may recompute only the days its main
    input's changes touched, from its last commit on, and why: its `by` must be the day of an event time
    of the main input (`gold_day_source`), and its dimension inputs unchanged since that commit, as a
    change to one may touch any day."""
    assert isinstance(target.incremental, Incremental)
    try:
        event_column = gold_day_source(stage, target, _input_schemas(context, stage))
    except NotDaywise as not_daywise:
        return Mode("full", str(not_daywise))
    main = stage.input_id
    resumed = _resumed(context, stage, target, context.snapshot.targets[main], context.lake.changed_between)
    if resumed.since is None:
        return resumed
    last = context.last_publish(target)
    assert last is not None, "the stage resumes from its last publish"
    read_then = last.get("inputs") or {}
    dimensions: dict[str, int] = {}
    for dimension in stage.inputs:
        if dimension not in read_then:
            return Mode("full", f"the last commit does not say which snapshot of {dimension} it read")
        current = context.lake.current_snapshot(table_of(context.snapshot.targets[dimension]))
        if current != int(read_then[dimension]):
            return Mode("full", f"the dimension input {dimension} changed since the last commit")
        dimensions[dimension] = current
    why = (
        f"recomputes the days of {target.incremental.by} that the changes of {main} after snapshot "
        f"{resumed.since} touched, {_lookback(main, target.incremental.lookback)}"
    )
    return Mode("incremental", why, resumed.since, days=Days(event_column, dimensions))


def _input_schemas(context: StageContext, stage: Stage) -> dict[str, dict[str, str]]:
    """Each input's columns (name → Spark type) as the stage reads them: its table's, or before it is
    written its declared ones (none when undeclared)."""
    schemas = {}
    for input_id in stage.input_ids():
        if context.lake.exists(table_of(context.snapshot.targets[input_id])):
            fields = context.read_dataset(input_id).schema.fields
            schemas[input_id] = {f.name: f.dataType.simpleString() for f in fields}
        else:
            schemas[input_id] = declared_columns(context.snapshot, input_id) or {}
    return schemas


def _columns_of(context: StageContext, dataset: Target) -> list[str]:
    """A lake dataset's columns: those its catalog row declares, else its table's."""
    if dataset.columns:
        return list(dataset.columns)
    table = table_of(dataset)
    return context.lake.read(table).columns if context.lake.exists(table) else []


def _resumed(
    context: StageContext,
    stage: Stage,
    target: Target,
    source: Target,
    readable: Callable[[TableRef, int, int | None], str | None],
) -> Mode:
    """Whether the stage can go on from its last commit, as every incremental plan needs: its inputs
    available, the same definition, its table's rows untouched since (a compaction rewrites files, not
    rows), the input snapshot it read known, and what `source` changed since then `readable` (the lake's
    check of what the plan reads: why not, or None).
    Returns `since` (that snapshot) when it can, else the full mode and why."""
    refused = _unresumable(context, stage, target)
    if refused:
        return Mode("full", refused)
    last = context.last_publish(target)
    assert last is not None, "a stage that can go on has a last commit"
    since = (last.get("inputs") or {}).get(stage.input_id)
    if since is None:
        return Mode("full", "the last commit does not say which input snapshot it read")
    input_table = table_of(source)
    refused = readable(input_table, int(since), context.lake.current_snapshot(input_table))
    if refused:
        return Mode("full", refused)
    return Mode("incremental", "", int(since))


def _unresumable(context: StageContext, stage: Stage, target: Target) -> str | None:
    """Why the stage's table is not what its last commit made with its current definition, from inputs that
    are available (then it is rebuilt whole); None when it is."""
    if context.recovery.flagged(context.lake_ancestry(stage)):
        return "an input is unavailable and rebuilt from its own inputs"
    last = context.last_publish(target)
    if last is None:
        return "first build: no earlier commit of this stage"
    fingerprint = stage_fingerprint(stage, target, context.snapshot)
    if last.get("fingerprint") != fingerprint:
        return f"the stage's definition changed ({last.get('fingerprint')} → {fingerprint})"
    table = table_of(target)
    changed = context.lake.rewritten_between(
        table, int(last["snapshot_id"]), context.lake.current_snapshot(table)
    )
    if changed:
        return f"the table changed since this stage's last commit (a rollback or another writer): {changed}"
    return None


def gold_groups(
    stage: Stage, target: Target, snapshot: CatalogSnapshot, input_columns: list[str]
) -> dict[str, exp.Expr]:
    """The groups a gold stage can be recomputed by, from its definition alone: output column → its key's
    expression over silver's columns (see `group_keys`). Raises NotGroupwise, saying why, unless it aggregates
    exactly one silver table by columns of it or deterministic expressions of them, each an output column, and
    its keys, if any, are those output columns, by which a group's rows are found in the table and in the
    warehouse."""
    source = snapshot.targets.get(stage.input_id)
    if stage.inputs or source is None or source.layer != "silver":
        raise NotGroupwise("the stage does not read exactly one silver table")
    if not stage.transform_sql:
        raise NotGroupwise("it has no SQL aggregation: a copy of its input")
    if target.cdc is not None:
        raise NotGroupwise("a change feed's target is rebuilt from its events")
    groups = group_keys(stage.transform_sql, stage.sql_dialect, stage.input_id, input_columns)
    declared = {column.lower() for column in target.columns or ()}
    undeclared = [group for group in groups if declared and group.lower() not in declared]
    if undeclared:
        raise NotGroupwise(f"its GROUP BY columns ({', '.join(undeclared)}) are not declared columns")
    if target.keys and {k.lower() for k in target.keys} != {g.lower() for g in groups}:
        raise NotGroupwise(
            f"its keys ({', '.join(target.keys)}) are not its GROUP BY columns ({', '.join(groups)})"
        )
    return groups


def gold_mode_description(stage: Stage, target: Target, snapshot: CatalogSnapshot) -> str:
    """How a gold stage builds its dataset, as far as its definition says (the asset's description)."""
    if target.incremental == "full":
        return f"Recomputed whole on every run: {ASKED_FULL}."
    if isinstance(target.incremental, Incremental):
        try:
            event_column = gold_day_source(stage, target, declared_schemas(stage, snapshot))
        except NotDaywise as not_daywise:
            return f"Recomputed whole on every run: {not_daywise}."
        dimensions = (
            f" Its dimension inputs ({', '.join(stage.inputs)}) are read whole; a change to one recomputes "
            "it whole."
            if stage.inputs
            else ""
        )
        return (
            f"Incremental by day: recomputes the days of {target.incremental.by} (the days of "
            f"{stage.input_id}.{event_column}) that changes of {stage.input_id} touch, "
            f"{_lookback(stage.input_id, target.incremental.lookback)} (whole on a first build, after a "
            f"definition change or a rollback).{dimensions}"
        )
    source = snapshot.targets.get(stage.input_id)
    try:
        groups = gold_groups(stage, target, snapshot, list(source.columns or ()) if source else [])
    except NotGroupwise as not_groupwise:
        return f"Recomputed whole on every run: {not_groupwise}."
    described = describe_groups(groups, stage.sql_dialect)
    whole_when = (
        "a first build, a definition change or a rollback"
        if target.incremental == "when_possible"
        else f"a first build, a definition change, a rollback, over fewer than "
        f"{config.gold_groups_from_rows():,} silver rows, or when changes touch a third of its groups or more"
    )
    return (
        f"Incremental: recomputes only the groups ({described}) that silver's changes touch (whole on "
        f"{whole_when})."
    )


def _lookback(main_input: str, lookback: int) -> str:
    """What a gold stage's `incremental.lookback` makes a run recompute, and read, in words."""
    if not lookback:
        return "with no lookback"
    days = f"{lookback} day" if lookback == 1 else f"{lookback} days"
    return (
        f"and the {days} after each (a lookback of {days}: a day is made from the rows of {main_input} of "
        f"that day and the {days} before)"
    )
