"""Incremental gold: an aggregation over one silver table recomputes only the groups silver's changes touched,
merges them into its table and applies exactly them to the warehouse. Built batch by batch, gold equals a full
recompute, and the warehouse equals gold, after every run."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from pydantic import ValidationError
from pyspark.sql import SparkSession

from medallion_assets.catalog.models import Stage, Target, ValidationRuleSet
from medallion_assets.engine.stage import StageOutcome, gold_groups, gold_mode_description
from medallion_assets.engine.transform import NotGroupwise, group_keys
from medallion_assets.storage.lake import history
from medallion_assets.storage.lake.layout import TableRef
from medallion_assets.storage.lake.metadata import snapshots_by_id
from medallion_assets.storage.lake.tables import LakeTables
from medallion_assets.storage.objects import write_bytes
from medallion_assets.storage.warehouse import Warehouse, warehouse_from_url
from tests.test_incremental import DATASETS, Lakehouse, random_batches

# Aggregations over silver_scd1 (a type 1 dimension of the random change feed: updates, deletes, late and
# duplicate events), grouped by plain columns or an expression of them; `<name>_full` is the same query behind
# a CTE, which the plan cannot split into groups, so it is always recomputed whole.
GOLD = {
    # Loaded into the warehouse by merge on its group keys; HAVING and the filter make groups vanish.
    "by_value": (
        "SELECT k1, v, COUNT(*) AS events, MAX(seq) AS last_seq, MIN(w) AS first_w FROM {input} "
        "WHERE v IS NOT NULL GROUP BY k1, v HAVING MIN(k2) = 'a'",
        {"kind": "warehouse", "location": "analytics.by_value", "keys": ["k1", "v"], "load_mode": "merge"},
    ),
    # Grouped by an expression, by ordinal, in the lake only: q and null (w is often null) make one null
    # group, so a row whose w changes may move between groups or stay in the null one.
    "by_label": (
        "SELECT NULLIF(w, 'q') AS label, COUNT(*) AS events, SUM(k1) AS total FROM {input} GROUP BY 1",
        {},
    ),
}


class GoldHouse(Lakehouse):
    """The lakehouse of test_incremental with silver_scd1 and the gold aggregations above over it."""

    def __init__(self, spark: SparkSession, root: Path, warehouse: Warehouse):
        super().__init__(spark, root, {"scd1": DATASETS["scd1"]}, warehouse)
        for order, (name, (sql, fields)) in enumerate(GOLD.items(), start=10):
            # Incremental on every batch, however many of their few groups it touches: the path under test.
            self.define_gold(
                order, name, sql.format(input="silver_scd1"), {**fields, "incremental": "when_possible"}
            )
            full_sql = "WITH whole AS (SELECT * FROM silver_scd1) " + sql.format(input="whole")
            self.define_gold(order + 100, f"{name}_full", full_sql, {})

    def define_gold(self, order: int, name: str, sql: str, fields: dict) -> None:
        target = Target(target_id=f"gold_{name}", layer="gold", **fields)
        self.add_stage(target, order, f"aggregate_{name}", "silver_scd1", transform_sql=sql)

    def warehouse_rows(self, table: str) -> list[tuple]:
        assert self.warehouse is not None
        return sorted(
            (tuple(row.values()) for row in self.warehouse.query(f"SELECT * FROM {table}")), key=repr
        )


@pytest.fixture
def warehouse(tmp_path):
    with warehouse_from_url(f"duckdb:///{tmp_path}/warehouse.duckdb") as opened:
        yield opened


# Each seed is 3 to 5 batches, each built through silver, both gold stages and their full twins: 20 to 60 s a
# seed on two shared cores.
@pytest.mark.parametrize("seed", range(2))
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


def test_one_changed_key_recomputes_its_old_and_new_group_and_loads_only_them(spark, tmp_path, warehouse):
    house = GoldHouse(spark, tmp_path, warehouse)
    # A row count is the table's, not the run's: the run below writes one row of a table of two.
    house.snapshot.add(
        "validation_rules", ValidationRuleSet(rule_set_id="two", check_def=[{"type": "row_count", "min": 2}])
    )
    stage = next(s for s in house.snapshot.stages() if s.target_id == "gold_by_value")
    house.snapshot.add("stages", stage.model_copy(update={"validation_set_id": "two"}))
    house.append([(1, "a", "1", "I", "x", "p"), (2, "a", "2", "I", "y", "p"), (1, "b", "3", "I", "x", "q")])
    house.build("scd1")
    assert house.build("by_value", "gold").details["why"] == "first build: no earlier commit of this stage"
    # Key (2, a) moves from group (2, y) to group (2, x): the first vanishes, the second appears.
    house.append([(2, "a", "4", "U", "x", "p")])
    house.build("scd1")
    changed = house.build("by_value", "gold")
    assert changed.details["why"].startswith(
        "recomputes the groups (k1, v) that silver's changes after snapshot"
    )
    # Of the two groups' silver rows, only the moved one is left: it makes the one row written.
    counts = (changed.details["groups_recomputed"], changed.rows_read, changed.details["rows_in"])
    assert (counts, changed.rows_written) == ((2, 1, 1), 1)
    assert [(o.rule.type, o.passed) for o in changed.rule_outcomes] == [("row_count", True)]
    # One row upserted, one group deleted, in one load; group (1, x) is not touched.
    assert (changed.load.rows_loaded, changed.load.rows_in_table) == (2, 2)
    expected = [(1, "x", 2, 3, "p"), (2, "x", 1, 4, "p")]
    assert house.rows("by_value", "gold") == house.warehouse_rows("analytics.by_value") == expected
    unchanged = house.build("by_value", "gold")
    assert unchanged.details["mode"] == "incremental" and unchanged.details["why"].endswith("touched: none")
    assert house.rows("by_value", "gold") == expected
    # The warehouse holds that version already: nothing is loaded.
    assert unchanged.load is None
    assert unchanged.details["warehouse_load"] == (
        f"none: the warehouse holds snapshot {changed.snapshot_id} already"
    )
    # Its table dropped by hand, the warehouse holds nothing any more: the next run loads gold whole.
    warehouse.query("DROP TABLE analytics.by_value")
    assert house.build("by_value", "gold").load.rows_in_table == 2
    assert house.warehouse_rows("analytics.by_value") == expected
    # Another warehouse does not hold it: its table gets gold whole.
    with warehouse_from_url(f"duckdb:///{tmp_path}/other.duckdb") as other:
        house.warehouse = other
        assert house.build("by_value", "gold").load.rows_in_table == 2
        assert house.warehouse_rows("analytics.by_value") == expected


def test_after_a_failed_load_the_next_run_loads_gold_whole(spark, tmp_path, warehouse):
    house = GoldHouse(spark, tmp_path, warehouse)
    house.append([(1, "a", "1", "I", "x", "p"), (2, "a", "2", "I", "y", "p")])
    house.build("scd1")
    house.build("by_value", "gold")
    # Gold publishes group (2, x) and loses (2, y), but the load fails: the warehouse still has (2, y).
    house.append([(2, "a", "3", "U", "x", "p")])
    house.build("scd1")
    house.warehouse = None
    with pytest.raises(RuntimeError, match="no warehouse is configured"):
        house.build("by_value", "gold")
    house.warehouse = warehouse
    assert house.warehouse_rows("analytics.by_value") == [(1, "x", 1, 1, "p"), (2, "y", 1, 2, "p")]
    # The next run touches group (1, x) only; the warehouse still gets the version before it whole.
    house.append([(1, "a", "4", "U", "x", "q")])
    house.build("scd1")
    resent = house.build("by_value", "gold")
    assert resent.details["groups_recomputed"] == 1
    assert resent.load.rows_loaded == 3  # two rows upserted, group (2, y) deleted
    assert house.warehouse_rows("analytics.by_value") == house.rows("by_value", "gold")
    assert house.rows("by_value", "gold") == [(1, "x", 1, 4, "q"), (2, "x", 1, 3, "p")]


def test_gold_recomputes_whole_after_a_definition_change_or_a_rollback_of_silver(spark, tmp_path, warehouse):
    house = GoldHouse(spark, tmp_path, warehouse)
    house.append([(1, "a", "1", "I", "x", "p"), (2, "a", "2", "I", "y", "p")])
    house.build("scd1")
    house.build("by_label", "gold")
    before = house.lake.current_snapshot(TableRef("lake", "silver", "scd1"))
    house.append([(1, "a", "3", "D", None, None)])
    house.build("scd1")
    assert house.build("by_label", "gold").details["mode"] == "incremental"
    assert house.rows("by_label", "gold") == [("p", 1, 2)]
    # A row moved into the null group (q is null): the group of p loses it.
    house.append([(2, "a", "4", "U", "y", "q")])
    house.build("scd1")
    moved = house.build("by_label", "gold")
    assert (moved.details["mode"], moved.details["groups_recomputed"]) == ("incremental", 2)
    assert moved.details["why"].startswith("recomputes the groups (label = NULLIF(w, 'q')) that silver's")
    assert house.rows("by_label", "gold") == [(None, 1, 2)]
    # Silver rolled back: the version gold read is no longer in its line.
    history.set_current(house.lake.lake, TableRef("lake", "silver", "scd1"), before)
    rebuilt = house.build("by_label", "gold")
    assert rebuilt.details["mode"] == "full" and "not an ancestor" in rebuilt.details["why"]
    assert house.rows("by_label", "gold") == [("p", 2, 3)]
    stage = next(s for s in house.snapshot.stages() if s.target_id == "gold_by_label")
    sql = (
        "SELECT w AS label, COUNT(*) AS events, SUM(k1) AS total, MAX(seq) AS top FROM silver_scd1 GROUP BY w"
    )
    house.snapshot.add("stages", stage.model_copy(update={"transform_sql": sql}))
    redefined = house.build("by_label", "gold")
    assert redefined.details["mode"] == "full"
    assert redefined.details["why"].startswith("the stage's definition changed (")
    assert house.rows("by_label", "gold") == [("p", 2, 3, 2)]


def batch_then_by_k1(house: Lakehouse, silver: str, events: list[tuple]) -> StageOutcome:
    """A bronze batch, silver `silver` built from it, then gold by_k1 and by_k1_full, its full recompute,
    which it must equal; returns by_k1's outcome."""
    house.append(events)
    house.build(silver)
    outcome = house.build("by_k1", "gold")
    house.build("by_k1_full", "gold")
    assert house.rows("by_k1", "gold") == house.rows("by_k1_full", "gold")
    return outcome


