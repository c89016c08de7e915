"""`medallion plan`: a corpus of changes to the seed catalog, each with the category of every dataset it
changes and the assets it rebuilds; the warehouse contracts and versions; rows read from Iceberg metadata; the
command's output and exit codes. No Spark: every test here is a unit test."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import pyarrow as pa
import pytest
from click.testing import CliRunner, Result
from dagster import AssetKey, AssetObservation, build_sensor_context, instance_for_test
from sqlalchemy import text

from medallion_assets.assets.translator import MedallionTranslator
from medallion_assets.catalog.loader import merged_snapshot
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import open_catalog
from medallion_assets.change.categories import CATEGORIES
from medallion_assets.change.plan import HELD, WAIVED_EVENT, Plan, plan_files, plan_schema
from medallion_assets.cli.main import main
from medallion_assets.config import DEFAULT_SENSOR_INTERVAL_SECONDS
from medallion_assets.control.steering.flags import read_control_state
from medallion_assets.loading import validate_files
from medallion_assets.sensors.control import build_control_sensor
from medallion_assets.storage.lake.root import Lake
from tests.conftest import SEED
from tests.fixtures.seed import edited_seed

UE, OR, CC, COMMON = "user_events_etl.yaml", "orders_etl.yaml", "customer_changes_etl.yaml", "common.yaml"
GOLD_UE_COLUMNS = "columns: {event_date: date, total_events: bigint, unique_users: bigint}"
UE_DESCRIPTIONS = (
    "    column_descriptions:\n      event_date: the UTC day the events happened\n"
    "      total_events: events that day, after deduplication by event_id\n"
    "      unique_users: distinct user_id values that day\n"
)


@dataclass(frozen=True)
class Change:
    """An edit of the seed's files (file, text, replacement), and what its plan must say."""

    name: str
    edits: list[tuple[str, str, str]]
    categories: dict[str, str]
    rebuilds: list[str] = field(default_factory=list)
    contract: list[str] = field(default_factory=list)  # "target.field" of each contract problem
    other_rows: int = 0


