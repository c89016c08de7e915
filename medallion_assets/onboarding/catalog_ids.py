"""Catalog ids for onboarded datasets and raw sources: the catalog's own where it has one, else a new one
made from the table's name, unique among the catalog's ids and those given out before."""

from __future__ import annotations

import re
from typing import cast

from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.naming import check_identifier
from medallion_assets.onboarding.datasets import Datasets
from medallion_assets.onboarding.layers import LayerDecider
from medallion_assets.onboarding.statements import CopyLoad
from medallion_assets.onboarding.temporary_tables import StatementLineage


def slug(text: str) -> str:
    """Text as a name: lower case, runs of other characters as one underscore."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


class CatalogIds:
    """Gives each dataset and raw source its catalog id, the same one every time it is asked."""

    def __init__(self, snapshot: CatalogSnapshot, datasets: Datasets, layers: LayerDecider) -> None:
        self.snapshot = snapshot
        self.datasets = datasets
        self.layers = layers
        self.taken = set(snapshot.targets) | set(snapshot.sources)
        self.ids: dict[str, str] = {}
        self.source_ids: dict[str, str] = {}

    def target_id(self, name: str) -> str:
        """The dataset's catalog id: its own if it has one, else `<layer>_<table>` made unique."""
        dataset = self.datasets.dataset(name)
        if dataset.existing:
            return dataset.existing.target_id
        if name not in self.ids:
            layer = self.layers.decided(name).layer
            schema, _, table = name.rstrip("/").rpartition("/" if name.startswith("s3://") else ".")
            table = slug(table) or "dataset"
            own = table if table.startswith(f"{layer}_") else f"{layer}_{table}"
            self.ids[name] = self._free([own, f"{layer}_{slug(schema.rpartition('/')[2])}_{table}"])
        return self.ids[name]

    def source_id(self, copy: CopyLoad) -> str:
        """The raw source's id: the catalog's source at the same S3 path, else `<table>_raw` made unique."""
        existing = next(
            (s for s in self.snapshot.sources.values() if s.s3_path.rstrip("/") == copy.s3_path.rstrip("/")),
            None,
        )
        if existing:
            return existing.source_id
        if copy.s3_path not in self.source_ids:
            schema, _, table = copy.target.rpartition(".")
            self.source_ids[copy.s3_path] = self._free(
                [f"{slug(table)}_raw", f"{slug(schema)}_{slug(table)}_raw"]
            )
        return self.source_ids[copy.s3_path]

    def upstream_id(self, lineage: StatementLineage, source: str) -> str:
        """A source's catalog id: the raw source of a COPY, or the dataset of a table."""
        if not source.startswith("s3://"):
            return self.target_id(source)
        # Statements name tables; an S3 path is what a COPY or external table reads.
        return self.source_id(cast(CopyLoad, lineage.parsed))

    def _free(self, candidates: list[str]) -> str:
        for candidate in candidates:
            if candidate not in self.taken:
                break
        else:
            base, suffix = candidates[-1], 2
            while f"{base}_{suffix}" in self.taken:
                suffix += 1
            candidate = f"{base}_{suffix}"
        self.taken.add(check_identifier(candidate, "catalog id"))
        return candidate
