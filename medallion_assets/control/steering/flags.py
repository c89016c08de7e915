"""Kill switches: which work the control_flags rows disable, and flipping them.

Flags are read fresh whenever work is about to start or commit, so a row update takes effect at the next
stage boundary without a reload. A flag may name:
  global   — everything (any entity_id),
  pipeline — a pipeline id,
  stage    — "pipeline_id.stage_name",
  dataset  — a target id (the dataset a stage writes),
  source   — a source id, or a source system (every source in it),
  target   — a target id, or a target system (every warehouse target in it).
"""

from __future__ import annotations

import getpass
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, cast

from medallion_assets.catalog.models import ControlFlag, Pipeline, Stage
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.rows import list_as, rows_as

Kind = Literal["global", "pipeline", "stage", "dataset", "source", "target"]
KINDS: tuple[Kind, ...] = ("global", "pipeline", "stage", "dataset", "source", "target")
# The run tags of a run a kill switch halted or cancelled: the status, and the switch's reason.
STATUS_TAG, HALT_REASON_TAG = "medallion/status", "medallion/halt_reason"
HALTED_TAGS = {STATUS_TAG: "halted"}


class UnknownEntity(ValueError):
    """A flag names something the catalog does not know; the message lists what it knows."""


def known_ids(snapshot: CatalogSnapshot, kind: str) -> list[str]:
    ids = {
        "global": ["*"],
        "pipeline": list(snapshot.pipelines),
        "stage": [f"{s.pipeline_id}.{s.stage_name}" for s in snapshot.stages()],
        "dataset": list(snapshot.targets),
        "source": [*snapshot.sources, *{s.system_id() for s in snapshot.sources.values()}],
        "target": [
            *snapshot.targets,
            *{t.system or "warehouse" for t in snapshot.targets.values() if t.kind == "warehouse"},
        ],
    }[kind]
    return sorted(set(ids))


def check_entity(snapshot: CatalogSnapshot, kind: str, entity_id: str) -> None:
    if kind not in KINDS:
        raise UnknownEntity(f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
    known = known_ids(snapshot, kind)
    if kind != "global" and entity_id not in known:
        raise UnknownEntity(f"unknown {kind} {entity_id!r}; known: {', '.join(known)}")


def stage_entities(snapshot: CatalogSnapshot, stage: Stage) -> list[tuple[str, str]]:
    """Every (kind, id) whose flag stops this stage."""
    target = snapshot.targets[stage.target_id]
    entities = [
        ("pipeline", stage.pipeline_id),
        ("stage", f"{stage.pipeline_id}.{stage.stage_name}"),
        ("dataset", stage.target_id),
    ]
    for input_id in stage.input_ids():
        source = snapshot.sources.get(input_id)
        if source:
            entities += [("source", source.source_id), ("source", source.system_id())]
    if target.kind == "warehouse":
        entities += [("target", target.target_id), ("target", target.system or "warehouse")]
    return entities


@dataclass(frozen=True)
class ControlState:
    """The switches as they are now: flags, plus the `enabled` columns of pipelines and stages."""

    flags: list[ControlFlag]
    disabled_pipelines: frozenset[str]
    disabled_stages: frozenset[tuple[str, int]]


def read_control_state(store: CatalogStore) -> ControlState:
    """Three small queries, made whenever work starts or commits, so a row update applies at once."""
    return ControlState(
        flags=list_as(ControlFlag, store.read_table("control_flags")),
        disabled_pipelines=frozenset(
            p.pipeline_id for p in rows_as(Pipeline, store.read_table("pipelines")) if not p.enabled
        ),
        disabled_stages=frozenset(
            s.key() for s in rows_as(Stage, store.read_table("stages")) if not s.enabled
        ),
    )


def disabled_reason(snapshot: CatalogSnapshot, state: ControlState, stage: Stage) -> str | None:
    """Why a stage must not run now, or None. `snapshot` gives structure only; `state` gives the switches."""
    if stage.pipeline_id in state.disabled_pipelines:
        return f"pipeline {stage.pipeline_id} is disabled in the pipelines table"
    if stage.key() in state.disabled_stages:
        return f"stage {stage.pipeline_id}.{stage.stage_name} is disabled in the stages table"
    entities = set(stage_entities(snapshot, stage))
    for flag in state.flags:
        if (
            flag.flag_name == "enabled"
            and not flag.flag_value
            and (flag.entity_type == "global" or (flag.entity_type, flag.entity_id) in entities)
        ):
            subject = "everything" if flag.entity_type == "global" else f"{flag.entity_type} {flag.entity_id}"
            by = f" by {flag.updated_by}" if flag.updated_by else ""
            return f"{subject} disabled{by}: {flag.reason or 'no reason given'}"
    return None


def set_flag(
    store: CatalogStore, kind: str, entity_id: str, enabled: bool, reason: str = "", who: str | None = None
) -> ControlFlag:
    """Flip a kill switch; the database trigger records the change in control_flag_history."""
    check_entity(store.snapshot(), kind, entity_id)
    flag = ControlFlag(
        entity_type=cast(Kind, kind),  # check_entity refused every other kind
        entity_id="*" if kind == "global" else entity_id,
        flag_value=enabled,
        reason=reason,
        updated_by=who or getpass.getuser(),
    )
    store.upsert({"control_flags": [flag]})
    return flag


def add_missing_flags(store: CatalogStore, who: str = "catalog load") -> list[ControlFlag]:
    """Give every pipeline, stage and source an enabled kill switch row of its own, leaving existing rows
    alone, so that a plain SQL UPDATE on control_flags always finds the row it means. Returns the rows
    added."""
    snapshot = store.snapshot()
    existing = {
        (flag.entity_type, flag.entity_id)
        for flag in rows_as(ControlFlag, store.read_table("control_flags"))
        if flag.flag_name == "enabled"
    }
    entities: tuple[tuple[Kind, Iterable[str]], ...] = (
        ("pipeline", snapshot.pipelines),
        ("source", snapshot.sources),
        ("stage", [f"{s.pipeline_id}.{s.stage_name}" for s in snapshot.stages()]),
    )
    added = [
        ControlFlag(entity_type=kind, entity_id=entity_id, flag_value=True, updated_by=who)
        for kind, ids in entities
        for entity_id in ids
        if (kind, entity_id) not in existing
    ]
    if added:
        store.upsert({"control_flags": added})
    return added
