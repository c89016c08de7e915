"""A code location per catalog domain: `medallion workspace` writes them, Dagster loads each in its own code
server, and a broken catalog row fails only its own domain's location, with an error naming the row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from dagster import AssetKey, instance_for_test
from sqlalchemy import text

from medallion_assets.catalog.store import CatalogRowInvalid, CatalogStore
from medallion_assets.cli import main
from medallion_assets.dagster_compat import WorkspaceFileTarget, WorkspaceProcessContext
from medallion_assets.loading import validate_files
from tests.conftest import REPO, SEED

pytestmark = pytest.mark.integration  # the CLI and Dagster's code servers, as processes


def load_workspace(path: Path) -> dict:
    """Location name → the asset keys it materializes, or the error it failed to load with. A location also
    shows the keys its stages read from other locations, as dependencies it does not materialize."""
    with instance_for_test() as instance:
        with WorkspaceProcessContext(instance, WorkspaceFileTarget(paths=[str(path)])) as context:
            request = context.create_request_context()
            loaded = {}
            for name in request.code_location_names:
                error = request.get_code_location_error(name)
                if error:
                    loaded[name] = error.to_string()
                else:
                    repository = next(iter(request.get_code_location(name).get_repositories().values()))
                    loaded[name] = set(repository.asset_graph.materializable_asset_keys)
            return loaded


def test_one_location_per_domain_and_a_broken_row_fails_only_its_own(tmp_path, monkeypatch):
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    rows = validate_files(store.snapshot(), [SEED]).rows
    rows["pipelines"] = [
        p.model_copy(update={"domain": "sales"}) if p.pipeline_id == "orders_etl" else p
        for p in rows["pipelines"]
    ]
    store.upsert(rows)
    monkeypatch.setenv("MEDALLION_CATALOG_URL", store.url)
    monkeypatch.setenv("MEDALLION_LAKE_URL", str(tmp_path / "lake"))
    monkeypatch.setenv("MEDALLION_WAREHOUSE_URL", f"duckdb:///{tmp_path}/warehouse.duckdb")
    workspace = tmp_path / "workspace.yaml"

    written = subprocess.run(
        [str(Path(sys.executable).parent / "medallion"), "workspace", "--to", str(workspace)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )

    assert written.returncode == 0, written.stderr
    assert written.stdout.splitlines() == [
        f"wrote {workspace}: 2 code location(s)",
        "  medallion_main: 9 dataset(s)",
        "  medallion_sales: 6 dataset(s)",
    ]
    assert written.stderr == ""
    locations = load_workspace(workspace)
    assert set(locations) == {"medallion_main", "medallion_sales"}
    assert AssetKey(["gold", "daily_revenue"]) in locations["medallion_sales"]
    assert AssetKey(["gold", "daily_user_events"]) in locations["medallion_main"]
    # main's customer_changes_etl reads sales' silver_orders, which only sales materializes.
    assert AssetKey(["silver", "orders"]) in locations["medallion_sales"]
    assert not locations["medallion_sales"] & locations["medallion_main"]

    with store.engine.begin() as connection:  # around the loader, as an operator's hand-written SQL would
        connection.execute(
            text(
                "UPDATE stages SET target_id = 'not an id!' "
                "WHERE pipeline_id = 'orders_etl' AND stage_order = 1"
            )
        )

    locations = load_workspace(workspace)
    assert (
        isinstance(locations["medallion_main"], set)
        and AssetKey(["gold", "daily_user_events"]) in locations["medallion_main"]
    )
    assert (
        "CatalogRowInvalid: catalog table stages, row (pipeline_id='orders_etl', stage_order=1): target_id: "
        in locations["medallion_sales"]
    )


def seed_in_two_domains(tmp_path) -> CatalogStore:
    """The seed catalog with orders_etl in domain `sales`, user_events_etl in the default one."""
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    rows = validate_files(store.snapshot(), [SEED]).rows
    rows["pipelines"] = [
        p.model_copy(update={"domain": "sales"}) if p.pipeline_id == "orders_etl" else p
        for p in rows["pipelines"]
    ]
    store.upsert(rows)
    return store


def test_a_domain_too_large_for_run_workers_to_start_in_3_s_is_named_with_its_size(tmp_path, monkeypatch):
    store = seed_in_two_domains(tmp_path)
    monkeypatch.setenv("MEDALLION_CATALOG_URL", store.url)
    # The seed's domains hold 9 and 6 datasets; with the limit at 8, main is over it.
    monkeypatch.setattr("medallion_assets.locations.LARGE_DOMAIN_DATASETS", 8)
    written = CliRunner().invoke(main, ["workspace", "--to", str(tmp_path / "workspace.yaml")])
    assert written.exit_code == 0, written.output
    assert written.stderr == (
        "warning: domain main has 9 datasets; each of its run workers rebuilds them all before its first "
        "step, which takes longer than 3 s past 8 (BENCHMARKS.md, Code locations per domain): split it into "
        "smaller domains\n"
    )
    # A row broken by plain SQL hides neither its domain nor its size.
    with store.engine.begin() as connection:
        connection.execute(
            text("UPDATE stages SET stage_name = 'not a name!' WHERE pipeline_id = 'orders_etl'")
        )
    assert store.domain_datasets() == {"main": 9, "sales": 6}


def test_a_domain_reads_only_its_share_of_sources_targets_and_rule_sets(tmp_path):
    store = seed_in_two_domains(tmp_path)

    sales = store.snapshot("sales")

    assert set(sales.pipelines) == {"orders_etl"}
    # orders_raw_replica is read by no stage, but by orders_etl's declared recovery path.
    assert set(sales.sources) == {"orders_raw", "orders_raw_replica", "customers_raw"}
    assert set(sales.targets) == {s.target_id for s in sales.stages()} | {
        s.input_id for s in sales.stages() if s.input_id not in sales.sources
    }
    assert "silver_user_events" not in sales.targets
    assert set(sales.rule_sets) == {s.validation_set_id for s in sales.stages()}
    assert "silver_user_events_rules" not in sales.rule_sets

    # A broken source row of the other domain is no longer read by this one.
    with store.engine.begin() as connection:
        connection.execute(
            text("UPDATE sources SET file_format = 'xlsx' WHERE source_id = 'user_events_raw'")
        )
    assert set(store.snapshot("sales").sources) == set(sales.sources)
    with pytest.raises(
        CatalogRowInvalid, match=r"^catalog table sources, row \(source_id='user_events_raw'\): file_format: "
    ):
        store.snapshot("main")


RUN_WORKER = """
import sys
from dagster import deserialize_value
from medallion_assets.dagster_compat import ReconstructableRepository
load_data = deserialize_value(open(sys.argv[1]).read()) if len(sys.argv) > 1 else None
repository = ReconstructableRepository.for_module(
    "medallion_assets.locations", "sales"
).with_repository_load_data(load_data).get_definition()
print(sorted(key.to_user_string() for key in repository.asset_graph.get_all_asset_keys()))
"""


def load_the_sales_location(load_data: Path) -> subprocess.CompletedProcess:
    """The code server's part: load the location and write its load data, which Dagster stores with each run
    for its run worker."""
    code_server = subprocess.run(
        [
            sys.executable,
            "-c",
            RUN_WORKER.replace(
                "print(",
                f"open({str(load_data)!r}, 'w')"
                ".write(__import__('dagster').serialize_value(repository.repository_load_data)); print(",
            ),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert code_server.returncode == 0, code_server.stderr
    return code_server


# As Dagster's run worker does: the location reconstructed for the run, then again for its execution plan,
# each time from load data deserialized anew. The asset factory is counted.
RECONSTRUCTED_TWICE = """
import json, sys
from dagster import deserialize_value
from medallion_assets import definitions
from medallion_assets.dagster_compat import ReconstructableRepository
factory_runs = []
build_assets = definitions.build_assets
definitions.build_assets = lambda *args: factory_runs.append(1) or build_assets(*args)
graphs = [
    sorted(
        key.to_user_string()
        for key in ReconstructableRepository.for_module("medallion_assets.locations", "sales")
        .with_repository_load_data(deserialize_value(open(path).read()))
        .get_definition()
        .asset_graph.get_all_asset_keys()
    )
    for path in sys.argv[1:]
]
print(json.dumps({"factory_runs": len(factory_runs), "graphs": graphs}))
"""


def test_a_run_worker_builds_its_location_once_however_often_dagster_reconstructs_it(tmp_path, monkeypatch):
    store = seed_in_two_domains(tmp_path)
    monkeypatch.setenv("MEDALLION_CATALOG_URL", store.url)
    monkeypatch.setenv("MEDALLION_LAKE_URL", str(tmp_path / "lake"))
    monkeypatch.setenv("MEDALLION_WAREHOUSE_URL", f"duckdb:///{tmp_path}/warehouse.duckdb")
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    load_the_sales_location(before)
    with store.engine.begin() as connection:  # a change to the domain: the next load has another snapshot
        connection.execute(
            text("UPDATE targets SET description = 'changed' WHERE target_id = 'gold_daily_revenue'")
        )
    load_the_sales_location(after)

    def reconstructed(*load_data: Path) -> dict:
        worker = subprocess.run(
            [sys.executable, "-c", RECONSTRUCTED_TWICE, *map(str, load_data)],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert worker.returncode == 0, worker.stderr
        return json.loads(worker.stdout)

    same = reconstructed(before, before)
    assert same["factory_runs"] == 1
    assert same["graphs"][0] == same["graphs"][1]
    assert "gold/daily_revenue" in same["graphs"][0]
    # Another snapshot is built anew, never answered from the first.
    assert reconstructed(before, after)["factory_runs"] == 2


def test_a_run_worker_rebuilds_its_location_from_the_code_servers_snapshot_not_the_catalog(
    tmp_path, monkeypatch
):
    store = seed_in_two_domains(tmp_path)
    monkeypatch.setenv("MEDALLION_CATALOG_URL", store.url)
    monkeypatch.setenv("MEDALLION_LAKE_URL", str(tmp_path / "lake"))
    monkeypatch.setenv("MEDALLION_WAREHOUSE_URL", f"duckdb:///{tmp_path}/warehouse.duckdb")
    load_data = tmp_path / "load_data.json"
    code_server = load_the_sales_location(load_data)
    with store.engine.begin() as connection:  # the catalog breaks after the location loaded
        connection.execute(
            text(
                "UPDATE stages SET target_id = 'not an id!' "
                "WHERE pipeline_id = 'orders_etl' AND stage_order = 1"
            )
        )

    worker = subprocess.run(
        [sys.executable, "-c", RUN_WORKER, str(load_data)], capture_output=True, text=True, cwd=REPO
    )
    without_snapshot = subprocess.run(
        [sys.executable, "-c", RUN_WORKER], capture_output=True, text=True, cwd=REPO
    )

    assert worker.returncode == 0, worker.stderr
    assert worker.stdout == code_server.stdout
    assert "gold/daily_revenue" in worker.stdout
    assert without_snapshot.returncode != 0
    assert (
        "catalog table stages, row (pipeline_id='orders_etl', stage_order=1): target_id: "
        in without_snapshot.stderr
    )
