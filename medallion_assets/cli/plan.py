"""`medallion plan DIR`: what loading the catalog files in DIR would change, before anything is written."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from medallion_assets import config
from medallion_assets.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    catalog_store,
    check_change_arguments,
    load_catalog_files,
    refuse,
    run_unit_tests,
    unit_test_results,
    validated,
)
from medallion_assets.redaction import echo

if TYPE_CHECKING:
    from medallion_assets.catalog.snapshot import CatalogSnapshot
    from medallion_assets.catalog.store import CatalogStore
    from medallion_assets.change.apply import Applied
    from medallion_assets.change.plan import Plan
    from medallion_assets.change.preview import Preview

# Lines per section of the text output, so a plan fits a screen; --json holds everything.
SHOWN = 12


@click.command("plan")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="print the plan as JSON (medallion_assets/change/plan.schema.json)",
)
@click.option(
    "--allow-breaking",
    is_flag=True,
    help="plan a change that breaks a warehouse target's contract anyway (catalog load needs it too)",
)
@click.option(
    "--env",
    "env",
    metavar="NAME",
    help="preview the change: run what it rebuilds on lake branches env_NAME and warehouse schemas "
    "SCHEMA__NAME, and compare each rebuilt table with main",
)
@click.option(
    "--test",
    "run_tests",
    is_flag=True,
    help="then run the stage tests of the stages the change touches, and those it adds or changes, on "
    "local Spark (as `medallion test`; with --json, their results are the plan's `tests`); a failing test "
    "exits 2",
)
def plan(directory: Path, as_json: bool, allow_breaking: bool, env: str | None, run_tests: bool) -> None:
    """Compare the catalog files in DIRECTORY with the loaded catalog: rows added, changed and removed, each
    changed dataset's category (breaking, non_breaking, checks_only, metadata_only, no_op), every asset it
    rebuilds with its mode, why and the rows it reads (from Iceberg metadata), and the warehouse tables it
    changes. Starts no Spark and writes nothing.

    Exit codes: 0 nothing to do, 1 changes, 2 invalid files (validate's messages) or a warehouse contract
    broken (a column dropped, renamed or narrowed without a new version), a version gone down, or with
    --test a stage test that fails. --test is the only plan without --env that starts Spark.

    With --env NAME it also runs the silver and gold stages the change rebuilds, with the new catalog, in
    environment NAME (main and the warehouse's own schemas are never written), and prints each rebuilt
    table's rows against main by its key: added, removed, changed. A stage with an input never built (no
    table on main nor in the environment) is not previewed, and said so. With --json the preview is the
    plan's `environment`.
    """
    from medallion_assets.catalog.loader import merged_snapshot
    from medallion_assets.change.plan import plan_files
    from medallion_assets.storage.lake.root import Lake

    check_change_arguments(directory, env)
    stored = catalog_store().snapshot()
    loaded = validated(stored, [directory])
    made = plan_files(stored, loaded, Lake.resolve())
    new = merged_snapshot(stored, loaded)
    refused = made.refused(allow_breaking)
    document = made.as_dict()
    if as_json and run_tests and not refused:  # the tests' results are part of the one JSON document
        results = unit_test_results(new, made.tests_to_run(new))
        document["tests"] = [r.as_dict() for r in results]
    # With --json a preview goes into the plan's JSON too, printed once the preview is done.
    if not as_json:
        for line in plan_lines(made):
            echo(line)
    elif env is None or refused or not all(t["passed"] for t in document.get("tests", [])):
        echo(json.dumps(document, default=str, indent=2))
    for problem in refused:
        echo(f"refused: {problem}", err=True)
    if refused:
        sys.exit(EXIT_INVALID)
    if run_tests and not as_json:
        results = run_unit_tests(new, made.tests_to_run(new))
    if run_tests and not all(r.passed for r in results):
        sys.exit(EXIT_INVALID)
    if env is not None:
        previewed = _preview(made, new, env)
        if as_json:
            shown = {**document, "environment": previewed.as_dict()}
            echo(json.dumps(shown, default=str, indent=2))
        else:
            for line in preview_lines(previewed):
                echo(line)
    sys.exit(0 if made.nothing_to_do else EXIT_FAILED)


def _preview(made: Plan, new: CatalogSnapshot, env: str) -> Preview:
    """Run the plan's rebuilds in environment `env`, and record the definitions it built."""
    from medallion_assets.change.environment import PREVIEW_EVENT, definitions
    from medallion_assets.change.preview import (
        EnvironmentRunner,
        PreviewLedger,
        environment_snapshot,
        preview_run,
    )
    from medallion_assets.control.steering.throttles import CatalogThrottles
    from medallion_assets.engine.spark import spark_session
    from medallion_assets.instance import open_instance
    from medallion_assets.recovery.routes import CatalogRoutes
    from medallion_assets.storage.lake.root import Lake
    from medallion_assets.storage.warehouse import warehouse_from_url

    store = catalog_store()
    snapshot = environment_snapshot(new, env)
    warehouse = warehouse_from_url(config.warehouse_url())
    try:
        runner = EnvironmentRunner(
            spark_session(app_name=f"medallion-env-{env}"),
            snapshot,
            PreviewLedger(store),
            Lake.resolve(),
            warehouse,
            throttle=CatalogThrottles(store),
            recovery=CatalogRoutes(store, snapshot),
            env=env,
        )
        previewed = preview_run(open_instance(), runner, made)
    finally:
        warehouse.close()
    store.record_audit(
        event=PREVIEW_EVENT,
        status="success",
        details={"environment": env, "definitions": definitions(new, [d.dataset for d in previewed.tables])},
    )
    return previewed


def preview_lines(previewed: Preview) -> list[str]:
    """Each rebuilt table's comparison with main, then each dataset not previewed and why, as text."""
    from medallion_assets.change.environment import env_branch

    env = previewed.environment
    lines = [f"environment {env}: {len(previewed.tables)} table(s) on branch {env_branch(env)}"]
    for d in previewed.tables:
        lines.append(
            f"  {d.dataset:<28} rows {d.rows_main:,} → {d.rows_env:,}: {d.added:,} added, "
            f"{d.removed:,} removed, {d.changed:,} changed"
        )
        if d.changed_columns:
            lines.append(
                "    changed columns: " + ", ".join(f"{c} {n:,}" for c, n in d.changed_columns.items())
            )
        lines += [f"    {check}" for check in d.checks]
    lines += [f"  {dataset:<28} not previewed: {why}" for dataset, why in previewed.not_previewed.items()]
    return lines


@click.group("env")
def env_group() -> None:
    """Environments that `medallion plan DIR --env NAME` previewed a change in."""


@env_group.command("list")
def env_list() -> None:
    """Every environment: its age, bytes and data files, and when the lake's maintenance drops it; then each
    table's branch."""
    from medallion_assets.change.preview import environments
    from medallion_assets.storage.lake.root import Lake

    now = datetime.now(UTC)
    found = environments(Lake.resolve(), catalog_store().snapshot())
    if not found:
        echo("no environments")
    for name, branches in sorted(found.items()):
        age = now - min(b.written_at for b in branches)
        size, files = sum(b.size_bytes for b in branches), sum(b.files for b in branches)
        expiries = [b.expires_at for b in branches if b.expires_at is not None]
        expires = f", expires {min(expiries):%Y-%m-%d %H:%M} UTC" if expiries else ""
        echo(
            f"{name}: {len(branches)} table(s), {size:,} bytes in {files:,} data file(s), "
            f"{int(age.total_seconds() // 60)} min old{expires}"
        )
        for b in branches:
            echo(f"  {b.table} snapshot {b.snapshot_id}, {b.size_bytes:,} bytes in {b.files:,} data file(s)")


@env_group.command("drop")
@click.argument("name")
def env_drop(name: str) -> None:
    """Remove environment NAME: its lake branches and its warehouse schemas."""
    from medallion_assets.change.environment import EnvironmentNameRefused, env_name
    from medallion_assets.change.preview import drop_environment
    from medallion_assets.engine.spark import spark_session
    from medallion_assets.storage.lake.root import Lake
    from medallion_assets.storage.warehouse import warehouse_from_url

    try:
        env_name(name)
    except EnvironmentNameRefused as error:
        refuse(str(error))
    snapshot = catalog_store().snapshot()  # a catalog that does not answer is said before Spark starts
    warehouse = warehouse_from_url(config.warehouse_url())
    try:
        removed = drop_environment(
            spark_session(app_name="medallion-env"), Lake.resolve(), warehouse, snapshot, name
        )
    finally:
        warehouse.close()
    if not removed:
        refuse(f"no environment {name}: `medallion env list` shows those there are")
    for line in removed:
        echo(f"removed {line}")


def plan_lines(made: Plan) -> list[str]:
    """The plan as text, each section cut to SHOWN lines."""
    if not made.rows:
        return ["no changes: the catalog holds these files' rows already"]
    lines = [f"{len(made.rows)} row change(s)"]
    lines += _section(
        [
            f"  {c.table:<18} {c.change:<8} {c.label}" + (f": {', '.join(c.fields)}" if c.fields else "")
            for c in made.rows
        ]
    )
    lines.append("datasets:" if made.datasets else "datasets: none changed")
    lines += _section([f"  {d.dataset:<28} {d.category:<14} {'; '.join(d.reasons)}" for d in made.datasets])
    lines.append(f"rebuilds: {len(made.rebuilds) or 'nothing'}")
    lines += _section(
        [
            f"  {'/'.join(r.asset_key):<28} {r.mode:<12}"
            + (f" reads {r.rows_read:,} rows" if r.rows_read is not None else "")
            + (f" → {', '.join(r.warehouse_tables)}" if r.warehouse_tables else "")
            + f"  ({r.why})"
            for r in made.rebuilds
        ]
    )
    judged = [d.dataset for d in made.datasets if d.category == "checks_only"]
    if judged:
        lines.append(f"checks judged again, nothing rebuilt: {', '.join(judged)}")
    if made.warehouse_tables():
        lines.append(f"warehouse tables changed: {', '.join(made.warehouse_tables())}")
    if any(c.change == "removed" for c in made.rows):
        lines.append(
            "removed rows stay in the catalog after `catalog load` (an upsert): delete them to retire them"
        )
    return lines


def _section(lines: list[str]) -> list[str]:
    if len(lines) <= SHOWN:
        return lines
    return [*lines[: SHOWN - 1], f"  … and {len(lines) - SHOWN + 1} more (--json shows all)"]


@click.command("apply")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option(
    "--env",
    "env",
    metavar="NAME",
    help="publish environment NAME, previewed by `medallion plan DIRECTORY --env NAME`",
)
@click.option("--allow-breaking", is_flag=True, help="as `catalog load --allow-breaking`")
def apply(directory: Path, env: str | None, allow_breaking: bool) -> None:
    """Load the catalog files in DIRECTORY. Without --env it prints the plan first, and the next runs rebuild
    what it says. With --env NAME it then publishes the environment's tables, upstream first: a table whose
    main has not moved since the preview is fast-forwarded to its branch (metadata only), any other runs its
    stage again; a warehouse target is loaded in one transaction. Run it again after a failure: it goes on
    with the tables not yet published."""
    check_change_arguments(directory, env)
    store = catalog_store()
    if env is None:
        from medallion_assets.change.plan import plan_files
        from medallion_assets.storage.lake.root import Lake

        stored = store.snapshot()
        for line in plan_lines(plan_files(stored, validated(stored, [directory]), Lake.resolve())):
            echo(line)
        echo(load_catalog_files(store, [directory], allow_breaking))
        return
    from medallion_assets.catalog.loader import merged_snapshot
    from medallion_assets.change.environment import PREVIEW_EVENT, changed_since_preview
    from medallion_assets.change.preview import environments
    from medallion_assets.storage.lake.root import Lake

    stored = store.snapshot()
    if env not in environments(Lake.resolve(), stored):
        refuse(f"no environment {env}: `medallion env list` shows those there are")
    files = merged_snapshot(stored, validated(stored, [directory]))
    if changed := changed_since_preview(store.audit_entries(event=PREVIEW_EVENT), env, files):
        refuse(
            f"environment {env} was previewed with other catalog files: {', '.join(changed)} changed since; "
            f"preview again with `medallion plan {directory} --env {env}`"
        )
    echo(load_catalog_files(store, [directory], allow_breaking))
    for applied in _apply_environment(store, env):
        echo(f"{applied.dataset}: {applied.how}, snapshot {applied.snapshot_id}")


def _apply_environment(store: CatalogStore, env: str) -> list[Applied]:
    """Publish environment `env` with the catalog as just loaded."""
    from medallion_assets.change.apply import apply_environment
    from medallion_assets.control.steering.throttles import CatalogThrottles
    from medallion_assets.engine.spark import spark_session
    from medallion_assets.engine.stage import StageRunner
    from medallion_assets.recovery.routes import CatalogRoutes
    from medallion_assets.storage.lake.root import Lake
    from medallion_assets.storage.warehouse import warehouse_from_url

    snapshot = store.snapshot()
    warehouse = warehouse_from_url(config.warehouse_url())
    try:
        runner = StageRunner(
            spark_session(app_name=f"medallion-apply-{env}"),
            snapshot,
            store,
            Lake.resolve(),
            warehouse,
            throttle=CatalogThrottles(store),
            recovery=CatalogRoutes(store, snapshot),
        )
        return apply_environment(runner, env)
    finally:
        warehouse.close()