CORPUS = [
    # SQL written differently, meaning the same: no_op.
    Change(
        "sql_spaces_and_comment",
        [(UE, "COUNT(*) AS total_events,", "COUNT(*)    AS   total_events,  -- every event\n")],
        {"gold_daily_user_events": "no_op"},
    ),
    Change(
        "sql_cast_spelled_out",
        [(UE, "SELECT event_ts::DATE AS event_date", "SELECT CAST(event_ts AS DATE) AS event_date")],
        {"gold_daily_user_events": "no_op"},
    ),
    Change(
        "sql_group_by_expression_for_ordinal",
        [(UE, "GROUP BY 1", "GROUP BY CAST(event_ts AS DATE)")],
        {"gold_daily_user_events": "no_op"},
    ),
    Change(
        "sql_keywords_lower_case",
        [(UE, "FROM silver_user_events\n      GROUP BY 1", "from silver_user_events\n      group by 1")],
        {"gold_daily_user_events": "no_op"},
    ),
    Change(
        "sql_join_condition_sides_swapped_and_reindented",
        [
            (
                CC,
                "SUM(o.amount) AS revenue, COUNT(*) AS orders\n      FROM",
                "SUM(o.amount) AS revenue,\n             COUNT(*) AS orders\n      FROM",
            )
        ],
        {"gold_daily_revenue_by_segment": "no_op"},
    ),
    # SQL that means something else: breaking, downstream rebuilt.
    Change(
        "sql_filter_added",
        [(UE, "FROM silver_user_events\n", "FROM silver_user_events WHERE event_type <> 'view'\n")],
        {"gold_daily_user_events": "breaking"},
        ["gold_daily_user_events"],
    ),
    Change(
        "sql_distinct_dropped",
        [(UE, "COUNT(DISTINCT user_id) AS unique_users", "COUNT(user_id) AS unique_users")],
        {"gold_daily_user_events": "breaking"},
        ["gold_daily_user_events"],
    ),
    Change(
        "sql_inner_join_made_left_rebuilds_other_pipeline",
        [(OR, "      JOIN bronze_customers c", "      LEFT JOIN bronze_customers c")],
        {"silver_orders": "breaking"},
        ["silver_orders", "gold_daily_revenue", "gold_daily_revenue_by_segment"],
    ),
    Change(
        "sql_gold_change_rebuilds_nothing_in_other_pipeline",
        [
            (
                OR,
                "COUNT(*) AS orders\n      FROM silver_orders",
                "COUNT(DISTINCT order_id) AS orders\n      FROM silver_orders",
            )
        ],
        {"gold_daily_revenue": "breaking"},
        ["gold_daily_revenue"],
    ),
    # Columns added: non_breaking, the dataset alone rebuilt.
    Change(
        "sql_and_columns_add_a_column",
        [
            (
                UE,
                "COUNT(DISTINCT user_id) AS unique_users",
                "COUNT(DISTINCT user_id) AS unique_users, SUM(value) AS total_value",
            ),
            (
                UE,
                GOLD_UE_COLUMNS,
                "columns: {event_date: date, total_events: bigint, unique_users: bigint, "
                "total_value: double}",
            ),
        ],
        {"gold_daily_user_events": "non_breaking"},
        ["gold_daily_user_events"],
    ),
    Change(
        "silver_column_added",
        [(UE, "event_ts: timestamp, value: double}", "event_ts: timestamp, value: double, device: string}")],
        {"silver_user_events": "non_breaking"},
        ["silver_user_events"],
    ),
    Change(
        "source_column_added",
        [(UE, "event_ts: string, value: double}", "event_ts: string, value: double, device: string}")],
        {"bronze_user_events": "non_breaking"},
        ["bronze_user_events"],
    ),
    Change(
        "contract_column_widened",
        [(OR, 'revenue: "decimal(18,2)", orders: bigint}', 'revenue: "decimal(20,2)", orders: bigint}')],
        {"gold_daily_revenue": "non_breaking"},
        ["gold_daily_revenue"],
    ),
    # Columns, keys, rules that change rows: breaking.
    Change(
        "silver_column_narrowed",
        [(UE, "event_ts: timestamp, value: double}", "event_ts: timestamp, value: float}")],
        {"silver_user_events": "breaking"},
        ["silver_user_events", "gold_daily_user_events"],
    ),
    Change(
        "silver_keys_changed",
        [(UE, "keys: [event_id]", "keys: [event_id, user_id]")],
        {"silver_user_events": "breaking"},
        ["silver_user_events", "gold_daily_user_events"],
    ),
    Change(
        "rule_made_to_quarantine",
        [
            (
                UE,
                "{type: not_null, column: event_id}",
                "{type: not_null, column: event_id, action: quarantine}",
            )
        ],
        {"silver_user_events": "breaking"},
        ["silver_user_events", "gold_daily_user_events"],
    ),
    Change(
        "source_options_changed",
        [
            (
                OR,
                "options: {header: true}\n    description: Order exports",
                "options: {header: true, sep: ;}\n    description: Order exports",
            )
        ],
        {"bronze_orders": "breaking"},
        ["bronze_orders", "silver_orders", "gold_daily_revenue", "gold_daily_revenue_by_segment"],
    ),
    Change(
        "history_tracking_changed",
        [(CC, "track_history_except: [email]", "track_history_except: [email, segment]")],
        {"silver_customer_history": "breaking"},
        ["silver_customer_history", "gold_daily_revenue_by_segment"],
    ),
    Change(
        "load_mode_changed",
        [
            (
                OR,
                "keys: [order_date, country]\n    load_mode: merge",
                "keys: [order_date, country]\n    load_mode: replace",
            )
        ],
        {"gold_daily_revenue": "breaking"},
        ["gold_daily_revenue"],
    ),
    # Rules that only judge: checks_only, nothing rebuilt.
    Change(
        "warn_rule_bound_changed",
        [
            (
                UE,
                "{type: range, column: value, min: 0, severity: warn}",
                "{type: range, column: value, min: -1, severity: warn}",
            )
        ],
        {"silver_user_events": "checks_only"},
    ),
    Change(
        "failing_rule_added",
        [
            (
                UE,
                "      - {type: range, column: total_events, min: 1}\n",
                "      - {type: range, column: total_events, min: 1}\n"
                "      - {type: not_null, column: unique_users}\n",
            )
        ],
        {"gold_daily_user_events": "checks_only"},
    ),
    Change(
        "shared_rule_set_changed",
        [(COMMON, "      - {type: row_count, min: 1}", "      - {type: row_count, min: 1, severity: warn}")],
        {
            "bronze_user_events": "checks_only",
            "bronze_orders": "checks_only",
            "bronze_customers": "checks_only",
            "bronze_customer_changes": "checks_only",
        },
    ),
    # Metadata: nothing runs.
    Change(
        "pipeline_owner",
        [(UE, "owner: team:growth-data", "owner: team:web-data")],
        {
            "bronze_user_events": "metadata_only",
            "silver_user_events": "metadata_only",
            "gold_daily_user_events": "metadata_only",
        },
    ),
    Change(
        "pipeline_schedule",
        [
            (
                CC,
                "    default_retry_id: std_retry\n",
                "    default_retry_id: std_retry\n    schedule: '0 5 * * *'\n",
            )
        ],
        {
            "bronze_customer_changes": "metadata_only",
            "silver_customer_history": "metadata_only",
            "gold_daily_revenue_by_segment": "metadata_only",
        },
    ),
    Change(
        "target_description",
        [(UE, "description: Events and distinct users per day", "description: Events and users per UTC day")],
        {"gold_daily_user_events": "metadata_only"},
    ),
    Change(
        "column_description",
        [(UE, "distinct user_id values that day", "how many distinct users were active")],
        {"gold_daily_user_events": "metadata_only"},
    ),
    Change(
        "target_sla",
        [
            (
                OR,
                'sla: {expected_by: "06:00", timezone: Europe/London}',
                'sla: {expected_by: "07:00", timezone: Europe/London}',
            )
        ],
        {"gold_daily_revenue": "metadata_only"},
    ),
    Change(
        "source_description",
        [(UE, "Clickstream events as JSON lines", "Clickstream events (JSON lines)")],
        {"bronze_user_events": "metadata_only"},
    ),
    Change(
        "table_layout",
        [
            (
                UE,
                'lake_table: {partition_by: ["days(event_ts)"]}',
                'lake_table: {partition_by: ["days(event_ts)"], sort_by: [user_id]}',
            )
        ],
        {"silver_user_events": "metadata_only"},
    ),
    Change(
        "stage_retry_policy",
        [
            (
                UE,
                "target_id: silver_user_events, validation_set_id: silver_user_events_rules}",
                "target_id: silver_user_events, validation_set_id: silver_user_events_rules, "
                "retry_id: no_retry}",
            )
        ],
        {"silver_user_events": "metadata_only"},
    ),
    Change(
        "incremental_mode",
        [(UE, "    keys: [event_id]\n", "    keys: [event_id]\n    incremental: full\n")],
        {"silver_user_events": "metadata_only"},
    ),
    # Rows of no dataset: a change all the same.
    Change(
        "retry_policy",
        [(COMMON, "max_retries: 3, backoff_sec: 30", "max_retries: 5, backoff_sec: 30")],
        {},
        other_rows=1,
    ),
    Change(
        "alternate_cost", [(OR, "kind: alternate, cost: 2", "kind: alternate, cost: 3")], {}, other_rows=1
    ),
    Change(
        "healing_rule_removed",
        [
            (
                COMMON,
                "  - {healing_id: corrupt_source_object, error_code: CorruptSourceObject, "
                "action: quarantine_object}\n",
                "",
            )
        ],
        {},
        other_rows=1,
    ),
    # A new dataset: built in full.
    Change(
        "new_gold_dataset",
        [
            (
                UE,
                "\nvalidation_rules:\n",
                "  - {target_id: gold_event_types, layer: gold, columns: {event_type: string, n: bigint}}\n"
                "\nvalidation_rules:\n",
            ),
            (
                UE,
                "      GROUP BY 1\n",
                "      GROUP BY 1\n  - {pipeline_id: user_events_etl, stage_order: 4, "
                "stage_name: gold_types, input_id: silver_user_events, target_id: gold_event_types,\n"
                "     transform_sql: 'SELECT event_type, COUNT(*) AS n FROM silver_user_events "
                "GROUP BY event_type'}\n",
            ),
        ],
        {"gold_event_types": "non_breaking"},
        ["gold_event_types"],
    ),
    # Warehouse contracts: broken, or kept by a new version.
    Change(
        "contract_column_narrowed",
        [(UE, GOLD_UE_COLUMNS, "columns: {event_date: date, total_events: int, unique_users: bigint}")],
        {"gold_daily_user_events": "breaking"},
        ["gold_daily_user_events"],
        ["gold_daily_user_events.columns"],
    ),
    Change(
        "contract_column_renamed",
        [
            (UE, "AS unique_users", "AS distinct_users"),
            (
                UE,
                GOLD_UE_COLUMNS,
                "columns: {event_date: date, total_events: bigint, distinct_users: bigint}",
            ),
            (UE, UE_DESCRIPTIONS, ""),
            (UE, "unique_users: bigint}}", "distinct_users: bigint}}"),
            (UE, "2, unique_users: 1}\n", "2, distinct_users: 1}\n"),  # the stage's unit test's rows
            (UE, "1, unique_users: 1}\n", "1, distinct_users: 1}\n"),
        ],
        {"gold_daily_user_events": "breaking"},
        ["gold_daily_user_events"],
        ["gold_daily_user_events.columns"],
    ),
    # A unit test alone: shown under the stage it tests; tests never run in a run.
    Change(
        "stage_test_expectation",
        [(UE, "2, unique_users: 1}\n", "2, unique_users: 2}\n")],
        {"gold_daily_user_events": "metadata_only"},
    ),
    Change(
        "contract_broken_under_new_version",
        [
            (UE, GOLD_UE_COLUMNS, "columns: {event_date: date, total_events: int, unique_users: bigint}"),
            (UE, "    load_mode: replace\n", "    load_mode: replace\n    version: 2\n"),
        ],
        {"gold_daily_user_events": "breaking"},
        ["gold_daily_user_events"],
    ),
    Change(
        "new_version_alone",
        [(UE, "    load_mode: replace\n", "    load_mode: replace\n    version: 2\n")],
        {"gold_daily_user_events": "non_breaking"},
        ["gold_daily_user_events"],
    ),
]


