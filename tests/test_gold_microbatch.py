"""Gold by day (`incremental: {by, lookback}`, dbt microbatch's idea): a gold stage that joins silver's events
to a dimension and ranks within each day and sums over three days recomputes only the days silver's changes
touched, and the `lookback` days after each, reading the dimension whole. Built batch by batch, it equals a
twin recomputed whole, and the warehouse equals it; a lookback shorter than the window keeps exactly the days
it promises to; a changed dimension recomputes whole; and the catalog refuses what cannot run by days."""

from __future__ import annotations

import random
from datetime import date, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError
from pyspark.sql import SparkSession

from medallion_assets.catalog.models import Stage, Target
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.engine.stage import ASKED_FULL, gold_mode_description
from medallion_assets.loading import check_references
from medallion_assets.storage.lake.layout import table_of
from medallion_assets.storage.warehouse import Warehouse, warehouse_from_url
from tests.test_incremental import Lakehouse
from tests.test_merge_windows import EVENTS, FIRST_DAY, SILVER

SEGMENTS = {"v": "string", "segment": "string"}
# Per day and segment of the events joined to their segment: a rank within the day, and a sum over the day
# and the two before it, which reaches two days back (a lookback of 2).
DAILY_SEGMENTS = """
WITH daily AS (
  SELECT CAST(e.seq AS DATE) AS day, d.segment, COUNT(*) AS events, MAX(e.k1) AS top_key
  FROM silver_events AS e JOIN silver_segments AS d ON e.v = d.v
  GROUP BY CAST(e.seq AS DATE), d.segment
)
SELECT day, segment, events, top_key,
  RANK() OVER (PARTITION BY day ORDER BY events DESC, segment) AS rank_in_day,
  SUM(events) OVER (PARTITION BY segment ORDER BY UNIX_DATE(day) RANGE BETWEEN 2 PRECEDING AND CURRENT ROW)
    AS events_3_days
FROM daily
"""
GOLD_COLUMNS = {
    "day": "date",
    "segment": "string",
    "events": "bigint",
    "top_key": "int",
    "rank_in_day": "int",
    "events_3_days": "bigint",
}


class SegmentHouse(Lakehouse):
    """silver_events (merged by day, from the bronze feed), silver_segments (a dimension the test writes),
    and gold stages over both: `gold_<name>` declared with each given `incremental`."""

    def __init__(
        self, spark: SparkSession, root: Path, golds: dict[str, object], warehouse: Warehouse | None
    ):
        super().__init__(spark, root, {}, warehouse)
        events = Target(target_id="silver_events", layer="silver", columns=EVENTS, **SILVER)
        self.add_stage(events, 2, "build_events", "bronze_feed")
        self.snapshot.add(
            "targets", Target(target_id="silver_segments", layer="silver", columns=SEGMENTS, keys=["v"])
        )
        for order, (name, incremental) in enumerate(golds.items(), start=3):
            loaded = {"kind": "warehouse", "location": f"analytics.{name}", "load_mode": "merge"}
            target = Target(
                target_id=f"gold_{name}",
                layer="gold",
                columns=GOLD_COLUMNS,
                keys=["day", "segment"],
                incremental=incremental,
                **(loaded if warehouse is not None else {}),
            )
            self.add_stage(
                target,
                order,
                f"daily_{name}",
                "silver_events",
                inputs=["silver_segments"],
                transform_sql=DAILY_SEGMENTS,
            )
        self.segments_table = table_of(self.snapshot.targets["silver_segments"])
        self.segments = 0

    def add_segments(self, rows: list[tuple[str, str]]) -> None:
        """A commit of the dimension: rows (v, segment) appended."""
        self.segments += 1
        frame = self.spark.createDataFrame(rows, "v string, segment string")
        self.lake.ensure(self.segments_table, frame.schema, None)
        self.lake.append(self.segments_table, frame, f"segments{self.segments}")

    def warehouse_rows(self, name: str) -> list[tuple]:
        assert self.warehouse is not None
        rows = self.warehouse.query(f"SELECT * FROM analytics.{name}")
        return sorted((tuple(row.values()) for row in rows), key=repr)