def test_gold_recomputes_whole_over_a_small_silver_or_when_a_batch_touches_a_third_of_its_groups(
    spark, tmp_path, warehouse, monkeypatch
):
    """By default gold by groups chooses the cheaper way: over a silver table too small for its fixed cost,
    and from a third of gold's groups touched on, the whole table; else the groups a batch touched. Either
    way it equals a full recompute, and a recompute does not keep the next batch from going by groups."""
    house = GoldHouse(spark, tmp_path, warehouse)
    by_k1 = "SELECT k1, COUNT(*) AS events, MAX(seq) AS last_seq FROM silver_scd1 GROUP BY k1"
    house.define_gold(30, "by_k1", by_k1, {"keys": ["k1"]})
    house.define_gold(130, "by_k1_full", by_k1, {"incremental": "full"})

    def batch(events: list[tuple]) -> StageOutcome:
        return batch_then_by_k1(house, "scd1", events)

    batch([(k, "a", str(k), "I", "x", "p") for k in range(1, 7)])  # six groups
    small = batch([(1, "b", "7", "I", "x", "p")])
    assert (small.details["mode"], small.details["why"]) == (
        "full",
        "silver_scd1 holds 7 rows, fewer than the 5,000,000 from which recomputing only the touched groups "
        "costs less than recomputing the whole table (MEDALLION_GOLD_GROUPS_FROM_ROWS)",
    )
    # Silver unchanged since: nothing to recompute, whatever its size.
    unchanged = house.build("by_k1", "gold")
    assert (unchanged.details["mode"], unchanged.rows_written) == ("incremental", 0)
    assert unchanged.details["why"].endswith("touched: none")
    monkeypatch.setenv("MEDALLION_GOLD_GROUPS_FROM_ROWS", "0")  # by groups at any size: the share decides
    one = batch([(2, "b", "8", "I", "x", "p")])
    assert (one.details["mode"], one.details["groups_recomputed"]) == ("incremental", 1)
    two = batch([(3, "b", "9", "I", "x", "p"), (4, "a", "10", "D", None, None)])
    assert (two.details["mode"], two.details["why"]) == (
        "full",
        "silver's changes touched 2 groups, 33% of the 6 rows gold holds: recomputed whole, which costs less "
        "than recomputing a third or more of its groups (incremental: when_possible keeps such runs "
        "incremental)",
    )
    assert house.rows("by_k1", "gold") == [(1, 2, 7), (2, 2, 8), (3, 2, 9), (5, 1, 5), (6, 1, 6)]
    after = batch([(5, "b", "11", "I", "x", "p")])
    assert (after.details["mode"], after.details["groups_recomputed"]) == ("incremental", 1)
    # `when_possible` is gold's: a silver merge's choice is kept by MEDALLION_SILVER_MERGE_FROM_ROWS=0.
    with pytest.raises(ValidationError, match="incremental: when_possible is for gold targets"):
        Target(target_id="silver_x", layer="silver", keys=["k"], incremental="when_possible")


