"""Settings from the environment, with embedded defaults so that a new user needs none."""

from __future__ import annotations

import os
from pathlib import Path


class SettingInvalid(ValueError):
    """An environment variable whose value Medallion cannot use; the message names it and says why, in one
    line."""


def environment() -> dict[str, str]:
    """A copy of the environment taken whole. Iterating `os.environ` while another thread sets or unsets a
    variable (Dagster's instances, this module's DAGSTER_HOME default) raises KeyError or "dictionary changed
    size during iteration"; a copy that met one is taken again."""
    while True:
        try:
            return dict(os.environ)
        except (KeyError, RuntimeError):
            continue


def home() -> Path:
    """Where the embedded defaults keep their files: MEDALLION_HOME, or .medallion in the working folder."""
    return Path(os.environ.get("MEDALLION_HOME", ".medallion")).resolve()


CATALOG_ENV, WAREHOUSE_ENV = "MEDALLION_CATALOG_URL", "MEDALLION_WAREHOUSE_URL"


def catalog_url() -> str:
    return os.environ.get(CATALOG_ENV, f"sqlite:///{home() / 'catalog.db'}")


def lake_url() -> str:
    return os.environ.get("MEDALLION_LAKE_URL", str(home() / "lake"))


def spark_jars_folder() -> Path:
    """The jars a Spark driver Medallion starts puts on its classpath (Iceberg's runtime, its AWS bundle, the
    JDBC catalog's drivers): MEDALLION_SPARK_JARS, else jars/lib of the repository, where `make jars` puts
    them."""
    configured = os.environ.get("MEDALLION_SPARK_JARS")
    return Path(configured) if configured else Path(__file__).resolve().parents[1] / "jars" / "lib"


def warehouse_url() -> str:
    return os.environ.get(WAREHOUSE_ENV, f"duckdb:///{home() / 'warehouse.duckdb'}")


def configured_warehouse_url() -> str | None:
    """MEDALLION_WAREHOUSE_URL when set: the warehouse `catalog validate` checks names against."""
    return os.environ.get(WAREHOUSE_ENV)


def spark_remote() -> str | None:
    """A Spark Connect URL (sc://host:port); when set, it wins over SPARK_MASTER."""
    return os.environ.get("SPARK_REMOTE") or None


def executor() -> str:
    """How a run executes its steps: in_process (one Spark session for all of them; the default) or
    multiprocess (a process per step; worth it only with SPARK_REMOTE, where a step's session costs no
    JVM)."""
    return os.environ.get("MEDALLION_EXECUTOR", "in_process")


def spark_master() -> str:
    return os.environ.get("SPARK_MASTER", "local[2]")


def raw_objects_folder() -> Path:
    """The embedded home's raw objects, one folder per bucket (`s3/<bucket>/<key>`), served on a loopback
    S3 API."""
    return home() / "s3"


def serves_embedded_s3() -> bool:
    """Whether raw objects come from the embedded home: it has some, and no S3 endpoint was chosen."""
    return "AWS_ENDPOINT_URL_S3" not in os.environ and raw_objects_folder().is_dir()


def embedded_dagster_home() -> Path:
    return home() / "dagster"


def use_embedded_dagster_home() -> None:
    """With DAGSTER_HOME unset, use the embedded home's instance once it exists, so the CLI's runs show in
    the UI."""
    if "DAGSTER_HOME" not in os.environ and (embedded_dagster_home() / "dagster.yaml").is_file():
        os.environ["DAGSTER_HOME"] = str(embedded_dagster_home())


def workspace_file() -> Path:
    """The Dagster workspace dagster-daemon loads: MEDALLION_WORKSPACE; else the one `medallion ui` wrote into
    DAGSTER_HOME; else the repository's workspace.yaml. `medallion run` submits a queued run to the code
    location in it that defines the pipeline."""
    if "MEDALLION_WORKSPACE" in os.environ:
        return Path(os.environ["MEDALLION_WORKSPACE"])
    written = Path(os.environ.get("DAGSTER_HOME", home() / "no-dagster-home")) / "workspace.yaml"
    return written if written.is_file() else Path(__file__).resolve().parents[1] / "workspace.yaml"


def dagster_home() -> Path | None:
    """The Dagster instance's folder, DAGSTER_HOME, when one is set."""
    folder = os.environ.get("DAGSTER_HOME")
    return Path(folder) if folder else None


def openlineage_namespace() -> str:
    """The OpenLineage job namespace: OPENLINEAGE_NAMESPACE, else "medallion"."""
    return os.environ.get("OPENLINEAGE_NAMESPACE", "medallion")


def openlineage_flush_sec() -> float:
    """How long closing the OpenLineage emitter waits for queued events: MEDALLION_OPENLINEAGE_FLUSH_SEC,
    else 2 s."""
    return float(os.environ.get("MEDALLION_OPENLINEAGE_FLUSH_SEC", 2.0))


OPENLINEAGE_SPEC_ENV = "MEDALLION_OPENLINEAGE_SPEC"


def openlineage_spec() -> str | None:
    """A folder of OpenLineage schemas to validate events against instead of the package's copy, if set."""
    return os.environ.get(OPENLINEAGE_SPEC_ENV) or None


def availability_ttl_sec() -> float:
    """How long a dataset's probed availability is trusted: MEDALLION_AVAILABILITY_TTL_SEC, 30 s."""
    return float(os.environ.get("MEDALLION_AVAILABILITY_TTL_SEC", 30.0))


