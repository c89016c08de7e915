"""The `medallion` command: catalog management, pipeline runs, sample data and the demo."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from medallion_assets import config

SEED = Path(__file__).resolve().parents[1] / "metadata_seed"
EXIT_FAILED = 1
EXIT_INVALID_CATALOG = 2
EXIT_HALTED = 3
EXIT_DEPLOYMENT = 4


def _store():
    from medallion_assets.catalog.store import CatalogStore

    store = CatalogStore(config.catalog_url())
    store.migrate()
    return store


@click.group()
def main() -> None:
    """Medallion: metadata-driven pipelines, S3 → bronze → silver → gold → warehouse."""


@main.group()
def catalog() -> None:
    """Create, fill and inspect the metadata catalog (MEDALLION_CATALOG_URL)."""


@catalog.command("init")
def catalog_init() -> None:
    """Create the catalog's tables, or migrate them to the newest version."""
    _store()
    click.echo(f"catalog ready at {config.catalog_url()}")


def _validated(store, paths):
    from medallion_assets.catalog.loader import CatalogInvalid, validate_files

    try:
        return validate_files(store.snapshot(), list(paths))
    except (CatalogInvalid, FileNotFoundError) as error:
        click.echo(str(error), err=True)
        sys.exit(EXIT_INVALID_CATALOG)


@catalog.command("validate")
@click.argument("paths", nargs=-1, required=True)
def catalog_validate(paths) -> None:
    """Check YAML files or folders against the catalog; lists every problem, writes nothing."""
    from medallion_assets.catalog.loader import merged_snapshot
    from medallion_assets.control.scheduling import profile_warnings

    store = _store()
    loaded = _validated(store, paths)
    click.echo(f"valid: {sum(len(rows) for rows in loaded.rows.values())} rows")
    for warning in profile_warnings(merged_snapshot(store.snapshot(), loaded)):
        click.echo(f"warning: {warning}", err=True)


@catalog.command("load")
@click.argument("paths", nargs=-1, required=True)
def catalog_load(paths) -> None:
    """Validate, then upsert YAML files or folders into the catalog (idempotent)."""
    from medallion_assets.lineage.paths import refresh_recovery_paths

    store = _store()
    written = store.upsert(_validated(store, paths).rows)
    changed = refresh_recovery_paths(store, store.snapshot())
    click.echo("loaded: " + (", ".join(f"{table} {count}" for table, count in written.items()) or "nothing")
               + f"; recovery paths refreshed for {len(changed)} dataset(s)")


@catalog.command("show")
@click.argument("table")
@click.option("--json", "as_json", is_flag=True, help="print rows as JSON")
def catalog_show(table, as_json) -> None:
    """Print the rows of a catalog table."""
    try:
        rows = _store().table_rows(table)
    except KeyError as error:
        click.echo(error.args[0], err=True)
        sys.exit(EXIT_INVALID_CATALOG)
    if as_json:
        click.echo(json.dumps(rows, default=str, indent=2))
        return
    for row in rows:
        click.echo("  ".join(f"{k}={v}" for k, v in row.items() if v not in (None, "", [], {})))


def _flip(kind: str, entity_id: str, enabled: bool, reason: str) -> None:
    from medallion_assets.control.flags import UnknownEntity, set_flag

    try:
        flag = set_flag(_store(), kind, entity_id, enabled, reason)
    except UnknownEntity as error:
        click.echo(str(error), err=True)
        sys.exit(EXIT_INVALID_CATALOG)
    state = "enabled" if enabled else "disabled"
    click.echo(f"{kind} {flag.entity_id} {state} by {flag.updated_by}" + (f": {reason}" if reason else ""))


KIND = click.Choice(["global", "pipeline", "stage", "dataset", "source", "target"])


@main.command("disable")
@click.argument("kind", type=KIND)
@click.argument("entity_id", metavar="ID", default="*")
@click.option("--reason", required=True, help="why; kept in the flag's history")
def disable(kind, entity_id, reason) -> None:
    """Kill switch: stop KIND ID (a stage is PIPELINE.STAGE; a source or target may be a system)."""
    _flip(kind, entity_id, False, reason)