@pytest.mark.parametrize("silver", ["latest", "scd1"])
def test_gold_over_a_silver_only_appended_to_recomputes_without_reading_its_changelog(
    spark, tmp_path, warehouse, monkeypatch, silver
):
    """Rows appended to silver are new rows: over a small silver, gold knows from silver's snapshot summaries
    that it is recomputed whole, and reads no changelog. A merge that replaced rows may have left them as
    they were: then the changelog is read first. Each run equals a full recompute. A change feed's merge of
    new keys alone is an append too: its delete, which matched no row, is not published."""
    house = Lakehouse(spark, tmp_path, {silver: DATASETS[silver]}, warehouse)
    by_k1 = "SELECT k1, COUNT(*) AS events, MAX(seq) AS last_seq FROM {input} GROUP BY k1"
    whole = f"WITH whole AS (SELECT * FROM silver_{silver}) " + by_k1.format(input="whole")
    by_groups = Target(target_id="gold_by_k1", layer="gold", keys=["k1"])
    house.add_stage(
        by_groups, 10, "by_k1", f"silver_{silver}", transform_sql=by_k1.format(input=f"silver_{silver}")
    )
    recomputed = Target(target_id="gold_by_k1_full", layer="gold", incremental="full")
    house.add_stage(recomputed, 110, "by_k1_full", f"silver_{silver}", transform_sql=whole)
    changelogs_read = []
    changelog = LakeTables.changelog
    monkeypatch.setattr(
        LakeTables, "changelog", lambda lake, *args: changelogs_read.append(args) or changelog(lake, *args)
    )

    def batch(events: list[tuple]) -> StageOutcome:
        return batch_then_by_k1(house, silver, events)

    batch([(k, "a", str(k), "I", "x", "p") for k in range(1, 4)])
    table = TableRef("lake", "silver", silver)
    before = house.lake.current_snapshot(table)
    appended = batch([(1, "b", "4", "I", "x", "p")])  # a new key: silver's merge appends it
    published = snapshots_by_id(house.lake.lake, table)[house.lake.current_snapshot(table)]
    assert (published.operation, published.parent_id) == ("append", before)
    assert (appended.details["mode"], changelogs_read) == ("full", [])
    assert appended.details["why"].startswith(f"silver_{silver} holds 4 rows, fewer than the 5,000,000")
    replaced = batch([(2, "a", "5", "U", "y", "q")])  # a newer row of key (2, a) replaces its row
    assert replaced.details["mode"] == "full" and len(changelogs_read) == 1
    assert house.rows("by_k1", "gold") == [(1, 2, 4), (2, 1, 5), (3, 1, 3)]


