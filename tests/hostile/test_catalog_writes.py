"""Catalog writes: two real processes loading conflicting files at once leave a valid catalog, every time."""

from __future__ import annotations

import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from medallion_assets.catalog.loader import CatalogInvalid
from medallion_assets.catalog.models import Pipeline
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.loading import check_references
from medallion_assets.onboarding.onboard import _unchanged_since
from tests.conftest import REPO

RACES = 12
BASE = """pipelines:
  - {pipeline_id: team_a, enabled: true}
  - {pipeline_id: team_b, enabled: true}
sources:
  - {source_id: landing, s3_path: "s3://landing/x/", file_format: jsonl, columns: {id: string}}
targets:
%s
"""


def race_files(folder: Path) -> tuple[list[str], list[str]]:
    """Per race i, one file for each team, each making bronze_race_i: valid alone, invalid together."""
    folder.mkdir()
    (folder / "base.yaml").write_text(
        BASE % "\n".join(f"  - {{target_id: bronze_race_{i}, layer: bronze}}" for i in range(RACES))
    )
    files = {"team_a": [str(folder / "base.yaml")], "team_b": [str(folder / "base.yaml")]}
    for i in range(RACES):
        for team in files:
            path = folder / f"{team}_{i}.yaml"
            path.write_text(
                f"stages:\n  - {{pipeline_id: {team}, stage_order: {i + 1}, stage_name: make_{i}, "
                f"input_id: landing, target_id: bronze_race_{i}}}\n"
            )
            files[team].append(str(path))
    return files["team_a"], files["team_b"]


@pytest.fixture(params=["sqlite", "postgresql"])
def catalog_url(request, tmp_path) -> str:
    """A catalog that does not exist yet: both processes migrate it at the same time first."""
    return (
        request.getfixturevalue("pg_database")
        if request.param == "postgresql"
        else f"sqlite:///{tmp_path}/catalog.db"
    )


@pytest.mark.integration  # two processes
def test_two_processes_loading_conflicting_files_at_once_leave_one_producer_per_target(catalog_url, tmp_path):
    team_a, team_b = race_files(tmp_path / "yaml")
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.hostile.load_worker", catalog_url, *files],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for files in (team_a, team_b)
    ]
    outcomes = {}
    for worker in workers:
        stdout, stderr = worker.communicate(timeout=600)
        assert worker.returncode == 0, stderr
        outcomes.update(line.split("\t", 1) for line in stdout.splitlines())
    assert len(outcomes) == 2 * RACES + 1  # base.yaml twice, under one name

    snapshot = CatalogStore(catalog_url).snapshot()
    assert check_references(snapshot, {}) == []
    for i in range(RACES):
        [producer] = [stage for stage in snapshot.stages() if stage.target_id == f"bronze_race_{i}"]
        loser = "team_b" if producer.pipeline_id == "team_a" else "team_a"
        assert outcomes[str(tmp_path / "yaml" / f"{producer.pipeline_id}_{i}.yaml")] == "loaded"
        # The problem is reported on whichever of the two stages the check meets second.
        assert outcomes[str(tmp_path / "yaml" / f"{loser}_{i}.yaml")] in {
            f"refused\ttarget 'bronze_race_{i}' is already made by stage {team}.make_{i}"
            for team in ("team_a", "team_b")
        }


def test_onboarding_writes_nothing_when_the_catalog_changed_after_its_rows_were_checked(tmp_path):
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    planned_on = store.snapshot()
    store.upsert({"pipelines": [Pipeline(pipeline_id="loaded_meanwhile")]})  # another writer, in between
    with pytest.raises(CatalogInvalid) as refused:
        store.upsert_checked(
            partial(_unchanged_since, planned_on, {"pipelines": [Pipeline(pipeline_id="onboarded")]})
        )
    assert [str(problem) for problem in refused.value.problems] == [
        "catalog: pipelines: changed while the SQL was onboarded; nothing was written, onboard again"
    ]
    assert [row["pipeline_id"] for row in store.table_rows("pipelines")] == ["loaded_meanwhile"]
