"""SLAs: when each dataset must be fresh, and whether it is, judged from the audit log's last successful
write.

The same rules as Dagster's freshness policies (assets/monitoring.py makes the policies from the same rows),
so the UI's fresh/late/stale and Medallion's "SLA missed" notifications agree. One difference, on purpose: a
dataset never written by its daily deadline has missed it (Dagster says "unknown" until a first write).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from sqlalchemy import func, select

from medallion_assets.catalog.models import Sla, Stage
from medallion_assets.catalog.schema import audit_log
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore

State = Literal["fresh", "late", "stale", "unknown"]


@dataclass(frozen=True)
class Freshness:
    """A dataset's freshness against its SLA. `episode` names one miss: the same miss has the same episode."""

    pipeline_id: str
    dataset: str
    owner: str
    sla: Sla
    state: State
    last_update: datetime | None
    lag_sec: float | None
    explanation: str
    episode: str | None = None


def effective_sla(snapshot: CatalogSnapshot, stage: Stage) -> Sla | None:
    """The SLA of the dataset a stage makes: the target's own, else its pipeline's."""
    pipeline = snapshot.pipelines.get(stage.pipeline_id)
    return snapshot.targets[stage.target_id].sla or (pipeline.sla if pipeline else None)


def last_deadline(sla: Sla, now: datetime) -> datetime:
    """The latest `expected_by` moment at or before `now`, in the SLA's time zone."""
    assert sla.expected_by is not None, "only a deadline SLA has a last deadline"
    local = now.astimezone(ZoneInfo(sla.timezone))
    hour, minute = map(int, sla.expected_by.split(":"))
    deadline = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
    return deadline if deadline <= local else deadline - timedelta(days=1)


def judge(sla: Sla, last_update: datetime | None, now: datetime) -> tuple[State, str, str | None]:
    """(state, explanation, episode of a miss)."""
    if sla.expected_by:
        deadline = last_deadline(sla, now)
        window_start = deadline - timedelta(minutes=sla.window_minutes)
        expected = (
            f"expected between {window_start:%Y-%m-%d %H:%M} and {deadline:%Y-%m-%d %H:%M} {sla.timezone}"
        )
        if last_update is None or last_update < window_start:
            seen = f"last update {last_update:%Y-%m-%d %H:%M:%S} UTC" if last_update else "never updated"
            return "stale", f"{expected}; {seen}", f"deadline {deadline.isoformat()}"
        return "fresh", f"{expected}; updated {last_update:%Y-%m-%d %H:%M:%S} UTC", None
    if last_update is None:
        return "unknown", "never updated: staleness is judged from the first update", None
    # The Sla model sets exactly one of expected_by and max_stale_minutes.
    assert sla.max_stale_minutes is not None
    minutes = (now - last_update).total_seconds() / 60
    if minutes >= sla.max_stale_minutes:
        return (
            "stale",
            f"{minutes:.0f} min since the last update; at most {sla.max_stale_minutes} allowed",
            f"stale since {last_update.isoformat()}",
        )
    if sla.warn_stale_minutes and minutes >= sla.warn_stale_minutes:
        return "late", f"{minutes:.0f} min since the last update; warns after {sla.warn_stale_minutes}", None
    return "fresh", f"{minutes:.0f} min since the last update (at most {sla.max_stale_minutes})", None


def last_updates(store: CatalogStore) -> dict[str, datetime]:
    """Dataset → when a stage last wrote it successfully: one grouped query, whatever the history's size."""
    query = (
        select(audit_log.c.dataset, func.max(audit_log.c.created_at))
        .where(audit_log.c.event == "stage", audit_log.c.status == "success")
        .group_by(audit_log.c.dataset)
    )
    with store.engine.connect() as connection:
        return {dataset: _aware(moment) for dataset, moment in connection.execute(query)}


def freshness(snapshot: CatalogSnapshot, store: CatalogStore, now: datetime | None = None) -> list[Freshness]:
    """Every dataset with an SLA, judged now."""
    now = now or datetime.now(UTC)
    updates = last_updates(store)
    verdicts = []
    for stage in snapshot.stages():
        sla = effective_sla(snapshot, stage)
        if sla is None:
            continue
        last = updates.get(stage.target_id)
        state, explanation, episode = judge(sla, last, now)
        owner = snapshot.targets[stage.target_id].owner or snapshot.pipelines[stage.pipeline_id].owner
        verdicts.append(
            Freshness(
                stage.pipeline_id,
                stage.target_id,
                owner,
                sla,
                state,
                last,
                (now - last).total_seconds() if last else None,
                explanation,
                episode,
            )
        )
    return verdicts


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; they are UTC (the database's CURRENT_TIMESTAMP)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
