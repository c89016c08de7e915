"""A class-data archive of the Spark driver (Java's application class-data sharing, JDK 13+).

A driver loads and verifies some twenty thousand classes before its first job: about a third of the CPU of a
short run. From an archive the JVM maps them, already parsed and verified. `make jars` records one from a
short session doing what a run does (JSON read through Python, an Iceberg table created, merged into and
aggregated); `engine.spark.session_conf` hands it to every driver Medallion starts. A JVM that cannot use
it (another JDK, another classpath) loads its classes as usual, silently: the archive only ever saves time.

    python -m medallion_assets.engine.class_archive
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from medallion_assets.engine.spark import ARCHIVE_QUIET, class_archive, spark_session

TRAINING = (
    "CREATE TABLE training.t.events (id BIGINT, day DATE, v DOUBLE) USING iceberg PARTITIONED BY (day)",
    "INSERT INTO training.t.events SELECT id, CAST(day AS DATE), v FROM events",
    "MERGE INTO training.t.events t USING (SELECT id, CAST(day AS DATE) AS day, v + 1 AS v FROM events "
    "WHERE id < 10) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *",
    "SELECT day, count(*), sum(v), row_number() OVER (ORDER BY day) FROM training.t.events GROUP BY day",
)


def record(path: Path) -> None:
    """Run a short representative session in a JVM that writes the classes it loaded to `path` at exit."""
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as work:
        conf = {
            "spark.master": "local[2]",
            "spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={partial} {ARCHIVE_QUIET}",
            "spark.sql.catalog.training": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.training.type": "hadoop",
            "spark.sql.catalog.training.warehouse": f"{work}/lake",
        }
        spark = spark_session(conf, app_name="medallion-class-archive")
        Path(work, "events.json").write_text(
            "\n".join(f'{{"id": {n}, "day": "2026-01-0{n % 9 + 1}", "v": {n / 3}}}' for n in range(100))
        )
        events = (
            spark.read.json(f"{work}/events.json")
            .select("id", "day", "v")
            .mapInArrow(lambda batches: batches, "id long, day string, v double")
        )
        events.createOrReplaceTempView("events")
        for statement in TRAINING:
            spark.sql(statement).collect()
        spark.table("training.t.events").write.mode("overwrite").parquet(f"{work}/out")
        spark.stop()
    _stop_gateway()
    if not partial.is_file():
        sys.exit(f"the JVM wrote no class-data archive to {partial}")
    os.replace(partial, path)


def _stop_gateway() -> None:
    """End the driver's JVM and wait for it: it writes the archive as it exits, when its stdin closes."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    process = gateway.proc
    gateway.shutdown()
    process.stdin.close()
    process.wait()


if __name__ == "__main__":
    record(class_archive())