@main.command("enable")
@click.argument("kind", type=KIND)
@click.argument("entity_id", metavar="ID", default="*")
@click.option("--reason", default="", help="why; kept in the flag's history")
def enable(kind, entity_id, reason) -> None:
    """Lift a kill switch on KIND ID."""
    _flip(kind, entity_id, True, reason)


@main.command("audit")
@click.option("--pipeline", "pipeline_id", help="only this pipeline")
@click.option("--run", "run_id", help="only this Dagster run")
@click.option("--json", "as_json", is_flag=True, help="print entries as JSON")
def audit(pipeline_id, run_id, as_json) -> None:
    """Show the audit log: stage executions, retries, healing, halts, cancellations."""
    where = {k: v for k, v in (("pipeline_id", pipeline_id), ("run_id", run_id)) if v}
    entries = _store().audit_entries(**where)
    if as_json:
        click.echo(json.dumps(entries, default=str, indent=2))
        return
    for e in entries:
        counts = (f" read={e['rows_read']} written={e['rows_written']} quarantined={e['rows_quarantined']}"
                  if e["rows_read"] is not None else "")
        click.echo(f"{e['created_at']}  {e['pipeline_id']}.{e['stage_name']}  {e['event']}:{e['status']}{counts}"
                   + _decision(e["event"], e["details"] or {}) + (f"  {e['error']}" if e["error"] else ""))


def _decision(event: str, details: dict) -> str:
    """What a healing or retry entry decided, in a few words."""
    if event == "healing":
        return f"  attempt {details['attempt']}: rule {details['rule']} → {details['action']}: {details['detail']}"
    if event == "retry":
        return f"  attempt {details['attempt']} failed; next in {details['delay_sec']} s"
    return ""


@main.command("sample-data")
@click.option("--rows", default=20_000, show_default=True, help="number of user events")
@click.option("--to", "to_url", required=True, help="s3://bucket/prefix or a local folder")
@click.option("--seed", default=7, show_default=True)
@click.option("--weather", is_flag=True, help="also daily weather, for the forecast example's second version")
def sample_data(rows, to_url, seed, weather) -> None:
    """Write deterministic raw sample data, with a small known share of malformed records."""
    from medallion_assets.sample_data import write_sample_data, write_weather_sample

    click.echo(str(write_sample_data(to_url, rows, seed)))
    if weather:
        click.echo(write_weather_sample(to_url, seed))


def _run(pipeline_id: str, as_json: bool) -> str:
    from medallion_assets.definitions import build_definitions
    from medallion_assets.instance import DeploymentError
    from medallion_assets.runner import instance, run_pipeline

    store = _store()
    snapshot = store.snapshot()
    if pipeline_id not in snapshot.pipelines:
        click.echo(f"unknown pipeline {pipeline_id!r}; pipelines: {', '.join(sorted(snapshot.pipelines))}", err=True)
        sys.exit(EXIT_INVALID_CATALOG)
    try:
        report = run_pipeline(build_definitions(), snapshot, store, pipeline_id, instance(), config.workspace_file())
    except DeploymentError as error:
        click.echo(str(error), err=True)
        sys.exit(EXIT_DEPLOYMENT)
    if as_json:
        click.echo(json.dumps(report.as_dict(), default=str))
    else:
        click.echo(f"{report.pipeline}: {report.status}")
        for asset in report.assets:
            checks = ", ".join(f"{c['name']} {'ok' if c['passed'] else 'FAILED'}" for c in asset.checks)
            click.echo(f"  {asset.key:<32} {asset.status:<8} rows={asset.rows}  {checks}"
                       + (f"  ({asset.reason})" if asset.reason else ""))
    return report.status