COLUMNS_OF_SILVER = ["k1", "k2", "seq", "v", "w"]


@pytest.mark.parametrize(
    "sql, groups",
    [
        ("SELECT k1, v AS value, COUNT(*) AS n FROM s GROUP BY k1, v", {"k1": "k1", "value": "v"}),
        # An expression of input columns, named by the output that selects it, in any spelling.
        (
            "SELECT CAST(seq AS STRING) AS day, k1, COUNT(*) AS n FROM s AS x "
            "GROUP BY cast(X.Seq as string), 2",
            {"day": "CAST(seq AS STRING)", "k1": "k1"},
        ),
        (
            "SELECT CONCAT(v, '-', w) AS vw, COUNT(*) AS n FROM s GROUP BY vw",
            {"vw": "CONCAT(v, '-', w)"},
        ),
        (
            "SELECT v AS value, k1, SUM(seq) AS total FROM s WHERE seq > 0 GROUP BY 1, 2 HAVING SUM(seq) > 1",
            {"value": "v", "k1": "k1"},
        ),
        # A name that is no input column is an output's alias, as Spark resolves it.
        ("SELECT w AS label, COUNT(DISTINCT k2) AS n FROM s GROUP BY label", {"label": "w"}),
        ("SELECT x.k1, MAX(x.seq) AS top FROM s AS x GROUP BY x.k1 ORDER BY top", {"k1": "k1"}),
    ],
)
def test_an_aggregation_by_columns_or_expressions_of_them_names_its_groups(sql, groups):
    keys = group_keys(sql, "spark", "s", COLUMNS_OF_SILVER)
    assert {output: key.sql("spark") for output, key in keys.items()} == groups


