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


def spark_remote() -> str | None:
    """A Spark Connect URL (sc://host:port); when set, it wins over SPARK_MASTER."""
    return os.environ.get("SPARK_REMOTE") or None


def executor() -> str:
    """How a run executes its steps: in_process (one Spark session for all of them; the default) or
    multiprocess (a process per step; worth it only with SPARK_REMOTE, where a step's session costs no JVM)."""
    return os.environ.get("MEDALLION_EXECUTOR", "in_process")


def spark_master() -> str:
    return os.environ.get("SPARK_MASTER", "local[2]")
