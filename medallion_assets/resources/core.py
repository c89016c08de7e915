"""The resources every generated asset uses. Fields default to the environment's settings (config.py)."""

from __future__ import annotations

from functools import cache
from typing import Any

from dagster import ConfigurableResource
from dagster_pyspark import LazyPySparkResource
from pydantic import Field
from pyspark.sql import SparkSession

from medallion_assets import config
from medallion_assets.catalog.store import CatalogStore, open_catalog
from medallion_assets.engine.spark import (
    SparkUnreachable,
    check_lake_visible,
    engine_setting,
    is_single_machine,
    prepare_session,
    session_conf,
)
from medallion_assets.storage.lake.catalogs import LAKE_SPARK_CONF
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.lake.runtime import LakeRuntimeMissing, check_lake_runtime
from medallion_assets.storage.warehouse import Warehouse, warehouse_from_url


class SparkResource(LazyPySparkResource):
    """dagster-pyspark's lazy session: created on first use and shared by every step of an in-process run.

    SPARK_REMOTE (Spark Connect) or SPARK_MASTER picks the engine; see engine/spark.py.
    """

    spark_config: dict[str, Any] = Field(
        default_factory=session_conf,
        description="Spark settings: the master (SPARK_MASTER, unless SPARK_REMOTE names a Connect server), "
        "Medallion's defaults, and any of your own, e.g. spark.executor.memory",
    )

    def get_session(self, lake: Lake) -> SparkSession:
        """The session, once the Connect server answers, has the lake's runtime, and its executors can see the
        lake."""
        prepare_session()
        session: SparkSession = self.spark_session
        if not is_single_machine():  # a driver Medallion starts itself is given the runtime (session_conf)
            try:
                check_lake_runtime(session, engine_setting(), LAKE_SPARK_CONF)
            except LakeRuntimeMissing as missing:
                raise SparkUnreachable(str(missing)) from None
        check_lake_visible(session, lake)
        return session


class LakeResource(ConfigurableResource["LakeResource"]):
    """Root of the lake where bronze, silver, gold and quarantine parquet live (MEDALLION_LAKE_URL)."""

    root: str = Field(
        default_factory=config.lake_url, description="local folder, or s3:// on a cluster with s3a"
    )

    def get_lake(self) -> Lake:
        """The lake at `root`, resolved in the process that uses it (its catalogs are that environment's)."""
        return Lake.resolve(self.root)


class WarehouseResource(ConfigurableResource["WarehouseResource"]):
    """The warehouse gold is loaded into: DuckDB file, PostgreSQL or Redshift (MEDALLION_WAREHOUSE_URL)."""

    url: str = Field(
        default_factory=config.warehouse_url,
        description="duckdb:///file, postgresql://…, or redshift://…?s3_staging=…; secrets via env",
    )

    def get_warehouse(self) -> Warehouse:
        return warehouse_from_url(self.url)


class CatalogResource(ConfigurableResource["CatalogResource"]):
    """The metadata catalog (MEDALLION_CATALOG_URL): runtime controls, bookmarks and the audit log."""

    url: str = Field(default_factory=config.catalog_url, description="SQLAlchemy URL of the catalog")

    def get_store(self) -> CatalogStore:
        return _store_for(self.url)


@cache
def _store_for(url: str) -> CatalogStore:
    """One store (one connection pool) per catalog per process, shared by every step of a run."""
    return open_catalog(url)
