"""The `medallion` command: catalog management, pipeline runs, sample data and the demo."""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from medallion_assets import config
from medallion_assets.cli.common import (
    EXIT_CONFIGURATION,
    EXIT_FAILED,
    EXIT_HALTED,
    EXIT_INVALID,
    EXIT_UNAVAILABLE,
    catalog_store,
    load_catalog_files,
    refuse,
    validated,
)
from medallion_assets.cli.configuration import debugging, unreachable_service
from medallion_assets.process_group import run_process_group
from medallion_assets.redaction import echo

if TYPE_CHECKING:
    pass

SEED = Path(__file__).resolve().parents[2] / "metadata_seed"


@atexit.register
def _skip_last_collection() -> None:
    """What a command made lives until its process ends; the interpreter's last garbage collection would walk
    it all (every module's objects: a quarter of a second of CPU for `medallion plan`) to free what exit
    frees. Not when DuckDB is loaded: its bindings report each object not collected as a leak."""
    if "_duckdb" not in sys.modules:
        gc.freeze()


# The commands that read raw objects; in the embedded home they get its loopback S3 API for their duration.
READS_RAW_OBJECTS = {"run", "paths", "lineage", "ui"}


# The sub-commands of their own modules, by name: "module:command". Only the one invoked is imported (click's
# lazy group), so `medallion plan` loads neither the onboarding tool nor Dagster; `--help` imports them all.
SUBCOMMANDS = {
    "plan": "plan:plan",
    "apply": "plan:apply",
    "env": "plan:env_group",
    "test": "stage_tests:test",
    "lineage": "lineage:lineage",
    "paths": "lineage:paths",
    "onboard": "onboard:onboard",
    "healing": "healing:healing",
    "profile": "profile:profile",
    "simulate": "profile:simulate",
    "throttle": "throttle:throttle",
    "metrics": "monitoring:metrics",
    "status": "monitoring:status",
    "notify": "monitoring:notify",
    "instance": "instance:instance",
    "lake": "lake:lake",
    "rollback": "lake:rollback",
}


class _Medallion(click.Group):
    """The command group that imports a sub-command's module only when it is invoked (SUBCOMMANDS), and says a
    configured service it cannot reach in one line (cli/configuration.py), exiting with EXIT_CONFIGURATION,
    unless asked for the traceback."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *SUBCOMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in SUBCOMMANDS:
            return super().get_command(ctx, cmd_name)
        module, name = SUBCOMMANDS[cmd_name].split(":")
        command: click.Command = getattr(importlib.import_module(f"medallion_assets.cli.{module}"), name)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as error:
            said = unreachable_service(error)
            if said is None or debugging(ctx.params.get("debug", False)):
                raise
            echo(said, err=True)
            ctx.exit(EXIT_CONFIGURATION)


@click.group(cls=_Medallion)
@click.option(
    "--debug", is_flag=True, help="show the traceback of a failure to reach a service (or MEDALLION_DEBUG=1)"
)
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Medallion: metadata-driven pipelines, S3 → bronze → silver → gold → warehouse.

    Exit codes, for every command: 0 success, 1 a failure, 2 an argument or file it cannot act on, 3 halted
    by a kill switch, 4 the Dagster deployment cannot take the work, 5 a configured service it cannot reach
    (MEDALLION_CATALOG_URL, MEDALLION_LAKE_CATALOG, MEDALLION_WAREHOUSE_URL, AWS_ENDPOINT_URL_S3), said in one
    line; --debug shows the traceback."""
    config.use_embedded_dagster_home()
    if ctx.invoked_subcommand in READS_RAW_OBJECTS and config.serves_embedded_s3():
        from medallion_assets.local_s3 import serve_folder

        ctx.with_resource(serve_folder(config.raw_objects_folder()))


@main.group()
def catalog() -> None:
    """Create, fill and inspect the metadata catalog (MEDALLION_CATALOG_URL)."""


@catalog.command("init")
def catalog_init() -> None:
    """Create the catalog's tables, or migrate them to the newest version."""
    catalog_store()
    echo(f"catalog ready at {config.catalog_url()}")


