"""`medallion lineage …` and `medallion paths`: what feeds a dataset, every way to produce it, and its
history.

Heavy modules are imported inside the commands, as in `medallion_assets.cli`, so `medallion --help` stays
quick.
"""

from __future__ import annotations

import json
import sys
from typing import IO, TYPE_CHECKING, Any

import click

from medallion_assets.cli.common import EXIT_INVALID, catalog_store, refuse
from medallion_assets.redaction import echo

if TYPE_CHECKING:
    import networkx as nx

    from medallion_assets.catalog.snapshot import CatalogSnapshot
    from medallion_assets.catalog.store import CatalogStore


def _catalog() -> tuple[CatalogStore, CatalogSnapshot, nx.DiGraph]:
    """The catalog store, a snapshot of it and its lineage graph."""
    from medallion_assets.recovery.graph import build_graph

    store = catalog_store()
    snapshot = store.snapshot()
    return store, snapshot, build_graph(snapshot)


@click.group()
def lineage() -> None:
    """Dataset lineage from the catalog: upstream and downstream datasets, columns, recovery paths,
    versions."""


@lineage.command("show")
@click.argument("dataset")
@click.option("--upstream", "direction", flag_value="upstream", help="only what DATASET is made from")
@click.option("--downstream", "direction", flag_value="downstream", help="only what is made from DATASET")
@click.option("--depth", type=click.IntRange(min=1), default=None, help="at most N hops away (default: all)")
@click.option("--columns", is_flag=True, help="also the column lineage between the datasets shown")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def show(dataset: str, direction: str | None, depth: int | None, columns: bool, as_json: bool) -> None:
    """The datasets DATASET is made from and those made from it, edge by edge, nearest first."""
    from medallion_assets.recovery.graph import UnknownDataset, column_lineage, downstream, upstream

    _, _, graph = _catalog()
    walks = {"upstream": upstream, "downstream": downstream}
    try:
        found = {
            name: walk(graph, dataset, depth) for name, walk in walks.items() if direction in (None, name)
        }
    except UnknownDataset as error:
        refuse(str(error))
    report: dict[str, Any] = {
        "dataset": dataset,
        **{name: [e._asdict() for e in edges] for name, edges in found.items()},
    }
    if columns:
        shown = {dataset, *(n for edges in found.values() for e in edges for n in (e.upstream, e.downstream))}
        report["columns"] = [row.model_dump() for row in column_lineage(graph, shown)]
    if as_json:
        echo(json.dumps(report, indent=2))
        return
    for name, edges in found.items():
        echo(f"{name} of {dataset}:" + ("" if edges else " none"))
        for e in edges:
            echo(
                f"  {e.depth}  {e.upstream} → {e.downstream}  via {e.via} "
                f"({e.kind}, {e.line}, cost {e.cost:g})"
            )
    if columns:
        echo("columns:" + ("" if report["columns"] else " none recorded"))
        for row in report["columns"]:
            echo(
                f"  {row['downstream']}.{row['downstream_column']} "
                f"← {row['upstream']}.{row['upstream_column']} ({row['transformation']})"
            )


@lineage.command("history")
@click.argument("dataset")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def history(dataset: str, as_json: bool) -> None:
    """The lineage versions of DATASET, oldest first: when, the code version, and what changed (inputs added
    and removed, columns added, removed and retyped, transformation, rules or output changed)."""
    from medallion_assets.catalog.versions import describe_changes, history_report
    from medallion_assets.recovery.graph import UnknownDataset

    store, _, graph = _catalog()
    versions = store.lineage_versions(dataset)
    if dataset not in graph and not versions:
        refuse(str(UnknownDataset(dataset, graph.nodes)))
    report = history_report(versions)
    if as_json:
        echo(json.dumps({"dataset": dataset, "versions": report}, indent=2))
        return
    if not report:
        echo(f"no lineage versions recorded for {dataset}")
    for entry in report:
        changes = describe_changes(entry) if entry["version"] > 1 else ""
        echo(
            f"v{entry['version']}  {entry['created_at']}  {entry['code_version']}  "
            f"inputs: {', '.join(entry['inputs'])}" + (f"  ({changes})" if changes else "")
        )


