"""The tables onboarded statements name, each as a dataset with the statements that write or change it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from medallion_assets.catalog.models import Target
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.onboarding.statements import DEFAULT_SCHEMA, DIRECT_KINDS, LOAD_KINDS
from medallion_assets.onboarding.temporary_tables import StatementLineage


def canonical_name(name: str) -> str:
    """`table` → `public.table`; `schema.table` and s3:// urls as they are, in lower case but for urls."""
    if name.startswith("s3://"):
        return name
    return name.lower() if "." in name else f"{DEFAULT_SCHEMA}.{name.lower()}"


@dataclass
class Dataset:
    """A table the statements name, the catalog's target for it if any, and the statements (by index) that
    write its rows or change them in place."""

    name: str
    existing: Target | None
    writers: list[int] = field(default_factory=list)
    changers: list[int] = field(default_factory=list)

    @property
    def statements(self) -> list[int]:
        return self.writers + self.changers


class Datasets:
    """Every table the statements name, matched to the catalog by location, or by id for unqualified names.

    ``lineages`` are the statements' lineages by index; None marks a statement that failed or was skipped.
    """

    def __init__(self, snapshot: CatalogSnapshot, lineages: list[StatementLineage | None]) -> None:
        self.lineages = lineages
        self._known: dict[str, Target] = {}
        for target in snapshot.targets.values():
            self._known.setdefault(canonical_name(target.target_id), target)
        for target in snapshot.targets.values():
            if target.location:
                self._known[canonical_name(target.location)] = target
        self._by_name: dict[str, Dataset] = {}
        for index, lineage in enumerate(lineages):
            if lineage is None:
                continue
            dataset = self.dataset(lineage.target)
            (dataset.writers if lineage.kind in (*DIRECT_KINDS, *LOAD_KINDS) else dataset.changers).append(
                index
            )
            for source in lineage.sources:
                if not source.startswith("s3://"):
                    self.dataset(source)

    def lineage(self, index: int) -> StatementLineage:
        """The lineage of a statement that writes or changes a dataset (a writer or changer has one)."""
        lineage = self.lineages[index]
        if lineage is None:
            raise LookupError(f"statement {index} failed or was skipped: it has no lineage")
        return lineage

    def dataset(self, name: str) -> Dataset:
        """The table's dataset, made when the table is first named."""
        if name not in self._by_name:
            self._by_name[name] = Dataset(name, self._known.get(name))
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Dataset]:
        return iter(list(self._by_name.values()))