def plan_of(stored: CatalogSnapshot, folder: Path, lake: Lake | None = None) -> Plan:
    return plan_files(stored, validate_files(stored, [folder]), lake)


def test_the_corpus_covers_every_category() -> None:
    found = {category for change in CORPUS for category in change.categories.values()}
    assert len(CORPUS) >= 30
    assert found == set(CATEGORIES)


@pytest.mark.parametrize("change", CORPUS, ids=[change.name for change in CORPUS])
def test_plan_of_a_change(change: Change, stored: CatalogSnapshot, tmp_path: Path) -> None:
    plan = plan_of(stored, edited_seed(tmp_path, change.edits))
    assert {d.dataset: d.category for d in plan.datasets} == change.categories
    assert [r.dataset for r in plan.rebuilds] == change.rebuilds
    assert [f"{p.target_id}.{p.field}" for p in plan.contract] == change.contract
    assert len(plan.other_rows) == change.other_rows
    assert plan.nothing_to_do == (set(change.categories.values()) <= {"no_op"} and not change.other_rows)
    assert plan.rows, "every change of the corpus changes a row"
    jsonschema.validate(plan.as_dict(), plan_schema())


def test_the_seed_against_itself_is_nothing(stored: CatalogSnapshot) -> None:
    plan = plan_of(stored, SEED)
    assert (plan.rows, plan.datasets, plan.rebuilds, plan.nothing_to_do) == ([], [], [], True)


