"""Incremental runs whose cost does not grow with history: a silver merge searches only the days its new rows
fall on (`incremental: {by: COLUMN}`), and gold reads only the days of the groups a change touched, from a
silver table partitioned by day. Built batch by batch, both equal a full recompute; and neither reads an
old day's files (shown by deleting them)."""

from __future__ import annotations

import random
import re
from datetime import date, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest
from pydantic import ValidationError
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, StringType, TimestampType

from medallion_assets.catalog.models import Target, ValidationRuleSet
from medallion_assets.engine.changes import on_days
from medallion_assets.engine.stage import ASKED_FULL
from medallion_assets.storage.lake.layout import TableRef
from tests.lake import data_files_scanned
from tests.test_incremental import COLUMNS, Lakehouse

EVENTS = {**COLUMNS, "seq": "timestamp"}  # seq: the event's time, which its copies share
SILVER = {
    "keys": ["k1", "k2"],
    "keep_latest_by": "w",
    "incremental": {"by": "seq"},
    "lake_table": {"partition_by": ["days(seq)"]},
}
DAILY = (
    "SELECT CAST(seq AS DATE) AS day, COUNT(*) AS events, COUNT(DISTINCT v) AS kinds FROM {input} GROUP BY 1"
)
FIRST_DAY = datetime(2026, 3, 1)


class DailyHouse(Lakehouse):
    """silver_events (merged by day) and gold_daily over it (`incremental: when_possible`), with twins
    `<name>_full` recomputed whole on every run (`incremental: full`)."""

    def __init__(self, spark: SparkSession, root: Path):
        super().__init__(spark, root, {})
        self.define(2, "events", SILVER)
        self.define(3, "events_full", {**SILVER, "incremental": "full"})
        # gold_daily is incremental on every batch, however many of its few days the batch touches.
        twins = [("daily", {"incremental": "when_possible"}), ("daily_full", {"incremental": "full"})]
        for order, (name, extra) in enumerate(twins, 4):
            silver = "silver_events" + name.removeprefix("daily")
            target = Target(target_id=f"gold_{name}", layer="gold", keys=["day"], **extra)
            self.add_stage(
                target, order, f"aggregate_{name}", silver, transform_sql=DAILY.format(input=silver)
            )

    def define(self, order: int, name: str, fields: dict, rules: str | None = None) -> None:
        target = Target(target_id=f"silver_{name}", layer="silver", columns=EVENTS, **fields)
        self.add_stage(target, order, f"build_{name}", "bronze_feed", validation_set_id=rules)

    def build_all(self) -> dict[str, dict]:
        return {
            name: self.build(name, layer).details
            for layer, name in [("silver", "events"), ("silver", "events_full")]
            + [("gold", "daily"), ("gold", "daily_full")]
        }


def event(key: int, day: int, rng: random.Random, w: str | None = None) -> tuple:
    """(k1, k2, seq, op, v, w): key `key`'s event on day `day` (from FIRST_DAY), its time fixed by its key."""
    moment = FIRST_DAY + timedelta(days=day, seconds=(key * 7919) % 86_400)
    return (key, "a", moment.strftime("%Y-%m-%d %H:%M:%S"), "I", rng.choice("xyz"), w or rng.choice("pqr"))


@pytest.mark.parametrize("seed", range(3))
def test_merged_by_day_batch_by_batch_equals_a_full_recompute(spark, tmp_path, seed):
    rng = random.Random(seed)
    house = DailyHouse(spark, tmp_path)
    sent: list[tuple] = []
    for number in range(4):
        batch = []
        for key in range(number * 10, number * 10 + rng.randint(4, 10)):
            late = rng.choice([0, 0, 0, 1, 3, 6])  # days before the batch's own
            batch.append(event(key, max(number * 2 - late, 0), rng))
        for _ in range(rng.randint(0, 4) if sent else 0):  # copies of earlier events, some newer by w
            copy = rng.choice(sent)
            batch.append((*copy[:5], rng.choice(["p", "q", "r", "s"])))
        if number == 2:
            batch.append((99, "a", None, "I", "x", "p"))  # no time: the null day
        house.append(batch)
        sent += batch
        details = house.build_all()
        assert details["events"]["mode"] == ("full" if number == 0 else "incremental"), details["events"]
        assert details["daily"]["mode"] == ("full" if number == 0 else "incremental"), details["daily"]
        assert details["events_full"]["why"] == details["daily_full"]["why"] == ASKED_FULL
        assert house.rows("events") == house.rows("events_full")
        assert house.rows("daily", "gold") == house.rows("daily_full", "gold")