@catalog.command("validate")
@click.argument("paths", nargs=-1, required=True)
def catalog_validate(paths: tuple[str, ...]) -> None:
    """Check YAML files or folders against the catalog; lists every problem, writes nothing."""
    from medallion_assets.catalog.loader import merged_snapshot
    from medallion_assets.control.steering.scheduling import profile_warnings

    store = catalog_store()
    loaded = validated(store.snapshot(), paths)
    echo(f"valid: {sum(len(rows) for rows in loaded.rows.values())} rows")
    for warning in profile_warnings(merged_snapshot(store.snapshot(), loaded)):
        echo(f"warning: {warning}", err=True)


@catalog.command("load")
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--allow-breaking",
    is_flag=True,
    help="load a change that drops, renames or narrows a warehouse target's contract column anyway",
)
def catalogload_catalog_files(paths: tuple[str, ...], allow_breaking: bool) -> None:
    """Validate, then upsert YAML files or folders into the catalog (idempotent). A change that breaks a
    warehouse target's contract (`medallion plan` shows it) is refused unless the target declares a new
    version or --allow-breaking is given."""
    echo(load_catalog_files(catalog_store(), paths, allow_breaking))


@catalog.command("show")
@click.argument("table")
@click.option("--json", "as_json", is_flag=True, help="print rows as JSON")
def catalog_show(table: str, as_json: bool) -> None:
    """Print the rows of a catalog table."""
    try:
        rows = catalog_store().table_rows(table)
    except KeyError as error:
        echo(error.args[0], err=True)
        sys.exit(EXIT_INVALID)
    if as_json:
        echo(json.dumps(rows, default=str, indent=2))
        return
    for row in rows:
        echo("  ".join(f"{k}={v}" for k, v in row.items() if v not in (None, "", [], {})))


def _flip(kind: str, entity_id: str, enabled: bool, reason: str) -> None:
    from medallion_assets.control.steering.flags import UnknownEntity, set_flag

    try:
        flag = set_flag(catalog_store(), kind, entity_id, enabled, reason)
    except UnknownEntity as error:
        echo(str(error), err=True)
        sys.exit(EXIT_INVALID)
    state = "enabled" if enabled else "disabled"
    echo(f"{kind} {flag.entity_id} {state} by {flag.updated_by}" + (f": {reason}" if reason else ""))


KIND = click.Choice(["global", "pipeline", "stage", "dataset", "source", "target"])


@main.command("disable")
@click.argument("kind", type=KIND)
@click.argument("entity_id", metavar="ID", default="*")
@click.option("--reason", required=True, help="why; kept in the flag's history")
def disable(kind: str, entity_id: str, reason: str) -> None:
    """Kill switch: stop KIND ID (a stage is PIPELINE.STAGE; a source or target may be a system)."""
    _flip(kind, entity_id, False, reason)


@main.command("enable")
@click.argument("kind", type=KIND)
@click.argument("entity_id", metavar="ID", default="*")
@click.option("--reason", default="", help="why; kept in the flag's history")
def enable(kind: str, entity_id: str, reason: str) -> None:
    """Lift a kill switch on KIND ID."""
    _flip(kind, entity_id, True, reason)


@main.command("audit")
@click.option("--pipeline", "pipeline_id", help="only this pipeline")
@click.option("--run", "run_id", help="only this Dagster run")
@click.option("--json", "as_json", is_flag=True, help="print entries as JSON")
def audit(pipeline_id: str | None, run_id: str | None, as_json: bool) -> None:
    """Show the audit log: stage executions, retries, healing, halts, cancellations."""
    where = {k: v for k, v in (("pipeline_id", pipeline_id), ("run_id", run_id)) if v}
    entries = catalog_store().audit_entries(**where)
    if as_json:
        echo(json.dumps(entries, default=str, indent=2))
        return
    for e in entries:
        counts = (
            f" read={e['rows_read']} written={e['rows_written']} quarantined={e['rows_quarantined']}"
            if e["rows_read"] is not None
            else ""
        )
        echo(
            f"{e['created_at']}  {e['pipeline_id']}.{e['stage_name']}  {e['event']}:{e['status']}{counts}"
            + _decision(e["event"], e["details"] or {})
            + (f"  {e['error']}" if e["error"] else "")
        )


