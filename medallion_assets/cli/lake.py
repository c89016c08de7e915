"""`medallion rollback` and `medallion lake history | maintain | migrate`: the lake's tables by hand."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from medallion_assets import config
from medallion_assets.cli.common import EXIT_FAILED, catalog_store, refuse
from medallion_assets.redaction import echo

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _spark() -> SparkSession:
    from medallion_assets.engine.spark import spark_session

    return spark_session(app_name="medallion-lake")


@click.command("rollback")
@click.argument("dataset")
@click.option("--to", "to", required=True, metavar="SNAPSHOT|RUN_ID", help="a snapshot id or a run id")
@click.option(
    "--cascade", is_flag=True, help="roll back too the downstream datasets built on a later version"
)
@click.option("--json", "as_json", is_flag=True, help="print what moved as JSON")
def rollback(dataset: str, to: str, cascade: bool, as_json: bool) -> None:
    """Put DATASET's lake table back to a snapshot, or to the version a run committed (audited); a warehouse
    table it serves is reloaded from that version."""
    from medallion_assets.control.steering.rollback import RollbackRefused
    from medallion_assets.control.steering.rollback import rollback as roll_back
    from medallion_assets.storage.lake.root import Lake

    try:
        moved = roll_back(
            catalog_store(),
            Lake.resolve(),
            dataset,
            to,
            cascade=cascade,
            warehouse_url=config.warehouse_url(),
        )
    except RollbackRefused as error:
        refuse(str(error))
    if as_json:
        echo(json.dumps([m.__dict__ for m in moved], indent=2))
        return
    for m in moved:
        reloaded = (
            f"; warehouse {m.warehouse_table} reloaded: {m.warehouse_rows} rows" if m.warehouse_table else ""
        )
        echo(f"{m.dataset} ({m.table}): snapshot {m.from_snapshot} → {m.to_snapshot}{reloaded}")


@click.group()
def lake() -> None:
    """The lake's Iceberg tables: history, maintenance, migration of a parquet lake."""


@lake.command("history")
@click.argument("dataset")
@click.option("--json", "as_json", is_flag=True, help="print the history as JSON")
def history(dataset: str, as_json: bool) -> None:
    """List DATASET's snapshots, newest first: when, the operation, the run that wrote it, the rows, what it
    was built from, and the branches and tags at it. `*` marks main's version and those it was built on; a
    snapshot without it was rolled away from or staged on a branch and not published. Reads the table's
    metadata only (no Spark)."""
    from medallion_assets.storage.lake.history import LakeHistoryError, table_history
    from medallion_assets.storage.lake.layout import table_of
    from medallion_assets.storage.lake.root import Lake

    store = catalog_store()
    target = store.snapshot().targets.get(dataset)
    if target is None:
        refuse(f"unknown dataset {dataset!r}; datasets: {', '.join(sorted(store.snapshot().targets))}")
    try:
        found = table_history(Lake.resolve(), table_of(target), store.lake_commits(dataset))
    except LakeHistoryError as error:
        refuse(f"{dataset}: {error}")
    if as_json:
        echo(json.dumps(found.as_dict(), indent=2))
        return
    main = f"main at snapshot {found.main}" if found.main is not None else "main holds no snapshot yet"
    echo(f"{dataset} ({found.table}): {main}, {len(found.versions)} snapshot(s)")
    echo(f"  {'snapshot':<20} {'committed (UTC)':<19} {'operation':<9} {'rows':>9}  {'run':<36}  built from")
    for v in found.versions:
        built_from = ", ".join(f"{name}@{version}" for name, version in sorted(v.built_from.items()))
        made_of = built_from or (f"batch {v.batch_id}" if v.batch_id else "")
        echo(
            f"{'*' if v.on_main else ' '} {v.snapshot_id:<20} {v.committed_at:%Y-%m-%d %H:%M:%S} "
            f"{v.operation:<9} {'' if v.rows is None else v.rows:>9}  {v.run_id or '':<36}  {made_of}"
            + (f"  [{', '.join(v.refs)}]" if v.refs else "")
        )


@lake.command("maintain")
@click.argument("datasets", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="print each dataset's report as JSON")
def maintain(datasets: tuple[str, ...], as_json: bool) -> None:
    """Compact, expire snapshots and remove orphan files now, as the table_maintenance rows say: of DATASETS,
    or of every dataset an enabled row covers."""
    from medallion_assets.control.steering.maintenance import chosen_policies, run_maintenance
    from medallion_assets.storage.lake.root import Lake

    store = catalog_store()
    try:
        chosen_policies(store.snapshot(), list(datasets) or None)  # refused before Spark starts, not after
        reports = run_maintenance(_spark(), store, Lake.resolve(), list(datasets) or None)
    except ValueError as error:
        refuse(str(error))
    if not reports:
        echo("no dataset to maintain: no enabled table_maintenance row applies")
    if as_json:
        echo(json.dumps([r.__dict__ for r in reports], indent=2, default=str))
    else:
        for r in reports:
            echo(f"{r.dataset} ({r.table}): {r.status} {r.error or json.dumps(r.reported, default=str)}")
    if any(r.status == "failed" for r in reports):
        raise SystemExit(EXIT_FAILED)


@lake.command("migrate")
def migrate() -> None:
    """Turn a parquet lake of the old layout (<lake>/<layer>/<target_id>/, <lake>/_quarantine/<target_id>/)
    into Iceberg tables in place, counting rows before and after. Run again safely: migrated tables are
    left alone."""
    from medallion_assets.storage.lake.migration import MigrationMismatch, migrate_lake
    from medallion_assets.storage.lake.root import Lake

    store = catalog_store()
    try:
        migrated = migrate_lake(_spark(), Lake.resolve(), store.snapshot())
    except MigrationMismatch as error:
        refuse(str(error), EXIT_FAILED)
    if not migrated:
        echo("nothing to migrate: no folder of the old layout under the lake")
    for m in migrated:
        store.record_audit(
            event="lake_migration",
            status=m.status,
            rows_read=m.rows_before,
            rows_written=m.rows_after,
            details=m.__dict__,
        )
        echo(f"{m.folder} → {m.table}: {m.status}, {m.rows_before} row(s) before, {m.rows_after} after")
