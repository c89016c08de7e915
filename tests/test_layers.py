"""The layers hold at run time too: a command of a low layer loads nothing of the layers above it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import SEED

pytestmark = pytest.mark.integration  # it starts a Python process

# Runs a `medallion` command (its words, then the seed's folder) in this process, then reports which heavy
# packages it loaded (the arguments after "--").
RUN_THEN_REPORT = """
import json, sys
from medallion_assets.cli import main
split = sys.argv.index("--")
try:
    main(sys.argv[1:split])
except SystemExit as exit:
    print(json.dumps({"exit": exit.code, "loaded": sorted(set(sys.argv[split + 1:]) & set(sys.modules))}))
"""


def loaded_by(words: list[str], heavy: list[str], tmp_path) -> tuple[list[str], dict]:
    """What `medallion WORDS` printed, its exit code and which of `heavy` it imported, on an empty home."""
    env = {**os.environ, "MEDALLION_HOME": str(tmp_path / "home")}
    env.pop("DAGSTER_HOME", None)
    env.pop("MEDALLION_CATALOG_URL", None)
    ran = subprocess.run(
        [sys.executable, "-c", RUN_THEN_REPORT, *words, "--", *heavy],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    *said, report = ran.stdout.splitlines()
    return said, json.loads(report)


def test_catalog_validate_loads_no_spark_and_no_warehouse_driver(tmp_path):
    said, report = loaded_by(["catalog", "validate", str(SEED)], ["pyspark", "duckdb", "psycopg2"], tmp_path)
    assert said[0].startswith("valid: ") and said[0].endswith(" rows")
    assert report == {"exit": 0, "loaded": []}


def test_plan_loads_neither_spark_nor_dagster_nor_another_command(tmp_path):
    """`medallion plan` imports only its own sub-command (the CLI's lazy group): no JVM can start, and
    neither Dagster, the onboarding tool's imports, nor Arrow and boto3 (which only the row checks' modules
    use when a rollback, healing action or notification runs) are paid for."""
    heavy = ["pyspark", "dagster", "medallion_assets.onboarding", "medallion_assets.cli.lineage"]
    heavy += ["pyarrow", "boto3"]
    said, report = loaded_by(["plan", str(SEED)], heavy, tmp_path)
    assert said[0].endswith(" row change(s)")  # the home's catalog is empty: every row is added
    assert report == {"exit": 1, "loaded": []}