def test_a_redshift_key_expression_is_read_in_its_dialect():
    sql = "SELECT event_ts::DATE AS event_date, COUNT(*) AS n FROM s GROUP BY 1"
    [(output, key)] = group_keys(sql, "redshift", "s", ["event_ts"]).items()
    assert (output, key.sql("spark")) == ("event_date", "CAST(event_ts AS DATE)")


@pytest.mark.parametrize(
    "sql, why",
    [
        ("SELECT k1, v FROM s", "its SQL has no GROUP BY"),
        (
            "SELECT COUNT(*) AS n FROM s GROUP BY CAST(seq AS STRING)",
            "its GROUP BY key CAST(seq AS STRING) is not an output column",
        ),
        (
            "SELECT k1 + seq AS total, COUNT(*) AS n FROM s GROUP BY k1 + seq + 0",
            "its GROUP BY key k1 + seq + 0 is not an output column",
        ),
        (
            "SELECT k1, COUNT(*) AS n FROM s GROUP BY ROLLUP (k1)",
            "its GROUP BY key ROLLUP (k1) makes grouping sets, whose rows span groups",
        ),
        (
            "SELECT k1, COUNT(*) AS n FROM s GROUP BY k1 WITH CUBE",
            "its GROUP BY makes grouping sets, whose rows span groups",
        ),
        ("SELECT k1, COUNT(*) AS n FROM s GROUP BY 2", "its GROUP BY key COUNT(*) holds an aggregate"),
        (
            "SELECT my_bucket(k1) AS bucket, COUNT(*) AS n FROM s GROUP BY 1",
            "its GROUP BY key MY_BUCKET(k1) calls my_bucket, not known to be deterministic",
        ),
        (
            "SELECT CONCAT(k2, 'x') AS k2, COUNT(*) AS n FROM s GROUP BY CONCAT(k9, 'x')",
            "its GROUP BY key CONCAT(k9, 'x') names k9, which is not a column of its input",
        ),
        ("SELECT COUNT(*) AS n FROM s GROUP BY k1", "its GROUP BY key k1 is not an output column"),
        (
            "SELECT s.k1, COUNT(*) AS n FROM s JOIN s AS t ON s.k2 = t.k2 GROUP BY s.k1",
            "its SQL is not one SELECT over its input alone",
        ),
        (
            "SELECT k1, SUM(COUNT(*)) OVER () AS n FROM s GROUP BY k1",
            "its SQL holds WINDOW, which reads across groups",
        ),
        (
            "SELECT k1, COUNT(*) AS n FROM s GROUP BY k1 LIMIT 3",
            "its SQL holds LIMIT, which reads across groups",
        ),
        (
            "SELECT k1, COUNT(*) AS n FROM s WHERE seq > (SELECT MAX(seq) FROM s) GROUP BY k1",
            "its SQL is not one SELECT over its input alone",
        ),
        (
            "SELECT DISTINCT k1, COUNT(*) AS n FROM s GROUP BY k1",
            "its SQL selects DISTINCT rows across groups",
        ),
        (
            "SELECT k1, COUNT(*) AS n FROM s WHERE seq > UNIX_DATE(CURRENT_DATE) GROUP BY k1",
            "its SQL calls CURRENT_DATE, whose value changes from run to run",
        ),
    ],
)
def test_anything_else_is_recomputed_whole_and_says_why(sql, why):
    with pytest.raises(NotGroupwise) as refused:
        group_keys(sql, "spark", "s", COLUMNS_OF_SILVER)
    assert str(refused.value) == why


def test_gold_whose_keys_are_not_its_group_columns_is_recomputed_whole(spark, tmp_path, warehouse):
    house = GoldHouse(spark, tmp_path, warehouse)
    stage = next(s for s in house.snapshot.stages() if s.target_id == "gold_by_value")
    target = house.snapshot.targets["gold_by_value"].model_copy(update={"keys": ["k1"]})
    with pytest.raises(NotGroupwise, match=r"its keys \(k1\) are not its GROUP BY columns \(k1, v\)"):
        gold_groups(stage, target, house.snapshot, COLUMNS_OF_SILVER)
    assert gold_mode_description(stage, target, house.snapshot).startswith(
        "Recomputed whole on every run: its keys"
    )
    declared = house.snapshot.targets["gold_by_value"].model_copy(
        update={"columns": {"k1": "int", "events": "bigint"}}
    )
    with pytest.raises(NotGroupwise, match=r"its GROUP BY columns \(v\) are not declared columns"):
        gold_groups(stage, declared, house.snapshot, COLUMNS_OF_SILVER)
    assert gold_mode_description(stage, house.snapshot.targets["gold_by_value"], house.snapshot).startswith(
        "Incremental: recomputes only the groups (k1, v) that silver's changes touch"
    )