def test_rows_changed_field_by_field(stored: CatalogSnapshot, tmp_path: Path) -> None:
    edits = [
        (UE, "owner: team:growth-data", "owner: team:web-data"),
        (UE, "criticality: high", "criticality: low"),
    ]
    plan = plan_of(stored, edited_seed(tmp_path, edits))
    [row] = plan.rows
    assert (row.table, row.key, row.change) == ("pipelines", ("user_events_etl",), "changed")
    assert row.fields == {"owner": ("team:growth-data", "team:web-data"), "criticality": ("high", "low")}


def test_breaking_rebuilds_downstream_upstream_first_with_mode_and_why(
    stored: CatalogSnapshot, tmp_path: Path
) -> None:
    edits = [(OR, "      JOIN bronze_customers c", "      LEFT JOIN bronze_customers c")]
    plan = plan_of(stored, edited_seed(tmp_path, edits))
    rebuilds = {r.dataset: r for r in plan.rebuilds}
    assert rebuilds["silver_orders"].mode == "full"
    assert rebuilds["silver_orders"].why.startswith("its definition changed (")
    assert (rebuilds["gold_daily_revenue"].mode, rebuilds["gold_daily_revenue"].why) == (
        "full",
        "its input silver_orders is rebuilt whole",
    )
    assert rebuilds["gold_daily_revenue_by_segment"].pipeline == "customer_changes_etl"
    assert plan.warehouse_tables() == [
        "analytics.daily_revenue_by_country",
        "analytics.daily_revenue_by_segment",
    ]
    [silver] = plan.datasets
    assert silver.reasons == [
        "transform_sql: removed JOIN `bronze_customers` AS `c` ON `c`...; "
        "inserted LEFT JOIN `bronze_customers` AS `c` O..."
    ]


