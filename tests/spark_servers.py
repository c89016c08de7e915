"""Real Spark servers on loopback, started from the pyspark wheel: a standalone master with one worker, and a
Spark Connect server. Each is stopped by the fixture that started it, and only that one."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pyspark.find_spark_home import _find_spark_home

from medallion_assets.engine.spark import PYTHON_WORKER_CONF, lake_jars
from medallion_assets.storage.lake.catalogs import LAKE_SPARK_CONF

SPARK_HOME = Path(_find_spark_home())
STARTUP_TIMEOUT_SEC = 180


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _environment(logs: Path, extra: Mapping[str, str]) -> dict[str, str]:
    # Executors and Python workers run this interpreter (it has pyarrow and boto3) and see the same S3
    # endpoint and credentials as the tests, as a cluster's nodes would through their own configuration.
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(logs),
        **extra,
    }
    env.pop("SPARK_REMOTE", None)
    return env


@contextmanager
def _process(command: list[str], log: Path, env: Mapping[str, str]) -> Iterator[subprocess.Popen]:
    with log.open("wb") as out:
        # A session of its own, so that stopping it stops its children (executors, Python workers) too.
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=dict(env), start_new_session=True
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _wait_until(ready, what: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_SEC
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{log.read_text()[-4000:]}")
        if ready():
            return
        time.sleep(0.5)
    raise RuntimeError(f"{what} not ready after {STARTUP_TIMEOUT_SEC} s:\n{log.read_text()[-4000:]}")


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as answer:
            return int(json.load(answer).get("aliveworkers", 0))
    except OSError:
        return 0


@contextmanager
def standalone_cluster(
    folder: Path, env: Mapping[str, str], cores: int = 2, memory: str = "2g"
) -> Iterator[tuple[str, subprocess.Popen]]:
    """A master and one worker (`cores` cores, `memory`); yields the master URL and the worker's process."""
    port, ui_port = free_port(), free_port()
    environment = _environment(folder, env)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    master_log, worker_log = folder / "master.log", folder / "worker.log"
    with _process(
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui_port),
        ],
        master_log,
        environment,
    ) as master:
        _wait_until(lambda: _answers(port), "the Spark master", master, master_log)
        url = f"spark://127.0.0.1:{port}"
        with _process(
            [
                spark_class,
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(folder / "work"),
            ],
            worker_log,
            environment,
        ) as worker:
            _wait_until(lambda: _alive_workers(ui_port) >= 1, "the Spark worker", worker, worker_log)
            yield url, worker


@contextmanager
def connect_server(
    folder: Path,
    env: Mapping[str, str],
    master: str = "local[2]",
    hidden: Path | None = None,
    lake_runtime: bool = True,
) -> Iterator[str]:
    """A Spark Connect server in the foreground of its own process; yields its sc:// URL.

    With `hidden`, the server runs in a mount namespace of its own where that folder is an empty tmpfs: a
    server on another machine, which cannot see what this one writes there. Without `lake_runtime`, it is
    started as a user who forgot the README's `--jars` and `--conf spark.sql.extensions=…` would start it.
    """
    port = free_port()
    log = folder / "connect.log"
    command = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--name",
        "medallion-tests-connect",
        "--master",
        master,
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.session.timeZone=UTC",
        "--conf",
        "spark.driver.memory=2g",
        # The lake's jars and Iceberg's SQL extensions, as the start command of docs/spark.md gives them.
        *(["--jars", lake_jars()] if lake_runtime else []),
        *[
            part
            for key, value in {**PYTHON_WORKER_CONF, **(LAKE_SPARK_CONF if lake_runtime else {})}.items()
            for part in ("--conf", f"{key}={value}")
        ],
    ]
    if hidden is not None:
        command = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount -t tmpfs medallion-hidden "$0" && exec "$@"',
            str(hidden),
            *command,
        ]
    with _process(command, log, {**_environment(folder, env), "SPARK_CONNECT_MODE": "0"}) as server:
        _wait_until(lambda: _answers(port), "the Spark Connect server", server, log)
        yield f"sc://127.0.0.1:{port}"