@pytest.fixture
def warehouse(tmp_path):
    with warehouse_from_url(f"duckdb:///{tmp_path}/warehouse.duckdb") as opened:
        yield opened


def event(key: int, day: int, v: str, w: str = "p") -> tuple:
    """(k1, k2, seq, op, v, w): key `key`'s event on day `day` (from FIRST_DAY), its time fixed by its key."""
    moment = FIRST_DAY + timedelta(days=day, seconds=(key * 7919) % 86_400)
    return (key, "a", moment.strftime("%Y-%m-%d %H:%M:%S"), "I", v, w)


def day(number: int) -> date:
    return (FIRST_DAY + timedelta(days=number)).date()


# Each seed is 4 batches, each built through silver, gold by day and its full twin: 30 to 60 s a seed on two
# shared cores.
@pytest.mark.parametrize("seed", range(2))
def test_gold_built_day_by_day_with_a_lookback_as_long_as_its_window_equals_a_full_recompute(
    spark, tmp_path, warehouse, seed
):
    build_day_by_day(spark, tmp_path, seed, warehouse)


def build_day_by_day(spark: SparkSession, root: Path, seed: int, warehouse: Warehouse | None = None) -> None:
    """Random batches of events, late ones and newer copies among them, built through silver, gold by day
    (a lookback as long as its window) and its full twin: after each, gold by day ran incrementally and
    equals the twin, and so does the warehouse when there is one. Also run through Spark Connect
    (tests/test_spark_anywhere.py)."""
    rng = random.Random(seed)
    house = SegmentHouse(spark, root, {"by_day": {"by": "day", "lookback": 2}, "whole": "full"}, warehouse)
    house.add_segments([("x", "retail"), ("y", "pro")])  # z has no segment: the join drops its events
    sent: list[tuple] = []
    for number in range(4):
        batch = []
        for key in range(number * 10, number * 10 + rng.randint(3, 8)):
            late = rng.choice([0, 0, 1, 2, 3])  # up to three days before the batch's own
            batch.append(event(key, max(number * 2 - late, 0), rng.choice("xyz")))
        for _ in range(rng.randint(0, 3) if sent else 0):
            # A copy of an earlier event, newer by w, with another v: its day's segments change.
            copy = rng.choice(sent)
            batch.append((*copy[:4], rng.choice("xyz"), rng.choice("st")))
        house.append(batch)
        sent += batch
        house.build("events")
        by_day = house.build("by_day", "gold")
        whole = house.build("whole", "gold")
        assert whole.details["why"] == ASKED_FULL
        if number == 0:
            assert by_day.details["why"] == "first build: no earlier commit of this stage"
        else:
            assert by_day.details["mode"] == "incremental", by_day.details
        assert house.rows("by_day", "gold") == house.rows("whole", "gold"), (seed, number, batch)
        if warehouse is not None:
            assert house.warehouse_rows("by_day") == house.rows("by_day", "gold"), (seed, number)


def test_a_late_event_recomputes_its_day_and_the_lookback_after_it_and_the_warehouse_follows(
    spark, tmp_path, warehouse
):
    house = SegmentHouse(spark, tmp_path, {"by_day": {"by": "day", "lookback": 2}}, warehouse)
    house.add_segments([("x", "retail"), ("y", "pro")])
    house.append(
        [event(key, key, "x") for key in range(8)] + [event(20, 3, "y")]
    )  # one a day; day 3: pro too
    house.build("events")
    house.build("by_day", "gold")
    silver = house.lake.current_snapshot(table_of(house.snapshot.targets["silver_events"]))
    # A late event on day 1 of another segment, and day 3's pro event moved to segment-less z: days 1 and 3
    # are touched, days 1 to 5 recomputed, from days 0 to 5 of silver.
    house.append([event(30, 1, "y"), (*event(20, 3, "z")[:5], "q")])
    house.build("events")
    late = house.build("by_day", "gold")
    assert late.details["why"] == (
        f"recomputes the days of day that the changes of silver_events after snapshot {silver} touched, and "
        "the 2 days after each (a lookback of 2 days: a day is made from the rows of silver_events of that "
        "day and the 2 days before)"
    )
    # Read: silver's 8 events of days 0 to 5, and the dimension's 2 rows.
    assert (late.details["days_recomputed"], late.rows_read) == (5, 8 + 2)
    # Day 1 gains a pro row, ranked before retail's; day 3 loses its pro row.
    retail = [(day(n), "retail", 1, n, 2 if n == 1 else 1, min(n, 2) + 1) for n in range(8)]
    expected = sorted([*retail, (day(1), "pro", 1, 30, 1, 1)], key=repr)
    assert house.rows("by_day", "gold") == expected
    # So does the warehouse: the 6 rows of days 1 to 5 upserted, day 3's pro row deleted.
    assert house.warehouse_rows("by_day") == expected
    assert (late.load.rows_loaded, late.load.rows_in_table) == (7, 9)
    nothing = house.build("by_day", "gold")
    assert nothing.details["why"].endswith(": none") and nothing.load is None


