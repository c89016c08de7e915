"""Incremental silver: a run reads only the rows bronze appended since its last commit and merges them, and
change feeds become type 1 or type 2 dimensions. Built batch by batch, every table equals one full build."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from medallion_assets.assets.monitoring import rows_judged, rows_rejected
from medallion_assets.catalog.models import Source, Stage, Target, ValidationRuleSet, history_rules
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.steering.throttles import CatalogThrottles
from medallion_assets.engine.ingest import bronze_schema
from medallion_assets.engine.stage import StageOutcome, StageRunner
from medallion_assets.engine.validation import evaluate_rules
from medallion_assets.recovery.routes import CatalogRoutes
from medallion_assets.storage.lake import history
from medallion_assets.storage.lake.layout import TableRef, table_of
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.lake.tables import LakeTables
from medallion_assets.storage.warehouse import Warehouse

FEED = Source(
    source_id="feed_raw",
    s3_path="s3://unused/feed/",
    file_format="jsonl",
    columns={"k1": "int", "k2": "string", "seq": "string", "op": "string", "v": "string", "w": "string"},
)
COLUMNS = {"k1": "int", "k2": "string", "seq": "bigint", "op": "string", "v": "string", "w": "string"}
DELETES = {"sequence_by": "seq", "apply_as_deletes": "op = 'D'", "except_columns": ["op"]}
# The datasets built from one change feed, each as a stage would: latest row per key, type 1 and type 2.
DATASETS = {
    "latest": {"keys": ["k1", "k2"], "keep_latest_by": "seq"},
    "scd1": {"keys": ["k1", "k2"], "cdc": {**DELETES, "ignore_null_updates": True}, "scd_type": 1},
    "scd2": {"keys": ["k1", "k2"], "cdc": DELETES, "scd_type": 2, "track_history_except": ["w"]},
}


class Lakehouse:
    """A catalog, a lake and a bronze change feed; silver datasets `<name>` built incrementally after each
    batch and `<name>_full` built once, at the end, from all of bronze."""

    def __init__(
        self,
        spark: SparkSession,
        root: Path,
        datasets: dict[str, dict[str, Any]] = DATASETS,
        warehouse: Warehouse | None = None,
    ):
        self.spark, self.root, self.batches, self.warehouse = spark, root, 0, warehouse
        self.store = CatalogStore(f"sqlite:///{root}/catalog.db")
        self.store.migrate()
        self.snapshot = CatalogSnapshot()
        self.snapshot.add("sources", FEED)
        self.snapshot.add("targets", Target(target_id="bronze_feed", layer="bronze"))
        self.snapshot.add(
            "stages",
            Stage(
                pipeline_id="feed",
                stage_order=1,
                stage_name="ingest",
                input_id="feed_raw",
                target_id="bronze_feed",
            ),
        )
        for order, name in enumerate([*datasets, *(f"{name}_full" for name in datasets)], start=2):
            self.define(order, name, datasets[name.removesuffix("_full")])
        self.lake = LakeTables(spark, Lake.resolve(root / "lake"))
        self.bronze = table_of(self.snapshot.targets["bronze_feed"])
        schema = spark.createDataFrame([], bronze_schema(FEED)).schema
        self.lake.ensure(self.bronze, schema, None)

    def define(self, order: int, name: str, fields: dict[str, Any], rules: str | None = None) -> None:
        target = Target(target_id=f"silver_{name}", layer="silver", columns=COLUMNS, **fields)
        self.add_stage(target, order, f"build_{name}", "bronze_feed", validation_set_id=rules)

    def add_stage(self, target: Target, order: int, stage_name: str, input_id: str, **stage: Any) -> None:
        """`target`, made by stage `stage_name` of pipeline feed from `input_id`."""
        self.snapshot.add("targets", target)
        self.snapshot.add(
            "stages",
            Stage(
                pipeline_id="feed",
                stage_order=order,
                stage_name=stage_name,
                input_id=input_id,
                target_id=target.target_id,
                **stage,
            ),
        )

    def append(self, events: list[tuple]) -> None:
        """One bronze batch: (k1, k2, seq, op, v, w) events, ingested a minute after the previous batch."""
        self.batches += 1
        at = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(minutes=self.batches)
        rows = [(f"batch{self.batches}", line, *event, at) for line, event in enumerate(events)]
        self.lake.append(
            self.bronze, self.spark.createDataFrame(rows, bronze_schema(FEED)), f"b{self.batches}"
        )

    def build(self, name: str, layer: str = "silver") -> StageOutcome:
        stage = next(s for s in self.snapshot.stages() if s.target_id == f"{layer}_{name}")
        runner = StageRunner(
            self.spark,
            self.snapshot,
            self.store,
            self.lake.lake,
            self.warehouse,
            throttle=CatalogThrottles(self.store),
            recovery=CatalogRoutes(self.store, self.snapshot),
        )
        return runner.run_stage(stage)

    def rows(self, name: str, layer: str = "silver") -> list[tuple]:
        table = TableRef("lake", layer, name)
        return sorted((tuple(r) for r in self.lake.read(table).collect()), key=repr)

    def quarantine(self, name: str) -> list[tuple]:
        table = TableRef("lake", "silver", name).quarantine()
        if not self.lake.exists(table):
            return []
        return sorted((r.reason, r.raw) for r in self.lake.read(table).collect())


def random_batches(rng: random.Random) -> list[list[tuple]]:
    """Batches of change events on a few compound keys: inserts, updates, deletes, nulls, duplicates (in
    the same batch or a later one), late and out-of-order sequences, ties, unparseable sequences, empty
    batches."""
    keys = [(rng.randint(1, 2), rng.choice("ab")) for _ in range(4)]
    sent: list[tuple] = []
    batches = []
    for number in range(rng.randint(3, 5)):
        batch: list[tuple] = []
        # The first build reads a bronze table that holds rows, as after a first ingest.
        for _ in range(rng.choice([1, 3, 5, 7] if number == 0 else [0, 1, 3, 5, 7])):
            roll = rng.random()
            if sent and roll < 0.15:
                batch.append(rng.choice(sent))  # a duplicate
                continue
            k1, k2 = rng.choice(keys)
            seq = str(rng.randint(1, 12)) if roll < 0.93 else "late"  # small range: ties and late events
            op = rng.choices(["I", "U", "D"], [3, 4, 2])[0]
            event = (k1, k2, seq, op, rng.choice(["x", "y", None]), rng.choice(["p", "q", None]))
            batch.append(event)
            sent.append(event)
        batches.append(batch)
    return batches


@pytest.mark.parametrize("seed", range(6))
def test_built_batch_by_batch_every_dataset_equals_one_full_build(spark, tmp_path, seed):
    rng = random.Random(seed)
    house = Lakehouse(spark, tmp_path)
    batches = random_batches(rng)
    for number, batch in enumerate(batches):
        house.append(batch)
        for name in DATASETS:
            outcome = house.build(name)
            assert outcome.details["mode"] == ("full" if number == 0 else "incremental"), outcome.details
    for name in DATASETS:
        full = house.build(f"{name}_full")
        assert full.details["mode"] == "full"
        assert house.rows(name) == house.rows(f"{name}_full"), (name, batches)
        assert house.quarantine(name) == house.quarantine(f"{name}_full"), name


def test_a_type_2_history_places_late_and_out_of_order_events_where_their_sequence_puts_them(spark, tmp_path):
    house = Lakehouse(spark, tmp_path, {"scd2": DATASETS["scd2"]})
    house.append([(1, "a", "10", "I", "red", "p"), (1, "a", "30", "U", "blue", "p")])
    assert house.build("scd2").details["mode"] == "full"
    # Late: a version between the two, a change of an untracked column, and the key's deletion after all.
    house.append([(1, "a", "20", "U", "green", "p"), (1, "a", "25", "U", "green", "q")])
    house.append([(1, "a", "40", "D", None, None), (2, "b", "5", "I", "red", None)])
    outcome = house.build("scd2")
    assert (outcome.details["mode"], outcome.rows_written) == ("incremental", 4)
    assert [(o.rule.name, o.passed) for o in outcome.rule_outcomes] == [
        ("scd2_one_current_row", True),
        ("scd2_no_overlapping_validity", True),
        ("scd2_unique_valid_from", True),
    ]
    assert house.rows("scd2") == [
        (1, "a", 10, "red", "p", 10, 20, False),
        (1, "a", 25, "green", "q", 20, 30, False),
        (1, "a", 30, "blue", "p", 30, 40, False),
        (2, "b", 5, "red", None, 5, None, True),
    ]


def test_a_late_older_copy_never_overwrites_a_newer_row(spark, tmp_path):
    house = Lakehouse(spark, tmp_path, {"latest": DATASETS["latest"]})
    house.append([(1, "a", "5", "U", "new", None)])
    house.build("latest")
    house.append([(1, "a", "3", "U", "old", None), (2, "a", "1", "I", "x", None)])
    outcome = house.build("latest")
    assert (outcome.details["mode"], outcome.rows_written) == ("incremental", 1)
    assert outcome.details["rows_in_dataset"] == 2
    assert house.rows("latest") == [(1, "a", 5, "U", "new", None), (2, "a", 1, "I", "x", None)]


def test_a_keyed_silver_over_a_small_bronze_is_rebuilt_whole_and_merged_from_the_floor_on(
    spark, tmp_path, monkeypatch
):
    """By default a keyed silver merge chooses the cheaper way: under MEDALLION_SILVER_MERGE_FROM_ROWS bronze
    rows (the tests set 0, tests/conftest.py), a rebuild; from there on, a merge. Either way the same rows."""
    monkeypatch.delenv("MEDALLION_SILVER_MERGE_FROM_ROWS")
    house = Lakehouse(spark, tmp_path, {"latest": DATASETS["latest"]})
    house.append([(1, "a", "5", "U", "new", None)])
    house.build("latest")
    house.append([(1, "a", "3", "U", "old", None), (2, "a", "1", "I", "x", None)])
    small = house.build("latest")
    assert (small.details["mode"], small.details["why"]) == (
        "full",
        "bronze_feed holds 3 rows, fewer than the 1,000,000 from which merging only its new rows costs "
        "less than rebuilding the table whole (MEDALLION_SILVER_MERGE_FROM_ROWS)",
    )
    monkeypatch.setenv("MEDALLION_SILVER_MERGE_FROM_ROWS", "4")
    house.append([(2, "a", "7", "U", "y", None)])
    merged = house.build("latest")
    assert (merged.details["mode"], merged.rows_written) == ("incremental", 1)
    assert house.rows("latest") == [(1, "a", 5, "U", "new", None), (2, "a", 7, "U", "y", None)]


def test_an_incremental_build_with_sql_counts_the_rows_its_sql_made_of_the_new_rows(spark, tmp_path):
    house = Lakehouse(spark, tmp_path, {"latest": DATASETS["latest"]})
    stage = next(s for s in house.snapshot.stages() if s.target_id == "silver_latest")
    sql = "SELECT * FROM bronze_feed WHERE op <> 'D'"
    house.snapshot.add("stages", stage.model_copy(update={"transform_sql": sql}))
    house.append([(1, "a", "1", "I", "x", "p")])
    house.build("latest")
    # Three new rows; the SQL makes two of them, of which one has a sequence that does not cast.
    house.append(
        [(1, "a", "2", "U", "y", "p"), (2, "a", "late", "I", "x", None), (2, "b", "3", "D", None, None)]
    )
    outcome = house.build("latest")
    assert outcome.details["mode"] == "incremental"
    counts = (outcome.rows_read, outcome.details["rows_in"], outcome.rows_written, outcome.rows_quarantined)
    assert counts == (3, 2, 1, 1)
    # What the data-quality check judges: the rows the SQL made, of which the quarantined one was rejected.
    assert (rows_judged(outcome), rows_rejected(outcome)) == (2, 1)


@pytest.mark.parametrize("name", ["latest", "scd1"])
def test_an_incremental_batch_whose_every_row_is_rejected_quarantines_each_and_writes_none(
    spark, tmp_path, name
):
    house = Lakehouse(spark, tmp_path, {name: DATASETS[name]})
    house.append([(1, "a", "1", "I", "x", None)])
    house.build(name)
    before = house.rows(name)
    # Every new row's sequence fails its cast: no row reaches the merge, and the rejects' counts, observed on
    # the way, must still be theirs.
    house.append([(2, "a", "late", "I", "x", None), (3, "b", "never", "U", "y", None)])
    outcome = house.build(name)
    assert outcome.details["mode"] == "incremental"
    assert (outcome.rows_read, outcome.rows_written, outcome.rows_quarantined) == (2, 0, 2)
    assert [reason for reason, _ in house.quarantine(name)] == [
        "seq: cannot cast late to bigint",
        "seq: cannot cast never to bigint",
    ]
    assert house.rows(name) == before


def test_the_mode_and_why_full_when_the_definition_or_bronze_history_changes(spark, tmp_path):
    house = Lakehouse(spark, tmp_path, {"scd1": DATASETS["scd1"]})
    house.append([(1, "a", "1", "I", "x", None)])
    first = house.build("scd1")
    assert first.details["why"] == "first build: no earlier commit of this stage"
    house.append([(1, "a", "2", "U", "y", None)])
    assert house.build("scd1").details["why"].startswith("reads the rows bronze appended after snapshot")
    # A new rule set is a new definition: rebuilt whole.
    house.snapshot.add(
        "validation_rules",
        ValidationRuleSet(rule_set_id="strict", check_def=[{"type": "not_null", "column": "v"}]),
    )
    stage = next(s for s in house.snapshot.stages() if s.target_id == "silver_scd1")
    house.snapshot.add("stages", stage.model_copy(update={"validation_set_id": "strict"}))
    changed = house.build("scd1")
    assert changed.details["mode"] == "full"
    assert changed.details["why"].startswith("the stage's definition changed (")
    # Bronze rolled back: its history is no longer what the last commit read.
    before = house.lake.current_snapshot(house.bronze)
    house.append([(1, "a", "3", "U", "z", None)])
    assert house.build("scd1").details["mode"] == "incremental"
    history.set_current(house.lake.lake, house.bronze, before)
    house.append([(1, "a", "4", "U", "w", None)])
    rebuilt = house.build("scd1")
    assert rebuilt.details["mode"] == "full"
    assert "not an ancestor" in rebuilt.details["why"]
    assert house.rows("scd1") == [(1, "a", 4, "w", None)]


def test_the_checks_of_a_type_2_history_find_two_current_rows_overlaps_and_repeated_starts(spark):
    target = Target(target_id="dim", layer="silver", keys=["k1", "k2"], cdc=DELETES, scd_type=2)
    history = spark.createDataFrame(
        [
            (1, "a", 10, 20, False),
            (1, "a", 15, None, True),  # overlaps [10, 20), and a second current row
            (1, "a", 30, None, True),
            (2, "a", 10, 20, False),
            (2, "a", 10, None, True),  # same start
            (2, "b", 10, None, True),  # another key: no conflict
        ],
        "k1 int, k2 string, __valid_from bigint, __valid_to bigint, __is_current boolean",
    )
    outcomes = evaluate_rules(history, history_rules(target))
    assert [(o.rule.name, o.failing_rows) for o in outcomes] == [
        ("scd2_one_current_row", 2),
        ("scd2_no_overlapping_validity", 3),
        ("scd2_unique_valid_from", 0),
    ]
    assert not outcomes[2].passed and outcomes[2].observed["duplicate_count"] == 1


def test_a_truncate_event_rebuilds_whole_and_wipes_late_events_before_it(spark, tmp_path):
    truncating = {"keys": ["k1", "k2"], "cdc": {**DELETES, "apply_as_truncates": "op = 'T'"}, "scd_type": 1}
    house = Lakehouse(spark, tmp_path, {"trunc": truncating})
    house.append([(1, "a", "1", "I", "x", "p"), (2, "a", "2", "I", "y", "p")])
    house.build("trunc")
    house.append([(0, "z", "5", "T", None, None), (3, "a", "6", "I", "z", None)])
    truncated = house.build("trunc")
    assert (truncated.details["mode"], truncated.details["why"]) == (
        "full",
        "a truncate event arrived: every key may change",
    )
    assert house.rows("trunc") == [(3, "a", 6, "z", None)]
    house.append([(1, "a", "4", "U", "late", None), (2, "a", "7", "U", "new", None)])
    assert house.build("trunc").details["mode"] == "incremental"
    assert house.build("trunc_full").details["mode"] == "full"
    assert (
        house.rows("trunc") == house.rows("trunc_full") == [(2, "a", 7, "new", None), (3, "a", 6, "z", None)]
    )
