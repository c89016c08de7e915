"""The Spark session: one per process, created on first use, shared by every stage a run executes.

A session costs seconds to start, so runs execute their steps in one process (Dagster's in-process
executor) and every step reuses this session instead of paying for its own.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
}


def spark_session(master: str, app_name: str = "medallion", conf: Mapping[str, str] | None = None) -> SparkSession:
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
