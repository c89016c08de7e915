"""The catalog's row format, one pydantic model per table: the documentation of record for metadata_seed/.

Every model forbids unknown fields, so a YAML typo is an error that names the field, never a silent default.
The models live by domain: `base` (the Row and checked names), `datasets` (sources, targets), `pipelines`
(pipelines, stages), `rules` (validation), `monitoring` (SLAs, volume bands), `control` (retries, healing,
switches, profiles, throttles, notifications, maintenance) and `lineage`; all are imported from here.
"""

from medallion_assets.catalog.models.base import (
    COLUMN_TYPE,
    Columns,
    Compression,
    DeprecatedName,
    FileFormat,
    Identifier,
    Layer,
    QualifiedName,
    Row,
)
from medallion_assets.catalog.models.control import (
    NOTIFICATION_EVENTS,
    ControlFlag,
    HealingAction,
    Notification,
    PipelineProfile,
    Profile,
    ProfileSetting,
    RetryPolicy,
    TableMaintenance,
    Throttle,
)
from medallion_assets.catalog.models.datasets import (
    MAX_LOOKBACK_DAYS,
    Cdc,
    Condition,
    Incremental,
    LakeTable,
    Source,
    Target,
    ValidityColumns,
)
from medallion_assets.catalog.models.lineage import ColumnLineage, DatasetLineage, ExternalLineage
from medallion_assets.catalog.models.monitoring import Sla, VolumeBand
from medallion_assets.catalog.models.pipelines import Pipeline, Stage, StageTest
from medallion_assets.catalog.models.rules import (
    HISTORY_RULE_TYPES,
    RULE_TYPES,
    Rule,
    RuleType,
    ValidationRuleSet,
    history_rules,
)

# The tables a YAML file may fill, in the order that upserts respect references.
LOADABLE: dict[str, type[Row]] = {
    "retry_policies": RetryPolicy,
    "pipelines": Pipeline,
    "sources": Source,
    "targets": Target,
    "validation_rules": ValidationRuleSet,
    "stages": Stage,
    "healing_actions": HealingAction,
    "control_flags": ControlFlag,
    "profiles": Profile,
    "pipeline_profiles": PipelineProfile,
    "profile_settings": ProfileSetting,
    "throttles": Throttle,
    "dataset_lineage": DatasetLineage,
    "column_lineage": ColumnLineage,
    "external_lineage": ExternalLineage,
    "notifications": Notification,
    "table_maintenance": TableMaintenance,
    "stage_tests": StageTest,
}

__all__ = [
    "COLUMN_TYPE",
    "Cdc",
    "ColumnLineage",
    "Columns",
    "Compression",
    "Condition",
    "ControlFlag",
    "DatasetLineage",
    "DeprecatedName",
    "ExternalLineage",
    "FileFormat",
    "HISTORY_RULE_TYPES",
    "HealingAction",
    "Identifier",
    "Incremental",
    "LOADABLE",
    "LakeTable",
    "Layer",
    "MAX_LOOKBACK_DAYS",
    "NOTIFICATION_EVENTS",
    "Notification",
    "Pipeline",
    "PipelineProfile",
    "Profile",
    "ProfileSetting",
    "QualifiedName",
    "RULE_TYPES",
    "RetryPolicy",
    "Row",
    "Rule",
    "RuleType",
    "Sla",
    "Source",
    "Stage",
    "StageTest",
    "TableMaintenance",
    "Target",
    "Throttle",
    "ValidationRuleSet",
    "ValidityColumns",
    "VolumeBand",
    "history_rules",
]
