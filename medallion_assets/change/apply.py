"""Publishing an environment a preview built (`medallion apply DIR --env NAME`), once the catalog holds the
change: table by table, upstream first, `main` takes the environment's version.

- A table whose `main` has not moved since the preview, and whose inputs' `main` is what the preview read,
  is fast-forwarded to its branch `env_<NAME>`: metadata only, no Spark job reads its data.
- Any other table runs its stage again, as a run would (its own write-audit-publish).
- A warehouse target then takes, in one transaction, the rows of the environment's warehouse table, which
  the preview loaded with that version: no lake data is read. When it cannot (that table is gone, or not
  that version's, or the target's table lacks one of its columns), the version `main` now holds is loaded
  from the lake, in one transaction too.

Each table's publish is one Iceberg commit, recorded in the ledger and in audit_log, and consumes its branch
once the warehouse holds the version too: a failure or a kill leaves each table at its old or its new
version, and `apply` run again goes on with the branches left (a table whose `main` is at its environment
version already is only loaded and consumed). Each lake table's metadata is read once (`LoadedTables`), and
again only after this apply committed to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from medallion_assets.catalog.models import Stage
from medallion_assets.change.environment import env_branch, env_location
from medallion_assets.change.preview import drop_branches, drop_schemas, environments
from medallion_assets.engine.stage import StageOutcome, StageRunner
from medallion_assets.engine.stage.load import load, take
from medallion_assets.storage.lake.layout import TableRef, table_of
from medallion_assets.storage.lake.metadata import LoadedTables


@dataclass(frozen=True)
class Applied:
    dataset: str
    how: str  # "fast-forwarded" or "rebuilt"
    snapshot_id: int | None


def apply_environment(runner: StageRunner, name: str) -> list[Applied]:
    """Publish environment `name`'s tables to `main` with the catalog `runner` runs (the one just loaded),
    upstream first; returns what each table did. Tables without a branch left are done already. When every
    table is published, the environment's remaining branches and its warehouse schemas go."""
    branches = {
        b.table: b.snapshot_id for b in environments(runner.resolved_lake, runner.snapshot).get(name, [])
    }
    metadata, done = LoadedTables(runner.resolved_lake), []
    for stage in runner.snapshot.stages():
        table = table_of(runner.snapshot.targets[stage.target_id])
        if table in branches:
            done.append(_apply_table(runner, stage, name, branches, metadata))
    if all(a.snapshot_id is not None for a in done):
        drop_branches(runner.spark, runner.resolved_lake, list(branches), name)
        drop_schemas(runner.warehouse, runner.snapshot, name)
    return done


def _apply_table(
    runner: StageRunner, stage: Stage, name: str, branches: dict[TableRef, int], metadata: LoadedTables
) -> Applied:
    """Publish the stage's table, then drop its branch; `branches` (table → environment version) loses the
    branches dropped."""
    target = runner.snapshot.targets[stage.target_id]
    table, branch = table_of(target), env_branch(name)
    if _unmoved(runner, stage, branches[table], metadata):
        outcome = StageOutcome(snapshot_id=runner.lake.fast_forward(table, branch))
        metadata.committed(table)
        outcome.input_snapshots = {
            i: s
            for i in stage.input_ids()
            if (s := metadata.current(table_of(runner.snapshot.targets[i]))) is not None
        }
        assert outcome.snapshot_id is not None
        runner.record_commit(stage, outcome.snapshot_id, "publish", outcome.input_snapshots)
        # The warehouse takes the environment's table, which the preview loaded with this version; only
        # when it cannot is the version read from the lake and loaded.
        location = target.warehouse_table()
        if target.kind == "warehouse" and location is not None:
            if take(runner, stage, target, env_location(location, name), outcome) is None:
                held = runner.store.warehouse_snapshot(target.target_id, repr(runner.warehouse))
                written = runner.lake.read(table, snapshot_id=outcome.snapshot_id)
                load(runner, stage, target, written, outcome, held)
        # The rejects the preview took out are published with the table.
        if branches.pop(table.quarantine(), None) is not None:
            runner.lake.publish(table.quarantine(), branch)
        # Last, the table's environment branch goes: its version is main's.
        runner.lake.drop_branch(table, branch)
        how = "fast-forwarded"
    else:
        outcome = runner.run_stage(stage)
        metadata.committed(table)
        # Last, the table's environment branch goes, with the files of the version not published.
        drop_branches(runner.spark, runner.resolved_lake, [table], name)
        how = "rebuilt"
    del branches[table]
    runner.store.record_audit(
        pipeline_id=stage.pipeline_id,
        stage_name=stage.stage_name,
        dataset=target.target_id,
        event="apply",
        status="success" if outcome.snapshot_id is not None else "failed",
        error=outcome.blocking_error(),
        details={"environment": name, "how": how, "snapshot_id": str(outcome.snapshot_id)},
    )
    return Applied(target.target_id, how, outcome.snapshot_id)


def _unmoved(runner: StageRunner, stage: Stage, version: int, metadata: LoadedTables) -> bool:
    """Whether the stage's table and inputs are where the preview found them: the table's `main` is the
    parent of its environment `version` (or that version, when an apply was stopped before it consumed the
    branch), and no input's `main` was committed after that version (an input the environment rebuilt and
    this apply fast-forwarded was committed before it)."""
    table = table_of(runner.snapshot.targets[stage.target_id])
    loaded = metadata(table)
    written = loaded.snapshot_by_id(version) if loaded else None
    if written is None or metadata.current(table) not in (written.parent_snapshot_id, written.snapshot_id):
        return False
    for dataset in stage.input_ids():
        input_table = metadata(table_of(runner.snapshot.targets[dataset]))
        current = input_table.current_snapshot() if input_table else None
        if current is not None and current.timestamp_ms > written.timestamp_ms:
            return False
    return True
