"""`medallion onboard`: hand Medallion the SQL your warehouse runs, get catalog rows that run it."""

from __future__ import annotations

import json
import sys
from typing import get_args

import click

from medallion_assets.catalog.models import Layer
from medallion_assets.cli.common import EXIT_FAILED, EXIT_INVALID, catalog_store
from medallion_assets.naming import InvalidIdentifier, check_identifier
from medallion_assets.onboarding.onboard import DEFAULT_DIALECT, OnboardingReport
from medallion_assets.redaction import echo

LAYER_CHOICES: tuple[str, ...] = get_args(Layer)


def _layer_overrides(specs: tuple[str, ...]) -> dict[str, str]:
    overrides = {}
    for spec in specs:
        table, separator, layer = spec.partition("=")
        if not separator or not table or layer not in LAYER_CHOICES:
            raise click.BadParameter(
                f"{spec!r} must be TABLE=LAYER with LAYER one of {', '.join(LAYER_CHOICES)}",
                param_hint="--layer",
            )
        overrides[table] = layer
    return overrides


@click.command("onboard")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--dialect", default=DEFAULT_DIALECT, show_default=True, help="SQL dialect of the files (sqlglot's name)"
)
@click.option("--pipeline", "pipeline_id", help="pipeline for new stages; default: the first file's name")
@click.option(
    "--layer",
    "layers",
    multiple=True,
    metavar="TABLE=LAYER",
    help="set a table's layer (bronze, silver, gold) instead of letting onboarding decide; repeatable",
)
@click.option(
    "--dry-run", is_flag=True, help="print the rows it would add, change or remove, as a diff; write nothing"
)
@click.option(
    "--json", "as_json", is_flag=True, help="print each statement's target, sources, layer and column lineage"
)
def onboard(
    files: tuple[str, ...],
    dialect: str,
    pipeline_id: str | None,
    layers: tuple[str, ...],
    dry_run: bool,
    as_json: bool,
) -> None:
    """Read SQL FILES (CREATE TABLE AS, INSERT, MERGE, CREATE VIEW, UPDATE, DELETE, COPY, CREATE EXTERNAL
    TABLE, ALTER TABLE … APPEND, UNLOAD…) and fill the catalog: sources, targets, stages in the medallion
    layers with their SQL, table and column lineage, and suggested validation rules. SQL is parsed, never
    executed; no DDL is needed. Onboarding the same SQL again changes nothing. Each statement gets a line:
    what it became, or why not.

    Column lineage target "*" lists the filter and join-key columns, which shape every row of the target; kind
    "ambiguous" marks a bare column that several tables of unknown columns may hold (all are listed).
    Exit code 1 when any statement failed (the others are still onboarded), 2 when the catalog is invalid.
    """
    from sqlglot.dialects.dialect import Dialect

    from medallion_assets.catalog.loader import CatalogInvalid
    from medallion_assets.onboarding.onboard import onboard as run_onboarding

    try:
        Dialect.get_or_raise(dialect)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--dialect") from None
    if pipeline_id:
        try:
            check_identifier(pipeline_id, "pipeline id")
        except InvalidIdentifier as error:
            raise click.BadParameter(str(error), param_hint="--pipeline") from None
    try:
        report = run_onboarding(
            list(files),
            catalog_store(),
            dialect=dialect,
            pipeline_id=pipeline_id,
            layer_overrides=_layer_overrides(layers),
            dry_run=dry_run,
        )
    except CatalogInvalid as error:
        echo(str(error), err=True)
        sys.exit(EXIT_INVALID)
    if as_json:
        echo(json.dumps(report.as_json(), indent=2))
    else:
        _print(report, dry_run)
    if report.failed:
        sys.exit(EXIT_FAILED)


def _print(report: OnboardingReport, dry_run: bool) -> None:
    for statement in report.statements:
        where = f"{statement.file}:{statement.line}"
        if statement.status == "failed":
            echo(f"{where}  {statement.kind}  FAILED  {statement.error}", err=True)
            continue
        if statement.status in ("skipped", "schema"):
            echo(
                f"{where}  {statement.kind}  {statement.status}"
                + (f"  {statement.target}" if statement.target else "")
                + (f": {statement.reason}" if statement.reason else "")
            )
            continue
        layer = f"  [{statement.layer}: {statement.layer_reason}]" if statement.layer else ""
        stage = f"  stage {statement.stage}" if statement.stage else ""
        echo(
            f"{where}  {statement.kind}  {statement.target} ← {', '.join(statement.sources) or '(no tables)'}"
            f"{layer}{stage}"
        )
        for warning in statement.warnings:
            echo(f"{where}  warning: {warning}", err=True)
    counts = {action: sum(1 for c in report.changes if c.action == action) for action in "+~-"}
    summary = f"catalog: {counts['+']} rows added, {counts['~']} changed, {counts['-']} removed"
    if dry_run:
        echo(f"{summary} (dry run: nothing written)")
        for change in report.changes:
            echo("\n".join(change.lines()))
    else:
        echo(summary if report.changes else "catalog: no changes")
