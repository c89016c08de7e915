"""A catalog stage through Dagster Pipes: medallion_assets/pipes_stage.py, the entry point EMR Serverless
(PipesEMRServerlessClient) would run, here run by a real local `spark-submit` from the pyspark wheel through
Dagster's PipesSubprocessClient, reporting its materialization back to a real Dagster instance."""

# No `from __future__ import annotations`: Dagster reads the asset's parameter annotations as types.
import sys
from pathlib import Path

from dagster import AssetExecutionContext, PipesSubprocessClient, asset, instance_for_test, materialize

import medallion_assets.pipes_stage
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.engine.spark import lake_jars
from medallion_assets.loading import validate_files
from medallion_assets.storage.lake.catalogs import LAKE_SPARK_CONF
from tests.conftest import SEED
from tests.lake import lake_rows

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"


def test_a_stage_runs_in_spark_submit_through_pipes(tmp_path, raw_data, monkeypatch):
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    monkeypatch.setenv("MEDALLION_CATALOG_URL", store.url)
    monkeypatch.setenv("MEDALLION_LAKE_URL", str(tmp_path / "lake"))

    @asset(key=["bronze", "user_events"])
    def bronze_user_events(context: AssetExecutionContext, pipes: PipesSubprocessClient):
        return pipes.run(
            context=context,
            # The lake's jars and Iceberg's extensions, as any spark-submit of a stage needs them.
            command=[
                str(SPARK_SUBMIT),
                "--master",
                "local[1]",
                "--jars",
                lake_jars(),
                *[part for key, value in LAKE_SPARK_CONF.items() for part in ("--conf", f"{key}={value}")],
                medallion_assets.pipes_stage.__file__,
            ],
            extras={"pipeline": "user_events_etl", "stage": "bronze_ingest"},
            env={"PYSPARK_PYTHON": sys.executable},
        ).get_materialize_result()

    with instance_for_test() as instance:
        result = materialize(
            [bronze_user_events], resources={"pipes": PipesSubprocessClient()}, instance=instance
        )
        assert result.success
        [materialization] = result.get_asset_materialization_events()
        metadata = materialization.materialization.metadata

    written = raw_data.event_lines - raw_data.malformed_events
    assert metadata["dagster/row_count"].value == written
    assert metadata["rows_quarantined"].value == raw_data.malformed_events
    assert metadata["rows_read"].value == raw_data.event_lines
    assert len(lake_rows(tmp_path / "lake", "bronze.user_events")) == written
