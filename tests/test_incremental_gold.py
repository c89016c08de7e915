"""Incremental gold: an aggregation over one silver table recomputes only the groups silver's changes touched,
merges them into its table and applies exactly them to the warehouse. Built batch by batch, gold equals a full
recompute, and the warehouse equals gold, after every run."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from medallion_assets.catalog.models import Stage, Target
from medallion_assets.storage.warehouse import Warehouse, warehouse_from_url
from tests.test_incremental import DATASETS, Lakehouse, random_batches

# Aggregations over silver_scd1 (a type 1 dimension of the random change feed: updates, deletes, late and
# duplicate events), each grouped by plain columns; `<name>_full` is the same query behind a CTE, which the
# plan cannot split into groups, so it is always recomputed whole.
GOLD = {
    # Loaded into the warehouse by merge on its group keys; HAVING and the filter make groups vanish.
    "by_value": (
        "SELECT k1, v, COUNT(*) AS events, MAX(seq) AS last_seq, MIN(w) AS first_w FROM {input} "
        "WHERE v IS NOT NULL GROUP BY k1, v HAVING MIN(k2) = 'a'",
        {"kind": "warehouse", "location": "analytics.by_value", "keys": ["k1", "v"], "load_mode": "merge"},
    ),
    # A null group (w is often null), grouped by ordinal, in the lake only.
    "by_label": (
        "SELECT w AS label, COUNT(*) AS events, SUM(k1) AS total FROM {input} GROUP BY 1",
        {},
    ),
}


class GoldHouse(Lakehouse):
    """The lakehouse of test_incremental with silver_scd1 and the gold aggregations above over it."""

    def __init__(self, spark: SparkSession, root: Path, warehouse: Warehouse):
        super().__init__(spark, root, {"scd1": DATASETS["scd1"]}, warehouse)
        for order, (name, (sql, fields)) in enumerate(GOLD.items(), start=10):
            self.define_gold(order, name, sql.format(input="silver_scd1"), fields)
            full_sql = "WITH whole AS (SELECT * FROM silver_scd1) " + sql.format(input="whole")
            self.define_gold(order + 100, f"{name}_full", full_sql, {})

    def define_gold(self, order: int, name: str, sql: str, fields: dict) -> None:
        self.snapshot.add("targets", Target(target_id=f"gold_{name}", layer="gold", **fields))
        stage = Stage(
            pipeline_id="feed",
            stage_order=order,
            stage_name=f"aggregate_{name}",
            input_id="silver_scd1",
            target_id=f"gold_{name}",
            transform_sql=sql,
        )
        self.snapshot.add("stages", stage)

    def warehouse_rows(self, table: str) -> list[tuple]:
        assert self.warehouse is not None
        return sorted(
            (tuple(row.values()) for row in self.warehouse.query(f"SELECT * FROM {table}")), key=repr
        )


@pytest.fixture
def warehouse(tmp_path):
    with warehouse_from_url(f"duckdb:///{tmp_path}/warehouse.duckdb") as opened:
        yield opened


@pytest.mark.parametrize("seed", range(3))
def test_gold_built_group_by_group_equals_a_full_recompute_and_the_warehouse_equals_gold(
    spark, tmp_path, warehouse, seed
):
    rng = random.Random(seed)
    house = GoldHouse(spark, tmp_path, warehouse)
    batches = random_batches(rng)
    for number, batch in enumerate(batches):
        house.append(batch)
        house.build("scd1")
        for name in GOLD:
            outcome = house.build(name, "gold")
            assert outcome.details["mode"] == ("full" if number == 0 else "incremental"), outcome.details
            full = house.build(f"{name}_full", "gold")
            assert (full.details["mode"], full.details["why"]) == (
                "full",
                "its SQL is not one SELECT over its input alone",
            )
            assert house.rows(name, "gold") == house.rows(f"{name}_full", "gold"), (name, number, batches)
        assert house.warehouse_rows("analytics.by_value") == house.rows("by_value", "gold"), (number, batches)