def test_a_lookback_shorter_than_the_window_keeps_the_days_after_a_change_as_it_promises(spark, tmp_path):
    house = SegmentHouse(spark, tmp_path, {"same_day": {"by": "day"}, "whole": "full"}, None)
    house.add_segments([("x", "retail")])
    house.append([event(key, key, "x") for key in range(5)])
    house.build("events")
    house.build("same_day", "gold")
    house.build("whole", "gold")
    house.append([event(10, 1, "x")])  # a second event on day 1
    house.build("events")
    assert house.build("same_day", "gold").details["days_recomputed"] == 1
    house.build("whole", "gold")
    # Declared lookback 0: a day is made from its own events alone. Day 1 is recomputed from day 1's events,
    # so its three-day sum holds day 1 alone; days 2 and 3, whose sums reach day 1, are not recomputed: they
    # keep the sums of their last recompute. Every other column, and every other day, is as a full recompute
    # makes it.
    same_day, whole = house.rows("same_day", "gold"), house.rows("whole", "gold")
    assert [row for row in same_day if row not in whole] == [
        (day(1), "retail", 2, 10, 1, 2),
        (day(2), "retail", 1, 2, 1, 3),
        (day(3), "retail", 1, 3, 1, 3),
    ]
    assert [row for row in whole if row not in same_day] == [
        (day(1), "retail", 2, 10, 1, 3),
        (day(2), "retail", 1, 2, 1, 4),
        (day(3), "retail", 1, 3, 1, 4),
    ]
    assert gold_mode_description(
        next(s for s in house.snapshot.stages() if s.target_id == "gold_same_day"),
        house.snapshot.targets["gold_same_day"],
        house.snapshot,
    ) == (
        "Incremental by day: recomputes the days of day (the days of silver_events.seq) that changes of "
        "silver_events touch, with no lookback (whole on a first build, after a definition change or a "
        "rollback). Its dimension inputs (silver_segments) are read whole; a change to one recomputes it "
        "whole."
    )


def test_a_change_to_the_dimension_recomputes_whole_and_says_why(spark, tmp_path):
    house = SegmentHouse(spark, tmp_path, {"by_day": {"by": "day", "lookback": 2}, "whole": "full"}, None)
    house.add_segments([("x", "retail")])
    house.append([event(key, key, "x" if key % 2 else "y") for key in range(4)])
    house.build("events")
    house.build("by_day", "gold")
    house.add_segments([("y", "pro")])  # y's events, on days 0 and 2, now join
    house.append([event(10, 3, "x")])
    house.build("events")
    changed = house.build("by_day", "gold")
    assert (changed.details["mode"], changed.details["why"]) == (
        "full",
        "the dimension input silver_segments changed since the last commit",
    )
    house.build("whole", "gold")
    assert house.rows("by_day", "gold") == house.rows("whole", "gold")
    # The full build read the dimension's new version: the next run goes on by day.
    house.append([event(11, 0, "y")])
    house.build("events")
    assert house.build("by_day", "gold").details["mode"] == "incremental"
    house.build("whole", "gold")
    assert house.rows("by_day", "gold") == house.rows("whole", "gold")


