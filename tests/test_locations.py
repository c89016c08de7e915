"""A code location per catalog domain: `medallion workspace` writes them, Dagster loads each in its own code
server, and a broken catalog row fails only its own domain's location, with an error naming the row."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from dagster import AssetKey, instance_for_test
from sqlalchemy import text

from medallion_assets.loading import validate_files
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.dagster_compat import WorkspaceFileTarget, WorkspaceProcessContext
from tests.conftest import REPO, SEED

pytestmark = pytest.mark.integration  # the CLI and Dagster's code servers, as processes


def load_workspace(path: Path) -> dict:
    """Location name → its asset keys, or the error it failed to load with."""
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
                    loaded[name] = {key for key in repository.asset_graph.get_all_asset_keys()}
            return loaded


def test_one_location_per_domain_and_a_broken_row_fails_only_its_own(tmp_path, monkeypatch):
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    rows = validate_files(store.snapshot(), [SEED]).rows
    rows["pipelines"] = [p.model_copy(update={"domain": "sales"}) if p.pipeline_id == "orders_etl" else p
                         for p in rows["pipelines"]]
    store.upsert(rows)
    monkeypatch.setenv("MEDALLION_CATALOG_URL", store.url)
    monkeypatch.setenv("MEDALLION_LAKE_URL", str(tmp_path / "lake"))
    monkeypatch.setenv("MEDALLION_WAREHOUSE_URL", f"duckdb:///{tmp_path}/warehouse.duckdb")
    workspace = tmp_path / "workspace.yaml"

    written = subprocess.run([str(Path(sys.executable).parent / "medallion"), "workspace", "--to", str(workspace)],
                             capture_output=True, text=True, cwd=REPO)

    assert written.returncode == 0, written.stderr
    assert written.stdout.strip() == f"wrote {workspace}: 2 code location(s)"
    locations = load_workspace(workspace)
    assert set(locations) == {"medallion_main", "medallion_sales"}
    assert AssetKey(["gold", "daily_revenue"]) in locations["medallion_sales"]
    assert AssetKey(["gold", "daily_user_events"]) in locations["medallion_main"]
    assert not {key for key in locations["medallion_sales"] if key.path[0] != "raw"} & locations["medallion_main"]

    with store.engine.begin() as connection:  # around the loader, as an operator's hand-written SQL would
        connection.execute(text("UPDATE stages SET target_id = 'not an id!' "
                                "WHERE pipeline_id = 'orders_etl' AND stage_order = 1"))

    locations = load_workspace(workspace)
    assert isinstance(locations["medallion_main"], set) and AssetKey(["gold", "daily_user_events"]) in locations["medallion_main"]
    assert ("CatalogRowInvalid: catalog table stages, row (pipeline_id='orders_etl', stage_order=1): target_id: "
            in locations["medallion_sales"])
