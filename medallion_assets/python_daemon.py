"""PySpark's Python worker daemon (`spark.python.daemon.module`), without one false alarm.

When Spark has what it needs from a task before the task's Python worker has sent everything (a `limit`, an
`isEmpty`), it closes the worker's socket. The worker's last flush then fails with BrokenPipeError, and
PySpark's daemon prints it as a traceback on the driver's stderr, although nothing failed: the task has
finished. This daemon ends such a worker exactly as PySpark's does (exit status 1, Spark forks another), minus
the traceback; any other error is PySpark's to report, as before. PySpark has no setting for it: with
`spark.python.daemon.killWorkerOnFlushFailure` off, the daemon still prints the error, and the worker may
hang on a half-written stream.

Used where Spark runs in this process (`local[...]`, engine/spark.py): a cluster's executors run PySpark's own
daemon, and need no Medallion installed.

It also imports the installed PySpark, whose modules are compiled, rather than Spark's copy of it: Spark puts
`pyspark.zip` and py4j's zip first on its workers' path, and Python compiles a zip's modules afresh in every
process, 0.85 s of CPU for the daemon alone and more in each worker it forks. Nor do Spark's archives stay on
the path: a worker invalidates the import caches before each task, which reads every archive's directory
again. The zips cost 13 ms a task; the jar of Spark's core classes, which Spark puts on the path too (for
distributions that packed PySpark into it) and which holds no Python, 5,358 entries and 80 ms a task. In
local mode the zips are the driver's own PySpark, of one version; they are dropped unless they are the only
copy. Outside `engine/`, whose package imports PySpark before any module of it would run.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys


def _is_spark_zip(entry: str) -> bool:
    """Whether a path entry is Spark's zip of PySpark or of py4j (`pyspark.zip`, `py4j-*-src.zip`)."""
    name = os.path.basename(entry)
    return name == "pyspark.zip" or (name.startswith("py4j-") and name.endswith("-src.zip"))


def _is_spark_core_jar(entry: str) -> bool:
    name = os.path.basename(entry)
    return name.startswith("spark-core_") and name.endswith(".jar")


_spark_zips = [entry for entry in sys.path if _is_spark_zip(entry)]
_dropped = _spark_zips + [entry for entry in sys.path if _is_spark_core_jar(entry)]
sys.path[:] = [entry for entry in sys.path if entry not in _dropped]
# Their importers, made when this module's package was looked up, would stay too, with those of the
# packages looked up inside them (`…/spark-core_2.13-4.1.1.jar/org`).
for _key in [key for key in sys.path_importer_cache if key.startswith(tuple(_dropped))]:
    del sys.path_importer_cache[_key]
if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("py4j") is None:
    sys.path.extend(_spark_zips)  # installed nowhere else

from pyspark import daemon  # noqa: E402  (after the path is set)

_pyspark_worker = daemon.worker


def _worker(sock: socket.socket, authenticated: bool) -> int:
    try:
        result: int = _pyspark_worker(sock, authenticated)  # type: ignore[no-untyped-call]
        return result
    except BrokenPipeError:
        os._exit(1)  # what PySpark's daemon does with a worker's error, after printing it


daemon.worker = _worker

if __name__ == "__main__":
    daemon.manager()  # type: ignore[no-untyped-call]
