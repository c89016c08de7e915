"""The Spark driver's class-data archive (engine/class_archive.py): every driver Medallion starts maps the one
`make jars` recorded, and a JVM that cannot use an archive starts as usual, saying nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from medallion_assets.engine.spark import ARCHIVE_QUIET, CLASS_ARCHIVE, class_archive, session_conf

# A driver started as Medallion starts one, told to stop rather than go on when it cannot map its archive.
START_A_DRIVER = """
from medallion_assets.engine.spark import spark_session
print(spark_session({"spark.master": "local[1]"}).range(3).count())
"""


def test_the_driver_options_name_the_archive_once_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDALLION_SPARK_JARS", str(tmp_path))
    assert "spark.driver.extraJavaOptions" not in session_conf()
    (tmp_path / CLASS_ARCHIVE).write_bytes(b"recorded")
    assert session_conf()["spark.driver.extraJavaOptions"] == (
        f"-XX:SharedArchiveFile={tmp_path / CLASS_ARCHIVE} -Xlog:cds*=off"
    )
    # A setting of the user's own wins.
    own = {"spark.driver.extraJavaOptions": "-Xss4m"}
    assert session_conf(own)["spark.driver.extraJavaOptions"] == "-Xss4m"


@pytest.mark.integration  # it starts a JVM
def test_a_jvm_given_an_archive_it_cannot_map_starts_and_says_nothing_of_it(tmp_path):
    corrupt = tmp_path / CLASS_ARCHIVE
    corrupt.write_bytes(os.urandom(4096))
    started = subprocess.run(
        ["java", f"-XX:SharedArchiveFile={corrupt}", ARCHIVE_QUIET, "-version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 0
    assert started.stdout == ""
    assert [line.split()[0] for line in started.stderr.splitlines()] == ["openjdk", "OpenJDK", "OpenJDK"]


@pytest.mark.integration  # it starts a Spark driver
def test_a_driver_medallion_starts_maps_the_archive_make_recorded():
    assert class_archive().is_file(), f"no {class_archive()}: run `make jars`"
    started = subprocess.run(
        [sys.executable, "-c", START_A_DRIVER],
        # -Xshare:on: a JVM that cannot map its archive exits at once, where it would otherwise go on without.
        env={**os.environ, "SPARK_SUBMIT_OPTS": f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -Xshare:on"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert started.returncode == 0, started.stderr[-2000:]
    assert started.stdout.splitlines()[-1] == "3"
