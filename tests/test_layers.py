"""The layers hold at run time too: a command of a low layer loads nothing of the layers above it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import SEED

pytestmark = pytest.mark.integration  # it starts a Python process

# Runs `medallion catalog validate` in this process, then reports which heavy packages it loaded.
VALIDATE_THEN_REPORT = """
import json, sys
from medallion_assets.cli import main
try:
    main(["catalog", "validate", sys.argv[1]])
except SystemExit as exit:
    print(json.dumps({"exit": exit.code, "loaded": sorted(set(sys.argv[2:]) & set(sys.modules))}))
"""


def test_catalog_validate_loads_no_spark_and_no_warehouse_driver(tmp_path):
    env = {**os.environ, "MEDALLION_HOME": str(tmp_path / "home")}
    env.pop("DAGSTER_HOME", None)
    heavy = ["pyspark", "duckdb", "psycopg2"]
    ran = subprocess.run(
        [sys.executable, "-c", VALIDATE_THEN_REPORT, str(SEED), *heavy],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    *said, report = ran.stdout.splitlines()
    assert said[0].startswith("valid: ") and said[0].endswith(" rows")
    assert json.loads(report) == {"exit": 0, "loaded": []}
