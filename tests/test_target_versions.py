"""A warehouse target's new contract version is built beside the old table, which stays for its readers."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import SEED, Medallion


def test_a_new_version_is_built_beside_the_old_table_which_stays(
    medallion: Medallion, tmp_path: Path
) -> None:
    assert medallion.run("user_events_etl").status == "success"
    served = medallion.gold("analytics.daily_user_events")
    assert served, "the first version holds the days"
    catalog = tmp_path / "versioned"
    shutil.copytree(SEED, catalog)
    events = catalog / "user_events_etl.yaml"
    events.write_text(
        events.read_text().replace("    load_mode: replace\n", "    load_mode: replace\n    version: 2\n")
    )
    medallion.load(catalog)

    report = medallion.run("user_events_etl")
    assert report.status == "success"
    [gold] = [asset for asset in report.assets if asset.key == "gold/daily_user_events"]
    assert gold.mode == "full" and gold.why.startswith("the stage's definition changed (")
    assert medallion.gold("analytics.daily_user_events_v2") == served
    assert medallion.gold("analytics.daily_user_events") == served
