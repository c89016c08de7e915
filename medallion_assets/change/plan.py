"""A plan: the rows a change makes, each changed dataset's category, what it rebuilds (mode, why, rows it
reads) and which warehouse tables change, and the warehouse contracts it breaks. Built from two catalogs
(before and after); reused by whatever previews or applies the change.

`as_dict` is the JSON of `medallion plan --json`; plan.schema.json beside this module is its schema.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import networkx as nx

from medallion_assets.catalog.loader import LoadedRows, merged_snapshot
from medallion_assets.catalog.models import StageTest, Target
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.stage_tests import stage_tests
from medallion_assets.catalog.versions import stage_fingerprint
from medallion_assets.change.categories import Category, Finding, category_of, dataset_findings
from medallion_assets.change.contracts import ContractProblem, contract_problems
from medallion_assets.change.rows import RowChange, diff_rows
from medallion_assets.naming import dataset_name
from medallion_assets.recovery.graph import build_graph
from medallion_assets.storage.lake.catalogs import LakeCatalogError
from medallion_assets.storage.lake.layout import table_of
from medallion_assets.storage.lake.metadata import current_records
from medallion_assets.storage.lake.root import Lake

SCHEMA_FILE = Path(__file__).with_name("plan.schema.json")
# The engine's reason for a target that is always recomputed whole, as engine/stage/plan.py says it: importing
# that would import Spark, which a plan never does.
ASKED_FULL = "its catalog row asks for a full recompute on every run (incremental: full)"


def default_asset_key(target: Target) -> list[str]:
    """The dataset's asset key as the default `MedallionTranslator` gives it, `[layer, dataset]`: the plan
    imports no Dagster and no Spark, which the translator's module does."""
    return [target.layer, dataset_name(target)]


@dataclass(frozen=True)
class DatasetChange:
    dataset: str
    asset_key: list[str]
    pipeline: str
    category: Category
    reasons: list[str]


@dataclass(frozen=True)
class Rebuild:
    """An asset the change rebuilds: how (`full` or `incremental`) and why, the rows it reads when Iceberg's
    metadata says (None: only the changes, or a table not built yet), and the warehouse tables it loads."""

    dataset: str
    asset_key: list[str]
    pipeline: str
    mode: Literal["full", "incremental"]
    why: str
    rows_read: int | None
    warehouse_tables: list[str]


@dataclass
class Plan:
    rows: list[RowChange]
    datasets: list[DatasetChange]
    rebuilds: list[Rebuild]
    contract: list[ContractProblem]
    # Row changes that belong to no dataset still there: global rows (throttles, notifications…), removals.
    other_rows: list[RowChange] = field(default_factory=list)

    @property
    def nothing_to_do(self) -> bool:
        return not self.other_rows and all(d.category == "no_op" for d in self.datasets)

    def refused(self, allow_breaking: bool) -> list[ContractProblem]:
        """The contract problems that stop this change: all, or with --allow-breaking the unwaivable ones."""
        return [p for p in self.contract if not (allow_breaking and p.waivable)]

    def warehouse_tables(self) -> list[str]:
        return sorted({table for rebuild in self.rebuilds for table in rebuild.warehouse_tables})

    def tests_to_run(self, new: CatalogSnapshot) -> list[StageTest]:
        """The stage tests `plan --test` runs in the new catalog: those of the stages whose datasets the
        change touches (a no_op rewrite too: the tests say whether it means the same), and those it adds or
        changes."""
        datasets = {d.dataset for d in self.datasets}
        rows = {c.key for c in self.rows if c.table == "stage_tests" and c.change != "removed"}
        made = {(s.pipeline_id, s.stage_name): s.target_id for s in new.stages()}
        return [
            test
            for test in stage_tests(new)
            if test.key() in rows or made.get((test.pipeline_id, test.stage_name)) in datasets
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "nothing_to_do": self.nothing_to_do,
            "rows": [
                {
                    "table": c.table,
                    "key": list(c.key),
                    "change": c.change,
                    "fields": {name: {"old": old, "new": new} for name, (old, new) in c.fields.items()},
                }
                for c in self.rows
            ],
            "datasets": [asdict(d) for d in self.datasets],
            "rebuilds": [asdict(r) for r in self.rebuilds],
            "checks_judged_again": [d.dataset for d in self.datasets if d.category == "checks_only"],
            "warehouse_tables": self.warehouse_tables(),
            "contract": [asdict(p) for p in self.contract],
        }


