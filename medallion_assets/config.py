"""Settings from the environment, with embedded defaults so that a new user needs none."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """Where the embedded defaults keep their files: MEDALLION_HOME, or .medallion in the working folder."""
    return Path(os.environ.get("MEDALLION_HOME", ".medallion")).resolve()


CATALOG_ENV, WAREHOUSE_ENV = "MEDALLION_CATALOG_URL", "MEDALLION_WAREHOUSE_URL"


def catalog_url() -> str:
    return os.environ.get(CATALOG_ENV, f"sqlite:///{home() / 'catalog.db'}")


def lake_url() -> str:
    return os.environ.get("MEDALLION_LAKE_URL", str(home() / "lake"))


def warehouse_url() -> str:
    return os.environ.get(WAREHOUSE_ENV, f"duckdb:///{home() / 'warehouse.duckdb'}")


def spark_master() -> str:
    return os.environ.get("SPARK_MASTER", "local[2]")


def workspace_file() -> Path:
    """The Dagster workspace dagster-daemon loads: MEDALLION_WORKSPACE, or the repository's workspace.yaml.
    `medallion run` submits a queued run to the code location in it that defines the pipeline."""
    return Path(os.environ.get("MEDALLION_WORKSPACE", Path(__file__).resolve().parents[1] / "workspace.yaml"))