GOLD = {"target_id": "gold_daily", "layer": "gold", "columns": GOLD_COLUMNS}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"incremental": {"by": "day", "lookback": -1}},
            "incremental.lookback is -1: give a number of days from 0 to 366",
        ),
        (
            {"incremental": {"by": "day", "lookback": 367}},
            "incremental.lookback is 367: give a number of days from 0 to 366",
        ),
        (
            {"incremental": {"by": "day"}, "columns": None},
            "incremental.by of a gold target names one of its columns: declare them",
        ),
        ({"incremental": {"by": "when"}}, "incremental.by names undeclared column 'when'"),
        (
            {"incremental": {"by": "segment"}},
            "incremental.by column 'segment' is string, not a date or timestamp",
        ),
        (
            {"incremental": {"by": "day"}, "keys": ["segment"]},
            "incremental.by column 'day' is not one of the keys (segment): a key's rows must share one day",
        ),
        (
            {"layer": "silver", "keys": ["segment"], "incremental": {"by": "day", "lookback": 1}},
            "incremental.lookback is for gold targets: a silver merge searches exactly the days of its new "
            "rows",
        ),
        ({"layer": "bronze", "incremental": {"by": "day"}}, "incremental.by is for silver and gold targets"),
    ],
)
def test_the_declaration_is_checked_with_exact_messages(fields, message):
    with pytest.raises(ValidationError) as refused:
        Target(**{**GOLD, **fields})
    [error] = refused.value.errors()
    assert error["msg"] == f"Value error, {message}"


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        (DAILY_SEGMENTS, None),
        (
            "SELECT MAX(CAST(seq AS DATE)) AS day, d.segment FROM silver_events AS e "
            "JOIN silver_segments AS d ON e.v = d.v GROUP BY d.segment",
            "day is MAX(CAST(e.seq AS DATE)), not a column or the day of one",
        ),
        (
            "SELECT CAST(d.segment AS DATE) AS day, d.segment FROM silver_events AS e "
            "JOIN silver_segments AS d ON e.v = d.v",
            "day is made from silver_segments.segment, a column of the dimension input silver_segments, not "
            "of the main input silver_events",
        ),
        (
            "SELECT CAST(k2 AS DATE) AS day, segment FROM silver_events AS e JOIN silver_segments AS d "
            "ON e.v = d.v",
            "day is made from silver_events.k2, which is string, not a date or timestamp",
        ),
        (
            "SELECT DATE_TRUNC('MONTH', seq) AS day, segment FROM silver_events "
            "JOIN silver_segments USING (v)",
            "day is DATE_TRUNC('MONTH', silver_events.seq), not a column or the day of one",
        ),
        (
            "SELECT seq AS moment, segment FROM silver_events JOIN silver_segments USING (v)",
            "its SQL outputs no column day",
        ),
    ],
)
def test_catalog_validate_refuses_a_day_its_sql_does_not_make_from_the_main_input(sql, why):
    snapshot = CatalogSnapshot()
    snapshot.add("targets", Target(target_id="silver_events", layer="silver", columns=EVENTS, **SILVER))
    snapshot.add("targets", Target(target_id="silver_segments", layer="silver", columns=SEGMENTS))
    snapshot.add("targets", Target(**GOLD, incremental={"by": "day", "lookback": 1}))
    stage = Stage(
        pipeline_id="feed",
        stage_order=3,
        stage_name="daily",
        input_id="silver_events",
        inputs=["silver_segments"],
        target_id="gold_daily",
        transform_sql=sql,
    )
    snapshot.add("stages", stage)
    problems = [problem for problem in check_references(snapshot, {}) if problem.field == "incremental"]
    expected = (
        []
        if why is None
        else [f"catalog: targets[gold_daily].incremental: it cannot be recomputed by the days of day: {why}"]
    )
    assert [str(problem) for problem in problems] == expected
    description = gold_mode_description(stage, snapshot.targets["gold_daily"], snapshot)
    if why is not None:
        assert (
            description
            == f"Recomputed whole on every run: it cannot be recomputed by the days of day: {why}."
        )