def test_a_bronze_change_ingests_only_new_objects(stored: CatalogSnapshot, tmp_path: Path) -> None:
    edits = [(UE, "event_ts: string, value: double}", "event_ts: string, value: double, device: string}")]
    [bronze] = plan_of(stored, edited_seed(tmp_path, edits)).rebuilds
    assert (bronze.mode, bronze.rows_read) == ("incremental", None)
    assert bronze.why == "bronze ingests only raw objects it has not read; the rows it holds stay"


def test_a_full_target_downstream_says_so(stored: CatalogSnapshot, tmp_path: Path) -> None:
    """A downstream target of `incremental: full` is recomputed whole whatever its input does."""
    edits = [
        (UE, "{type: not_null, column: event_id}", "{type: not_null, column: event_id, action: quarantine}"),
        (UE, "    load_mode: replace\n", "    load_mode: replace\n    incremental: full\n"),
    ]
    rebuilds = {r.dataset: r for r in plan_of(stored, edited_seed(tmp_path, edits)).rebuilds}
    assert rebuilds["gold_daily_user_events"].why == (
        "its catalog row asks for a full recompute on every run (incremental: full)"
    )


def test_rows_read_come_from_iceberg_metadata(stored: CatalogSnapshot, tmp_path: Path) -> None:
    """Silver's table holds 3 rows: the gold stage rebuilt in full reads them, as its snapshot says."""
    lake = Lake.resolve(tmp_path / "lake")
    catalog = lake.catalog("lake").metadata()
    catalog.create_namespace("silver")
    rows = pa.table({"event_id": ["a", "b", "c"], "user_id": ["u", "u", "v"]})
    catalog.create_table(("silver", "user_events"), schema=rows.schema).append(rows)
    edits = [(UE, "FROM silver_user_events\n", "FROM silver_user_events WHERE event_type <> 'view'\n")]
    [gold] = plan_of(stored, edited_seed(tmp_path, edits), lake).rebuilds
    assert (gold.mode, gold.rows_read) == ("full", 3)


