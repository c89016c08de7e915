"""The one entry point: the catalog, read once per code-location load, becomes Dagster Definitions.

A pipeline added to the catalog appears after a reload, with no code change. A run worker does not read the
catalog's structure again: the code server hands the snapshot it built from to Dagster as reconstruction
metadata, and the run worker rebuilds the same definitions from it (runtime controls are read
live at run time, as everywhere). Runs execute in process, so
all steps of a run share one Spark session (a session costs seconds to start; see README, Architecture),
unless MEDALLION_EXECUTOR=multiprocess asks for a process per step.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zlib

from dagster import Definitions, EnvVar, definitions, in_process_executor, multiprocess_executor

from medallion_assets import config
from medallion_assets.assets import build_assets
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.dagster_compat import DefinitionsLoadContext, DefinitionsLoadType
from medallion_assets.redaction import scrub
from medallion_assets.resources import CatalogResource, LakeResource, SparkResource, WarehouseResource
from medallion_assets.sensors import build_control_sensor
from medallion_assets.sensors.healing import build_healing_sensor
from medallion_assets.sensors.launcher import build_launcher_sensor
from medallion_assets.sensors.notifications import build_notification_sensor

# The reconstruction-metadata key of the catalog snapshot a code location was built from.
SNAPSHOT_KEY = "medallion/catalog_snapshot"


def snapshot_key(catalog_url: str, domain: str | None) -> str:
    """Whose snapshot it is: Dagster keeps one load context per process, and a process that reconstructs one
    code location in process and then builds another catalog's or domain's definitions must not take the
    first one's snapshot. The key is stored with every run: it is made of the URL with its password masked."""
    digest = hashlib.sha256(f"{scrub(catalog_url)}\0{domain or ''}".encode()).hexdigest()[:16]
    return f"{SNAPSHOT_KEY}/{digest}"


def _catalog_snapshot(store: CatalogStore, domain: str | None) -> CatalogSnapshot:
    """The snapshot the code server built these definitions from, when Dagster reconstructs them (in a run
    worker); else the catalog (or the domain's share of it) read now, and handed to Dagster to keep with the
    code location's load data, which Dagster stores with every run and gives back to its run worker."""
    context, key = DefinitionsLoadContext.get(), snapshot_key(store.url, domain)
    if context.load_type == DefinitionsLoadType.RECONSTRUCTION and key in context.reconstruction_metadata:
        return unpack_snapshot(context.reconstruction_metadata[key])
    store.migrate()
    snapshot = store.snapshot(domain)
    context.add_to_pending_reconstruction_metadata(key, pack_snapshot(snapshot))
    return snapshot


def pack_snapshot(snapshot: CatalogSnapshot) -> str:
    """Compressed (about 30 times at 10k datasets): Dagster stores it with the execution plan of every run."""
    return base64.b64encode(zlib.compress(snapshot.to_json().encode())).decode()


def unpack_snapshot(packed: str) -> CatalogSnapshot:
    return CatalogSnapshot.from_json(zlib.decompress(base64.b64decode(packed)).decode())


def _from_environment(explicit: str | None, variable: str) -> EnvVar | None:
    """The environment variable a setting comes from, when it does. Dagster keeps and shows a resource setting
    given as an EnvVar by the variable's name, never its value: a catalog or warehouse URL may hold a
    password."""
    return EnvVar(variable) if explicit is None and variable in os.environ else None


def build_definitions(
    catalog_url: str | None = None,
    lake_root: str | None = None,
    warehouse_url: str | None = None,
    domain: str | None = None,
) -> Definitions:
    """Every pipeline's assets, or with `domain` only that domain's (one code location per domain)."""
    catalog_setting = _from_environment(catalog_url, config.CATALOG_ENV)
    warehouse_setting = _from_environment(warehouse_url, config.WAREHOUSE_ENV)
    catalog_url = catalog_url or config.catalog_url()
    lake_root = lake_root or config.lake_url()
    warehouse_url = warehouse_url or config.warehouse_url()
    store = CatalogStore(catalog_url)
    snapshot = _catalog_snapshot(store, domain)
    assets = build_assets(snapshot, lake_root)
    sensors = [build_control_sensor(snapshot, store)]
    if snapshot.stages():  # with no asset to run there is nothing to launch or heal, nor Dagster's asset job
        sensors += [
            build_launcher_sensor(snapshot, store),
            build_healing_sensor(snapshot, store, lake_root, warehouse_url),
            build_notification_sensor(store),
        ]
    return Definitions(
        assets=assets,
        sensors=sensors,
        resources={
            "spark": SparkResource(),
            "lake": LakeResource(root=lake_root),
            "warehouse": WarehouseResource(url=warehouse_setting or warehouse_url),
            "catalog": CatalogResource(url=catalog_setting or catalog_url),
        },
        executor=multiprocess_executor if config.executor() == "multiprocess" else in_process_executor,
    )


@definitions
def defs() -> Definitions:
    """Loaded by Dagster when the code location loads, never at import time."""
    return build_definitions()