@main.command("run")
@click.argument("pipeline_id")
@click.option("--json", "as_json", is_flag=True, help="print the run report as JSON")
def run(pipeline_id, as_json) -> None:
    """Materialize every enabled stage of PIPELINE_ID through Dagster (DAGSTER_HOME, or a throwaway instance).

    An instance with a run queue (dagster.yaml's queued run coordinator) gets the run queued for its
    dagster-daemon, which runs it in a run worker; this command follows it to the end.

    Exit codes: 0 success, 1 a stage failed, 2 unknown pipeline, 3 halted by a kill switch, 4 the Dagster
    deployment cannot take the run (storage down, no daemon, no code location for the pipeline).
    """
    status = _run(pipeline_id, as_json)
    if status != "success":
        sys.exit(EXIT_HALTED if status == "halted" else EXIT_FAILED)


@main.command("workspace")
@click.option("--to", "path", default="workspace.yaml", show_default=True, type=click.Path(path_type=Path),
              help="the workspace file to write")
def workspace(path) -> None:
    """Write a Dagster workspace with one code location per catalog domain (pipelines.domain)."""
    from medallion_assets.locations import write_workspace

    domains = _store().domains()
    click.echo(f"wrote {write_workspace(path, domains)}: {len(domains)} code location(s)")


@main.command("ui")
@click.option("--local-s3", is_flag=True, help="serve the seed's sample data from an S3 API server on loopback")
@click.option("--rows", default=20_000, show_default=True, help="sample events to serve with --local-s3")
@click.option("--port", default=3000, show_default=True)
def ui(local_s3, rows, port) -> None:
    """Open the Dagster UI (dagster dev) on the catalog's assets."""
    import contextlib
    import subprocess

    from medallion_assets.local_s3 import local_s3 as start_local_s3
    from medallion_assets.sample_data import write_sample_data

    workspace = Path(__file__).resolve().parents[1] / "workspace.yaml"
    with start_local_s3(buckets=("medallion-raw",)) if local_s3 else contextlib.nullcontext():
        if local_s3:
            write_sample_data("s3://medallion-raw", rows)
            store = _store()
            store.upsert(_validated(store, [SEED]).rows)
        subprocess.run(["dagster", "dev", "-w", str(workspace), "-p", str(port)], check=False)


@main.command("demo")
@click.option("--rows", default=20_000, show_default=True, help="number of user events to generate")
def demo(rows) -> None:
    """Sample data on a loopback S3 server, the seed catalog, every seed pipeline run, and the gold rows."""
    from medallion_assets.local_s3 import local_s3
    from medallion_assets.naming import quote_qualified
    from medallion_assets.sample_data import write_sample_data
    from medallion_assets.storage.warehouse import warehouse_from_url

    with local_s3(buckets=("medallion-raw",)) as endpoint:
        click.echo(f"S3 API on {endpoint}; writing {rows} sample events to s3://medallion-raw/")
        click.echo(str(write_sample_data("s3://medallion-raw", rows)))
        store = _store()
        store.upsert(_validated(store, [SEED]).rows)
        statuses = {pipeline_id: _run(pipeline_id, as_json=False) for pipeline_id in sorted(store.snapshot().pipelines)}
    warehouse = warehouse_from_url(config.warehouse_url())
    try:
        for target in store.snapshot().targets.values():
            if target.type == "redshift":
                click.echo(f"\n{target.location}:")
                for row in warehouse.query(f"SELECT * FROM {quote_qualified(target.location)} ORDER BY 1, 2"):
                    click.echo("  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    finally:
        warehouse.close()
    if any(status != "success" for status in statuses.values()):
        sys.exit(EXIT_FAILED)
from medallion_assets.lineage.cli import lineage, paths  # noqa: E402
main.add_command(lineage)
main.add_command(paths)
from medallion_assets.onboarding.cli import onboard  # noqa: E402
main.add_command(onboard)
from medallion_assets.control.healing_cli import healing  # noqa: E402
main.add_command(healing)
from medallion_assets.control.profile_cli import profile, simulate  # noqa: E402
main.add_command(profile)
main.add_command(simulate)
from medallion_assets.control.throttle_cli import throttle  # noqa: E402
main.add_command(throttle)
from medallion_assets.instance_cli import instance  # noqa: E402
main.add_command(instance)
if __name__ == "__main__":
    main()
