"""Change data capture from whole snapshots (`cdc.from_snapshot`): consecutive snapshots are compared, a key
whose row changed is updated, a key missing from the next snapshot is deleted (type 1) or its version closed
(type 2), one that comes back is inserted again. Built batch by batch, the tables equal one full build."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from medallion_assets.catalog.models import Stage, Target
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.versions import definition, stage_fingerprint
from tests.test_incremental import COLUMNS, Lakehouse

SNAPSHOTS = {"sequence_by": "seq", "from_snapshot": True, "except_columns": ["op"]}
DATASETS = {
    "scd1": {"keys": ["k1", "k2"], "cdc": SNAPSHOTS, "scd_type": 1},
    "scd2": {"keys": ["k1", "k2"], "cdc": SNAPSHOTS, "scd_type": 2, "track_history_except": ["w"]},
}


def snapshot(seq: int | str, *rows: tuple) -> list[tuple]:
    """One snapshot's rows, (k1, k2, v, w) each, as bronze events exported at `seq` (op is unused)."""
    return [(k1, k2, str(seq), "S", v, w) for k1, k2, v, w in rows]


def test_three_snapshots_of_customers_insert_change_delete_and_reinsert(spark, tmp_path):
    house = Lakehouse(spark, tmp_path, DATASETS)
    # Customers (k1, k2) with their segment (v, tracked) and email (w, untracked in type 2).
    house.append(
        snapshot(
            10,
            (1, "eu", "standard", "one@mail.example"),
            (2, "eu", "plus", "two@mail.example"),
            (3, "us", "standard", "three@mail.example"),
        )
    )
    for name in DATASETS:
        assert house.build(name).details["mode"] == "full"
    # Customer 1 moves to premium, customer 2 is gone, customer 3 is as it was.
    house.append(
        snapshot(
            20,
            (1, "eu", "premium", "one@mail.example"),
            (3, "us", "standard", "three@mail.example"),
        )
    )
    for name in DATASETS:
        assert house.build(name).details["mode"] == "incremental"
    assert house.rows("scd1") == [
        (1, "eu", 20, "premium", "one@mail.example"),
        (3, "us", 20, "standard", "three@mail.example"),
    ]
    # Customer 2 is back; customer 3 changed only its email.
    house.append(
        snapshot(
            30,
            (1, "eu", "premium", "one@mail.example"),
            (2, "eu", "plus", "two@mail.example"),
            (3, "us", "standard", "three@work.example"),
        )
    )
    outcomes = {name: house.build(name) for name in DATASETS}
    assert {name: outcome.details["mode"] for name, outcome in outcomes.items()} == {
        "scd1": "incremental",
        "scd2": "incremental",
    }
    assert [(o.rule.name, o.passed) for o in outcomes["scd2"].rule_outcomes] == [
        ("scd2_one_current_row", True),
        ("scd2_no_overlapping_validity", True),
        ("scd2_unique_valid_from", True),
    ]
    assert house.rows("scd1") == [
        (1, "eu", 30, "premium", "one@mail.example"),
        (2, "eu", 30, "plus", "two@mail.example"),
        (3, "us", 30, "standard", "three@work.example"),
    ]
    # (k1, k2, seq, v, w, __valid_from, __valid_to, __is_current): a version holds the values of the last
    # snapshot it was in.
    assert house.rows("scd2") == [
        (1, "eu", 10, "standard", "one@mail.example", 10, 20, False),
        (1, "eu", 30, "premium", "one@mail.example", 20, None, True),
        (2, "eu", 10, "plus", "two@mail.example", 10, 20, False),
        (2, "eu", 30, "plus", "two@mail.example", 30, None, True),
        (3, "us", 30, "standard", "three@work.example", 10, None, True),
    ]
    for name in DATASETS:
        assert house.build(f"{name}_full").details["mode"] == "full"
        assert house.rows(f"{name}_full") == house.rows(name)


def random_snapshots(rng: random.Random) -> list[list[tuple]]:
    """Batches of zero to two snapshots of a few compound keys, mostly in order, some late (a sequence
    already delivered, or before it): keys appear, change (tracked or untracked columns, nulls), vanish and
    come back; a key may be twice in one snapshot, and a row's sequence may not cast (rejected)."""
    keys = [(rng.randint(1, 2), rng.choice("ab")) for _ in range(5)]
    delivered: list[int] = []
    batches = []
    for number in range(rng.randint(3, 5)):
        batch: list[tuple] = []
        # The first build reads a bronze table that holds a snapshot, as after a first ingest.
        for _ in range(1 if number == 0 else rng.choice([0, 1, 1, 2])):
            late = delivered and rng.random() < 0.2
            seq = rng.randint(1, max(delivered)) if late else max(delivered, default=0) + rng.randint(1, 3)
            delivered.append(seq)
            rows = [
                (k1, k2, rng.choice(["x", "y", None]), rng.choice(["p", "q", None]))
                for k1, k2 in rng.sample(keys, rng.randint(1 if number == 0 else 0, len(keys)))
            ]
            rows += [(k1, k2, "z", "p") for k1, k2, *_ in rows if rng.random() < 0.1]
            batch += snapshot(seq, *rows)
            if rows and rng.random() < 0.1:
                batch += snapshot("unparseable", rows[0])
        batches.append(batch)
    return batches


