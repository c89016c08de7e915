"""The one entry point: the catalog, read once per code-location load, becomes Dagster Definitions.

A pipeline added to the catalog appears after a reload, with no code change. A run worker does not read the
catalog's structure again: the code server hands the snapshot it built from to Dagster as reconstruction
metadata, and the run worker rebuilds the same definitions from it (runtime controls are read
live at run time, as everywhere). Runs execute in process, so
all steps of a run share one Spark session (a session costs seconds to start; see docs/engine.md),
unless MEDALLION_EXECUTOR=multiprocess asks for a process per step.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zlib
from dataclasses import dataclass
from functools import lru_cache

from dagster import Definitions, EnvVar, definitions, in_process_executor, multiprocess_executor

from medallion_assets import config
from medallion_assets.assets import build_assets
from medallion_assets.assets.translator import MedallionTranslator
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.dagster_compat import DefinitionsLoadContext, DefinitionsLoadType
from medallion_assets.redaction import scrub
from medallion_assets.resources import CatalogResource, LakeResource, SparkResource, WarehouseResource
from medallion_assets.sensors import build_control_sensor
from medallion_assets.sensors.healing import build_healing_sensor
from medallion_assets.sensors.launcher import build_launcher_sensor
from medallion_assets.sensors.maintenance import build_maintenance_schedules
from medallion_assets.sensors.notifications import build_notification_sensor
from medallion_assets.storage.lake.root import Lake

# The reconstruction-metadata key of the catalog snapshot a code location was built from.
SNAPSHOT_KEY = "medallion/catalog_snapshot"


def snapshot_key(catalog_url: str, domain: str | None) -> str:
    """Whose snapshot it is: Dagster keeps one load context per process, and a process that reconstructs one
    code location in process and then builds another catalog's or domain's definitions must not take the
    first one's snapshot. The key is stored with every run: it is made of the URL with its password masked."""
    digest = hashlib.sha256(f"{scrub(catalog_url)}\0{domain or ''}".encode()).hexdigest()[:16]
    return f"{SNAPSHOT_KEY}/{digest}"


def pack_snapshot(snapshot: CatalogSnapshot) -> str:
    """Compressed (about 30 times at 10k datasets): Dagster stores it with the execution plan of every run."""
    return base64.b64encode(zlib.compress(snapshot.to_json().encode())).decode()


def unpack_snapshot(packed: str) -> CatalogSnapshot:
    return CatalogSnapshot.from_json(zlib.decompress(base64.b64decode(packed)).decode())


@dataclass(frozen=True)
class _Settings:
    """Where a code location's definitions read and write, resolved from arguments and the environment."""

    catalog_url: str
    lake: Lake
    warehouse_url: str
    domain: str | None
    # The environment variables the catalog and warehouse URLs come from, when they do: Dagster keeps and
    # shows a resource setting given as an EnvVar by the variable's name, never its value (a URL may hold a
    # password).
    catalog_variable: EnvVar | None
    warehouse_variable: EnvVar | None
    executor: str
    sensor_interval_seconds: int
    translator: MedallionTranslator


def _from_environment(explicit: str | None, variable: str) -> EnvVar | None:
    return EnvVar(variable) if explicit is None and variable in os.environ else None


def build_definitions(
    catalog_url: str | None = None,
    lake_root: str | None = None,
    warehouse_url: str | None = None,
    domain: str | None = None,
    translator: MedallionTranslator | None = None,
) -> Definitions:
    """Every pipeline's assets, or with `domain` only that domain's (one code location per domain), named by
    `translator` (a subclass of `MedallionTranslator` changes keys, groups and the rest; the default's when
    None).

    Built from the catalog (or the domain's share of it) read now, whose snapshot is handed to Dagster to
    keep with the code location's load data; Dagster stores it with every run and gives it back to the run
    worker, which rebuilds from it (Dagster reconstructs) without reading the catalog's structure again.
    """
    settings = _Settings(
        catalog_url or config.catalog_url(),
        Lake.resolve(lake_root or config.lake_url()),
        warehouse_url or config.warehouse_url(),
        domain,
        _from_environment(catalog_url, config.CATALOG_ENV),
        _from_environment(warehouse_url, config.WAREHOUSE_ENV),
        config.executor(),
        config.sensor_interval_seconds(),
        translator or MedallionTranslator(),
    )
    context, key = DefinitionsLoadContext.get(), snapshot_key(settings.catalog_url, domain)
    if context.load_type == DefinitionsLoadType.RECONSTRUCTION and key in context.reconstruction_metadata:
        return _reconstructed(context.reconstruction_metadata[key], settings)
    store = CatalogStore(settings.catalog_url)
    store.migrate()
    snapshot = store.snapshot(domain)
    context.add_to_pending_reconstruction_metadata(key, pack_snapshot(snapshot))
    return _assemble(snapshot, store, settings)


# Dagster reconstructs a run's code location twice in the run worker (for the run, then again for its
# execution plan, each time with equal load data in a new object that its own caches do not recognise),
# and the code server once after loading it. Built once per process: the same snapshot and settings give
# the same definitions. A few entries: a process may reconstruct several locations (tests do).
@lru_cache(maxsize=8)
def _reconstructed(packed_snapshot: str, settings: _Settings) -> Definitions:
    return _assemble(unpack_snapshot(packed_snapshot), CatalogStore(settings.catalog_url), settings)


def _assemble(snapshot: CatalogSnapshot, store: CatalogStore, settings: _Settings) -> Definitions:
    translator, interval = settings.translator, settings.sensor_interval_seconds
    assets = build_assets(snapshot, settings.lake, translator)
    sensors = [build_control_sensor(snapshot, store, translator, interval)]
    if snapshot.stages():  # with no asset to run there is nothing to launch or heal, nor Dagster's asset job
        sensors += [
            build_launcher_sensor(snapshot, store, translator, interval),
            build_healing_sensor(
                snapshot, store, settings.lake, settings.warehouse_url, translator, interval
            ),
            build_notification_sensor(store, interval),
        ]
    return Definitions(
        assets=assets,
        sensors=sensors,
        schedules=build_maintenance_schedules(snapshot),
        resources={
            "spark": SparkResource(),
            "lake": LakeResource(root=settings.lake.root),
            "warehouse": WarehouseResource(url=settings.warehouse_variable or settings.warehouse_url),
            "catalog": CatalogResource(url=settings.catalog_variable or settings.catalog_url),
        },
        executor=multiprocess_executor if settings.executor == "multiprocess" else in_process_executor,
    )


@definitions
def defs() -> Definitions:
    """Loaded by Dagster when the code location loads, never at import time."""
    return build_definitions()
