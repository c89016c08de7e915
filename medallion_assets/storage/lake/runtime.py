"""Whether a Spark engine Medallion did not start itself (a Connect server, a cluster) has the lake's runtime:
Iceberg's classes and its SQL extensions. Without them every stage would fail on its own with a Java class
name; checked once per engine when a run first gets its session, so the run fails at its start instead."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession

EXTENSIONS = "spark.sql.extensions"
CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"
# A catalog of Iceberg's class under a name of its own: loading it needs the class, and reads nothing else.
_PROBE = "medallion_runtime_probe"
# Spark's words when a catalog's plugin class is not on its classpath.
_NO_CLASS = "Cannot find catalog plugin class"
# How a Connect server gets the runtime; README.md's start command gives the same.
START_HINT = (
    'start it with --jars "$(ls jars/lib/*.jar | paste -sd,)" --conf {settings}, as README.md\'s '
    "start-connect-server.sh command does (a cluster: jars/lib on its classpath)"
)

_checked: set[str] = set()


class LakeRuntimeMissing(RuntimeError):
    """The Spark engine lacks Iceberg's classes or SQL extensions; the message says which, and how to start
    it."""


def missing_runtime(spark: SparkSession, lake_conf: Mapping[str, str]) -> list[str]:
    """What of the lake's runtime the session's engine lacks: the static settings `lake_conf` names (Iceberg's
    SQL extensions), Iceberg's classes; [] when nothing."""
    missing = [
        f"{key}={value}"
        for key, value in lake_conf.items()
        if value not in (spark.conf.get(key, None) or "").split(",")
    ]
    spark.conf.set(f"spark.sql.catalog.{_PROBE}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{_PROBE}.type", "hadoop")
    spark.conf.set(f"spark.sql.catalog.{_PROBE}.warehouse", "file:///nonexistent/medallion-runtime-probe")
    try:
        spark.sql(f"SHOW NAMESPACES IN {_PROBE}").collect()
    except Exception as error:  # noqa: BLE001 (only a missing class tells; the empty warehouse may fail else)
        if _NO_CLASS in str(error):
            missing.insert(0, f"Iceberg's classes ({CATALOG_CLASS})")
    finally:
        for key in (".type", ".warehouse", ""):
            spark.conf.unset(f"spark.sql.catalog.{_PROBE}{key}")
    return missing


def check_lake_runtime(spark: SparkSession, engine: str, lake_conf: Mapping[str, str]) -> None:
    """Refuse, before any stage, an engine (`SPARK_REMOTE=sc://…`, `SPARK_MASTER=…`) without the lake's
    runtime, in one line naming it, what it lacks and how to start it right. Once per engine per process."""
    if engine in _checked:
        return
    if missing := missing_runtime(spark, lake_conf):
        settings = " --conf ".join(f"{key}={value}" for key, value in lake_conf.items())
        raise LakeRuntimeMissing(
            f"{engine} lacks the lake's runtime ({', '.join(missing)}): "
            + START_HINT.format(settings=settings)
        )
    _checked.add(engine)
