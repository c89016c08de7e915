"""The one entry point: the catalog, read once per code-location load, becomes Dagster Definitions.

A pipeline added to the catalog appears after a reload, with no code change. Runs execute in process, so
all steps of a run share one Spark session (a session costs seconds to start; see README, Architecture).
"""

from __future__ import annotations

from dagster import Definitions, definitions, in_process_executor

from medallion_assets import config
from medallion_assets.assets import build_assets
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.resources import CatalogResource, LakeResource, SparkResource, WarehouseResource
from medallion_assets.sensors import build_control_sensor
from medallion_assets.sensors.healing import build_healing_sensor
from medallion_assets.sensors.launcher import build_launcher_sensor


def build_definitions(catalog_url: str | None = None, lake_root: str | None = None,
                      warehouse_url: str | None = None) -> Definitions:
    catalog_url = catalog_url or config.catalog_url()
    lake_root = lake_root or config.lake_url()
    warehouse_url = warehouse_url or config.warehouse_url()
    store = CatalogStore(catalog_url)
    store.migrate()
    snapshot = store.snapshot()
    return Definitions(
        assets=build_assets(snapshot, lake_root),
        sensors=[build_control_sensor(snapshot, store), build_launcher_sensor(snapshot, store),
                 build_healing_sensor(snapshot, store, lake_root, warehouse_url)],
        resources={
            "spark": SparkResource(),
            "lake": LakeResource(root=lake_root),
            "warehouse": WarehouseResource(url=warehouse_url),
            "catalog": CatalogResource(url=catalog_url),
        },
        executor=in_process_executor,
    )


@definitions
def defs() -> Definitions:
    """Loaded by Dagster when the code location loads, never at import time."""
    return build_definitions()
