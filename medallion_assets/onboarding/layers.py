"""Which layer an onboarded dataset belongs to, and why: the reason is shown to the user with the decision."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from medallion_assets.onboarding.datasets import Dataset, Datasets, canonical_name
from medallion_assets.onboarding.statements import CopyLoad

LAYERS = ("bronze", "silver", "gold")
# Schema names and table-name prefixes that say a layer, as teams commonly name them.
LAYER_WORDS = {
    "bronze": ("bronze", "raw", "landing", "staging", "stage", "stg", "src", "ods"),
    "silver": (
        "silver",
        "clean",
        "cleansed",
        "curated",
        "conformed",
        "core",
        "int",
        "intermediate",
        "refined",
    ),
    "gold": (
        "gold",
        "analytics",
        "mart",
        "marts",
        "reporting",
        "report",
        "agg",
        "dm",
        "bi",
        "fct",
        "fact",
        "dim",
    ),
}


@dataclass(frozen=True)
class LayerDecision:
    layer: str
    reason: str


class LayerDecider:
    """Decides each dataset's layer once: by --layer, by the catalog, by what its SQL does, by the layers of
    what it reads, by naming convention, else silver."""

    def __init__(self, datasets: Datasets, layer_overrides: Mapping[str, str]) -> None:
        self.datasets = datasets
        self.overrides = {canonical_name(name): layer for name, layer in layer_overrides.items()}
        self.decisions: dict[str, LayerDecision | None] = {}

    def decide(self, name: str) -> LayerDecision | None:
        """The dataset's layer and why; None while it is being decided (a cycle, which validation reports)."""
        if name not in self.decisions:
            self.decisions[name] = None
            self.decisions[name] = self._decide(self.datasets.dataset(name))
        return self.decisions[name]

    def decided(self, name: str) -> LayerDecision:
        """The dataset's layer and why, asked for once no decision is under way (so never None)."""
        decision = self.decide(name)
        if decision is None:
            raise RuntimeError(f"the layer of {name} is asked for while it is being decided")
        return decision

    def _decide(self, dataset: Dataset) -> LayerDecision:
        override = self.overrides.get(dataset.name) or (
            dataset.existing and self.overrides.get(canonical_name(dataset.existing.target_id))
        )
        if override:
            return LayerDecision(override, f"set by --layer for {dataset.name}")
        if dataset.existing:
            return LayerDecision(
                dataset.existing.layer,
                f"already in the catalog as {dataset.existing.layer} ({dataset.existing.target_id})",
            )
        writers = [self.datasets.lineage(i) for i in dataset.writers]
        copy = next((w for w in writers if isinstance(w.parsed, CopyLoad)), None)
        if copy:
            return LayerDecision(
                "bronze",
                f"loaded from raw files by {copy.parsed.kind.replace('_', ' ').upper()} "
                f"at {copy.parsed.statement.where()}",
            )
        aggregating = next((w for w in writers if w.aggregates), None)
        if aggregating:
            return LayerDecision(
                "gold",
                f"aggregates (GROUP BY or aggregate functions) at {aggregating.parsed.statement.where()}",
            )
        inputs = [s for w in writers for s in w.sources if not s.startswith("s3://")]
        decided = {source: self.decide(source) for source in inputs}
        for layer, verb in (("gold", "reads gold table"), ("bronze", "cleans bronze table")):
            source = next((s for s, d in decided.items() if d and d.layer == layer), None)
            if source:
                return LayerDecision("gold" if layer == "gold" else "silver", f"{verb} {source}")
        convention = _layer_by_convention(dataset.name, ("silver", "gold") if writers else LAYERS)
        if convention:
            return convention
        if writers:
            return LayerDecision("silver", "transforms tables without aggregating: silver by default")
        return LayerDecision(
            "silver", "read but not made by the SQL, no naming convention: silver by default"
        )


def _layer_by_convention(name: str, allowed: tuple[str, ...]) -> LayerDecision | None:
    if name.startswith("s3://"):
        return None
    schema, _, table = name.rpartition(".")
    for layer in allowed:
        if schema in LAYER_WORDS[layer]:
            return LayerDecision(layer, f"schema {schema!r} is a {layer} schema by naming convention")
    prefix = table.split("_")[0]
    for layer in allowed:
        if prefix in LAYER_WORDS[layer]:
            return LayerDecision(layer, f"table name prefix {prefix!r} means {layer} by naming convention")
    return None