def probe_timeout_sec() -> float:
    """How long one availability probe may take: MEDALLION_PROBE_TIMEOUT_SEC, 10 s."""
    return float(os.environ.get("MEDALLION_PROBE_TIMEOUT_SEC", 10.0))


# How often the sensors tick. A queued run waits at most this long to be cancelled by a kill switch; slower
# ticks would delay that, faster ones flood each sensor's tick history (at 5 s, 17k ticks a day) for nothing,
# since running runs check the switches themselves. Dagster's sensor daemon looks at its sensors every 5 s, so
# a shorter interval gains nothing.
SENSOR_INTERVAL_ENV = "MEDALLION_SENSOR_INTERVAL_SECONDS"
DEFAULT_SENSOR_INTERVAL_SECONDS = 30


def sensor_interval_seconds() -> int:
    """The sensors' minimum interval: MEDALLION_SENSOR_INTERVAL_SECONDS, else 30 s."""
    return _whole_number(SENSOR_INTERVAL_ENV, DEFAULT_SENSOR_INTERVAL_SECONDS, "seconds", at_least=1)


# Gold by groups costs a few seconds whatever its size (the changelog read and counted, a semi join, a
# delete and an append: 6-7 s a day on this project's 2-core machine), while a recompute of gold costs about
# 1.1 s and 0.5 s more a million silver rows (1.4, 1.7 and 1.9 s over 0.5, 1 and 1.5 million rows;
# bench/HISTORY.md, session 25): below about 10 million rows a recompute is cheaper however few groups a
# batch touches. The default keeps a margin of half.
GROUPS_FROM_ROWS_ENV = "MEDALLION_GOLD_GROUPS_FROM_ROWS"
DEFAULT_GROUPS_FROM_ROWS = 5_000_000


def gold_groups_from_rows() -> int:
    """The silver rows under which gold by groups recomputes whole instead: MEDALLION_GOLD_GROUPS_FROM_ROWS,
    else 5,000,000 (0: by groups at any size)."""
    return _whole_number(GROUPS_FROM_ROWS_ENV, DEFAULT_GROUPS_FROM_ROWS, "rows", at_least=0)


# A keyed silver merge costs a few seconds whatever its batch (the new rows computed and counted, their keys
# searched for in silver, a delete and an append, its quarantine, each a job): 5.9-8.2 s a day over 200,000
# to 400,000 bronze rows, where rebuilding silver took 2.8-3.4 s (bench/HISTORY.md, session 32). Where the
# two ways meet is not measured yet: the default floor is set above the sizes measured, not at the crossing.
SILVER_MERGE_FROM_ROWS_ENV = "MEDALLION_SILVER_MERGE_FROM_ROWS"
DEFAULT_SILVER_MERGE_FROM_ROWS = 1_000_000


def silver_merge_from_rows() -> int:
    """The bronze rows under which a keyed silver table is rebuilt whole instead of merged:
    MEDALLION_SILVER_MERGE_FROM_ROWS, else 1,000,000 (0: merged at any size)."""
    return _whole_number(SILVER_MERGE_FROM_ROWS_ENV, DEFAULT_SILVER_MERGE_FROM_ROWS, "rows", at_least=0)


def _whole_number(variable: str, default: int, unit: str, at_least: int) -> int:
    """The whole number `variable` sets (`default` when unset); SettingInvalid, naming it, when it is not
    one of at least `at_least`."""
    configured = os.environ.get(variable, str(default))
    if not configured.isdecimal() or int(configured) < at_least:
        raise SettingInvalid(
            f"{variable}={configured!r} is not a whole number of {unit} of at least {at_least}"
        )
    return int(configured)


# dagster-daemon writes a heartbeat every 30 s (Dagster's DEFAULT_HEARTBEAT_INTERVAL_SECONDS, which its status
# check adds by itself); a daemon silent for longer than this counts as stopped. Three intervals by default:
# on a busy machine one heartbeat comes late (a slow iteration of the queue loop delays it) without the daemon
# having stopped. Dagster's own tolerance, 30 minutes, would leave a run queued for half an hour before anyone
# said the daemon is gone.
DAEMON_HEARTBEAT_INTERVAL_SECONDS = 30
DAEMON_SILENCE_ENV = "MEDALLION_DAEMON_SILENCE_SECONDS"
DEFAULT_DAEMON_SILENCE_SECONDS = 3 * DAEMON_HEARTBEAT_INTERVAL_SECONDS


def daemon_silence_seconds() -> int:
    """How long a silent dagster-daemon counts as alive: MEDALLION_DAEMON_SILENCE_SECONDS, else 90 s."""
    configured = os.environ.get(DAEMON_SILENCE_ENV, str(DEFAULT_DAEMON_SILENCE_SECONDS))
    if not configured.isdecimal() or int(configured) <= DAEMON_HEARTBEAT_INTERVAL_SECONDS:
        raise SettingInvalid(
            f"{DAEMON_SILENCE_ENV}={configured!r} is not a whole number of seconds over "
            f"{DAEMON_HEARTBEAT_INTERVAL_SECONDS} (dagster-daemon's heartbeat interval)"
        )
    return int(configured)


def is_embedded_dagster_home() -> bool:
    """Whether the Dagster instance in use is the embedded home's, which no one chose explicitly."""
    return os.environ.get("DAGSTER_HOME") == str(embedded_dagster_home())
