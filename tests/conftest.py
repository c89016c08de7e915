"""Real parts for every test: an S3 API server on loopback, the PostgreSQL server, one local Spark session.

A part that cannot be started fails the test run loudly; nothing is skipped.

Two tiers. A test is `integration` when it uses a fixture of a real part (REAL_PARTS) or is marked so, itself
or by its module (`pytestmark = pytest.mark.integration`: tests that start processes, a daemon, a browser or
the CLI as a user would); every other test is `unit`, and `make test-unit` (`pytest -m unit`) runs those
alone. A unit test is held to it: while it runs, starting a process (Spark's JVM, a daemon, a server) or
connecting off this machine raises, naming the test, so a test that needs real parts cannot pass as a unit
test.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import psycopg2
import pytest
from dagster import DagsterInstance
from moto.server import ThreadedMotoServer

from medallion_assets.catalog.models import RetryPolicy
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.definitions import build_definitions
from medallion_assets.engine.spark import spark_session
from medallion_assets.loading import validate_files
from medallion_assets.runner import PipelineReport, run_pipeline
from medallion_assets.sample_data import SampleSummary, write_sample_data
from medallion_assets.storage.warehouse import warehouse_from_url
from tests.lake import lake_rows
from tests.tiers import UNIT_TEST_GUARD, refuse_in_unit_test

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "metadata_seed"
RAW = "s3://medallion-raw"  # where the seed catalog's sources live

# Every Spark driver the tests start, in this process or a command's (spark-submit reads SPARK_SUBMIT_OPTS),
# runs on a test's few thousand rows: the JIT's first tier alone and one GC thread halve its CPU (34 s to 18 s
# for a session writing, merging and reading an Iceberg table), and on 2 cores CPU is what the suite waits on.
# On so few rows, compiling each query's generated Java costs more than it saves: Spark's interpreted
# operators and expressions (a driver reads `-Dspark.*` as its settings) cut a module's JVM CPU by about a
# sixth (tests/test_merge_windows.py, 130-155 s to 98-116 s). The first tier alone has the JIT's smaller
# code cache (48 MB), which Spark and Iceberg fill: the sweeper then flushes compiled methods and the JIT
# compiles them again. At 256 MB they stay (55 MB used) and the sweeper does no work
# (tests/test_merge_windows.py: 4-5 of its driver's 76-90 CPU-s before; 64-85 CPU-s in four runs after).
# A standalone cluster's executors are started with the JVM options their driver's settings give them.
# Production keeps the JVM's and Spark's defaults, made for long runs on many rows.
SHORT_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m -XX:+UseSerialGC"
os.environ.setdefault(
    "SPARK_SUBMIT_OPTS",
    f"{SHORT_JVM_OPTIONS} -Dspark.executor.extraJavaOptions='{SHORT_JVM_OPTIONS}'"
    " -Dspark.sql.codegen.wholeStage=false -Dspark.sql.codegen.factoryMode=NO_CODEGEN",
)

# The tests' tables hold a few rows, under the bronze size from which a keyed silver merges rather than
# rebuilds (config.silver_merge_from_rows): at 0 they merge at any size, so that the incremental paths are
# what they test; tests/test_incremental.py checks the floor itself.
os.environ.setdefault("MEDALLION_SILVER_MERGE_FROM_ROWS", "0")

# The fixtures that start or reach a real server; a test using any of them, directly or through another
# fixture, is an integration test.
REAL_PARTS = frozenset({"spark", "s3_endpoint", "pg_url", "rest_catalog"})

# Fixtures that several test modules use, shared from here rather than imported from one test module into
# another.
pytest_plugins = [
    "tests.fixtures.lineage",
    "tests.fixtures.rest_catalog",
    "tests.fixtures.seed",
    "tests.fixtures.warehouse",
    "tests.fixtures.webhook",
]


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = sorted(REAL_PARTS.intersection(item.fixturenames))
        if item.get_closest_marker("unit") and parts:
            raise pytest.UsageError(f"{item.nodeid} is marked unit but uses {', '.join(parts)}")
        if not parts and item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.unit)
        else:
            item.add_marker(pytest.mark.integration)


def pytest_configure(config: pytest.Config) -> None:
    sys.addaudithook(UNIT_TEST_GUARD)  # audit hooks cannot be removed: it is idle outside unit tests


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    _refuse_a_scattered_group(item)
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    with _guarded(item):
        return (yield)


def _refuse_a_scattered_group(item: pytest.Item) -> None:
    """Under `--dist loadgroup`, a test of an xdist_group carries the group in its id, by which pytest-xdist
    sends tests to workers. Where pytest and pytest-xdist disagree on how to rename a test, groups scatter
    silently, and each worker starts its own costly server: fail the test instead."""
    if (
        item.config.getoption("loadgroup", default=False)
        and item.get_closest_marker("xdist_group")
        and "@" not in item.nodeid.rpartition("]")[2]
    ):
        pytest.fail(
            f"pytest-xdist did not put {item.nodeid} in its xdist_group: this pytest-xdist does not work "
            "with this pytest; install both from constraints.txt"
        )


@contextlib.contextmanager
def _guarded(item: pytest.Item) -> Iterator[None]:
    UNIT_TEST_GUARD.running = item.nodeid if item.get_closest_marker("unit") else None
    try:
        yield
    finally:
        UNIT_TEST_GUARD.running = None


@pytest.fixture(scope="session", autouse=True)
def medallion_home(tmp_path_factory):
    """Everything the framework writes by default (OpenLineage event files included) goes to one folder; at
    the end every event the suite emitted there must validate against the OpenLineage JSON schemas."""
    from medallion_assets.openlineage.emitter import emitter
    from tests.openlineage_schema import validate

    home = tmp_path_factory.mktemp("medallion-home")
    previous = dict(os.environ)
    # The client's own variables; without them events would follow DAGSTER_HOME, which each
    # instance_for_test points at a folder deleted with the instance.
    os.environ.update(
        MEDALLION_HOME=str(home),
        OPENLINEAGE__TRANSPORT__TYPE="file",
        OPENLINEAGE__TRANSPORT__LOG_FILE_PATH=str(home / "openlineage" / "event"),
    )
    (home / "openlineage").mkdir()
    yield home
    emitter().close(timeout=10)
    events = [
        json.loads(line)
        for path in sorted((home / "openlineage").rglob("*"))
        if path.is_file()
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    for event in events:
        validate(event)
    os.environ.clear()
    os.environ.update(previous)


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto in server mode on 127.0.0.1, reached through plain boto3 with an endpoint URL, as AWS would be."""
    refuse_in_unit_test("s3_endpoint")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = dict(os.environ)
    os.environ.update(
        AWS_ENDPOINT_URL_S3=endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
    )
    yield endpoint
    server.stop()
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def bucket(s3_endpoint) -> str:
    """A fresh, empty bucket for one test."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


def _start_throwaway_postgres(tmp_root: Path) -> str:
    """No server answered: start one from the local PostgreSQL binaries, as pytest-postgresql does."""
    from pytest_postgresql.executors.proc import PostgreSQLExecutor

    pg_ctl = shutil.which("pg_ctl") or next(
        iter(sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))), None
    )
    if pg_ctl is None:
        pytest.fail(
            "no PostgreSQL server at 127.0.0.1:5432 and no pg_ctl to start one: "
            "install PostgreSQL or set MEDALLION_TEST_PG_URL"
        )
    executor = PostgreSQLExecutor(
        executable=str(pg_ctl),
        host="127.0.0.1",
        port=55432,
        user="postgres",
        dbname="postgres",
        options="",
        startparams="",
        unixsocketdir=str(tmp_root),
        datadir=str(tmp_root / "data"),
        logfile=str(tmp_root / "postgresql.log"),
        password="",
        postgres_options="",
    )
    executor.start()
    return "postgresql://postgres@127.0.0.1:55432/postgres"


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory) -> str:
    refuse_in_unit_test("pg_url")
    url = os.environ.get("MEDALLION_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    try:
        psycopg2.connect(url, connect_timeout=3).close()
        return url
    except psycopg2.OperationalError:
        if "MEDALLION_TEST_PG_URL" in os.environ:
            pytest.fail(f"MEDALLION_TEST_PG_URL={url} does not answer")
        return _start_throwaway_postgres(tmp_path_factory.mktemp("pg"))


@contextlib.contextmanager
def fresh_database(pg_url: str) -> Iterator[str]:
    """A new database on the PostgreSQL server, dropped on exit."""
    name = f"medallion_test_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(pg_url)
    admin.autocommit = True
    admin.cursor().execute(f'CREATE DATABASE "{name}"')
    yield pg_url.rsplit("/", 1)[0] + f"/{name}"
    admin.cursor().execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    admin.close()


@pytest.fixture
def pg_database(pg_url) -> str:
    """A fresh database on the PostgreSQL server for one test, dropped afterwards."""
    with fresh_database(pg_url) as url:
        yield url


@pytest.fixture(scope="session")
def spark(s3_endpoint):
    """One local Spark session for the whole test run (a session costs seconds to start).

    Started after the S3 API server, so that its executors' Python workers, which read raw objects through
    boto3, inherit the endpoint and credentials from the environment, as on a cluster's nodes."""
    # The driver's result-size limit is a real Spark limit, set low so a healing test can run into it with
    # a gold table of a few MB; every other result in the suite is far below it. The tests' tables hold a few
    # thousand rows: one task slot, one shuffle partition and no adaptive re-planning of each query's stages
    # run them in less CPU (tests/test_merge_windows.py: 220 CPU-s with two slots, four partitions and
    # adaptive execution; 167 this way), and four workers share two cores.
    session = spark_session(
        {
            "spark.master": "local[1]",
            "spark.sql.shuffle.partitions": "1",
            "spark.sql.adaptive.enabled": "false",
            "spark.driver.maxResultSize": "8m",
        },
        "medallion-tests",
    )
    yield session
    session.stop()


