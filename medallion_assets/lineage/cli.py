"""`medallion lineage …` and `medallion paths`: what feeds a dataset, every way to produce it, and its history.

Heavy modules are imported inside the commands, as in `medallion_assets.cli`, so `medallion --help` stays quick.
"""

from __future__ import annotations

import json
import sys

import click


def _catalog():
    """The catalog store, a snapshot of it and its lineage graph."""
    from medallion_assets.cli import _store
    from medallion_assets.lineage.graph import build_graph

    store = _store()
    snapshot = store.snapshot()
    return store, snapshot, build_graph(snapshot)


def _refuse_unknown(error: Exception) -> None:
    from medallion_assets.cli import EXIT_INVALID_CATALOG

    click.echo(str(error), err=True)
    sys.exit(EXIT_INVALID_CATALOG)


@click.group()
def lineage() -> None:
    """Dataset lineage from the catalog: upstream and downstream datasets, columns, recovery paths, versions."""


@lineage.command("show")
@click.argument("dataset")
@click.option("--upstream", "direction", flag_value="upstream", help="only what DATASET is made from")
@click.option("--downstream", "direction", flag_value="downstream", help="only what is made from DATASET")
@click.option("--depth", type=click.IntRange(min=1), default=None, help="at most N hops away (default: all)")
@click.option("--columns", is_flag=True, help="also the column lineage between the datasets shown")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def show(dataset, direction, depth, columns, as_json) -> None:
    """The datasets DATASET is made from and those made from it, edge by edge, nearest first."""
    from medallion_assets.lineage.graph import UnknownDataset, column_lineage, downstream, upstream

    _, _, graph = _catalog()
    walks = {"upstream": upstream, "downstream": downstream}
    try:
        found = {name: walk(graph, dataset, depth) for name, walk in walks.items() if direction in (None, name)}
    except UnknownDataset as error:
        _refuse_unknown(error)
    report = {"dataset": dataset, **{name: [e._asdict() for e in edges] for name, edges in found.items()}}
    if columns:
        shown = {dataset, *(n for edges in found.values() for e in edges for n in (e.upstream, e.downstream))}
        report["columns"] = [row.model_dump() for row in column_lineage(graph, shown)]
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    for name, edges in found.items():
        click.echo(f"{name} of {dataset}:" + ("" if edges else " none"))
        for e in edges:
            click.echo(f"  {e.depth}  {e.upstream} → {e.downstream}  via {e.via} ({e.kind}, {e.line}, cost {e.cost:g})")
    if columns:
        click.echo("columns:" + ("" if report["columns"] else " none recorded"))
        for row in report["columns"]:
            click.echo(f"  {row['downstream']}.{row['downstream_column']} ← {row['upstream']}.{row['upstream_column']}"
                       f" ({row['transformation']})")


@lineage.command("history")
@click.argument("dataset")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def history(dataset, as_json) -> None:
    """The lineage versions of DATASET, oldest first, each with the inputs it added and removed."""
    from medallion_assets.lineage.graph import UnknownDataset

    store, _, graph = _catalog()
    rows = store.table_rows("lineage_versions")
    if dataset not in graph and dataset not in {r["dataset"] for r in rows}:
        _refuse_unknown(UnknownDataset(dataset, graph.nodes))
    versions, previous = [], []
    for row in sorted((r for r in rows if r["dataset"] == dataset), key=lambda r: r["version"]):
        versions.append({
            "version": row["version"], "created_at": str(row["created_at"]), "fingerprint": row["fingerprint"],
            "inputs": row["inputs"], "inputs_added": sorted(set(row["inputs"]) - set(previous)),
            "inputs_removed": sorted(set(previous) - set(row["inputs"])), "transform_sql": row["transform_sql"],
        })
        previous = row["inputs"]
    if as_json:
        click.echo(json.dumps({"dataset": dataset, "versions": versions}, indent=2))
        return
    if not versions:
        click.echo(f"no lineage versions recorded for {dataset}")
    for v in versions:
        changes = [*(f"+{i}" for i in v["inputs_added"]), *(f"-{i}" for i in v["inputs_removed"])]
        click.echo(f"v{v['version']}  {v['created_at']}  {v['fingerprint']}  inputs: {', '.join(v['inputs'])}"
                   + (f"  ({' '.join(changes)})" if v["version"] > 1 and changes else ""))


@lineage.command("refresh")
def refresh() -> None:
    """Recompute every dataset's recovery paths into dataset_recovery_paths (only changed datasets are rewritten)."""
    from medallion_assets.lineage.paths import refresh_recovery_paths

    store, snapshot, _ = _catalog()
    changed = refresh_recovery_paths(store, snapshot)
    click.echo(f"recovery paths: {len(changed)} dataset(s) updated" + (f": {', '.join(changed)}" if changed else ""))


@click.command("paths")
@click.argument("dataset")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def paths(dataset, as_json) -> None:
    """Every path by which DATASET can be produced, cheapest first, whether each is available now (sources and
    warehouse tables are probed; operators' `available` flags apply), and the path in use."""
    from medallion_assets.lineage.availability import Availability
    from medallion_assets.lineage.graph import UnknownDataset
    from medallion_assets.lineage.paths import paths_report, recovery_paths

    store, snapshot, graph = _catalog()
    try:
        ranked = recovery_paths(graph, dataset)
    except UnknownDataset as error:
        _refuse_unknown(error)
    down = Availability(store, snapshot).unavailable({node for path in ranked for node in path.nodes})
    report = paths_report(graph, dataset, ranked, down)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    active = " → ".join(report["active"]) if report["active"] else "none: no path is available"
    click.echo(f"{dataset}  active: {active}")
    for rank, path in enumerate(report["paths"], 1):
        state = "available" if path["available"] else "down"
        click.echo(f"  {rank:>2}  cost {path['cost']:<6g} {state:<9}  {' → '.join(path['nodes'])}")
    for node, reason in report["down"].items():
        click.echo(f"  down: {node}: {reason}")
