"""Which Spark a run uses, chosen by configuration alone: `SPARK_REMOTE` (Spark Connect) or `SPARK_MASTER`.

`SPARK_REMOTE=sc://host:port` runs every DataFrame on a Spark Connect server (EMR, Databricks, a server of
your own) and the run process holds no JVM; otherwise `SPARK_MASTER` (`local[2]` by default, `spark://…`,
`yarn`, `k8s://…`) starts a driver in the run process. The engine uses only the DataFrame API that both
support (no SparkContext, no RDDs). One session per process, created on first use, serves every step.
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from medallion_assets import config
from medallion_assets.engine import raw_reader
from medallion_assets.storage.lake.catalogs import LAKE_SPARK_CONF
from medallion_assets.storage.lake.root import Lake

# Settings of the driver Medallion starts itself; a Connect server keeps the ones it was started with (the
# start command of docs/spark.md sets PYTHON_WORKER_CONF too).
PYTHON_WORKER_CONF = {
    # Executors talk to their Python workers through Unix domain sockets, not TCP on loopback, where every
    # task waited 25-45 ms for its first batch (measured with Spark's task list: 65-100 ms a task over TCP,
    # 15-50 ms over a Unix socket); every bronze read runs Python tasks, two reads when there are rejects.
    "spark.python.unix.domain.socket.enabled": "true",
}
DRIVER_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.log.level": "ERROR",
    **PYTHON_WORKER_CONF,
    **LAKE_SPARK_CONF,
}
SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    # Silver keeps the first row per key (row_number() = 1 over the keys). Spark's group limit before the
    # shuffle sorts every row to drop duplicates that are a few percent of them: without it, deduplicating 2M
    # rows cost 0.8x the CPU. A transformation's own top-N per group over large groups may want it back
    # (the resource's conf sets any key).
    "spark.sql.optimizer.windowGroupLimitThreshold": "-1",
}
# The driver's classes, recorded by `make jars` (engine/class_archive.py) for its JVM to map at start. Without
# the quiet option, a JVM that cannot map it (another JDK, another classpath) would say so on stderr.
CLASS_ARCHIVE = "spark-driver.jsa"
ARCHIVE_QUIET = "-Xlog:cds*=off"
CONNECT_TIMEOUT_SEC = 5
CONNECT_PORT = 15002  # Spark Connect's default
# The lakes executors were seen to reach, per engine: probed once per process, not before every step.
_visible_lakes: set[tuple[str, str]] = set()


class SparkUnreachable(RuntimeError):
    """The configured Spark cannot be used: a Connect server that does not answer, or a cluster that cannot
    see the lake."""


def session_conf(conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every setting of a new session: the master when there is no Connect server, Medallion's defaults, and
    `conf` on top. The Connect URL itself is never a setting: PySpark reads SPARK_REMOTE, so a token in it
    does not reach resource configuration shown by Dagster."""
    if config.spark_remote():
        return {**SESSION_CONF, **(conf or {})}
    driver = {"spark.master": config.spark_master(), "spark.jars": lake_jars(), **DRIVER_CONF}
    if options := class_archive_options():
        driver["spark.driver.extraJavaOptions"] = options
    if is_single_machine():  # its Python workers are this interpreter's, which has Medallion
        driver["spark.python.daemon.module"] = "medallion_assets.python_daemon"
    return {**driver, **SESSION_CONF, **(conf or {})}


def lake_jars() -> str:
    """The jars of the lake's table format, comma-separated as `spark.jars` takes them (Spark ships them to a
    cluster's executors itself); empty when there are none. Nothing is downloaded at run time: `make jars`
    resolved them."""
    folder = config.spark_jars_folder()
    return ",".join(sorted(str(jar) for jar in folder.glob("*.jar"))) if folder.is_dir() else ""


def class_archive() -> Path:
    return config.spark_jars_folder() / CLASS_ARCHIVE


def class_archive_options() -> str:
    """The driver's JVM options that map the class archive; none before `make jars` has recorded it."""
    path = class_archive()
    return f"-XX:SharedArchiveFile={path} {ARCHIVE_QUIET}" if path.is_file() else ""


def spark_session(conf: Mapping[str, str] | None = None, app_name: str = "medallion") -> SparkSession:
    """The process's session, for callers outside Dagster (tests, benchmarks); assets use the resource."""
    prepare_session()
    builder = SparkSession.builder.appName(app_name)
    for key, value in session_conf(conf).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def prepare_session() -> None:
    """What must hold before a session is created.

    With Spark Connect: fail at once, naming SPARK_REMOTE, when no server answers (the client would retry for
    minutes before saying anything). With a local master: Python tasks run in this interpreter, which has the
    packages they need, unless PYSPARK_PYTHON says otherwise (on a cluster, the cluster's setting rules).
    """
    remote = config.spark_remote()
    if not remote:
        if not lake_jars():
            raise SparkUnreachable(
                f"no Spark jars in {config.spark_jars_folder()}: run `make jars` (Maven resolves them from "
                "jars/pom.xml), or point MEDALLION_SPARK_JARS at a folder holding them"
            )
        if is_single_machine():
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        return
    parsed = urlparse(remote)
    try:
        socket.create_connection(
            (parsed.hostname or "localhost", parsed.port or CONNECT_PORT), timeout=CONNECT_TIMEOUT_SEC
        ).close()
    except OSError as error:
        raise SparkUnreachable(
            f"SPARK_REMOTE={_shown(remote)}: no Spark Connect server answers "
            f"({error.strerror or error}); start one or unset SPARK_REMOTE"
        ) from None


def is_single_machine() -> bool:
    """True when Spark runs inside this process (`local[...]`): then it sees every local folder we see."""
    return not config.spark_remote() and config.spark_master().startswith("local")


def check_lake_visible(spark: SparkSession, lake: Lake) -> None:
    """Refuse, before anything is written, a lake in a local folder that the Spark executors cannot see.

    A marker written here must be readable by a task: true of a folder shared by every node (a mount), false
    of a folder on this machine only, which a remote cluster would write into its own disks instead.
    """
    engine = config.spark_remote() or config.spark_master()
    if not lake.is_local or is_single_machine() or (lake.root, engine) in _visible_lakes:
        return
    marker = Path(lake.root) / "_medallion" / f"visible-{uuid.uuid4().hex}"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("medallion")
    try:
        probe = spark.range(1).select(F.lit(str(marker)).alias("path"))
        seen = probe.mapInArrow(raw_reader.paths_seen, "seen boolean").collect()[0].seen
    finally:
        marker.unlink(missing_ok=True)
    if not seen:
        raise SparkUnreachable(
            f"MEDALLION_LAKE_URL={lake.root} is a folder on this machine that the Spark "
            f"executors ({engine_setting()}) cannot see; use storage every node shares "
            "(s3a://…, hdfs://…, or a shared mount)"
        )
    _visible_lakes.add((lake.root, engine))


def engine_setting() -> str:
    """The setting that picks the Spark engine, as messages name it (a Connect URL without its token)."""
    remote = config.spark_remote()
    return f"SPARK_REMOTE={_shown(remote)}" if remote else f"SPARK_MASTER={config.spark_master()}"


def _shown(remote: str) -> str:
    """The Connect URL without its parameters, which may carry a token."""
    parsed = urlparse(remote)
    return f"sc://{parsed.hostname or 'localhost'}:{parsed.port or CONNECT_PORT}"
