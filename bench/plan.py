"""Benchmark: `medallion plan` on the seed catalog and on a generated catalog of 1,000 stages with one change.

Each catalog is loaded into a temporary SQLite catalog (untimed). The generated one is bench/definitions.py's:
pipelines shaped like the seed's user_events_etl (bronze → silver → gold with SQL, a rule set per stage),
334 of them, 1,002 stages; its change is one gold stage's SQL (a filter added: breaking). `--repeats` times:

(a) in process, what the command does once Python has started, in two parts: read the catalog and validate
    the files (what `catalog validate` does), then the plan itself;
(b) the command as a user runs it, `medallion plan DIR` in a new process: its wall time, of which the
    imports, its CPU time (user and system: what it costs on a shared machine whatever the load), and whether
    pyspark was imported at all (without it no JVM can start).

Medians are reported. The goals (issue 33): the seed ≤ 1 s, 1,000 stages with one change ≤ 3 s, no JVM.

    python bench/plan.py              # 5 repeats
    python bench/plan.py --repeats 2
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.definitions import GOLD_SQL, catalog_rows  # noqa: E402
from medallion_assets.catalog.store import CatalogStore  # noqa: E402
from medallion_assets.change.plan import plan_files  # noqa: E402
from medallion_assets.loading import validate_files  # noqa: E402

SEED = REPO / "metadata_seed"
STAGES = 1_000


def generated_catalog(folder: Path, changed: bool) -> Path:
    """The generated catalog as one YAML file; `changed`: pipeline 7's gold SQL filters its rows."""
    rows = catalog_rows(-(-STAGES // 3))
    if changed:
        gold = next(s for s in rows["stages"] if s.pipeline_id == "p00007" and s.stage_order == 3)
        gold.transform_sql = GOLD_SQL.format(silver=gold.input_id).replace(
            " GROUP BY", " WHERE value > 0 GROUP BY"
        )
    folder.mkdir(parents=True)
    tables = {
        table: [row.model_dump(mode="json", exclude_defaults=True) for row in found]
        for table, found in rows.items()
    }
    (folder / "catalog.yaml").write_text(yaml.safe_dump(tables, sort_keys=False))
    return folder


def loaded_catalog(url: str, folder: Path) -> CatalogStore:
    store = CatalogStore(url)
    store.migrate()
    from medallion_assets.catalog.snapshot import CatalogSnapshot

    store.upsert(validate_files(CatalogSnapshot(), [folder]).rows)
    return store


# The command in a new process, saying on its last line of stderr how long its imports took (the CLI's and
# those the plan command makes when invoked: the CLI imports a sub-command only when it runs) and whether
# pyspark was imported.
COMMAND = """
import atexit, json, sys, time
start = time.perf_counter()
from medallion_assets.cli import main
import medallion_assets.cli.plan, medallion_assets.change.plan, medallion_assets.loading
imported = time.perf_counter() - start
said = lambda: json.dumps({"imports": imported, "pyspark": "pyspark" in sys.modules})
atexit.register(lambda: print(said(), file=sys.stderr))
main(["plan", sys.argv[1]])
"""


def time_in_process(store: CatalogStore, folder: Path, lake: str) -> tuple[float, float]:
    """Seconds to read and validate, and to plan."""
    start = time.perf_counter()
    stored = store.snapshot()
    loaded = validate_files(stored, [folder])
    validated = time.perf_counter()
    plan = plan_files(stored, loaded, lake)
    planned = time.perf_counter()
    assert plan.rows, "the benchmark's change must show in the plan"
    return validated - start, planned - validated


def time_command(env: dict[str, str], folder: Path) -> tuple[float, float, bool, float]:
    """Wall seconds of the command, of which imports, whether it imported pyspark, and its CPU seconds (user
    and system: on a shared machine, what the command costs whatever the load)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", COMMAND, str(folder)], env=env, capture_output=True, text=True
    )
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 1, done.stderr
    said = json.loads(done.stderr.strip().splitlines()[-1])
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return elapsed, said["imports"], said["pyspark"], cpu


def measure(name: str, stored_folder: Path, planned_folder: Path, work: Path, repeats: int) -> None:
    url = f"sqlite:///{work / name.replace(' ', '_')}.db"
    lake = str(work / "lake")
    store = loaded_catalog(url, stored_folder)
    env = {**os.environ, "MEDALLION_CATALOG_URL": url, "MEDALLION_LAKE_URL": lake, "PYTHONPATH": str(REPO)}
    in_process = [time_in_process(store, planned_folder, lake) for _ in range(repeats)]
    command = [time_command(env, planned_folder) for _ in range(repeats)]
    stages = len(store.snapshot().stages())
    validate, plan = (statistics.median(t[part] for t in in_process) for part in (0, 1))
    wall, imports, cpu = (statistics.median(c[part] for c in command) for part in (0, 1, 3))
    print(
        f"{name:<22} {stages:>6,} stages  read+validate {validate:6.3f} s  plan {plan:6.3f} s  |  "
        f"command {wall:6.3f} s (imports {imports:6.3f} s, CPU {cpu:6.3f} s)  "
        f"pyspark imported: {any(c[2] for c in command)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        changed_seed = work / "seed_changed"
        shutil.copytree(SEED, changed_seed)
        events = changed_seed / "user_events_etl.yaml"
        events.write_text(
            events.read_text().replace(
                "FROM silver_user_events\n", "FROM silver_user_events WHERE value > 0\n"
            )
        )
        measure("seed, one change", SEED, changed_seed, work, args.repeats)
        measure(
            "generated, one change",
            generated_catalog(work / "generated", changed=False),
            generated_catalog(work / "generated_changed", changed=True),
            work,
            args.repeats,
        )


if __name__ == "__main__":
    main()
