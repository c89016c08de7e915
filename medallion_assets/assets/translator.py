"""How catalog rows look in Dagster, decided in one class: `MedallionTranslator`.

As dagster-dbt's `DagsterDbtTranslator` does for dbt's nodes, each method decides one thing of a stage's
dataset or of a raw source: its asset key, group, description, metadata, tags, kinds, owners, code version,
freshness policy and pool; `get_asset_spec` and `get_source_spec` put them together. To change naming,
subclass it (`from medallion_assets.assets import MedallionTranslator`) and pass an instance to
`build_definitions(translator=…)`: the assets, their deps, and the sensors that find assets by key all
follow it. For example, every key under a prefix, in a code location of your own:

    class Prefixed(MedallionTranslator):
        def get_asset_key(self, target):
            return super().get_asset_key(target).with_prefix("medallion")

        def get_source_asset_key(self, source):
            return super().get_source_asset_key(source).with_prefix("medallion")

    @definitions
    def defs():
        return build_definitions(translator=Prefixed())

`medallion run` runs the default translator's definitions; a custom one's run from the UI or its sensors.
"""

from __future__ import annotations

import re
from typing import Any

from dagster import AssetKey, AssetSpec, FreshnessPolicy, TableColumn, TableSchema

from medallion_assets.assets.monitoring import freshness_policy
from medallion_assets.catalog.models import Pipeline, Source, Stage, Target
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.versions import stage_fingerprint
from medallion_assets.control.steering.throttles import stage_pool
from medallion_assets.engine.stage import gold_mode_description
from medallion_assets.naming import dataset_name
from medallion_assets.redaction import scrub
from medallion_assets.storage.lake.layout import TABLE_FORMAT, table_of
from medallion_assets.storage.lake.root import Lake

# The layer of the external assets that stand for raw sources: keys read [raw, <source id>].
RAW_LAYER = "raw"


