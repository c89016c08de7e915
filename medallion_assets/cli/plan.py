"""`medallion plan DIR`: what loading the catalog files in DIR would change, before anything is written."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from medallion_assets import config
from medallion_assets.cli.common import EXIT_FAILED, EXIT_INVALID, catalog_store, refuse, validated
from medallion_assets.redaction import echo

if TYPE_CHECKING:
    from medallion_assets.change.plan import Plan

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
def plan(directory: Path, as_json: bool, allow_breaking: bool) -> None:
    """Compare the catalog files in DIRECTORY with the loaded catalog: rows added, changed and removed, each
    changed dataset's category (breaking, non_breaking, checks_only, metadata_only, no_op), every asset it
    rebuilds with its mode, why and the rows it reads (from Iceberg metadata), and the warehouse tables it
    changes. Starts no Spark and writes nothing.

    Exit codes: 0 nothing to do, 1 changes, 2 invalid files (validate's messages) or a warehouse contract
    broken (a column dropped, renamed or narrowed without a new version), a version gone down.
    """
    from medallion_assets.change.plan import plan_files

    if not directory.is_dir():
        refuse(f"no such catalog folder: {directory}")
    stored = catalog_store().snapshot()
    made = plan_files(stored, validated(stored, [directory]), config.lake_url())
    if as_json:
        echo(json.dumps(made.as_dict(), default=str, indent=2))
    else:
        for line in plan_lines(made):
            echo(line)
    refused = made.refused(allow_breaking)
    for problem in refused:
        echo(f"refused: {problem}", err=True)
    if refused:
        sys.exit(EXIT_INVALID)
    sys.exit(0 if made.nothing_to_do else EXIT_FAILED)


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
