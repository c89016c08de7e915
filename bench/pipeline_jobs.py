"""Benchmark: what one Dagster job per pipeline (named after it) would add to a code-location load.

A catalog of N datasets (N/4 pipelines, generated as in bench/definitions.py) is loaded as Dagster loads a
code location (build, resolve, snapshot: `code_location_load` of bench/definitions.py), `--repeats` times
alternating the order: (a) Medallion's Definitions as they are; (b) the same plus
`define_asset_job(<pipeline id>, AssetSelection.groups(<pipeline's group>))` for every pipeline. Reported:
medians and the ratio (b) / (a).

    python bench/pipeline_jobs.py --sizes 1000 2000 --repeats 2
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from dagster import AssetSelection, Definitions, define_asset_job

sys.path.insert(0, str(Path(__file__).resolve().parent))
from definitions import DATASETS_PER_PIPELINE, catalog_rows, code_location_load  # noqa: E402

from medallion_assets.assets.translator import MedallionTranslator  # noqa: E402
from medallion_assets.catalog.models import Pipeline  # noqa: E402
from medallion_assets.catalog.store import CatalogStore  # noqa: E402
from medallion_assets.definitions import build_definitions  # noqa: E402


def with_pipeline_jobs(defs: Definitions, pipelines: list[Pipeline]) -> Definitions:
    translator = MedallionTranslator()
    jobs = [
        define_asset_job(pipeline.pipeline_id, AssetSelection.groups(translator.get_group_name(pipeline)))
        for pipeline in pipelines
    ]
    return Definitions.merge(defs, Definitions(jobs=jobs))


def bench_size(datasets: int, repeats: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="medallion-bench-jobs-") as folder:
        urls = (f"sqlite:///{folder}/catalog.db", f"{folder}/lake", f"duckdb:///{folder}/w.duckdb")
        store = CatalogStore(urls[0])
        store.migrate()
        store.upsert(catalog_rows(datasets // DATASETS_PER_PIPELINE))
        pipelines = [pipeline for _, pipeline in sorted(store.snapshot().pipelines.items())]
        sides = {
            "as is": lambda: build_definitions(*urls),
            "job per pipeline": lambda: with_pipeline_jobs(build_definitions(*urls), pipelines),
        }
        totals: dict[str, list[float]] = {side: [] for side in sides}
        for repeat in range(repeats):
            for side in list(sides) if repeat % 2 == 0 else list(sides)[::-1]:
                seconds, shape, _ = code_location_load(sides[side])
                assert len(shape) == datasets
                totals[side].append(sum(seconds.values()))
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    for datasets in args.sizes:
        totals = bench_size(datasets, args.repeats)
        medians = {side: statistics.median(values) for side, values in totals.items()}
        print(
            f"{datasets:,} datasets: as is {medians['as is']:.2f} s, job per pipeline "
            f"{medians['job per pipeline']:.2f} s, ratio "
            f"{medians['job per pipeline'] / medians['as is']:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