def test_an_incremental_run_reads_no_file_of_a_day_its_batch_does_not_touch(spark, tmp_path):
    rng = random.Random(1)
    house = DailyHouse(spark, tmp_path)
    house.append([event(key, key // 6, rng) for key in range(12)])  # keys 0-5 on day 0, 6-11 on day 1
    house.build("events")
    house.build("daily", "gold")
    # Day 0's silver files are gone: a run that read them would fail.
    day_zero = list((tmp_path / "lake/silver/events/data").glob("seq_day=2026-03-01/*.parquet"))
    assert day_zero
    for data_file in day_zero:
        data_file.unlink()
    house.append([event(20, 1, rng), event(8, 1, rng, w="zz")])  # a new key, and key 8 newer by w
    assert house.build("events").details["mode"] == "incremental"
    assert house.build("daily", "gold").details["groups_recomputed"] == 1
    day_one = F.col("seq") >= F.lit("2026-03-02").cast("timestamp")
    silver = house.lake.read(TableRef("lake", "silver", "events")).where(day_one)
    assert silver.where("k1 = 8").select("w").collect()[0].w == "zz"
    assert silver.count() == 7
    gold = house.lake.read(TableRef("lake", "gold", "daily")).where(F.col("day") == date(2026, 3, 2))
    assert [(r.day, r.events) for r in gold.collect()] == [(date(2026, 3, 2), 7)]


def test_a_batch_of_new_events_is_appended_and_gold_scans_only_its_days_files(spark, tmp_path):
    """Gold by groups (a day's aggregate) and gold by day (`incremental: {by, lookback}`) over silver kept
    by day: after a batch of new events of one day, silver's merge only added a file, and every scan of
    silver that gold's runs planned kept that day's files alone (Iceberg's scan metrics)."""
    house = DailyHouse(spark, tmp_path)
    by_day = Target(
        target_id="gold_by_day",
        layer="gold",
        keys=["day"],
        columns={"day": "date", "events": "bigint", "kinds": "bigint"},
        incremental={"by": "day", "lookback": 0},
    )
    house.add_stage(
        by_day, 6, "aggregate_by_day", "silver_events", transform_sql=DAILY.format(input="silver_events")
    )
    rng = random.Random(3)
    first = [event(key, key // 3, rng) for key in range(12)]  # days 0-3, one file each
    house.append(first)
    for name, layer in [("events", "silver"), ("daily", "gold"), ("by_day", "gold")]:
        house.build(name, layer)
    house.append([event(20, 2, rng), event(21, 2, rng), first[4]])  # two new events and a copy
    assert house.build("events").details["rows_merged"] == 2
    last = spark.sql(
        "SELECT operation, summary FROM lake.silver.events.snapshots ORDER BY committed_at"
    ).tail(1)
    summary = last[0].summary
    assert (last[0].operation, summary["added-data-files"], summary.get("deleted-data-files")) == (
        "append",
        "1",
        None,
    )
    for name in ("daily", "by_day"):
        outcome, scans = data_files_scanned(spark, "lake.silver.events", partial(house.build, name, "gold"))
        assert outcome.details["mode"] == "incremental", name
        # Day 2's two files (its first and the batch's) kept, days 0, 1 and 3 skipped; scans planning no
        # file at all aside.
        assert {scan for scan in scans if scan != (0, 0)} == {(2, 3)}, (name, scans)
    house.build("events_full")
    house.build("daily_full", "gold")
    assert house.rows("daily", "gold") == house.rows("by_day", "gold") == house.rows("daily_full", "gold")


def test_an_empty_batch_runs_silver_and_gold_from_metadata_alone(spark, tmp_path):
    house = DailyHouse(spark, tmp_path)
    for dataset, column in [("silver_events", "k1"), ("gold_daily", "day")]:
        rules = [{"type": "not_null", "column": column}, {"type": "row_count", "min": 3}]
        house.snapshot.add("validation_rules", ValidationRuleSet(rule_set_id=dataset, check_def=rules))
        stage = next(s for s in house.snapshot.stages() if s.target_id == dataset)
        house.snapshot.add("stages", stage.model_copy(update={"validation_set_id": dataset}))
    rng = random.Random(2)
    house.append([event(key, key % 3, rng) for key in range(9)])
    house.build("events")
    house.build("daily", "gold")
    # Every data file of silver and gold is gone: a run that read one would fail.
    data_files = [*(tmp_path / "lake/silver/events/data").rglob("*.parquet")]
    data_files += [*(tmp_path / "lake/gold/daily/data").rglob("*.parquet")]
    assert data_files
    for data_file in data_files:
        data_file.unlink()
    house.append([])
    for name, layer in [("events", "silver"), ("daily", "gold")]:
        outcome = house.build(name, layer)
        assert outcome.details["mode"] == "incremental" and outcome.details["why"].endswith(": none")
        assert [(o.rule.type, o.passed, o.observed) for o in outcome.rule_outcomes] == [
            ("not_null", True, {"null_count": 0, "row_count": 0}),  # of this run's rows: none
            ("row_count", True, {"row_count": 9 if layer == "silver" else 3}),
        ], name


DAYS = [date(2026, 1, 1) + timedelta(days=n) for n in range(0, 400, 3)]


@pytest.mark.parametrize("column_type", [TimestampType(), DateType()])
def test_the_window_of_some_days_holds_exactly_the_values_on_those_days(spark, column_type):
    rng = random.Random(5)
    moments = [datetime(2026, 1, 1) + timedelta(minutes=rng.randrange(600 * 24 * 60)) for _ in range(400)]
    values = spark.createDataFrame([(m,) for m in moments] + [(None,)], "c timestamp").select(
        F.col("c").cast(column_type).alias("c")
    )
    for days in [
        [date(2026, 2, 3)],
        [date(2026, 2, 3), date(2026, 2, 4), date(2026, 2, 6), None],
        DAYS,
        [],
    ]:
        window = on_days("c", column_type, days)
        assert window is not None
        if len(days) == len(DAYS):  # more ranges than a condition spells out: the days from first to last
            wanted = F.to_date("c").between(DAYS[0], DAYS[-1])
        else:
            wanted = F.to_date("c").isin([d for d in days if d is not None])
            wanted = wanted | F.col("c").isNull() if None in days else wanted
        expected = values.where(F.coalesce(wanted, F.lit(False))).count()
        assert values.where(window).count() == expected, days
    assert on_days("c", StringType(), [date(2026, 2, 3)]) is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"layer": "gold"},
            "incremental.by column 'seq' is not one of the keys (k1, k2): a key's rows must share one day",
        ),
        ({"keys": []}, "incremental.by is for keyed silver targets without cdc"),
        ({"incremental": {"by": "nope"}}, "incremental.by names undeclared column 'nope'"),
        ({"incremental": {"by": "v"}}, "incremental.by column 'v' is string, not a date or timestamp"),
        (
            {"cdc": {"sequence_by": "seq"}, "keep_latest_by": None},
            "incremental.by is for keyed silver targets without cdc",
        ),
    ],
)
def test_a_merge_window_needs_a_keyed_silver_merge_and_a_declared_day_column(fields, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        Target(target_id="silver_events", columns=EVENTS, **{"layer": "silver", **SILVER, **fields})