@pytest.mark.parametrize("seed", range(5))
def test_built_batch_by_batch_equals_one_full_build_over_every_snapshot(spark, tmp_path, seed):
    rng = random.Random(seed)
    house = Lakehouse(spark, tmp_path, DATASETS)
    batches = random_snapshots(rng)
    applied: set[int] = set()
    for number, batch in enumerate(batches):
        house.append(batch)
        sequences = {int(event[2]) for event in batch if event[2].isdigit()}
        late = applied and sequences and min(sequences) <= max(applied)
        applied |= sequences
        for name in DATASETS:
            details = house.build(name).details
            expected = "full" if number == 0 or late else "incremental"
            assert details["mode"] == expected, (name, details, batches)
    for name in DATASETS:
        assert house.build(f"{name}_full").details["mode"] == "full"
        assert house.rows(name) == house.rows(f"{name}_full"), (name, batches)
        assert house.quarantine(name) == house.quarantine(f"{name}_full"), name


def test_a_late_snapshot_recomputes_whole_saying_why_and_the_result_is_correct(spark, tmp_path):
    house = Lakehouse(spark, tmp_path, {"scd2": DATASETS["scd2"]})
    house.append(snapshot(10, (1, "a", "red", "p")) + snapshot(30, (1, "a", "red", "p")))
    house.build("scd2")
    # Between the two, key 1 was missing and key 2 was there: as if it had arrived first.
    house.append(snapshot(20, (2, "a", "blue", "q")))
    late = house.build("scd2")
    assert (late.details["mode"], late.details["why"]) == (
        "full",
        "a snapshot arrived late (seq 20 is not after 30, the latest applied): every key of the snapshots "
        "after it may change",
    )
    assert house.rows("scd2") == [
        (1, "a", 10, "red", "p", 10, 20, False),
        (1, "a", 30, "red", "p", 30, None, True),
        (2, "a", 20, "blue", "q", 20, 30, False),
    ]
    # The next snapshot in order is applied incrementally again.
    house.append(snapshot(40, (2, "a", "blue", "q")))
    assert house.build("scd2").details["mode"] == "incremental"
    assert house.build("scd2_full").details["mode"] == "full"
    assert (
        house.rows("scd2")
        == house.rows("scd2_full")
        == [
            (1, "a", 10, "red", "p", 10, 20, False),
            (1, "a", 30, "red", "p", 30, 40, False),
            (2, "a", 20, "blue", "q", 20, 30, False),
            (2, "a", 40, "blue", "q", 40, None, True),
        ]
    )


@pytest.mark.parametrize(
    ("cdc", "message"),
    [
        (
            {"apply_as_deletes": "op = 'D'"},
            "apply_as_deletes is for change feeds: with from_snapshot, a key missing from a snapshot is "
            "deleted",
        ),
        (
            {"apply_as_truncates": "op = 'T'"},
            "apply_as_truncates is for change feeds: with from_snapshot, a snapshot holds every row",
        ),
        (
            {"ignore_null_updates": True},
            "ignore_null_updates is for change feeds: with from_snapshot, a null is the column's value",
        ),
    ],
)
def test_what_only_a_change_feed_means_is_refused_with_snapshots(cdc, message):
    with pytest.raises(ValidationError) as raised:
        Target(
            target_id="silver_customers",
            layer="silver",
            columns=COLUMNS,
            keys=["k1", "k2"],
            cdc={**SNAPSHOTS, **cdc},
            scd_type=1,
        )
    assert [error["msg"] for error in raised.value.errors()] == [f"Value error, {message}"]


def test_from_snapshot_is_part_of_the_definition_only_where_set():
    stage = Stage(pipeline_id="p", stage_order=1, stage_name="s", input_id="bronze_feed", target_id="silver")
    feed, snapshots = (
        Target(target_id="silver", layer="silver", keys=["k1"], cdc={"sequence_by": "seq", **extra})
        for extra in ({}, {"from_snapshot": True})
    )
    # A change feed keeps the fingerprint it had before from_snapshot existed: no full recompute on upgrade.
    assert stage_fingerprint(stage, feed, CatalogSnapshot()) == "3a61024340c1"
    assert definition(stage, snapshots, CatalogSnapshot())["output"]["cdc"] == {
        "sequence_by": "seq",
        "from_snapshot": True,
        "ignore_null_updates": False,
        "except_columns": [],
    }