def test_no_lake_yet_reads_unknown_rows_and_creates_nothing(stored: CatalogSnapshot, tmp_path: Path) -> None:
    folder = tmp_path / "lake"
    edits = [(UE, "FROM silver_user_events\n", "FROM silver_user_events WHERE event_type <> 'view'\n")]
    [gold] = plan_of(stored, edited_seed(tmp_path, edits), Lake.resolve(folder)).rebuilds
    assert gold.rows_read is None
    assert not (folder / "iceberg_catalog.db").exists()


def test_contract_problem_names_the_column_and_its_consumers(stored: CatalogSnapshot, tmp_path: Path) -> None:
    edits = [(OR, 'revenue: "decimal(18,2)", orders: bigint}', 'revenue: "decimal(18,2)", orders: int}')]
    [problem] = plan_of(stored, edited_seed(tmp_path, edits)).contract
    assert str(problem) == (
        "targets[gold_daily_revenue].columns: contract column 'orders' of "
        "analytics.daily_revenue_by_country is narrowed from bigint to int; its consumers: the warehouse's "
        "readers (none known to the catalog). Declare version: 2 to build "
        "analytics.daily_revenue_by_country_v2 beside it, or pass --allow-breaking"
    )
    assert problem.waivable


def test_contract_consumers_from_the_graph(stored: CatalogSnapshot, tmp_path: Path) -> None:
    """A dashboard another tool reported reading the table (OpenLineage) is named."""
    readers = (
        "external_lineage:\n  - {upstream: gold_daily_revenue, downstream: looker/finance_dashboard, "
        "job: looker/refresh}\n"
    )
    edits = [
        (OR, "dataset_lineage:\n", readers + "dataset_lineage:\n"),
        (OR, 'revenue: "decimal(18,2)", orders: bigint}', 'revenue: "decimal(18,2)", orders: int}'),
    ]
    [problem] = plan_of(stored, edited_seed(tmp_path, edits)).contract
    assert (
        "is narrowed from bigint to int; its consumers: looker/finance_dashboard. Declare" in problem.message
    )


def test_a_version_that_goes_down_is_refused_even_when_breaking_is_allowed(tmp_path: Path) -> None:
    versioned = edited_seed(
        tmp_path / "v3", [(UE, "    load_mode: replace\n", "    load_mode: replace\n    version: 3\n")]
    )
    stored = merged_snapshot(CatalogSnapshot(), validate_files(CatalogSnapshot(), [versioned]))
    plan = plan_of(
        stored,
        edited_seed(
            tmp_path / "v2", [(UE, "    load_mode: replace\n", "    load_mode: replace\n    version: 2\n")]
        ),
    )
    [problem] = plan.refused(allow_breaking=True)
    assert (
        str(problem)
        == "targets[gold_daily_user_events].version: goes down from 3 to 2: a version only goes up"
    )


def test_a_new_version_builds_its_table_beside_the_old(stored: CatalogSnapshot, tmp_path: Path) -> None:
    edits = [(UE, "    load_mode: replace\n", "    load_mode: replace\n    version: 2\n")]
    plan = plan_of(stored, edited_seed(tmp_path, edits))
    [gold] = plan.datasets
    assert gold.reasons == [
        "version 1 → 2: builds analytics.daily_user_events_v2 beside analytics.daily_user_events"
    ]
    assert plan.warehouse_tables() == ["analytics.daily_user_events_v2"]


# The command as a user runs it (in process: it starts no Spark).


