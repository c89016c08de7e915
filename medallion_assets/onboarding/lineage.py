"""The analyzer of one onboarding run: statements parsed and qualified against one shared schema, and
each one's column lineage (`column_lineage`) before temporary tables are collapsed (`temporary_tables`).

Parses and analyses are cached, so a file of thousands of statements that repeat themselves is analyzed once.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import TypeVar

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import build_scope
from sqlglot.schema import MappingSchema

from medallion_assets.naming import IDENTIFIER
from medallion_assets.onboarding.column_lineage import (
    IDENTITY,
    UNEXPANDED_STAR,
    UNKNOWN_TYPE,
    ColumnEdge,
    ColumnWalker,
    LineageUnavailable,
    QueryLineage,
    aggregates,
    ambiguity_warnings,
    columns_shown,
    is_star,
    referenced_tables,
)
from medallion_assets.onboarding.parse import parse_sql
from medallion_assets.onboarding.statements import DEFAULT_SCHEMA, CopyLoad, StatementError, Transformation

K = TypeVar("K")
V = TypeVar("V")

# Statements whose outputs are named by the target's columns when they list none.
_BY_TARGET_COLUMNS = ("insert", "insert_values", "alter_table_append")
CACHE_SIZE = 4096


def _output_names(target: str, query: exp.Query, written: exp.Query, warnings: list[str]) -> list[str]:
    """The names of the query's outputs; a value the SQL gives no name (`SELECT 1`: qualifying names it
    "1") is named by its place, as sqlglot names unnamed values. A name the SQL gives is kept as written."""
    written_selects = written.selects if len(written.selects) == len(query.selects) else None
    names = []
    for place, projection in enumerate(query.selects):
        name = projection.output_name.lower()
        value = written_selects[place] if written_selects is not None else None
        if value is not None and not isinstance(value, exp.Alias) and not IDENTIFIER.fullmatch(name):
            name = f"_col_{place}"
            warnings.append(
                f"column {place + 1} of {target} ({value.sql()}) has no name: it is {name} (give it one "
                "with AS)"
            )
        names.append(name)
    return names


class TargetColumnsUnknown(LineageUnavailable):
    """Which target column each value feeds cannot be told: the statement lists none and the target's are
    unknown. Its sources still are."""


class _Lru(OrderedDict[K, V]):
    """A mapping that forgets its least recently used entries beyond CACHE_SIZE."""

    def get_recent(self, key: K) -> V | None:
        if key in self:
            self.move_to_end(key)
            return self[key]
        return None

    def put(self, key: K, value: V) -> None:
        self[key] = value
        if len(self) > CACHE_SIZE:
            self.popitem(last=False)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _table_node(canonical: str) -> exp.Table:
    db, _, name = canonical.rpartition(".")
    return exp.Table(this=exp.to_identifier(name), db=exp.to_identifier(db or DEFAULT_SCHEMA))


def _name_outputs(query: exp.Query, names: Iterable[str]) -> exp.Query:
    """Name the query's output columns (those of its first SELECT, for a UNION) as the target's columns.

    A star that could not be expanded (unknown schema) is left alone: its columns are not known.
    """
    select = query
    while isinstance(select, exp.SetOperation):
        select = select.this
    if not any(is_star(projection) for projection in select.expressions):
        select.set(
            "expressions",
            [
                projection if projection.alias_or_name == name else exp.alias_(projection.unalias(), name)
                for projection, name in zip(select.expressions, names)
            ],
        )
    return query


class SqlAnalyzer:
    """Parses and analyzes statements of one dialect against one reused MappingSchema.

    Parses are cached by the SQL's hash; analyses by the SQL's hash and the schemas of the tables it reads,
    so a cached result is never stale after a CREATE TABLE changes a table.
    """

    def __init__(self, dialect: str):
        self.dialect = dialect
        self.schema = MappingSchema(dialect=dialect)
        self._parsed: _Lru[str, list[exp.Expr | None]] = _Lru()
        self._analyses: _Lru[str, QueryLineage] = _Lru()
        # Columns statements showed tables of unknown columns to have: evidence, not a schema (never
        # complete).
        self.shown: dict[str, dict[str, None]] = {}

    def show(self, table: str, columns: Iterable[str]) -> None:
        """Record that a table (canonical name) has these columns, as a statement or the catalog's lineage
        shows."""
        self.shown.setdefault(table, {}).update(dict.fromkeys(columns))

    def parse(self, text: str, dialect: str) -> list[exp.Expr | None]:
        """sqlglot.parse through the cache. Callers never change the trees: analysis copies before
        qualifying."""
        key = _digest(dialect, text)
        parsed = self._parsed.get_recent(key)
        if parsed is None:
            parsed = parse_sql(text, dialect)
            self._parsed.put(key, parsed)
        return parsed

    def column_types(self, table: str) -> dict[str, str] | None:
        """The known columns of a table (canonical name) and their SQL types, or None when unknown."""
        found = self.schema.find(_table_node(table), raise_on_missing=False)
        return {name: str(type_name) for name, type_name in found.items()} if found else None

    def set_columns(self, table: str, columns: Mapping[str, str]) -> None:
        """Declare or redefine a table's columns (name → SQL type of this dialect)."""
        if self.column_types(table) == dict(columns):
            return
        redefined = self.column_types(table) is not None
        self.schema.add_table(_table_node(table), dict(columns), dialect=self.dialect)
        if redefined:
            # sqlglot caches lookups by the aliased table node as well, and add_table only evicts the bare
            # one, so a redefined table would keep its old columns in queries that alias it.
            self.schema._find_cache.clear()

    def analyze(self, transformation: Transformation) -> QueryLineage:
        """Lineage of one transformation; raises StatementError when its columns do not fit its target."""
        queries = [transformation.lineage_query]
        if (
            transformation.stage_query is not None
            and transformation.stage_query is not transformation.lineage_query
        ):
            queries.append(transformation.stage_query)
        tables = [table for query in queries for table in referenced_tables(query)]
        if transformation.kind in _BY_TARGET_COLUMNS and transformation.target_columns is None:
            tables.append(transformation.target)  # its columns name the query's outputs
        # Column names decide qualification and lineage; types decide neither.
        fingerprint = repr(
            [(table, list(self.column_types(table) or self.shown.get(table) or ())) for table in tables]
        )
        key = _digest(self.dialect, transformation.statement.text, fingerprint)
        lineage = self._analyses.get_recent(key)
        if lineage is None:
            lineage = self._analyze(transformation)
            self._analyses.put(key, lineage)
        return lineage

    def analyze_copy(self, copy: CopyLoad) -> QueryLineage:
        """A COPY's columns: those it lists, else the table's; each is the raw file's column of that name."""
        types = self.column_types(copy.target)
        columns = copy.columns or tuple(types or ())
        if not columns:
            unavailable = (
                f"column lineage unavailable (the columns of {copy.target} are unknown: list them in the "
                f"COPY ({copy.target} (a, b, …) FROM …) or declare them with CREATE TABLE before it): "
                "table-level lineage only"
            )
            return QueryLineage((copy.s3_path,), (), None, False, (), None, (*copy.warnings, unavailable))
        unknown = [c for c in columns if types is not None and c not in types]
        if unknown:
            raise StatementError(
                copy.statement.line,
                f"COPY lists columns {', '.join(unknown)} that {copy.target} does not have",
            )
        edges = tuple(ColumnEdge(c, copy.s3_path, c, IDENTITY) for c in columns)
        return QueryLineage((copy.s3_path,), tuple(columns), edges, False, (), None, copy.warnings)

    def _schema_for(self, query: exp.Query) -> tuple[MappingSchema, dict[str, dict[str, str]]]:
        """The schema to qualify `query` against, and the tables in it whose columns are all known, with
        those.

        When the query reads tables of unknown columns, a schema of just the tables it reads: the known ones,
        and the others with the columns the query shows they have.
        """
        tables = referenced_tables(query)
        known = {table: self.column_types(table) for table in tables}
        complete = {table: columns for table, columns in known.items() if columns}
        if len(complete) == len(tables):
            return self.schema, complete
        shown = columns_shown(
            query, known.get, {table: self.shown[table] for table in tables if table in self.shown}
        )
        for table, columns in shown.items():
            self.show(table, columns)
        mapping: dict[str, dict[str, dict[str, str]]] = {}
        for table in tables:
            types = known[table] or dict.fromkeys(shown.get(table, ()), UNKNOWN_TYPE)
            if types:
                db, _, name = table.rpartition(".")
                mapping.setdefault(db, {})[name] = types
        # MappingSchema takes dict[str, object]; dict is invariant, so the nested dict is passed as a copy of
        # that type.
        return MappingSchema(dict[str, object](mapping), dialect=self.dialect), complete

    def _qualify(self, query: exp.Query, schema: MappingSchema | None = None) -> exp.Query:
        return qualify(
            query.copy(),
            dialect=self.dialect,
            schema=schema or self.schema,
            db=DEFAULT_SCHEMA,
            validate_qualify_columns=False,
            identify=False,
        )

    def _lineage_query(self, transformation: Transformation) -> exp.Query:
        """The transformation's lineage query; ALTER TABLE … APPEND matches columns by name, so from a source
        of unknown columns it moves the target's."""
        query = transformation.lineage_query
        if transformation.kind == "alter_table_append":
            [source] = referenced_tables(query)
            target = self.column_types(transformation.target)
            if self.column_types(source) is None and target:
                return exp.select(*target).from_(query.args["from_"].this.copy())
        return query

    def _analyze(self, transformation: Transformation) -> QueryLineage:
        query = self._lineage_query(transformation)
        sources = tuple(referenced_tables(query))
        warnings = list(transformation.warnings)
        schema, complete = self._schema_for(query)
        try:
            qualified = self._qualify(query, schema)
        except SqlglotError as error:
            qualified = None
            warnings.append(f"column lineage unavailable ({error}): table-level lineage only")
        columns_known = True
        try:
            columns = self._target_columns(transformation, qualified or query, warnings)
        except TargetColumnsUnknown as reason:
            # No target column to walk to; the columns that shape the whole target still are.
            columns, columns_known = (), False
            warnings.append(f"column lineage unavailable ({reason}): lineage to the whole target only")
        edges: tuple[ColumnEdge, ...] | None = None
        group_columns: tuple[str, ...] = ()
        if qualified is not None:
            try:
                if any(is_star(projection) for projection in qualified.selects):
                    raise LineageUnavailable(UNEXPANDED_STAR)
                walker = ColumnWalker(build_scope(qualified), complete)
                edges = walker.edges(columns)
                group_columns = walker.group_columns(columns)
                warnings += ambiguity_warnings(edges)
            except LineageUnavailable as reason:
                warnings.append(f"column lineage unavailable ({reason}): table-level lineage only")
        aggregated = aggregates(qualified or query)
        if transformation.stage_query is None or not columns_known:
            stage = None
        elif transformation.stage_query is transformation.lineage_query:
            # The walk is done with the qualified query: it becomes the stage's, named as the target's
            # columns.
            stage = _name_outputs(qualified or query.copy(), columns)
        else:
            # A MERGE's stage query names its columns already: those of the INSERT clause.
            try:
                stage = self._qualify(
                    transformation.stage_query, self._schema_for(transformation.stage_query)[0]
                )
            except SqlglotError:
                stage = transformation.stage_query.copy()
            if transformation.unnamed_values:
                stage = _name_outputs(stage, columns[-transformation.unnamed_values :])
        return QueryLineage(sources, columns, edges, aggregated, group_columns, stage, tuple(warnings))

    def _values_columns(self, transformation: Transformation) -> tuple[str, ...]:
        """The target columns a MERGE's INSERT without a column list feeds: the target's first ones."""
        declared = tuple(self.column_types(transformation.target) or ())
        if len(declared) < transformation.unnamed_values:
            raise TargetColumnsUnknown(
                f"the MERGE's INSERT lists no columns and those of {transformation.target} are unknown: list "
                "them (INSERT (a, b) VALUES …) or declare them with CREATE TABLE before the MERGE"
            )
        return declared[: transformation.unnamed_values]

    def _target_columns(
        self, transformation: Transformation, query: exp.Query, warnings: list[str]
    ) -> tuple[str, ...]:
        """The target column each projection feeds: as listed, else the target table's, else the query's
        (a value without a name, as `SELECT 1`, named by its place as sqlglot names it, with a warning)."""
        expanded = not any(is_star(projection) for projection in query.selects)
        declared = self.column_types(transformation.target)
        if transformation.unnamed_values:
            named = transformation.target_columns or ()
            columns = (*named[: -transformation.unnamed_values], *self._values_columns(transformation))
        elif transformation.target_columns is not None:
            columns = transformation.target_columns
        elif transformation.kind in ("insert", "insert_values") and declared:
            columns = tuple(declared)[: len(query.selects)] if expanded else tuple(declared)
        elif transformation.kind == "insert_values":
            raise TargetColumnsUnknown(
                f"the columns of {transformation.target} are unknown: list them (INSERT INTO t (a, b) "
                "VALUES …) or declare them with CREATE TABLE before the INSERT"
            )
        elif expanded:
            columns = tuple(
                _output_names(transformation.target, query, transformation.lineage_query, warnings)
            )
        else:
            columns = ()
        # A DELETE, or a MERGE that only deletes, feeds no column: its lineage query's one value is a
        # placeholder.
        if expanded and columns and len(columns) != len(query.selects):
            raise StatementError(
                transformation.statement.line,
                f"the query yields {len(query.selects)} "
                f"columns for {len(columns)} columns of {transformation.target}",
            )
        return tuple(columns)