# A gold stage of the seed's user_events_etl that aggregates silver by a plain column: incremental, as is the
# seed's own daily aggregate, by the day of its events (an expression).
BY_USER = {
    "targets": [
        Target(
            target_id="gold_events_by_user",
            layer="gold",
            kind="warehouse",
            location="analytics.events_by_user",
            keys=["user_id"],
            load_mode="merge",
        )
    ],
    "stages": [
        Stage(
            pipeline_id="user_events_etl",
            stage_order=4,
            stage_name="gold_by_user",
            input_id="silver_user_events",
            target_id="gold_events_by_user",
            transform_sql="SELECT user_id, COUNT(*) AS events, MAX(event_type) AS last_type "
            "FROM silver_user_events GROUP BY user_id",
        )
    ],
}


def test_a_dagster_run_recomputes_the_users_and_days_a_new_batch_touched_and_the_warehouse_follows(
    medallion, monkeypatch
):
    monkeypatch.setenv("MEDALLION_GOLD_GROUPS_FROM_ROWS", "0")  # by groups over the seed's small silver
    medallion.store.upsert(BY_USER)
    first = medallion.run("user_events_etl")
    assert first.status == "success"
    modes = {asset.key: (asset.mode, asset.why) for asset in first.assets}
    assert modes["gold/events_by_user"] == ("full", "first build: no earlier commit of this stage")
    assert modes["gold/daily_user_events"] == ("full", "first build: no earlier commit of this stage")
    # A new object of three events, for two users already known and one new user.
    events = [("late1", "u000001", "view"), ("late2", "u000001", "click"), ("late3", "u999999", "signup")]
    lines = [
        json.dumps(
            {"event_id": e, "user_id": u, "event_type": t, "event_ts": "2026-11-01T10:00:00Z", "value": 1.0}
        )
        for e, u, t in events
    ]
    write_bytes("s3://medallion-raw/user_events/part-late.jsonl", "\n".join(lines).encode())
    second = medallion.run("user_events_etl")
    assert second.status == "success", [(a.key, a.reason) for a in second.assets]
    modes = {asset.key: (asset.mode, asset.why) for asset in second.assets}
    assert modes["gold/events_by_user"][0] == "incremental"
    assert modes["gold/events_by_user"][1].startswith("recomputes the groups (user_id)")
    assert modes["gold/daily_user_events"][0] == "incremental"
    assert modes["gold/daily_user_events"][1].startswith(
        "recomputes the groups (event_date = CAST(event_ts AS DATE)) that silver's changes after snapshot"
    )
    [_, audit] = medallion.stage_audit("gold_by_user")
    assert (audit["details"]["groups_recomputed"], audit["details"]["rows_merged"]) == (2, 2)
    [_, daily_audit] = medallion.stage_audit("gold_daily_aggregate")
    assert (daily_audit["details"]["mode"], daily_audit["details"]["groups_recomputed"]) == ("incremental", 1)
    silver = medallion.rows("silver.user_events")
    # Every day as a full recompute makes it, in the lake and in the warehouse (which it replaces whole).
    days = {r["event_ts"].date() for r in silver}
    daily = sorted(
        (
            day,
            sum(1 for r in silver if r["event_ts"].date() == day),
            len({r["user_id"] for r in silver if r["event_ts"].date() == day}),
        )
        for day in days
    )
    daily_lake = sorted(tuple(row.values()) for row in medallion.rows("gold.daily_user_events"))
    daily_warehouse = sorted(tuple(row.values()) for row in medallion.gold("analytics.daily_user_events"))
    assert daily_lake == daily_warehouse == daily
    expected = sorted(
        (
            user,
            sum(1 for r in silver if r["user_id"] == user),
            max(r["event_type"] for r in silver if r["user_id"] == user),
        )
        for user in {r["user_id"] for r in silver}
    )
    lake = sorted(tuple(row.values()) for row in medallion.rows("gold.events_by_user"))
    warehouse = sorted(tuple(row.values()) for row in medallion.gold("analytics.events_by_user"))
    assert lake == warehouse == expected
