"""A preview of a catalog change in an environment (`medallion plan DIR --env NAME`): the stages the plan
rebuilds run with the new catalog, as SQLMesh's virtual data environments run changed models, but on the
lake's own write-audit-publish branches.

- Each rebuilt lake table is written on its branch `env_<NAME>` (kept, never fast-forwarded); an input the
  change does not rebuild is read at `main`'s snapshot, without a copy.
- A warehouse target loads into `<schema>__<NAME>`, never into its own schema.
- Nothing is recorded in the ledger: main's next run plans as if the preview never ran.

Then each rebuilt table is compared with `main` by its target's key: rows before and after, added, removed
and changed, and in how many of the changed rows each column changed.

A stage with an input that has no table on `main` nor on the environment's branch (never built: another
pipeline that never ran) is not previewed, and says so, as SQLMesh and dbt leave out a model whose upstream
was never built; nor is a stage made from one that was not previewed. The rest of the preview goes on.

An environment's branches are kept as long as a run's unpublished branch (STAGED_BRANCH_RETENTION_DAYS): the
lake's maintenance (`expire_snapshots`) drops them after that, as Iceberg drops any branch past its retention.
"""

from __future__ import annotations

import operator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from functools import reduce
from typing import Any

from dagster import DagsterInstance, GraphDefinition, op
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from medallion_assets.catalog.models import Stage, Target
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.change.environment import env_branch, env_location
from medallion_assets.change.plan import Plan
from medallion_assets.engine.refresh import FullRefresh
from medallion_assets.engine.services import Ledger
from medallion_assets.engine.stage import StageOutcome, StageRunner
from medallion_assets.naming import ENV_TAG
from medallion_assets.storage.lake.layout import TableRef, table_of
from medallion_assets.storage.lake.maintenance import LakeMaintenance
from medallion_assets.storage.lake.metadata import branch_head, load_table, main_snapshot_id
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.lake.tables import STAGED_BRANCH_RETENTION_DAYS, LakeTables
from medallion_assets.storage.warehouse import Warehouse

# Up to how many rows (of both versions together, from their snapshots' summaries) a table's diff runs in one
# task: below that, a shuffle's tasks cost more than they share out.
ONE_TASK_ROWS = 1_000_000
# Why a preview rebuilds every dataset it runs whole: an incremental step would read main's changes since
# main's last run, which says nothing of the branch.
PREVIEW_REFRESH = FullRefresh(starts=None, asked_by="medallion plan --env")