@dataclass
class Medallion:
    """One isolated Medallion installation: its own catalog, lake and warehouse."""

    store: CatalogStore
    lake: Path
    warehouse_url: str

    @classmethod
    def seeded(cls, folder: Path) -> Medallion:
        """The seed installation in `folder`."""
        store = CatalogStore(f"sqlite:///{folder}/catalog.db")
        store.migrate()
        installation = cls(store, folder / "lake", f"duckdb:///{folder}/warehouse.duckdb")
        installation.load(SEED)
        return installation

    def run(self, pipeline_id: str, tags: dict[str, str] | None = None) -> PipelineReport:
        """A run of the pipeline on a throwaway Dagster instance, the one `medallion run` opens without
        DAGSTER_HOME (instance.py): in memory, a quarter of the CPU of a test instance's SQLite files.
        `tags` as a user adds them in the launchpad."""
        defs = build_definitions(self.store.url, str(self.lake), self.warehouse_url)
        with DagsterInstance.ephemeral() as instance:
            return run_pipeline(defs, self.store.snapshot(), self.store, pipeline_id, instance, tags=tags)

    def load(self, *paths) -> None:
        self.store.upsert(validate_files(self.store.snapshot(), list(paths)).rows)

    def move_source(self, source_id: str, s3_path: str) -> None:
        """Point a source somewhere else, as an operator's catalog update would."""
        source = self.store.snapshot().sources[source_id]
        self.store.upsert({"sources": [source.model_copy(update={"s3_path": s3_path})]})

    def set_retries(self, max_retries: int, backoff_sec: float = 1) -> None:
        """Replace the seed's std_retry policy."""
        self.store.upsert(
            {
                "retry_policies": [
                    RetryPolicy(retry_id="std_retry", max_retries=max_retries, backoff_sec=backoff_sec)
                ]
            }
        )

    def gold(self, table: str) -> list[dict]:
        warehouse = warehouse_from_url(self.warehouse_url)
        try:
            return warehouse.query(f"SELECT * FROM {table} ORDER BY 1, 2")
        finally:
            warehouse.close()

    def stage_audit(self, stage_name: str) -> list[dict]:
        return self.store.audit_entries(stage_name=stage_name, event="stage")

    def rows(self, table: str) -> list[dict]:
        """A lake table's rows (`silver.user_events`), read through its catalog with pyiceberg."""
        return lake_rows(self.lake, table)


def fill_raw_bucket() -> SampleSummary:
    """The seed's bucket, emptied and filled with 3,000 events (and their orders and customers)."""
    s3 = boto3.resource("s3")
    bucket = s3.Bucket("medallion-raw")
    if bucket.creation_date is None:
        bucket.create()
    bucket.objects.all().delete()
    return write_sample_data(RAW, rows=3000, lines_per_file=1000)


@pytest.fixture
def raw_data(s3_endpoint) -> SampleSummary:
    """The seed's bucket, filled for one test (`fill_raw_bucket`)."""
    return fill_raw_bucket()


@pytest.fixture
def medallion(tmp_path, raw_data, spark) -> Medallion:
    """The seed installation. Its runs use the suite's Spark session (`spark`), created first with its
    settings."""
    return Medallion.seeded(tmp_path)
