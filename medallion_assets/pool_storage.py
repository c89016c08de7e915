"""Dagster's event log storages, on SQLite and PostgreSQL, with a pool slot two steps cannot both claim.

Dagster 1.13 claims a concurrency-pool slot in two statements on an autocommit connection: a SELECT of a free
slot (`FOR UPDATE SKIP LOCKED`, whose lock ends with the statement) and then an UPDATE of that slot by id
alone. Two run workers that select the same free slot both update it, and both steps run. CI saw four steps
inside a pool of three; four steps claiming at once take three or four slots of a pool of two in most rounds
on SQLite, and in about one round in three on PostgreSQL. Its pending-step queue cannot stop them either, as
it assigns a slot after a count read in another statement. Here the claim is one conditional UPDATE, which
the database applies to a free slot once; a step that loses the race stays queued and claims again on its
next poll, as any blocked step does. The shipped dagster.yaml and `deploy/postgres.yaml` name these classes
as the instance's event log storage, so the daemon, the webserver and every run worker (which rebuild the
instance from its recorded classes) claim slots through them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from dagster import StringSource
from dagster_postgres import PostgresEventLogStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config
from sqlalchemy import Connection, select

from medallion_assets.dagster_compat import (
    ConcurrencySlotsTable,
    ConcurrencySlotStatus,
    SqliteEventLogStorage,
)


class OneStatementClaim:
    """A pool slot claimed in one conditional UPDATE, for an event log storage of Dagster's."""

    if TYPE_CHECKING:  # the storage's own, which this class comes before in the method order

        def index_connection(self) -> AbstractContextManager[Connection]: ...

    def _claim_concurrency_slot(
        self, concurrency_key: str, run_id: str, step_key: str
    ) -> ConcurrencySlotStatus:
        slots = ConcurrencySlotsTable
        free = (
            select(slots.c.id)
            .where(
                slots.c.concurrency_key == concurrency_key,
                slots.c.step_key.is_(None),
                slots.c.deleted.is_(False),
            )
            .limit(1)
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        # `step_key IS NULL` again on the row updated: a slot another worker claimed between the subquery and
        # the update is re-read by PostgreSQL after that worker's commit, and no longer matches (SQLite runs
        # the whole statement under its write lock).
        claim = (
            slots.update()
            .where(slots.c.id == free, slots.c.step_key.is_(None))
            .values(run_id=run_id, step_key=step_key)
        )
        with self.index_connection() as connection:
            claimed = connection.execute(claim).rowcount
        return ConcurrencySlotStatus.CLAIMED if claimed else ConcurrencySlotStatus.BLOCKED


class PoolSafeSqliteEventLogStorage(OneStatementClaim, SqliteEventLogStorage):
    """Configured with the instance's folder, DAGSTER_HOME, it keeps the event log where Dagster's default
    SQLite storage does, so an instance written before keeps its history."""

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {"dagster_home": StringSource}

    @classmethod
    def from_config_value(
        cls, inst_data: Any, config_value: Mapping[str, Any]
    ) -> PoolSafeSqliteEventLogStorage:
        return cls(os.path.join(config_value["dagster_home"], "history", "runs", ""), inst_data=inst_data)


class PoolSafePostgresEventLogStorage(OneStatementClaim, PostgresEventLogStorage):
    """Configured as dagster-postgres's event log is (`postgres_db` or `postgres_url`)."""

    @classmethod
    def from_config_value(
        cls, inst_data: Any, config_value: Mapping[str, Any]
    ) -> PoolSafePostgresEventLogStorage:
        return cls(
            inst_data=inst_data,
            postgres_url=pg_url_from_config(config_value),
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            token_provider=get_token_provider_from_config(config_value),
        )