def _decision(event: str, details: dict[str, Any]) -> str:
    """What a healing or retry entry decided, in a few words."""
    if event == "healing":
        return (
            f"  attempt {details['attempt']}: rule {details['rule']} → {details['action']}: "
            f"{details['detail']}"
        )
    if event == "retry":
        return f"  attempt {details['attempt']} failed; next in {details['delay_sec']} s"
    return ""


@main.command("sample-data")
@click.option("--rows", default=20_000, show_default=True, help="number of user events")
@click.option("--to", "to_url", required=True, help="s3://bucket/prefix or a local folder")
@click.option("--seed", default=7, show_default=True)
@click.option("--weather", is_flag=True, help="also daily weather, for the forecast example's second version")
@click.option("--gzip", "gzipped", is_flag=True, help="gzip-compress the jsonl and csv files (.gz)")
def sample_data(rows: int, to_url: str, seed: int, weather: bool, gzipped: bool) -> None:
    """Write deterministic raw sample data, with a small known share of malformed records."""
    from medallion_assets.sample_data import write_sample_data, write_weather_sample

    echo(str(write_sample_data(to_url, rows, seed, gzipped=gzipped)))
    if weather:
        echo(write_weather_sample(to_url, seed))


# The statuses of a run report that exit 0: a check of warn severity that failed is said, not fatal.
SUCCEEDED = frozenset({"success", "success_with_warnings"})


def _run(
    pipeline_id: str, as_json: bool, full_refresh: bool = False, start: str | None = None, restate: str = ""
) -> str:
    """Run the pipeline and print its report; returns its status. A full refresh, or a restatement of the
    days `restate`, starts from `start`, or covers every dataset when it is None."""
    from medallion_assets.definitions import build_definitions
    from medallion_assets.engine.refresh import RefreshRefused, full_refresh_tags
    from medallion_assets.engine.restatement import restatement_tags
    from medallion_assets.instance import DeploymentError, QueuedRunCanceled
    from medallion_assets.runner import instance, route, run_pipeline

    store = catalog_store()
    snapshot = store.snapshot()
    if pipeline_id not in snapshot.pipelines:
        echo(
            f"unknown pipeline {pipeline_id!r}; pipelines: {', '.join(sorted(snapshot.pipelines))}", err=True
        )
        sys.exit(EXIT_INVALID)
    try:
        tags = full_refresh_tags(snapshot, pipeline_id, start) if full_refresh else {}
        tags |= restatement_tags(snapshot, pipeline_id, restate, start) if restate else {}
    except RefreshRefused as refused:
        refuse(str(refused))
    try:
        dagster_instance = instance()
        path = route(dagster_instance)
        echo(f"{pipeline_id}: {path.why}", err=True)  # stderr: stdout may be the JSON report
        workspace = config.workspace_file() if path.queued else None
        try:
            report = run_pipeline(
                build_definitions(), snapshot, store, pipeline_id, dagster_instance, workspace, tags
            )
        except QueuedRunCanceled as canceled:
            echo(f"{canceled}; running it in this process instead", err=True)
            report = run_pipeline(
                build_definitions(), snapshot, store, pipeline_id, dagster_instance, None, tags
            )
    except DeploymentError as error:
        echo(str(error), err=True)
        sys.exit(EXIT_UNAVAILABLE)
    if as_json:
        echo(json.dumps(report.as_dict(), default=str))
    else:
        echo(f"{report.pipeline}: {report.status.replace('_', ' ')}")
        for asset in report.assets:
            checks = ", ".join(
                f"{c['name']} {'ok' if c['passed'] else 'WARNING' if c['severity'] == 'warn' else 'FAILED'}"
                for c in asset.checks
            )
            echo(
                f"  {asset.key:<32} {asset.status:<8} read={asset.rows_read} written={asset.rows} "
                f"quarantined={asset.rows_quarantined}"
                + (f" snapshot={asset.snapshot_id}" if asset.snapshot_id is not None else "")
                + f"  {checks}"
                + (f"  ({asset.reason})" if asset.reason else "")
            )
            if asset.duration_sec is not None:
                spark = "?" if asset.spark_jobs_sec is None else f"{asset.spark_jobs_sec:.2f}"
                echo(
                    f"    {asset.duration_sec:.2f} s: Spark jobs {spark} s, metadata commits "
                    f"{asset.metadata_commits_sec:.2f} s, other {asset.other_sec:.2f} s"
                )
            if asset.mode:
                echo(f"    {asset.mode}: {asset.why}")
            if asset.unchanged_since is not None:
                echo(f"    unchanged since snapshot {asset.unchanged_since}: its checks are that version's")
            if asset.quarantine_reasons:
                causes = "; ".join(f"{count} × {cause}" for cause, count in asset.quarantine_reasons.items())
                echo(f"    quarantined for: {causes}")
    return report.status


