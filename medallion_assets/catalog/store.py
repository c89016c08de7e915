"""The catalog database: migrations, idempotent upserts, snapshots, bookmarks and the audit log.

SQLite by default, PostgreSQL in production: the SQL here stays within what both speak. Every write of
loadable rows goes through `upsert` (or `upsert_checked`): one transaction under the catalog-wide lock, in
which the lineage versions the write causes are recorded too.

One view of the catalog per purpose:
- **Structure** (pipelines, stages, sources, targets, rule sets, lineage: what becomes definitions) comes from
  the snapshot taken when definitions load (`snapshot()`, in definitions.py). Assets and sensors read it,
  never a copy of their own. One exception, said explicitly by the run's tags: once healing has changed the
  catalog in a run (a new column), that run's later steps take a new snapshot (control/healing/failures.py).
- **Runtime controls** (control flags and `enabled` switches, retry policies, healing rules, profiles and
  their settings, throttles, notifications) are read live through `read_table`, at the moment they decide
  something, so a row update applies at once; a sensor that needs controls beside structure lays them over the
  load-time snapshot (`CatalogSnapshot.replaced`).
- A CLI command, which runs once, takes its own snapshot.
- `audit_log` records what happened. Its history is read for judgements over time (the circuit breaker's
  failures in a window, volume bands), never to pass state from one attempt to the next.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, cast

import networkx as nx
from pydantic import ValidationError
from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    RowMapping,
    create_engine,
    delete,
    exc,
    insert,
    select,
    text,
    update,
)

from medallion_assets import config
from medallion_assets.catalog.models import LOADABLE, DatasetLineage, Row, Stage
from medallion_assets.catalog.schema import (
    LOADABLE_TABLES,
    audit_log,
    catalog_changes,
    conflict_insert,
    ingestion_bookmarks,
    lake_commits,
    metadata,
)
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.versions import (
    DEFINING_TABLES,
    LineageVersion,
    record_lineage_versions,
    stored_versions,
)
from medallion_assets.errors import ServiceUnreachable
from medallion_assets.redaction import scrub

MIGRATIONS = Path(__file__).with_name("migrations")
# The key of the PostgreSQL advisory lock every catalog write (and migration) takes: "medallion" in ASCII, cut
# to a bigint.
CATALOG_LOCK_KEY = int.from_bytes(b"medallio", "big") >> 1


def open_catalog(url: str | None = None) -> CatalogStore:
    """The catalog at `url`, by default the configured one, migrated to the newest schema: how every entry
    point (the CLI, the code location, a run's resource, a Pipes step) opens it."""
    url = url or config.catalog_url()
    try:
        store = CatalogStore(url)
        store.migrate()
    except (exc.OperationalError, exc.InterfaceError) as error:  # the server's refusal, or no server
        raise ServiceUnreachable(config.CATALOG_ENV, url, " ".join(str(error.orig).split())) from error
    except (exc.ArgumentError, exc.NoSuchModuleError) as error:  # not a database URL SQLAlchemy knows
        raise ServiceUnreachable(config.CATALOG_ENV, url, " ".join(str(error).split())) from error
    return store


@cache  # the scripts do not change while a process runs; every catalog it opens asks
def migration_heads() -> frozenset[str]:
    """The revisions of MIGRATIONS that no migration revises, read from their module-level assignments (as
    alembic reads them, without running them)."""
    declared: dict[str, Any] = {}
    for script in (MIGRATIONS / "versions").glob("*.py"):
        assigned = {
            target.id: node.value
            for node in ast.parse(script.read_text()).body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        declared[ast.literal_eval(assigned["revision"])] = ast.literal_eval(assigned["down_revision"])
    revised = {
        down for downs in declared.values() for down in (downs if isinstance(downs, tuple) else (downs,))
    }
    return frozenset(declared) - revised


class CatalogStore:
    """A handle on one catalog database. Cheap to create; the engine pools connections."""

    def __init__(self, url: str):
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.url = url
        # A pooled SQLite connection may be reset or closed by another thread (the garbage collector's, at
        # exit); the pool never lets two threads use one connection at a time, so the check is not needed.
        # A writer waits for the catalog's write lock up to `timeout` seconds (see locked).
        connect_args = {"check_same_thread": False, "timeout": 60} if url.startswith("sqlite") else {}
        self.engine: Engine = create_engine(url, future=True, connect_args=connect_args)

    def migrate(self) -> None:
        """Bring the schema to the newest migration; a no-op when it is there already.

        Under the catalog-wide lock: a second process starting at the same time waits, then finds it done.
        """
        if self._at_head():
            return
        # Imported here, not at the top: only migrating needs alembic, and a run worker never migrates.
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with self.locked() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

    def _at_head(self) -> bool:
        """Whether the schema is at the newest migration already, told without importing alembic (a sixth of
        a second of every command's start): its one version row names the only revision no other revises."""
        try:
            with self.engine.connect() as connection:
                versions = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
        except exc.DatabaseError:  # a new catalog: no version table yet
            return False
        return len(versions) == 1 and versions[0] in migration_heads()

    def upsert(
        self, rows: Mapping[str, Iterable[Row]], remove: Mapping[str, Iterable[tuple[Any, ...]]] | None = None
    ) -> dict[str, int]:
        """Insert or update rows by primary key, all in one transaction. Returns rows written per table.

        `remove` names rows by primary key, per table, to delete in the same transaction, first.
        """
        return self._upsert(lambda: rows, remove)

    def upsert_checked(
        self,
        prepare: Callable[[CatalogSnapshot], Mapping[str, Iterable[Row]]],
        remove: Mapping[str, Iterable[tuple[Any, ...]]] | None = None,
    ) -> dict[str, int]:
        """Upsert the rows `prepare` returns for the catalog as it is now, checking them against it (it raises
        to write nothing). The check and the write happen under the catalog-wide lock, in one transaction, so
        two loads that are each valid alone cannot commit together into an invalid catalog: the second waits,
        and is then checked against the first's rows."""
        return self._upsert(lambda: prepare(self.snapshot()), remove)

    def _upsert(
        self,
        rows_to_write: Callable[[], Mapping[str, Iterable[Row]]],
        remove: Mapping[str, Iterable[tuple[Any, ...]]] | None,
    ) -> dict[str, int]:
        """Under the catalog-wide lock: the rows `rows_to_write()` returns, written in one transaction."""
        with self.locked() as connection:
            written = self.write(connection, rows_to_write(), remove)
            # However rows arrive (catalog load, onboarding, an operator's script), a changed definition is
            # versioned, in the write's own transaction.
            if DEFINING_TABLES.intersection([*written, *(remove or {})]):
                record_lineage_versions(connection, self._snapshot(connection))
        return written

    def write(
        self,
        connection: Connection,
        rows: Mapping[str, Iterable[Row]],
        remove: Mapping[str, Iterable[tuple[Any, ...]]] | None = None,
    ) -> dict[str, int]:
        """Upsert `rows` (after deleting `remove`) in the transaction of `connection`, holding the lock."""
        written = {}
        # Stamped here, to the microsecond: database triggers tell these writes from plain SQL updates by it.
        stamp = datetime.now(UTC)
        for table_name, keys in (remove or {}).items():
            table = LOADABLE_TABLES[table_name]
            key_columns = [table.c[name] for name in LOADABLE[table_name].key_fields]
            for key in keys:
                connection.execute(delete(table).where(*[c == v for c, v in zip(key_columns, key)]))
        for table_name in LOADABLE:
            batch = [{**row.model_dump(mode="json"), "updated_at": stamp} for row in rows.get(table_name, ())]
            if not batch:
                continue
            table = LOADABLE_TABLES[table_name]
            statement = conflict_insert(connection, table)
            key_columns = [table.c[name] for name in LOADABLE[table_name].key_fields]
            updates = {c.name: statement.excluded[c.name] for c in table.columns if c not in key_columns}
            connection.execute(
                statement.on_conflict_do_update(index_elements=key_columns, set_=updates), batch
            )
            written[table_name] = len(batch)
        return written

    @contextmanager
    def locked(self, connection: Connection | None = None) -> Iterator[Connection]:
        """A transaction holding the catalog-wide write lock until it ends: a transaction-scoped advisory lock
        on PostgreSQL; on SQLite, BEGIN IMMEDIATE takes the database's write lock before anything is read.
        On `connection` when given (one the caller keeps), else on a connection of the pool."""
        with (
            nullcontext(connection) if connection else self.engine.connect() as connection,
            connection.begin(),
        ):
            if self.engine.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": CATALOG_LOCK_KEY})
            else:
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            yield connection

    def read_table(self, table_name: str, where: ColumnElement[bool] | None = None) -> list[Row]:
        """The rows of one loadable table as models (those matching the SQLAlchemy clause `where`, if given),
        read now (runtime controls use this, never a snapshot). A row that is no valid model, as a plain SQL
        write can leave, raises CatalogRowInvalid naming the table, the row's key and the field."""
        with self.engine.connect() as connection:
            return _read_table(connection, table_name, where)

    def snapshot(self, domain: str | None = None) -> CatalogSnapshot:
        """Every loadable table; with `domain`, only that domain's share of the structure (see _domain_rows),
        so a broken row of another domain does not stop this one from loading, and a domain reads no more than
        its own part of a large catalog."""
        with self.engine.connect() as connection:
            return self._snapshot(connection, domain)

    def _snapshot(self, connection: Connection, domain: str | None = None) -> CatalogSnapshot:
        snapshot = CatalogSnapshot()
        scoped = self._domain_rows(domain) if domain is not None else {}
        for table_name in LOADABLE:
            rows = scoped[table_name] if table_name in scoped else _read_table(connection, table_name)
            for row in rows:
                snapshot.add(table_name, row)
        return snapshot

    def lineage_versions(self, dataset: str | None = None) -> list[LineageVersion]:
        """The recorded lineage versions, of one dataset or of all, oldest first per dataset."""
        with self.engine.connect() as connection:
            return stored_versions(connection, dataset)

    def domains(self) -> list[str]:
        """The domains pipelines name, read with plain SQL: a broken row must not hide its domain."""
        pipelines = LOADABLE_TABLES["pipelines"]
        default = LOADABLE["pipelines"].model_fields["domain"].default
        with self.engine.connect() as connection:
            return sorted(
                {domain or default for domain in connection.execute(select(pipelines.c.domain)).scalars()}
            )

    def domain_datasets(self) -> dict[str, int]:
        """Per domain, the datasets (assets) its code location builds: what its stages write and read. Plain
        SQL too: a broken row must not hide its domain's size."""
        pipelines, stages = LOADABLE_TABLES["pipelines"], LOADABLE_TABLES["stages"]
        default = LOADABLE["pipelines"].model_fields["domain"].default
        datasets: dict[str, set[str]] = {domain: set() for domain in self.domains()}
        with self.engine.connect() as connection:
            rows = connection.execute(
                select(pipelines.c.domain, stages.c.target_id, stages.c.input_id, stages.c.inputs).join(
                    stages, stages.c.pipeline_id == pipelines.c.pipeline_id
                )
            )
            for domain, target_id, input_id, inputs in rows:
                more = [str(name) for name in inputs] if isinstance(inputs, list) else []
                datasets[domain or default] |= {str(target_id), str(input_id), *more}
        return {domain: len(names) for domain, names in datasets.items()}

    def _domain_rows(self, domain: str) -> dict[str, Sequence[Row]]:
        """A domain's pipelines, their stages, the rule sets those stages name, and the sources and targets of
        the datasets the stages read and write and of every dataset upstream of them in the declared lineage
        (a recovery path may read an alternate source; an input may be another domain's target)."""
        pipelines, stages = LOADABLE_TABLES["pipelines"], LOADABLE_TABLES["stages"]
        # A pipeline written before domains existed has none: it is in the default domain.
        in_domain = pipelines.c.domain == domain
        if domain == LOADABLE["pipelines"].model_fields["domain"].default:
            in_domain = in_domain | pipelines.c.domain.is_(None)
        rows: dict[str, Sequence[Row]] = {"pipelines": self.read_table("pipelines", in_domain)}
        # read_table returns each table's rows as that table's model (LOADABLE).
        domain_stages = cast(
            list[Stage],
            self.read_table(
                "stages", stages.c.pipeline_id.in_(select(pipelines.c.pipeline_id).where(in_domain))
            ),
        )
        rows["stages"] = domain_stages
        lineage = cast(list[DatasetLineage], self.read_table("dataset_lineage"))
        rows["dataset_lineage"] = lineage
        datasets = {dataset for stage in domain_stages for dataset in (*stage.input_ids(), stage.target_id)}
        upstream = nx.DiGraph((edge.upstream, edge.downstream) for edge in lineage)
        datasets |= {
            ancestor
            for dataset in datasets
            if dataset in upstream
            for ancestor in nx.ancestors(upstream, dataset)
        }
        named = {
            "sources": datasets,
            "targets": datasets,
            "validation_rules": {
                stage.validation_set_id for stage in domain_stages if stage.validation_set_id is not None
            },
        }
        for table_name, ids in named.items():
            [key] = LOADABLE[table_name].key_fields
            rows[table_name] = self.read_table(
                table_name, LOADABLE_TABLES[table_name].c[key].in_(sorted(ids))
            )
        return rows

    def table_rows(self, table_name: str) -> list[dict[str, Any]]:
        if table_name not in metadata.tables:
            raise KeyError(
                f"unknown catalog table {table_name!r}; tables: {', '.join(sorted(metadata.tables))}"
            )
        with self.engine.connect() as connection:
            return [dict(r) for r in connection.execute(select(metadata.tables[table_name])).mappings()]

    def processed_objects(self, source_id: str) -> dict[str, str]:
        """Bookmark of a source: object url → etag of every object whose ingestion was committed."""
        query = select(ingestion_bookmarks.c.object_key, ingestion_bookmarks.c.etag).where(
            ingestion_bookmarks.c.source_id == source_id, ingestion_bookmarks.c.state == "committed"
        )
        with self.engine.connect() as connection:
            return dict(connection.execute(query).all())

    def record_bookmarks(
        self, source_id: str, objects: Iterable[tuple[str, str, int]], batch_id: str, state: str = "committed"
    ) -> None:
        """Mark objects (url, etag, size) as ingested, or as being ingested by batch `batch_id` (`pending`);
        an object re-ingested after a change is re-marked."""
        records = [
            dict(
                source_id=source_id,
                object_key=url,
                etag=etag,
                size_bytes=size,
                batch_id=batch_id,
                state=state,
            )
            for url, etag, size in objects
        ]
        if not records:
            return
        with self.engine.begin() as connection:
            connection.execute(
                delete(ingestion_bookmarks).where(
                    ingestion_bookmarks.c.source_id == source_id,
                    ingestion_bookmarks.c.object_key.in_([r["object_key"] for r in records]),
                )
            )
            connection.execute(insert(ingestion_bookmarks), records)

    def pending_batches(self, source_id: str) -> list[str]:
        """The batches of a source begun and neither committed nor given up: a run stopped in between."""
        query = (
            select(ingestion_bookmarks.c.batch_id)
            .where(ingestion_bookmarks.c.source_id == source_id, ingestion_bookmarks.c.state == "pending")
            .distinct()
        )
        with self.engine.connect() as connection:
            return sorted(connection.execute(query).scalars())

    def batch_objects(self, source_id: str, batch_id: str) -> list[tuple[str, str, int]]:
        """The objects (url, etag, size) bookmarked by batch `batch_id` of a source, by url."""
        rows = ingestion_bookmarks.c
        query = (
            select(rows.object_key, rows.etag, rows.size_bytes)
            .where(rows.source_id == source_id, rows.batch_id == batch_id)
            .order_by(rows.object_key)
        )
        with self.engine.connect() as connection:
            return [(url, etag, size) for url, etag, size in connection.execute(query).all()]

    def settle_batch(self, source_id: str, batch_id: str, snapshot_id: int | None) -> None:
        """A pending batch's end: committed as lake snapshot `snapshot_id`, or (None) never committed, when
        its objects are forgotten so the next run ingests them."""
        rows = ingestion_bookmarks.c
        where = (rows.source_id == source_id, rows.batch_id == batch_id, rows.state == "pending")
        with self.engine.begin() as connection:
            if snapshot_id is None:
                connection.execute(delete(ingestion_bookmarks).where(*where))
            else:
                connection.execute(
                    update(ingestion_bookmarks)
                    .where(*where)
                    .values(state="committed", snapshot_id=snapshot_id)
                )

    def record_commit(self, **commit: Any) -> None:
        """One version of a lake table: dataset, snapshot_id, operation, and run_id, pipeline_id, stage_name,
        inputs (dataset → snapshot id) where known."""
        with self.engine.begin() as connection:
            connection.execute(insert(lake_commits).values(**commit))

    def lake_commits(self, dataset: str) -> list[dict[str, Any]]:
        """The versions of a lake table Medallion committed, oldest first."""
        query = (
            select(lake_commits).where(lake_commits.c.dataset == dataset).order_by(lake_commits.c.commit_id)
        )
        with self.engine.connect() as connection:
            return [dict(r) for r in connection.execute(query).mappings()]

    def record_audit(self, **entry: Any) -> None:
        """One audit_log row. `details` must be JSON-serialisable; it is checked here, not at read time.

        Its text is scrubbed of credentials: an error may quote a URL with its password."""
        entry = {name: scrub(value) if isinstance(value, str) else value for name, value in entry.items()}
        if entry.get("details") is not None:
            entry["details"] = json.loads(scrub(json.dumps(entry["details"])))
        with self.engine.begin() as connection:
            connection.execute(insert(audit_log).values(**entry))

    def warehouse_snapshot(self, dataset: str, warehouse: str) -> int | None:
        """The lake version of `dataset` last loaded into its table in `warehouse` (as the load's
        `warehouse_load` audit row names it), if any."""
        query = (
            select(audit_log.c.details)
            .where(audit_log.c.event == "warehouse_load", audit_log.c.dataset == dataset)
            .order_by(audit_log.c.audit_id.desc())
        )
        with self.engine.connect() as connection:
            for details in connection.execute(query).scalars():
                if (details or {}).get("warehouse") == warehouse:
                    return int(details["snapshot_id"])
        return None

    def verdicts(self, dataset: str, snapshot_id: int) -> dict[str, dict[str, Any]]:
        """The rule verdicts the last successful stage run that published, or found unchanged, that version
        of `dataset` recorded in its audit row (`details.verdicts`), by rule name; empty when none did."""
        query = (
            select(audit_log.c.details)
            .where(
                audit_log.c.event == "stage", audit_log.c.dataset == dataset, audit_log.c.status == "success"
            )
            .order_by(audit_log.c.audit_id.desc())
        )
        with self.engine.connect() as connection:
            for details in connection.execute(query).scalars():
                if (details or {}).get("snapshot_id") == str(snapshot_id) and "verdicts" in details:
                    return dict(details["verdicts"])
        return {}

    def audit_entries(self, **where: Any) -> list[dict[str, Any]]:
        query = select(audit_log).order_by(audit_log.c.audit_id)
        for column, value in where.items():
            query = query.where(audit_log.c[column] == value)
        with self.engine.connect() as connection:
            return [dict(r) for r in connection.execute(query).mappings()]


class CatalogRowInvalid(Exception):
    """A catalog row that is no valid model (written around the loader, e.g. with plain SQL)."""


def change_count(connection: Connection) -> int:
    """How many writes the loadable tables have had, however made (migration 0011's triggers): while it stays
    the same, so does everything a snapshot holds. Read inside a transaction, it covers that transaction's own
    writes too."""
    return int(connection.execute(select(catalog_changes.c.counter)).scalar_one())


def _read_table(
    connection: Connection, table_name: str, where: ColumnElement[bool] | None = None
) -> list[Row]:
    table = LOADABLE_TABLES[table_name]
    query = select(table) if where is None else select(table).where(where)
    return [_model(table_name, record) for record in connection.execute(query).mappings()]


def _model(table_name: str, record: RowMapping) -> Row:
    model = LOADABLE[table_name]
    try:
        return model.model_validate(
            {k: v for k, v in record.items() if k in model.model_fields and v is not None}
        )
    except ValidationError as error:
        # Field names and pydantic's messages only: a value read from the catalog may be hostile or secret.
        key = ", ".join(f"{field}={record.get(field)!r}" for field in model.key_fields)
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise CatalogRowInvalid(f"catalog table {table_name}, row ({key}): {problems}") from None
