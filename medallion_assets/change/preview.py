"""A preview of a catalog change in an environment (`medallion plan DIR --env NAME`): the stages the plan
rebuilds run with the new catalog, as SQLMesh's virtual data environments run changed models, but on the
lake's own write-audit-publish branches.

- Each rebuilt lake table is written on its branch `env_<NAME>` (kept, never fast-forwarded); an input the
  change does not rebuild is read at `main`'s snapshot, without a copy.
- A warehouse target loads into `<schema>__<NAME>`, never into its own schema.
- Nothing is recorded in the ledger: main's next run plans as if the preview never ran.

Then each rebuilt table is compared with `main` by its target's key: rows before and after, added, removed
and changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dagster import DagsterInstance, GraphDefinition, op
from pyspark.sql import SparkSession

from medallion_assets.catalog.models import Stage, Target
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.change.environment import env_branch, env_location
from medallion_assets.change.plan import Plan
from medallion_assets.engine.refresh import FullRefresh
from medallion_assets.engine.services import Ledger
from medallion_assets.engine.stage import StageOutcome, StageRunner
from medallion_assets.naming import ENV_TAG
from medallion_assets.storage.lake.layout import TableRef, table_of
from medallion_assets.storage.lake.metadata import current_snapshot_id, load_table, snapshot_total
from medallion_assets.storage.lake.tables import LakeTables
from medallion_assets.storage.warehouse import Warehouse

# Why a preview rebuilds every dataset it runs whole: an incremental step would read main's changes since
# main's last run, which says nothing of the branch.
PREVIEW_REFRESH = FullRefresh(starts=None, asked_by="medallion plan --env")


def branch_snapshot(lake_root: str, table: TableRef, branch: str) -> int | None:
    """The snapshot the table's `branch` is at, from its metadata; None without the table or the branch."""
    loaded = load_table(lake_root, table)
    ref = loaded.refs().get(branch) if loaded else None
    return ref.snapshot_id if ref else None


@dataclass
class EnvironmentLake(LakeTables):
    """The lake as an environment sees it: a table it rebuilt is read at its branch, any other at `main`; and
    a run's checked branch becomes the environment's branch instead of `main`."""

    branch: str = field(kw_only=True)

    def current_snapshot(self, table: TableRef) -> int | None:
        own = branch_snapshot(self.lake_root, table, self.branch)
        return own if own is not None else super().current_snapshot(table)

    def publish(self, table: TableRef, branch: str) -> int:
        snapshot_id = branch_snapshot(self.lake_root, table, branch)
        assert snapshot_id is not None, "a run publishes the branch it just wrote"
        self.spark.sql(
            f"ALTER TABLE {table.sql} CREATE OR REPLACE BRANCH `{self.branch}` AS OF VERSION {snapshot_id}"
        )
        self.spark.sql(f"ALTER TABLE {table.sql} DROP BRANCH IF EXISTS `{branch}`")
        return snapshot_id


@dataclass
class PreviewLedger:
    """The ledger as a preview uses it: it reads what main's runs recorded and records nothing, and the
    environment's warehouse tables are new, so none holds a version yet."""

    main: Ledger

    def lake_commits(self, dataset: str) -> list[dict[str, Any]]:
        return self.main.lake_commits(dataset)

    def record_commit(self, **commit: Any) -> None:
        pass

    def record_audit(self, **entry: Any) -> None:
        pass

    def warehouse_snapshot(self, dataset: str, warehouse: str) -> int | None:
        return None

    def __getattr__(self, name: str) -> Any:  # bronze's bookmarks: a preview never ingests
        raise NotImplementedError(f"a preview does not use the ledger's {name}")


@dataclass(frozen=True)
class TableDiff:
    """One rebuilt table in the environment against `main`, rows compared by the target's key."""

    dataset: str
    table: str
    rows_main: int
    rows_env: int
    added: int
    removed: int
    changed: int
    checks: list[str]


def environment_snapshot(snapshot: CatalogSnapshot, name: str) -> CatalogSnapshot:
    """`snapshot` with every warehouse target moved to environment `name`'s schema."""
    moved = snapshot.replaced({})
    for target in snapshot.targets.values():
        if target.kind == "warehouse" and target.location:
            moved.add("targets", target.model_copy(update={"location": env_location(target.location, name)}))
    return moved


def rebuilt_stages(plan: Plan, snapshot: CatalogSnapshot) -> list[Stage]:
    """The silver and gold stages the plan rebuilds, upstream first. Bronze is not previewed: it ingests raw
    objects, which the change does not alter, and its bookmarks are main's."""
    stages = (snapshot.stage_producing(rebuild.dataset) for rebuild in plan.rebuilds)
    return [s for s in stages if s is not None and snapshot.targets[s.target_id].layer != "bronze"]


@dataclass
class EnvironmentRunner(StageRunner):
    """Runs stages in environment `env`: its lake (EnvironmentLake) and the ledger as a preview uses it."""

    env: str = field(kw_only=True)

    def __post_init__(self) -> None:
        self.lake = EnvironmentLake(self.spark, self.lake_root, branch=env_branch(self.env))