@cache
def plan_schema() -> dict[str, Any]:
    """The JSON Schema of `Plan.as_dict()`."""
    schema: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return schema


def datasets_by_row(
    old: CatalogSnapshot, new: CatalogSnapshot
) -> dict[tuple[str, tuple[Any, ...]], set[str]]:
    """The datasets (stage targets) each row belongs to, in either catalog, by (table, key): a stage's or
    target's own, the users of a rule set or raw source, the datasets of a pipeline, a stage test's stage."""
    index: dict[tuple[str, tuple[Any, ...]], set[str]] = defaultdict(set)
    for snapshot in (old, new):
        made = {(stage.pipeline_id, stage.stage_name): stage.target_id for stage in snapshot.stages()}
        for key in snapshot.tables["stage_tests"]:
            if tested := made.get(key[:2]):  # (pipeline_id, stage_name, test_name)
                index[("stage_tests", key)].add(tested)
        for stage in snapshot.stages():
            for row in (
                ("stages", stage.key()),
                ("targets", (stage.target_id,)),
                ("validation_rules", (stage.validation_set_id,)),
                ("sources", (stage.input_id,)),
                ("pipelines", (stage.pipeline_id,)),
                ("pipeline_profiles", (stage.pipeline_id,)),
            ):
                index[row].add(stage.target_id)
    return index


def make_plan(old: CatalogSnapshot, new: CatalogSnapshot, rows: list[RowChange], lake: Lake | None) -> Plan:
    """The plan of going from `old` to `new`, whose row changes are `rows` (rows.diff_rows). Rows read come
    from `lake` (None: not asked)."""
    datasets: dict[str, list[Finding]] = {}
    other_rows = []
    belongs = datasets_by_row(old, new)
    for change in rows:
        touched = {d for d in belongs.get((change.table, change.key), ()) if new.stage_producing(d)}
        if change.change == "removed" or not touched:
            other_rows.append(change)
        for dataset in touched:
            datasets.setdefault(dataset, dataset_findings(old, new, dataset))
    graph = build_graph(new)
    changes = [_dataset_change(new, dataset, findings) for dataset, findings in sorted(datasets.items())]
    rebuilds = _rebuilds(old, new, graph, changes, lake)
    return Plan(rows, changes, rebuilds, contract_problems(old, new, graph), other_rows)


def _dataset_change(snapshot: CatalogSnapshot, dataset: str, findings: list[Finding]) -> DatasetChange:
    target, stage = snapshot.targets[dataset], snapshot.stage_producing(dataset)
    assert stage is not None, "a plan's datasets are made by a stage"
    category = category_of(findings)
    reasons = [f.reason for f in findings] or ["only formatting, comments, or SQL that means the same"]
    return DatasetChange(dataset, default_asset_key(target), stage.pipeline_id, category, reasons)


