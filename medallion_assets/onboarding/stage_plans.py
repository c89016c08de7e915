"""Which statements one stage replays to make each onboarded dataset, and its merge keys; the statements it
does not replay give lineage only, with a warning that says why."""

from __future__ import annotations

from collections.abc import Callable

from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.onboarding.datasets import Dataset, Datasets
from medallion_assets.onboarding.statements import LOAD_KINDS

_APPENDING = ("create_table_as", "insert", "insert_values", "select_into", "alter_table_append")


class StagePlanner:
    """Plans one stage per dataset the statements make, when every table it reads is made by a stage too.

    ``warn(index, message)`` tells the statement at ``index`` why it gives lineage only.
    """

    def __init__(
        self, snapshot: CatalogSnapshot, datasets: Datasets, warn: Callable[[int, str], None]
    ) -> None:
        self.datasets = datasets
        self.warn = warn
        self.producers = {stage.target_id: stage for stage in snapshot.stages()}
        self.plans: dict[str, tuple[list[int], list[str]]] = {}

    def plan(self, name: str) -> tuple[list[int], list[str]]:
        """The statements one stage replays to make the dataset (none: lineage only) and its merge keys."""
        if name not in self.plans:
            self.plans[name] = ([], [])  # while deciding: a table that reads itself gets no stage
            dataset = self.datasets.dataset(name)
            chosen, keys = self._statements(dataset)
            if chosen and not self._inputs_made(dataset, chosen):
                chosen = []
            self.plans[name] = (chosen, keys)
        return self.plans[name]

    def _statements(self, dataset: Dataset) -> tuple[list[int], list[str]]:
        """The statements whose rows make the dataset (replayed by one stage), and its merge keys if any."""
        lineage_of = self.datasets.lineage
        writers = dataset.writers
        if not writers:
            for index in dataset.changers:
                self.warn(index, f"changes {dataset.name} in place, which no stage replays: lineage only")
            return [], []
        first = lineage_of(writers[0])
        if first.kind not in _APPENDING:
            chosen = [writers[0]]
        else:
            chosen = [i for i in writers if lineage_of(i).kind in _APPENDING]
        for index in writers:
            if index not in chosen:
                self.warn(
                    index,
                    f"{dataset.name} is already made by the statement at "
                    f"{first.parsed.statement.where()}: this one gives lineage only",
                )
        if any(lineage_of(i).stage is None and lineage_of(i).kind not in LOAD_KINDS for i in chosen):
            return [], []
        keys = list(first.merge_keys) if first.kind == "merge" else []
        for index in dataset.changers:
            changer = lineage_of(index)
            reads_same = set(changer.sources) & {s for i in chosen for s in lineage_of(i).sources}
            if (
                changer.kind == "delete"
                and changer.merge_keys
                and len(chosen) == 1
                and first.kind == "insert"
                and reads_same
                and not keys
            ):
                keys = list(changer.merge_keys)
                self.warn(
                    index,
                    f"DELETE … USING then INSERT is a merge on {', '.join(keys)}: the stage loads "
                    "with load_mode merge",
                )
            else:
                self.warn(
                    index, f"changes {dataset.name} in place, which the stage does not replay: lineage only"
                )
        return chosen, keys

    def _made_by_a_stage(self, name: str) -> bool:
        dataset = self.datasets.dataset(name)
        existing_stage = dataset.existing is not None and dataset.existing.target_id in self.producers
        return existing_stage or bool(self.plan(name)[0])

    def _inputs_made(self, dataset: Dataset, statements: list[int]) -> bool:
        """A stage can run only if it reads tables and each is made by a stage, existing or onboarded now."""
        for index in statements:
            lineage = self.datasets.lineage(index)
            if not lineage.sources:
                self.warn(index, f"reads no table: no stage for {dataset.name}, lineage only")
                return False
            for source in lineage.sources:
                if source.startswith("s3://") or self._made_by_a_stage(source):
                    continue
                if source == dataset.name:
                    why = "it reads the table it writes"
                elif self.datasets.dataset(source).writers:
                    why = f"{source} is made by no stage"
                else:
                    why = f"{source} is not made by any stage (an external table)"
                self.warn(index, f"{why}: no stage for {dataset.name}, lineage only")
                return False
        return True
