"""One of two processes racing to load catalog files: migrates, then loads each file in its own transaction.

Prints one tab-separated line per file: the file, then `loaded`, or `refused` and the first problem.
"""

from __future__ import annotations

import sys

from medallion_assets.catalog.loader import CatalogInvalid
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.loading import validate_files


def main(url: str, *files: str) -> None:
    store = CatalogStore(url)
    store.migrate()
    for file in files:
        load(store, file)


def load(store: CatalogStore, file: str) -> None:
    try:
        store.upsert_checked(lambda snapshot: validate_files(snapshot, [file]).rows)
        print(f"{file}\tloaded", flush=True)
    except CatalogInvalid as refused:
        print(f"{file}\trefused\t{refused.problems[0].message}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