@dataclass
class EnvironmentLake(LakeTables):
    """The lake as an environment sees it: a table it rebuilt is read at its branch, any other at `main`; and
    a run's checked branch becomes the environment's branch instead of `main`."""

    branch: str = field(kw_only=True)

    def current_snapshot(self, table: TableRef) -> int | None:
        loaded = load_table(self.lake, table)  # once: both refs are in its metadata
        own = loaded.refs().get(self.branch) if loaded else None
        return own.snapshot_id if own else main_snapshot_id(loaded)

    def publish(self, table: TableRef, branch: str) -> int:
        head = branch_head(self.lake, table, branch)
        assert head is not None, "a run publishes the branch it just wrote"
        snapshot_id = head.snapshot_id
        self.spark.sql(
            f"ALTER TABLE {table.sql} CREATE OR REPLACE BRANCH `{self.branch}` AS OF VERSION {snapshot_id} "
            f"RETAIN {STAGED_BRANCH_RETENTION_DAYS} DAYS"
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
    changed_columns: dict[str, int]  # of the changed rows, how many changed in each column (those that did)
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
        self.lake = EnvironmentLake(self.spark, self.resolved_lake, branch=env_branch(self.env))


@dataclass(frozen=True)
class Preview:
    """What a preview did in environment `environment`: each table it rebuilt compared with `main`, and the
    datasets it did not preview, each with why."""

    environment: str
    tables: list[TableDiff]
    not_previewed: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        """As `medallion plan --json --env` prints it (plan.schema.json's `environment`)."""
        return {
            "name": self.environment,
            "branch": env_branch(self.environment),
            "tables": [asdict(d) for d in self.tables],
            "not_previewed": [{"dataset": d, "why": why} for d, why in self.not_previewed.items()],
        }


def preview(runner: EnvironmentRunner, plan: Plan) -> Preview:
    """Run the stages `plan` rebuilds in the runner's environment, upstream first, and compare each table
    they wrote with `main`; a stage whose inputs cannot be read is left out (`unreadable_input`)."""
    diffs: list[TableDiff] = []
    not_previewed: dict[str, str] = {}
    for stage in rebuilt_stages(plan, runner.snapshot):
        why = unreadable_input(runner, stage, not_previewed)
        if why is not None:
            not_previewed[stage.target_id] = why
            continue
        outcome = runner.run_stage(stage)
        target = runner.snapshot.targets[stage.target_id]
        # A version a blocking rule failed stays on its run's branch, not the environment's: it is compared
        # from there, and what is made from it reads main.
        branch = outcome.staged_branch or env_branch(runner.env)
        diffs.append(table_diff(runner.lake, target, branch, outcome))
    return Preview(runner.env, diffs, not_previewed)


def unreadable_input(runner: EnvironmentRunner, stage: Stage, not_previewed: dict[str, str]) -> str | None:
    """Why the stage cannot be previewed, or None when it can: an input this preview left out, or one with
    no table on `main` nor on the environment's branch (reading it would fail, or read nothing)."""
    for dataset in stage.input_ids():
        if dataset in not_previewed:
            return f"input {dataset} was not previewed"
        if runner.lake.current_snapshot(table_of(runner.snapshot.targets[dataset])) is None:
            return f"input {dataset} has never been built"
    return None


def preview_run(instance: DagsterInstance, runner: EnvironmentRunner, plan: Plan) -> Preview:
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
    previewed: Preview = result.output_for_node("preview_environment")
    return previewed


def table_diff(lake: LakeTables, target: Target, branch: str, outcome: StageOutcome) -> TableDiff:
    """The table's rows on `branch` against `main`, matched by the target's keys (all columns without)."""
    table = table_of(target)
    loaded = load_table(lake.lake, table)
    assert loaded is not None, "the preview just wrote the table's branch"
    versions = (loaded.snapshot_by_id(loaded.refs()[branch].snapshot_id), loaded.current_snapshot())
    rows = sum(int(v.summary.additional_properties["total-records"]) for v in versions if v and v.summary)
    env = lake.read(table, branch=branch)
    main = env.limit(0) if versions[1] is None else lake.read(table)
    shared = [c for c in env.columns if c in main.columns]
    keys = [k for k in target.keys if k in shared] or shared
    compared = [c for c in shared if c not in keys]
    rows_env, rows_main, added, removed, changed, *by_column = compared_by_key(
        env, main, keys, compared, one_task=rows <= ONE_TASK_ROWS
    )
    return TableDiff(
        dataset=target.target_id,
        table=str(table),
        rows_main=rows_main,
        rows_env=rows_env,
        added=added,
        removed=removed,
        changed=changed,
        changed_columns={c: n for c, n in zip(compared, by_column) if n},
        checks=[f"{'passed' if o.passed else 'FAILED'}: {o.message}" for o in outcome.rule_outcomes],
    )


def compared_by_key(
    env: DataFrame, main: DataFrame, keys: list[str], compared: list[str], one_task: bool = False
) -> list[int]:
    """Both versions' rows, then the keys only `env` holds (added), only `main` holds (removed), held by
    both with a row that differs in any of the `compared` columns (changed), and in each of them (nulls
    equal): one Spark job, both versions grouped by key together. With `one_task` (small versions), in one
    task without a shuffle: a single partition is grouped where it is."""

    def side(frame: DataFrame, name: str) -> DataFrame:
        values = F.struct(*(F.col(f"`{c}`") for c in compared), F.lit(True).alias("_held"))
        return frame.select(*keys, values.alias(name))

    both = side(env, "env").unionByName(side(main, "main"), allowMissingColumns=True)
    by_key = (
        (both.coalesce(1) if one_task else both)
        .groupBy(*keys)
        .agg(
            F.count("env").alias("rows_env"),
            F.count("main").alias("rows_main"),
            F.first("env", ignorenulls=True).alias("env"),
            F.first("main", ignorenulls=True).alias("main"),
        )
    )
    paired = F.col("env").isNotNull() & F.col("main").isNotNull()
    differs = [~F.col("env").getField(c).eqNullSafe(F.col("main").getField(c)) for c in compared]
    counted = by_key.agg(
        F.sum("rows_env"),
        F.sum("rows_main"),
        F.count_if(F.col("main").isNull()),
        F.count_if(F.col("env").isNull()),
        F.count_if(paired & reduce(operator.or_, differs, F.lit(False))),
        *(F.count_if(paired & d) for d in differs),
    ).first()
    return [int(n or 0) for n in (counted or [0] * (len(compared) + 5))]


@dataclass(frozen=True)
class EnvironmentBranch:
    """One lake table's branch of an environment: its snapshot, when it was written, its bytes and data
    files, and when the lake's maintenance may drop it (None: never)."""

    table: TableRef
    snapshot_id: int
    written_at: datetime
    size_bytes: int
    files: int
    expires_at: datetime | None


def environments(lake: Lake, snapshot: CatalogSnapshot) -> dict[str, list[EnvironmentBranch]]:
    """Every environment's branches in the catalog's silver and gold tables and their quarantine tables, by
    environment name, from the tables' metadata (no Spark)."""
    found: dict[str, list[EnvironmentBranch]] = {}
    for target in snapshot.targets.values():
        for table in (table_of(target), table_of(target).quarantine()) if target.layer != "bronze" else ():
            loaded = load_table(lake, table)
            for name, ref in (loaded.refs() if loaded else {}).items():
                written = loaded.snapshot_by_id(ref.snapshot_id) if loaded else None
                if written is None or not name.startswith("env_"):
                    continue
                totals = written.summary.additional_properties if written.summary else {}
                at = datetime.fromtimestamp(written.timestamp_ms / 1000, UTC)
                kept = timedelta(milliseconds=ref.max_ref_age_ms) if ref.max_ref_age_ms else None
                found.setdefault(name.removeprefix("env_"), []).append(
                    EnvironmentBranch(
                        table,
                        ref.snapshot_id,
                        at,
                        int(totals.get("total-files-size", 0)),
                        int(totals.get("total-data-files", 0)),
                        at + kept if kept else None,
                    )
                )
    return found


def drop_environment(
    spark: SparkSession, lake: Lake, warehouse: Warehouse | None, snapshot: CatalogSnapshot, name: str
) -> list[str]:
    """Remove environment `name`: its branches, with the snapshots only they held and those snapshots' files,
    and its warehouse schemas. Returns what was removed, one line each."""
    branches = [b.table for b in environments(lake, snapshot).get(name, [])]
    return drop_branches(spark, lake, branches, name) + drop_schemas(warehouse, snapshot, name)


def drop_branches(spark: SparkSession, lake: Lake, tables: list[TableRef], name: str) -> list[str]:
    """Drop environment `name`'s branch of each table, with the snapshots only it held and their files; one
    line each of what was removed."""
    maintenance, branch, removed = LakeMaintenance(spark, lake), env_branch(name), []
    for table in tables:
        files = maintenance.drop_branch(table, branch).get("deleted_data_files_count", 0)
        removed.append(f"branch {branch} of {table} and its {files} data file(s)")
    return removed


def drop_schemas(warehouse: Warehouse | None, snapshot: CatalogSnapshot, name: str) -> list[str]:
    """Drop environment `name`'s warehouse schemas (`<schema>__NAME`) that exist; one line each."""
    schemas = sorted(
        {
            env_location(t.location, name).split(".")[0]
            for t in snapshot.targets.values()
            if t.kind == "warehouse" and t.location
        }
    )
    removed = []
    for schema in schemas:
        exists = f"SELECT 1 FROM information_schema.schemata WHERE schema_name = '{schema}'"
        if warehouse is not None and warehouse.query(exists):
            warehouse.query(f'DROP SCHEMA "{schema}" CASCADE')
            removed.append(f"warehouse schema {schema}")
    return removed