@lineage.command("refresh")
def refresh() -> None:
    """Recompute every dataset's recovery paths into dataset_recovery_paths (only changed datasets are
    rewritten)."""
    from medallion_assets.recovery.paths import refresh_recovery_paths

    store, snapshot, _ = _catalog()
    changed = refresh_recovery_paths(store, snapshot)
    echo(
        f"recovery paths: {len(changed)} dataset(s) updated" + (f": {', '.join(changed)}" if changed else "")
    )


@lineage.command("ingest")
@click.argument("file", type=click.File("rb"))
def ingest(file: IO[bytes]) -> None:
    """Add the lineage in FILE (newline-delimited OpenLineage events from Airflow, dbt, Spark…; - reads stdin)
    to the catalog graph. A malformed event is reported with its line and left out; the others are ingested.

    Exit codes: 0 every event ingested, 2 some were rejected.
    """
    from medallion_assets import config
    from medallion_assets.openlineage.ingest import ingest_events, lines
    from medallion_assets.storage.lake.root import Lake

    # Standard input read as bytes has no name of its own everywhere (click's test runner's has none).
    name = getattr(file, "name", "<stdin>")
    report = ingest_events(catalog_store(), lines(file, name), Lake.resolve(), config.warehouse_url())
    for rejection in report.rejected:
        echo(str(rejection), err=True)
    for warning in report.warnings:
        echo(f"warning: {warning}", err=True)
    echo(report.summary())
    if report.rejected:
        sys.exit(EXIT_INVALID)


@lineage.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option(
    "--port", default=5000, show_default=True, help="port to listen on (Marquez's API port by default)"
)
@click.option(
    "--token",
    envvar="MEDALLION_LINEAGE_TOKEN",
    default=None,
    help="bearer token every request must carry; required unless --host is a loopback address "
    "(prefer the environment variable MEDALLION_LINEAGE_TOKEN: a command line is visible to all users)",
)
def serve(host: str, port: int, token: str | None) -> None:
    """Receive OpenLineage events over HTTP at POST /api/v1/lineage, as Marquez does, and add their lineage to
    the catalog graph: 201 for an accepted event, 400 with the schema error for a malformed one."""
    from medallion_assets import config
    from medallion_assets.openlineage.server import ENDPOINT, LineageServer
    from medallion_assets.storage.lake.root import Lake

    try:
        server = LineageServer(
            (host, port), catalog_store(), Lake.resolve(), config.warehouse_url(), token=token
        )
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    echo(f"OpenLineage endpoint on http://{host}:{server.server_port}{ENDPOINT} (Ctrl+C stops it)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@click.command("paths")
@click.argument("dataset")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def paths(dataset: str, as_json: bool) -> None:
    """Every path by which DATASET can be produced, cheapest first, whether each is available now (sources and
    warehouse tables are probed; operators' `available` flags apply), and the path in use."""
    from medallion_assets.recovery.availability import Availability
    from medallion_assets.recovery.graph import UnknownDataset
    from medallion_assets.recovery.paths import paths_report, recovery_paths

    store, snapshot, graph = _catalog()
    try:
        ranked = recovery_paths(graph, dataset)
    except UnknownDataset as error:
        refuse(str(error))
    down = Availability(store, snapshot).unavailable({node for path in ranked for node in path.nodes})
    report = paths_report(graph, dataset, ranked, down)
    if as_json:
        echo(json.dumps(report, indent=2))
        return
    active = " → ".join(report["active"]) if report["active"] else "none: no path is available"
    echo(f"{dataset}  active: {active}")
    for rank, path in enumerate(report["paths"], 1):
        state = "available" if path["available"] else "down"
        echo(f"  {rank:>2}  cost {path['cost']:<6g} {state:<9}  {' → '.join(path['nodes'])}")
    for node, reason in report["down"].items():
        echo(f"  down: {node}: {reason}")
