"""Names: no catalog name is cut short, folded onto another, or read with a trailing newline by a
warehouse."""

from __future__ import annotations

import psycopg2
import pyarrow as pa
import pytest

from medallion_assets.catalog.loader import CatalogInvalid
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.loading import validate_files
from medallion_assets.naming import InvalidIdentifier, check_identifier
from medallion_assets.storage.warehouse import warehouse_from_url
from tests.conftest import SEED

ROWS = pa.table({"id": pa.array([1, 2], pa.int64()), "amount": [1.5, 2.5]})


def tables(pg_database: str) -> dict[str, int]:
    """Every table of the gold schema, with its row count."""
    with psycopg2.connect(pg_database) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'gold'")
        names = [name for (name,) in cursor.fetchall()]
        counts = {}
        for name in names:
            cursor.execute(f'SELECT count(*) FROM gold."{name}"')
            counts[name] = cursor.fetchone()[0]
        return counts


@pytest.mark.parametrize("name", ["orders\n", "orders\r\n", "orders\x00", "ordérs", "a" * 128])
def test_identifier_patterns_match_the_whole_name(name):
    with pytest.raises(InvalidIdentifier, match="is not a plain name"):
        check_identifier(name)


def test_a_name_postgresql_would_truncate_is_refused_before_any_sql(pg_database):
    long_name = "gold." + "revenue_by_country_and_day_for_the_finance_team_dashboard_v2_final"  # 66 bytes
    with warehouse_from_url(pg_database) as warehouse:
        with pytest.raises(InvalidIdentifier) as refused:
            warehouse.load(long_name, ROWS, "replace")
    assert str(refused.value) == (
        "name 'revenue_by_country_and_day_for_the_finance_team_dashboard_v2_final' is 66 bytes; postgres "
        "keeps only 63, so it would be cut to "
        "'revenue_by_country_and_day_for_the_finance_team_dashboard_v2_fi'"
    )
    assert tables(pg_database) == {}


def test_drop_staging_cannot_drop_the_target_postgresql_would_truncate_its_staging_name_to(pg_database):
    """The attack: a 63-byte target. Its staging name, 80 bytes, is the target's own name once PostgreSQL
    cuts it, so `DROP TABLE IF EXISTS <staging>` would drop the gold table."""
    target = "gold." + "t" * 63
    with warehouse_from_url(pg_database) as warehouse:
        warehouse.load(target, ROWS, "replace")
        with pytest.raises(InvalidIdentifier) as refused:
            warehouse.drop_staging(target)
        assert str(refused.value).startswith(
            f"name '{'t' * 63}__medallion_stage' is 80 bytes; postgres keeps only 63"
        )
        with pytest.raises(InvalidIdentifier):  # a merge would stage in that same truncated name
            warehouse.load(target, ROWS, "merge", ["id"])
    assert tables(pg_database) == {"t" * 63: 2}
    # What the check stands between: PostgreSQL really does cut the staging name down to the target's.
    with psycopg2.connect(pg_database) as connection, connection.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM gold."{"t" * 63}__medallion_stage"')
        assert cursor.fetchone() == (2,)


def test_drop_staging_never_drops_a_table_the_catalog_loads(pg_database):
    with warehouse_from_url(pg_database) as warehouse:
        warehouse.load("gold.daily__medallion_stage", ROWS, "replace")
        with pytest.raises(InvalidIdentifier) as refused:
            warehouse.drop_staging("gold.daily", targets=["gold.daily", "gold.daily__medallion_stage"])
    assert (
        str(refused.value)
        == "gold.daily__medallion_stage is a target table, not a staging table; it is not dropped"
    )
    assert tables(pg_database) == {"daily__medallion_stage": 2}


def test_targets_that_fold_to_one_table_or_name_a_staging_table_are_refused_at_load(tmp_path):
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    clash = tmp_path / "clash.yaml"
    clash.write_text(
        """targets:
  - {target_id: gold_a, layer: gold, kind: warehouse, location: analytics.daily_user_events_copy}
  - {target_id: gold_b, layer: gold, kind: warehouse, location: Analytics.Daily_User_Events_Copy}
  - {target_id: gold_c, layer: gold, kind: warehouse, location: analytics.daily_user_events__medallion_stage}
  - {target_id: gold_d, layer: gold, kind: warehouse, location: analytics.%s}
"""
        % ("x" * 115)
    )
    with pytest.raises(CatalogInvalid) as refused:
        validate_files(store.snapshot(), [SEED, clash])
    assert [str(problem) for problem in refused.value.problems] == [
        f"{clash}:3: targets[gold_b].location: 'Analytics.Daily_User_Events_Copy' is the same table as "
        "target gold_a's (names fold to lower case)",
        f"{clash}:4: targets[gold_c].location: 'analytics.daily_user_events__medallion_stage' ends with "
        "'__medallion_stage', the name of a merge's staging table",
        f"{clash}:5: targets[gold_d].location: 'analytics.{'x' * 115}' is too long: its staging table adds "
        "17 characters and a name may have at most 127",
        f"{clash}:5: targets[gold_d].location: name '{'x' * 115}' is 115 bytes; postgresql (the strictest "
        "warehouse supported; MEDALLION_WAREHOUSE_URL is unset) keeps only 63, so it would be cut to "
        f"'{'x' * 63}'",
    ]
    assert store.snapshot().targets == {}


def test_a_catalog_id_with_a_trailing_newline_is_refused_at_load(tmp_path):
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    store.migrate()
    sneaky = tmp_path / "sneaky.yaml"
    sneaky.write_text('targets:\n  - {target_id: "gold_orders\\n", layer: gold}\n')
    with pytest.raises(CatalogInvalid) as refused:
        validate_files(store.snapshot(), [sneaky])
    [problem] = refused.value.problems
    assert (problem.line, problem.field) == (2, "target_id")
    assert "'gold_orders\\n' is not a plain name" in problem.message