@main.command("run")
@click.argument("pipeline_id")
@click.option("--json", "as_json", is_flag=True, help="print the run report as JSON")
@click.option(
    "--full-refresh",
    is_flag=True,
    help="rebuild silver and gold whole from bronze, one commit per table; bronze is never re-ingested "
    "(its raw objects may be gone): its new objects are ingested as on any run",
)
@click.option(
    "--restate",
    metavar="FROM:TO",
    help="recompute the days FROM to TO (YYYY-MM-DD, inclusive) of the silver and gold tables partitioned by "
    "day, and their warehouse rows: only those days' files are rewritten, one commit per table",
)
@click.option(
    "--from",
    "start",
    metavar="DATASET",
    help="with --full-refresh or --restate: rebuild only DATASET and what is downstream of it in the "
    "pipeline; the other stages run as usual",
)
def run(pipeline_id: str, as_json: bool, full_refresh: bool, restate: str | None, start: str | None) -> None:
    """Materialize every enabled stage of PIPELINE_ID through Dagster (DAGSTER_HOME, or a throwaway instance).

    Silver and gold run incrementally where they can; the report says each stage's mode and why.
    --full-refresh rebuilds them whole and --restate some days, through run tags the launchpad can set too.

    An instance with a run queue (dagster.yaml's queued run coordinator) whose dagster-daemon has sent a
    heartbeat in the last 90 s (MEDALLION_DAEMON_SILENCE_SECONDS) gets the run queued for that daemon, which
    runs it in a run worker; this command follows it to the end. Should the daemon fall silent meanwhile
    (`medallion ui` stopping says so at once), a run still queued is canceled and run in this process instead;
    a started one is left to its run worker, and the command exits 4. Any other instance (no DAGSTER_HOME, no
    daemon running, Dagster's defaults) runs it in this process. Which path it took is said on stderr.

    Exit codes: 0 success (with warnings too), 1 a stage failed, 2 unknown pipeline, --from dataset or days,
    3 halted by a kill switch, 4 the Dagster deployment cannot take the run (storage down, daemon gone while
    following, no code location for the pipeline).
    """
    if (start is not None and not (full_refresh or restate)) or (full_refresh and restate):
        refuse("--from needs one of --full-refresh and --restate, which exclude each other")
    status = _run(pipeline_id, as_json, full_refresh, start, restate or "")
    if status not in SUCCEEDED:
        sys.exit(EXIT_HALTED if status == "halted" else EXIT_FAILED)


def _dagster_home() -> Path:
    """DAGSTER_HOME, else the embedded home's instance, created with the shipped dagster.yaml."""
    if "DAGSTER_HOME" not in os.environ:
        folder = config.embedded_dagster_home()
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / "dagster.yaml").exists():
            shutil.copyfile(Path(__file__).parents[1] / "dagster.yaml", folder / "dagster.yaml")
        os.environ["DAGSTER_HOME"] = str(folder)
    return Path(os.environ["DAGSTER_HOME"])


