"""Benchmark: OpenLineage events of real producers (tests/openlineage_corpus/) through `lineage ingest`.

Per producer file, into a fresh SQLite catalog loaded with the seed: events accepted, refused (each reason
printed), crashes (an exception out of ingestion instead of a per-event refusal: must be 0), and edges
written. Then the cost of judging one event: every event of the corpus checked against the specification
(`validate_event`) `--repeats` times, as events per second, against `json.loads` of the same lines, the
baseline, in the same run.

    python bench/openlineage_corpus.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from medallion_assets.catalog.store import CatalogStore  # noqa: E402
from medallion_assets.loading import validate_files  # noqa: E402
from medallion_assets.openlineage.ingest import ingest_events, lines  # noqa: E402
from medallion_assets.openlineage.schema_validation import EventInvalid, validate_event  # noqa: E402
from medallion_assets.storage.lake.root import Lake  # noqa: E402
from tests.conftest import REPO, SEED  # noqa: E402

CORPUS = REPO / "tests" / "openlineage_corpus"


def bench_producers() -> None:
    print("producer            events  accepted  refused  crashes  edges")
    totals = [0, 0, 0, 0, 0]
    for path in sorted(CORPUS.glob("*.ndjson")):
        with tempfile.TemporaryDirectory() as folder:
            store = CatalogStore(f"sqlite:///{folder}/catalog.db")
            store.migrate()
            store.upsert(validate_files(store.snapshot(), [SEED]).rows)
            with path.open("rb") as events:
                documents = list(lines(events, path.name))
            try:
                report = ingest_events(
                    store, documents, Lake.resolve(f"{folder}/lake"), f"duckdb:///{folder}/wh.duckdb"
                )
                row = [len(documents), report.accepted, len(report.rejected), 0, len(report.edges)]
                reasons = [str(rejection) for rejection in report.rejected]
            except Exception as error:  # noqa: BLE001 (a crash is what this counts)
                row = [len(documents), 0, 0, len(documents), 0]
                reasons = [f"crash: {type(error).__name__}: {error}"]
        totals = [a + b for a, b in zip(totals, row, strict=True)]
        print(f"{path.stem:<18}" + "".join(f"{figure:>9}" for figure in row))
        for reason in reasons:
            print(f"    {reason}")
    print(f"{'all':<18}" + "".join(f"{figure:>9}" for figure in totals))


def bench_validation(repeats: int) -> None:
    texts = [line for path in sorted(CORPUS.glob("*.ndjson")) for line in path.read_text().splitlines()]
    start = time.perf_counter()
    for _ in range(repeats):
        parsed = [json.loads(text) for text in texts]
    parse_seconds = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(repeats):
        for event in parsed:
            try:
                validate_event(event)
            except EventInvalid:
                pass
    validate_seconds = time.perf_counter() - start
    events = len(texts) * repeats
    print(
        f"validate_event: {events / validate_seconds:,.0f} events/s; json.loads of the same lines: "
        f"{events / parse_seconds:,.0f} events/s ({validate_seconds / parse_seconds:.0f}× its time)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    bench_producers()
    bench_validation(args.repeats)


if __name__ == "__main__":
    main()