class MedallionTranslator:
    """Every naming decision of the asset factory; the default gives keys `[layer, dataset]`, one group per
    pipeline and one pool per source or target system."""

    # Equal when of one class with equal attributes: a run worker builds its code location again with a new
    # instance, and the definitions built once per process (`definitions._reconstructed`) must be found.
    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash(type(self))

    def get_asset_key(self, target: Target) -> AssetKey:
        """`[layer, dataset]`, the dataset being the target id less its layer prefix: silver/user_events."""
        return AssetKey([target.layer, dataset_name(target)])

    def get_source_asset_key(self, source: Source) -> AssetKey:
        return AssetKey([RAW_LAYER, source.source_id])

    def get_input_key(self, snapshot: CatalogSnapshot, input_id: str) -> AssetKey:
        """An input is an upstream target, or else a raw source (an external asset)."""
        target = snapshot.targets.get(input_id)
        return self.get_asset_key(target) if target else self.get_source_asset_key(snapshot.sources[input_id])

    def get_group_name(self, pipeline: Pipeline) -> str:
        """One group per pipeline; a raw source is in the group of the first pipeline that reads it."""
        return pipeline.pipeline_id

    def get_description(self, stage: Stage, snapshot: CatalogSnapshot) -> str:
        """The dataset's description, and for gold how it is built: by changed groups or whole, and why."""
        target = snapshot.targets[stage.target_id]
        described = target.description or stage.stage_name
        if target.layer != "gold":
            return described
        return f"{described}\n\n{gold_mode_description(stage, target, snapshot)}"

    def get_metadata(self, stage: Stage, snapshot: CatalogSnapshot, lake: Lake) -> dict[str, Any]:
        """The pipeline and stage, where the table lives, its declared columns and its table name."""
        target = snapshot.targets[stage.target_id]
        metadata: dict[str, Any] = {
            "pipeline": stage.pipeline_id,
            "stage": stage.stage_name,
            "location": scrub(lake.table_location(target)),
        }
        if target.columns:
            metadata["dagster/column_schema"] = TableSchema(
                columns=[
                    TableColumn(name, type_name, description=(target.column_descriptions or {}).get(name))
                    for name, type_name in target.columns.items()
                ]
            )
        metadata["dagster/table_name"] = (
            target.location if target.kind == "warehouse" else str(table_of(target))
        )
        return metadata

    def get_tags(self, stage: Stage, snapshot: CatalogSnapshot) -> dict[str, str]:
        """Asset tags: none by default (the catalog declares none)."""
        return {}

    def get_kinds(self, stage: Stage, snapshot: CatalogSnapshot) -> set[str]:
        """Spark, the layer and where the data lands (the warehouse, or the lake's table format). The layer is
        a kind because the graph labels a node by its dataset's name, which layers share."""
        target = snapshot.targets[stage.target_id]
        return {"spark", target.layer, "warehouse" if target.kind == "warehouse" else TABLE_FORMAT}

    def get_owners(self, owner: str) -> list[str]:
        """A catalog owner as a Dagster owner, which must be an email or a `team:` name: anything else names
        a team."""
        if not owner:
            return []
        if owner.startswith("team:") or "@" in owner:
            return [owner]
        return ["team:" + re.sub(r"[^A-Za-z0-9_-]+", "-", owner).strip("-")]

    def get_code_version(self, stage: Stage, snapshot: CatalogSnapshot) -> str:
        """The fingerprint of the dataset's lineage version (inputs, transformation, rules, output): it
        changes exactly when a new lineage version is recorded, so Dagster flags data made by an older version
        as stale."""
        return stage_fingerprint(stage, snapshot.targets[stage.target_id], snapshot)

    def get_freshness_policy(self, stage: Stage, snapshot: CatalogSnapshot) -> FreshnessPolicy | None:
        """The SLA of the stage's dataset, which the daemon evaluates into fresh, late and stale."""
        return freshness_policy(snapshot, stage)

    def get_pool(self, stage: Stage, snapshot: CatalogSnapshot) -> str | None:
        """The concurrency pool the stage's step claims: its source system's for bronze, its target system's
        for a warehouse load, none otherwise. The throttles set these pools' limits by system
        (`control/steering/throttles.py`): a pool of another name gets the instance's default limit."""
        return stage_pool(stage, snapshot)

    def get_asset_spec(self, stage: Stage, snapshot: CatalogSnapshot, lake: Lake) -> AssetSpec:
        """The stage's dataset as Dagster shows it."""
        target = snapshot.targets[stage.target_id]
        pipeline = snapshot.pipelines[stage.pipeline_id]
        return AssetSpec(
            key=self.get_asset_key(target),
            deps=[self.get_input_key(snapshot, i) for i in stage.input_ids()],
            group_name=self.get_group_name(pipeline),
            kinds=self.get_kinds(stage, snapshot),
            owners=self.get_owners(target.owner or pipeline.owner),
            code_version=self.get_code_version(stage, snapshot),
            description=self.get_description(stage, snapshot),
            metadata=self.get_metadata(stage, snapshot, lake),
            tags=self.get_tags(stage, snapshot),
            freshness_policy=self.get_freshness_policy(stage, snapshot),
            # A halted stage yields no materialization (its step fails with the reason); Dagster skips what
            # follows.
            skippable=True,
        )

    def get_source_description(self, source: Source) -> str:
        return source.description or f"raw {source.file_format} files at {scrub(source.s3_path)}"

    def get_source_metadata(self, source: Source) -> dict[str, Any]:
        return {"location": scrub(source.s3_path), "format": source.file_format}

    def get_source_kinds(self, source: Source) -> set[str]:
        return {"s3", source.file_format}

    def get_source_spec(self, source: Source, pipeline: Pipeline) -> AssetSpec:
        """A raw source as an external asset, in the group of `pipeline`, the first that reads it: Dagster
        shows it at the root of the lineage graph and never runs it."""
        return AssetSpec(
            key=self.get_source_asset_key(source),
            group_name=self.get_group_name(pipeline),
            kinds=self.get_source_kinds(source),
            description=self.get_source_description(source),
            metadata=self.get_source_metadata(source),
            owners=self.get_owners(source.owner or pipeline.owner),
        )