def _rebuilds(
    old: CatalogSnapshot,
    new: CatalogSnapshot,
    graph: nx.DiGraph,
    changes: list[DatasetChange],
    lake: Lake | None,
) -> list[Rebuild]:
    """Every asset rebuilt, upstream first: a breaking change's dataset and all stage-made datasets downstream
    of it, a non-breaking one's alone."""
    stage_edges = nx.subgraph_view(
        graph, filter_edge=lambda u, v: any(r.kind == "stage" for r in graph.edges[u, v]["routes"])
    )
    changed = {c.dataset: c for c in changes if c.category in ("breaking", "non_breaking")}
    rebuilt = set(changed)
    for change in changed.values():
        if change.category == "breaking":
            rebuilt |= nx.descendants(stage_edges, change.dataset) & graph.graph["produced"]
    modes: dict[str, str] = {}
    rebuilds = []
    for dataset in nx.lexicographical_topological_sort(stage_edges.subgraph(rebuilt)):
        target, stage = new.targets[dataset], new.stage_producing(dataset)
        assert stage is not None, "rebuilt datasets are made by stages"
        old_stage, old_target = old.stage_producing(dataset), old.targets.get(dataset)
        mode: Literal["full", "incremental"]
        if dataset in changed and target.layer == "bronze":
            mode, why = (
                "incremental",
                "bronze ingests only raw objects it has not read; the rows it holds stay",
            )
        elif old_stage is None or old_target is None:
            mode, why = "full", "first build: a new dataset"
        elif dataset in changed:
            before = stage_fingerprint(old_stage, old_target, old)
            mode, why = "full", f"its definition changed ({before} → {stage_fingerprint(stage, target, new)})"
        elif target.incremental == "full":
            mode, why = "full", ASKED_FULL
        else:
            inputs = [i for i in stage.input_ids() if i in modes]
            whole = [i for i in inputs if modes[i] == "full"]
            mode, why = (
                ("full", f"its input {', '.join(whole)} is rebuilt whole")
                if whole
                else ("incremental", f"reads what the rebuild of {', '.join(inputs)} changes")
            )
        modes[dataset] = mode
        rows_read = _rows_read(new, stage.input_ids(), lake) if mode == "full" else None
        warehouse = [t for t in [target.warehouse_table()] if t and target.kind == "warehouse"]
        rebuilds.append(
            Rebuild(
                dataset,
                default_asset_key(target),
                stage.pipeline_id,
                mode,
                why,
                rows_read,
                warehouse,
            )
        )
    return rebuilds


def _rows_read(snapshot: CatalogSnapshot, inputs: list[str], lake: Lake | None) -> int | None:
    """The rows the inputs' main snapshots hold, from their metadata; None when any is unknown."""
    if lake is None or any(i not in snapshot.targets for i in inputs):
        return None
    total = 0
    for input_id in inputs:
        try:
            records = current_records(lake, table_of(snapshot.targets[input_id]))
        except LakeCatalogError:
            return None
        if records is None:
            return None
        total += records
    return total


def plan_files(stored: CatalogSnapshot, loaded: LoadedRows, lake: Lake | None) -> Plan:
    """The plan of loading `loaded` (checked files' rows) into the catalog `stored`. The files speak for the
    tables they hold rows of: a stored row of such a table that they lack is shown removed (`catalog load` is
    an upsert and keeps it: delete it to retire it)."""
    files = {table: {row.key(): row for row in rows} for table, rows in loaded.rows.items() if rows}
    rows = diff_rows(stored.tables, files, files)
    return make_plan(stored, merged_snapshot(stored, loaded), rows, lake)


# The tables whose rows make datasets and their metadata: what a plan of an edited catalog compares.
PLANNED_TABLES = ("pipelines", "pipeline_profiles", "sources", "targets", "validation_rules", "stages")
# The kill-switch reason of a stage held for a contract-breaking change made by SQL, and of its release.
HELD = "held: a catalog change made by SQL breaks a warehouse contract: "
WAIVED_EVENT = "contract_waived"


def plan_since(loaded: CatalogSnapshot, current: CatalogSnapshot, lake: Lake | None) -> Plan:
    """The plan of what changed in the catalog since `loaded` (the snapshot the definitions were built
    from: a domain's share of the catalog, or all of it) was read: its rows as they are now, and the stages
    now in its pipelines with the rows they name."""
    stages = [stage for stage in current.stages() if stage.pipeline_id in loaded.pipelines]
    named: dict[str, set[tuple[Any, ...]]] = {
        "targets": {(d,) for stage in stages for d in (stage.target_id, *stage.input_ids())},
        "sources": {(stage.input_id,) for stage in stages},
        "validation_rules": {(stage.validation_set_id,) for stage in stages},
    }
    now = {
        table: {
            key: row
            for key, row in current.tables[table].items()
            if key in loaded.tables[table] or key in named.get(table, ())
        }
        for table in PLANNED_TABLES
    }
    now["stages"] = {stage.key(): stage for stage in stages}
    after = loaded.replaced({table: rows.values() for table, rows in now.items()})
    return make_plan(loaded, after, diff_rows(loaded.tables, now, PLANNED_TABLES), lake)