def medallion(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def loaded_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A catalog of its own holding the seed; returns the folder to put edited copies in."""
    monkeypatch.setenv("MEDALLION_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MEDALLION_CATALOG_URL", raising=False)
    monkeypatch.delenv("MEDALLION_LAKE_URL", raising=False)
    assert medallion("catalog", "load", str(SEED)).exit_code == 0
    return tmp_path


def test_cli_nothing_to_do_exits_0(loaded_seed: Path) -> None:
    result = medallion("plan", str(SEED))
    assert (result.exit_code, result.output) == (
        0,
        "no changes: the catalog holds these files' rows already\n",
    )


def test_cli_changes_exit_1_in_text_and_json(loaded_seed: Path) -> None:
    folder = edited_seed(
        loaded_seed, [(UE, "FROM silver_user_events\n", "FROM silver_user_events WHERE value > 0\n")]
    )
    result = medallion("plan", str(folder))
    assert result.exit_code == 1
    assert "  gold_daily_user_events       breaking       transform_sql: inserted WHERE" in result.output
    assert "warehouse tables changed: analytics.daily_user_events" in result.output
    as_json = medallion("plan", str(folder), "--json")
    assert as_json.exit_code == 1
    plan = json.loads(as_json.output)
    jsonschema.validate(plan, plan_schema())
    assert [r["dataset"] for r in plan["rebuilds"]] == ["gold_daily_user_events"]


def test_cli_text_fits_a_screen(loaded_seed: Path) -> None:
    many = "".join(
        f"  - {{notification_id: hook_{n}, channel: webhook, params: {{url_env: HOOK_{n}}}, "
        "events: [run_failed]}\n"
        for n in range(30)
    )
    folder = edited_seed(loaded_seed, [(COMMON, "notifications:\n", "notifications:\n" + many)])
    result = medallion("plan", str(folder))
    assert result.exit_code == 1
    assert len(result.output.splitlines()) <= 24
    assert "  … and 19 more (--json shows all)" in result.output.splitlines()
    assert len(json.loads(medallion("plan", str(folder), "--json").output)["rows"]) == 30


def test_cli_missing_folder_exits_2(loaded_seed: Path) -> None:
    result = medallion("plan", str(loaded_seed / "nowhere"))
    assert (result.exit_code, result.output) == (2, f"no such catalog folder: {loaded_seed / 'nowhere'}\n")


def test_cli_invalid_files_exit_2_with_validates_messages(loaded_seed: Path) -> None:
    folder = edited_seed(
        loaded_seed, [(UE, "input_id: silver_user_events\n", "input_id: silver_user_event\n")]
    )
    result = medallion("plan", str(folder))
    assert result.exit_code == 2
    assert (
        "stages[user_events_etl.gold_daily_aggregate].input_id: unknown source or target 'silver_user_event'"
        in result.output
    )
    assert medallion("catalog", "validate", str(folder)).output == result.output


def test_cli_contract_break_refused_by_plan_and_load_until_allowed(loaded_seed: Path) -> None:
    folder = edited_seed(
        loaded_seed,
        [(UE, GOLD_UE_COLUMNS, "columns: {event_date: date, total_events: int, unique_users: bigint}")],
    )
    refusal = (
        "refused: targets[gold_daily_user_events].columns: contract column 'total_events' of "
        "analytics.daily_user_events is narrowed from bigint to int"
    )
    planned = medallion("plan", str(folder))
    assert planned.exit_code == 2 and refusal in planned.output
    loaded = medallion("catalog", "load", str(folder))
    assert loaded.exit_code == 2 and refusal in loaded.output
    assert medallion("plan", str(folder), "--allow-breaking").exit_code == 1
    assert medallion("catalog", "load", str(folder), "--allow-breaking").exit_code == 0
    assert medallion("plan", str(folder)).exit_code == 0


def test_cli_versioned_target_loads(loaded_seed: Path) -> None:
    folder = edited_seed(
        loaded_seed,
        [
            (UE, GOLD_UE_COLUMNS, "columns: {event_date: date, total_events: int, unique_users: bigint}"),
            (UE, "    load_mode: replace\n", "    load_mode: replace\n    version: 2\n"),
        ],
    )
    assert medallion("catalog", "load", str(folder)).exit_code == 0
    shown = medallion("catalog", "show", "targets", "--json")
    [gold] = [t for t in json.loads(shown.output) if t["target_id"] == "gold_daily_user_events"]
    assert gold["version"] == 2


# The SQL path: the control sensor plans what an UPDATE changed, and holds a contract break.

GOLD_STAGE = "user_events_etl.gold_daily_aggregate"


def test_sql_update_is_planned_recorded_on_the_asset_and_a_contract_break_held(loaded_seed: Path) -> None:
    store = open_catalog()
    sensor = build_control_sensor(
        store.snapshot(), store, MedallionTranslator(), DEFAULT_SENSOR_INTERVAL_SECONDS
    )
    with instance_for_test() as instance:
        cursor = None

        def tick() -> list[AssetObservation]:
            nonlocal cursor
            result = sensor.evaluate_tick(build_sensor_context(instance=instance, cursor=cursor))
            cursor = result.cursor
            return list(result.asset_events)

        assert tick() == []
        with store.engine.begin() as connection:
            connection.execute(
                text(
                    "UPDATE stages SET transform_sql = 'SELECT CAST(event_ts AS DATE) AS event_date, "
                    "COUNT(*) AS total_events, COUNT(DISTINCT user_id) AS unique_users "
                    "FROM silver_user_events WHERE value > 0 GROUP BY 1' "
                    "WHERE stage_name = 'gold_daily_aggregate'"
                )
            )
        [observed] = tick()
        assert observed.asset_key == AssetKey(["gold", "daily_user_events"])
        assert observed.metadata["catalog_change/category"].value == "breaking"
        assert observed.metadata["catalog_change/rebuild"].value.startswith("full: its definition changed (")
        [planned] = store.audit_entries(event="catalog_change")
        assert (planned["status"], planned["details"]["datasets"][0]["category"]) == ("planned", "breaking")
        assert tick() == []  # nothing moved since: nothing recorded again

        with store.engine.begin() as connection:
            connection.execute(
                text("UPDATE targets SET columns = :columns WHERE target_id = 'gold_daily_user_events'"),
                {
                    "columns": json.dumps(
                        {"event_date": "date", "total_events": "int", "unique_users": "bigint"}
                    )
                },
            )
        tick()
        held = store.audit_entries(event="catalog_change")[-1]
        assert held["status"] == "held"
        assert held["error"].startswith(
            "targets[gold_daily_user_events].columns: contract column 'total_events' of "
            "analytics.daily_user_events is narrowed from bigint to int"
        )
        [flag] = [f for f in read_control_state(store).flags if f.entity_id == GOLD_STAGE]
        assert (flag.flag_value, flag.reason) == (False, HELD + held["error"])

        # `medallion enable` lifts the hold, and the sensor does not hold the same problem again.
        assert medallion("enable", "stage", GOLD_STAGE).exit_code == 0
        with store.engine.begin() as connection:
            connection.execute(
                text("UPDATE pipelines SET owner = 'team:web' WHERE pipeline_id = 'user_events_etl'")
            )
        tick()
        [flag] = [f for f in read_control_state(store).flags if f.entity_id == GOLD_STAGE]
        assert flag.flag_value


def test_a_hold_is_released_by_loading_the_same_change_with_allow_breaking(loaded_seed: Path) -> None:
    store = open_catalog()
    sensor = build_control_sensor(
        store.snapshot(), store, MedallionTranslator(), DEFAULT_SENSOR_INTERVAL_SECONDS
    )
    narrowed = {"event_date": "date", "total_events": "int", "unique_users": "bigint"}
    with store.engine.begin() as connection:
        connection.execute(
            text("UPDATE targets SET columns = :columns WHERE target_id = 'gold_daily_user_events'"),
            {"columns": json.dumps(narrowed)},
        )
    with instance_for_test() as instance:
        sensor.evaluate_tick(build_sensor_context(instance=instance))
    assert not next(f for f in read_control_state(store).flags if f.entity_id == GOLD_STAGE).flag_value
    folder = edited_seed(
        loaded_seed,
        [(UE, GOLD_UE_COLUMNS, "columns: {event_date: date, total_events: int, unique_users: bigint}")],
    )
    assert medallion("catalog", "load", str(folder), "--allow-breaking").exit_code == 0
    [flag] = [f for f in read_control_state(store).flags if f.entity_id == GOLD_STAGE]
    assert (flag.flag_value, flag.reason) == (True, "the breaking change was loaded with --allow-breaking")
    [waived] = store.audit_entries(event=WAIVED_EVENT)
    assert waived["details"]["problems"][0].startswith("targets[gold_daily_user_events].columns: contract")