@main.command("workspace")
@click.option(
    "--to",
    "path",
    default="workspace.yaml",
    show_default=True,
    type=click.Path(path_type=Path),
    help="the workspace file to write",
)
def workspace(path: Path) -> None:
    """Write a Dagster workspace with one code location per catalog domain (pipelines.domain)."""
    from medallion_assets.locations import LARGE_DOMAIN_DATASETS, location_name, write_workspace

    sizes = catalog_store().domain_datasets()
    echo(f"wrote {write_workspace(path, sorted(sizes))}: {len(sizes)} code location(s)")
    for domain, datasets in sorted(sizes.items()):
        echo(f"  {location_name(domain)}: {datasets:,} dataset(s)")
        if datasets > LARGE_DOMAIN_DATASETS:
            echo(
                f"warning: domain {domain} has {datasets:,} datasets; each of its run workers rebuilds them "
                f"all before its first step, which takes longer than 3 s past {LARGE_DOMAIN_DATASETS:,} "
                "(BENCHMARKS.md, Code locations per domain): split it into smaller domains",
                err=True,
            )


@main.command("ui")
@click.option("--port", default=3000, show_default=True)
def ui(port: int) -> None:
    """Open the Dagster UI (dagster dev) on the catalog's assets; Ctrl-C or SIGTERM stops all it started."""
    import yaml

    catalog_store()  # a catalog it cannot open is said now, not as a code location that fails to load

    workspace = _dagster_home() / "workspace.yaml"
    workspace.write_text(
        yaml.safe_dump(
            {
                "load_from": [
                    {
                        "python_module": {
                            "module_name": "medallion_assets.definitions",
                            "attribute": "defs",
                            "working_directory": os.getcwd(),
                            "location_name": "medallion",
                        }
                    }
                ]
            }
        )
    )
    # dagster dev starts the webserver and the daemon by name: they are beside this interpreter, on PATH or
    # not.
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "MEDALLION_HOME": str(config.home()),
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
    }
    started = time.time()
    code = run_process_group(
        [sys.executable, "-m", "dagster", "dev", "-w", str(workspace), "-p", str(port)], env
    )
    # Its daemon is gone with it: the instance is told, so the next `medallion run` does not wait for it.
    from medallion_assets.instance import DeploymentError, forget_daemon, open_instance

    try:
        forget_daemon(open_instance(), started)
    except DeploymentError as error:
        echo(f"the stopped daemon's heartbeats are left in place: {error}", err=True)
    sys.exit(code)


@main.command("demo")
@click.option("--rows", default=20_000, show_default=True, help="number of user events to generate")
def demo(rows: int) -> None:
    """Sample data, the seed catalog, every seed pipeline run (each after those making its inputs) and the
    gold rows, all in the embedded home."""
    from medallion_assets.local_s3 import serve_folder
    from medallion_assets.naming import quote_qualified
    from medallion_assets.sample_data import write_sample_data
    from medallion_assets.storage.warehouse import warehouse_from_url

    store = catalog_store()
    raw = config.raw_objects_folder()
    echo(f"writing {rows} sample events to {raw / 'medallion-raw'}, served as s3://medallion-raw/")
    echo(str(write_sample_data(str(raw / "medallion-raw"), rows)))
    echo(load_catalog_files(store, [SEED]))
    _dagster_home()
    with serve_folder(raw):
        statuses = {
            pipeline_id: _run(pipeline_id, as_json=False)
            for pipeline_id in store.snapshot().pipelines_upstream_first()
        }
    warehouse = warehouse_from_url(config.warehouse_url())
    try:
        for target in store.snapshot().targets.values():
            if target.kind == "warehouse":
                assert target.location is not None  # the Target model requires it of a warehouse target
                echo(f"\n{target.location}:")
                for row in warehouse.query(f"SELECT * FROM {quote_qualified(target.location)} ORDER BY 1, 2"):
                    echo("  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    finally:
        warehouse.close()
    if any(status not in SUCCEEDED for status in statuses.values()):
        sys.exit(EXIT_FAILED)
