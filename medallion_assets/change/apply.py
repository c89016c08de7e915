"""Publishing an environment a preview built (`medallion apply DIR --env NAME`), once the catalog holds the
change: table by table, upstream first, `main` takes the environment's version.

- A table whose `main` has not moved since the preview, and whose inputs' `main` is what the preview read,
  is fast-forwarded to its branch `env_<NAME>`: metadata only, no Spark job reads its data.
- Any other table runs its stage again, as a run would (its own write-audit-publish).
- A warehouse target is then loaded from the version `main` now holds, in one transaction.

Each table's publish is one Iceberg commit, recorded in the ledger and in audit_log, and consumes its branch
once the warehouse holds the version too: a failure or a kill leaves each table at its old or its new
version, and `apply` run again goes on with the branches left (a table whose `main` is at its environment
version already is only loaded and consumed).
"""

from __future__ import annotations

from dataclasses import dataclass

from medallion_assets.catalog.models import Stage
from medallion_assets.change.environment import env_branch
from medallion_assets.change.preview import branch_snapshot, drop_environment
from medallion_assets.engine.stage import StageOutcome, StageRunner
from medallion_assets.engine.stage.load import load
from medallion_assets.storage.lake.layout import TableRef, table_of
from medallion_assets.storage.lake.maintenance import LakeMaintenance
from medallion_assets.storage.lake.metadata import current_snapshot_id, load_table


@dataclass(frozen=True)
class Applied:
    dataset: str
    how: str  # "fast-forwarded" or "rebuilt"
    snapshot_id: int | None


def apply_environment(runner: StageRunner, name: str) -> list[Applied]:
    """Publish environment `name`'s tables to `main` with the catalog `runner` runs (the one just loaded),
    upstream first; returns what each table did. Tables without a branch left are done already. When every
    table is published, the environment's warehouse schemas go."""
    done = []
    for stage in runner.snapshot.stages():
        target = runner.snapshot.targets[stage.target_id]
        if target.layer != "bronze" and branch_snapshot(runner.lake_root, table_of(target), env_branch(name)):
            done.append(_apply_table(runner, stage, name))
    if all(a.snapshot_id is not None for a in done):
        drop_environment(runner.spark, runner.lake_root, runner.warehouse, runner.snapshot, name)
    return done


def _apply_table(runner: StageRunner, stage: Stage, name: str) -> Applied:
    target = runner.snapshot.targets[stage.target_id]
    table, branch = table_of(target), env_branch(name)
    inputs = {i: table_of(runner.snapshot.targets[i]) for i in stage.input_ids()}
    if _unmoved(runner, stage, name):
        held = (
            runner.store.warehouse_snapshot(target.target_id, repr(runner.warehouse))
            if runner.warehouse is not None
            else None
        )
        outcome = StageOutcome(snapshot_id=runner.lake.fast_forward(table, branch))
        outcome.input_snapshots = {
            i: s for i, t in inputs.items() if (s := current_snapshot_id(runner.lake_root, t)) is not None
        }
        assert outcome.snapshot_id is not None
        runner.record_commit(stage, outcome.snapshot_id, "publish", outcome.input_snapshots)
        if target.kind == "warehouse":
            written = runner.lake.read(table, snapshot_id=outcome.snapshot_id)
            load(runner, stage, target, written, outcome, held)
        # The rejects the preview took out are published with the table.
        if branch_snapshot(runner.lake_root, table.quarantine(), branch) is not None:
            runner.lake.publish(table.quarantine(), branch)
        how = "fast-forwarded"
    else:
        outcome = runner.run_stage(stage)
        how = "rebuilt"
    _consume(runner, table, branch)
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


def _consume(runner: StageRunner, table: TableRef, branch: str) -> None:
    """Drop the table's environment branch, last, with the files of a version that was not published."""
    LakeMaintenance(runner.spark, runner.lake_root).drop_branch(table, branch)


def _unmoved(runner: StageRunner, stage: Stage, name: str) -> bool:
    """Whether the stage's table and inputs are where the preview found them: the table's `main` is the
    parent of its environment version (or that version, when an apply was stopped before it consumed the
    branch), and no input's `main` was committed after that version (an input the environment rebuilt and
    this apply fast-forwarded was committed before it)."""
    table = table_of(runner.snapshot.targets[stage.target_id])
    version = branch_snapshot(runner.lake_root, table, env_branch(name))
    loaded = load_table(runner.lake_root, table)
    written = loaded.snapshot_by_id(version) if loaded and version is not None else None
    if written is None or current_snapshot_id(runner.lake_root, table) not in (
        written.parent_snapshot_id,
        written.snapshot_id,
    ):
        return False
    for dataset in stage.input_ids():
        input_table = load_table(runner.lake_root, table_of(runner.snapshot.targets[dataset]))
        current = input_table.current_snapshot() if input_table else None
        if current is not None and current.timestamp_ms > written.timestamp_ms:
            return False
    return True