def preview(runner: EnvironmentRunner, plan: Plan) -> list[TableDiff]:
    """Run the stages `plan` rebuilds in the runner's environment, upstream first, and compare each table
    they wrote with `main`."""
    diffs = []
    for stage in rebuilt_stages(plan, runner.snapshot):
        outcome = runner.run_stage(stage)
        target = runner.snapshot.targets[stage.target_id]
        # A version a blocking rule failed stays on its run's branch, not the environment's: it is compared
        # from there, and what is made from it reads main.
        branch = outcome.staged_branch or env_branch(runner.env)
        diffs.append(table_diff(runner.lake, target, branch, outcome))
    return diffs


def preview_run(instance: DagsterInstance, runner: EnvironmentRunner, plan: Plan) -> list[TableDiff]:
    """`preview` as a Dagster run of its own in `instance`, tagged ENV_TAG with the environment's name, so
    that the UI lists an environment's runs (its runs page filters by tag). The run's id is the runner's,
    which names the branches its stages write, as an asset run's does."""

    @op(name="preview_environment")
    def run_preview() -> Any:
        return preview(runner, plan)

    job = GraphDefinition(name="medallion_env_preview", node_defs=[run_preview]).to_job()
    # What the command prints says what happened; Dagster's log of every event stays in the instance.
    quiet = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
    result = job.execute_in_process(
        run_config=quiet, instance=instance, run_id=runner.run_id, tags={ENV_TAG: runner.env}
    )
    diffs: list[TableDiff] = result.output_for_node("preview_environment")
    return diffs


def table_diff(lake: LakeTables, target: Target, branch: str, outcome: StageOutcome) -> TableDiff:
    """The table's rows on `branch` against `main`, matched by the target's keys (all columns without)."""
    table = table_of(target)
    env = lake.read(table, branch=branch)
    main = env.limit(0) if current_snapshot_id(lake.lake_root, table) is None else lake.read(table)
    shared = [c for c in env.columns if c in main.columns]
    keys = [k for k in target.keys if k in shared] or shared
    env_keys, main_keys = env.select(*keys).distinct(), main.select(*keys).distinct()
    changed = (
        env.select(*shared).exceptAll(main.select(*shared)).join(main_keys, keys, "left_semi").select(*keys)
    )
    return TableDiff(
        dataset=target.target_id,
        table=str(table),
        rows_main=main.count(),
        rows_env=env.count(),
        added=env_keys.join(main_keys, keys, "left_anti").count(),
        removed=main_keys.join(env_keys, keys, "left_anti").count(),
        changed=changed.distinct().count(),
        checks=[f"{'passed' if o.passed else 'FAILED'}: {o.message}" for o in outcome.rule_outcomes],
    )


@dataclass(frozen=True)
class EnvironmentBranch:
    """One lake table's branch of an environment: its snapshot, when it was written, its bytes."""

    table: TableRef
    snapshot_id: int
    written_at: datetime
    size_bytes: int


def environments(lake_root: str, snapshot: CatalogSnapshot) -> dict[str, list[EnvironmentBranch]]:
    """Every environment's branches in the catalog's silver and gold tables, by environment name, from the
    tables' metadata (no Spark)."""
    found: dict[str, list[EnvironmentBranch]] = {}
    for target in snapshot.targets.values():
        table = table_of(target)
        loaded = load_table(lake_root, table) if target.layer != "bronze" else None
        for name, ref in (loaded.refs() if loaded else {}).items():
            written = loaded.snapshot_by_id(ref.snapshot_id) if loaded and name.startswith("env_") else None
            if written is not None:
                size = snapshot_total(lake_root, table, ref.snapshot_id, "total-files-size") or 0
                at = datetime.fromtimestamp(written.timestamp_ms / 1000, UTC)
                found.setdefault(name.removeprefix("env_"), []).append(
                    EnvironmentBranch(table, ref.snapshot_id, at, size)
                )
    return found


def drop_environment(
    spark: SparkSession, lake_root: str, warehouse: Warehouse | None, snapshot: CatalogSnapshot, name: str
) -> list[str]:
    """Remove environment `name`: its branches (their files go with the snapshots' expiry) and its warehouse
    schemas. Returns what was removed, one line each."""
    removed = []
    LakeTables(spark, lake_root)  # registers the lake's catalogs on the session
    for branch in environments(lake_root, snapshot).get(name, []):
        spark.sql(f"ALTER TABLE {branch.table.sql} DROP BRANCH IF EXISTS `{env_branch(name)}`")
        removed.append(f"branch {env_branch(name)} of {branch.table}")
    schemas = sorted(
        {
            env_location(t.location, name).split(".")[0]
            for t in snapshot.targets.values()
            if t.kind == "warehouse" and t.location
        }
    )
    for schema in schemas:
        exists = f"SELECT 1 FROM information_schema.schemata WHERE schema_name = '{schema}'"
        if warehouse is not None and warehouse.query(exists):
            warehouse.query(f'DROP SCHEMA "{schema}" CASCADE')
            removed.append(f"warehouse schema {schema}")
    return removed
