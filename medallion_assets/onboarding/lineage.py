"""Table and column lineage of parsed statements, collapsed through temporary tables onto permanent ones.

Every query is qualified by sqlglot against one `MappingSchema` shared by the whole onboarding run (the
catalog's schemas, then each table a statement creates), and a walk over the qualified query's scopes ties
every target column to the base-table columns it is computed from, with the kind of transformation:

- identity: the column itself, perhaps renamed, through any number of subqueries, CTEs and temp tables;
- expression: any other computation (functions, arithmetic, CASE, casts, window PARTITION BY / ORDER BY);
- aggregate: an argument of an aggregate function, windowed or not, anywhere on the way;
- filter: a column in a WHERE, HAVING or QUALIFY condition, a one-table JOIN condition, or a filtering
  subquery (IN, EXISTS);
- join_key: a column in a condition between two tables (JOIN … ON / USING, MERGE ON, an implicit join in
  WHERE);
- ambiguous: a column written without its table where several tables of unknown columns could hold it; every
  candidate is listed, none is chosen.

Tables whose columns are unknown (no CREATE TABLE, no catalog row) get the columns the statement itself shows
they have: `alias.col` says so outright, and a bare `col` with one relation in scope, or with every other
relation known not to have it, belongs to the remaining one (the SQL runs, so the column is not ambiguous).

Along a path the strongest kind wins (aggregate > expression > identity). Filters and join keys shape every
row of the target, so they are recorded against the whole target, column "*" (OpenLineage's dataset-level
column lineage). In UPDATE, DELETE and MERGE the target's own columns are not lineage of itself.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar, cast

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, ScopeType, build_scope
from sqlglot.schema import MappingSchema

from medallion_assets.naming import IDENTIFIER
from medallion_assets.onboarding.parse import (
    DEFAULT_SCHEMA,
    CopyLoad,
    StatementError,
    Transformation,
    canonical_table,
    is_temporary_name,
    parse_sql,
    session_name,
)

IDENTITY, EXPRESSION, AGGREGATE, FILTER, JOIN_KEY = (
    "identity",
    "expression",
    "aggregate",
    "filter",
    "join_key",
)
AMBIGUOUS = "ambiguous"
WHOLE_TARGET = "*"
# Strength orders kinds of the same family: direct (identity < expression < aggregate) and indirect; an
# ambiguous column stays ambiguous whatever is computed from it.
_STRENGTH = {IDENTITY: 0, EXPRESSION: 1, AGGREGATE: 2, FILTER: 0, JOIN_KEY: 1, AMBIGUOUS: 3}
UNKNOWN_TYPE = "UNKNOWN"
_UNEXPANDED_STAR = "SELECT * over a table whose columns are unknown"
_SELF_EXCLUDED = ("update", "delete", "merge")
# Statements whose outputs are named by the target's columns when they list none.
_BY_TARGET_COLUMNS = ("insert", "insert_values", "alter_table_append")
CACHE_SIZE = 4096

BaseColumn = tuple[str, str]

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class ColumnEdge:
    """Target column (or "*", the whole target) ← a source table's column, and how."""

    target_column: str
    source: str
    source_column: str
    transformation: str


@dataclass(frozen=True)
class QueryLineage:
    """What one statement's query reads and computes, before temporary tables are collapsed.

    `stage` is the query qualified (stars expanded, every column tied to its table) with its output columns
    named as the target's; None when the statement yields no rows of its own (UPDATE, DELETE). Results are
    cached and shared, so `stage` is never changed in place: users copy it.
    """

    sources: tuple[str, ...]
    columns: tuple[str, ...]
    edges: tuple[ColumnEdge, ...] | None
    aggregates: bool
    group_columns: tuple[str, ...]
    stage: exp.Query | None
    warnings: tuple[str, ...] = ()


class LineageUnavailable(Exception):
    """Column lineage cannot be derived (unknown schema, unresolvable column): table level still holds."""


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


def stronger(first: str, second: str) -> str:
    """The stronger of two kinds of the same family (identity < expression < aggregate; filter < join_key)."""
    return first if _STRENGTH[first] >= _STRENGTH[second] else second


def _merge(into: dict[K, str], key: K, kind: str) -> None:
    into[key] = stronger(kind, into[key]) if key in into else kind


def referenced_tables(query: exp.Expr) -> list[str]:
    """Tables a query reads, in the order written, without its CTE names."""
    ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    tables = []
    for table in query.find_all(exp.Table, bfs=False):
        if not isinstance(table.this, exp.Identifier) or (not table.db and table.name.lower() in ctes):
            continue
        name = canonical_table(table)
        if name not in tables:
            tables.append(name)
    return tables


def aggregates(query: exp.Query) -> bool:
    """Whether the rows a query yields are groups: a GROUP BY, or an aggregate outside a window, in the query
    or in a derived table or CTE it reads. Subqueries that filter or compute one value do not count.
    """
    try:
        root = build_scope(query)
    except SqlglotError:
        return False
    if root is None:
        return False
    skipped = {
        id(inner)
        for scope in root.traverse()
        if scope.scope_type == ScopeType.SUBQUERY
        for inner in scope.traverse()
    }
    for scope in root.traverse():
        select = scope.expression
        if id(scope) in skipped or not isinstance(select, exp.Select):
            continue
        if select.args.get("group") or any(
            _is_aggregate(node) and not isinstance(node.parent, exp.Window)
            for projection in select.selects
            for node in _own_nodes(projection)
        ):
            return True
    return False


def _is_star(projection: exp.Expr) -> bool:
    return isinstance(projection, exp.Star) or (
        isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)
    )


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
    if not any(_is_star(projection) for projection in select.expressions):
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
                if any(_is_star(projection) for projection in qualified.selects):
                    raise LineageUnavailable(_UNEXPANDED_STAR)
                walker = _Walker(build_scope(qualified), complete)
                edges = walker.edges(columns)
                group_columns = walker.group_columns(columns)
                warnings += _ambiguity_warnings(edges)
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
        expanded = not any(_is_star(projection) for projection in query.selects)
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


def _relations(scope: Scope) -> dict[str, exp.Table | Scope]:
    """The tables and queries a scope selects from (FROM and JOINs), by the name columns refer to them by."""
    return {name: source for name, (_, source) in scope.selected_sources.items()}


def columns_shown(
    query: exp.Query,
    known: Callable[[str], Mapping[str, str] | None],
    shown_before: Mapping[str, Iterable[str]],
) -> dict[str, list[str]]:
    """Columns the query shows its tables of unknown columns (`known` gives None for them) to have, beside
    those earlier statements showed (`shown_before`).

    `alias.col` shows that the table has `col`; a bare `col` belongs to the one relation in its scope that may
    hold it (derived tables and known tables hold only their columns), else to the one shown to have it.
    Columns of a table read by `SELECT *` or `alias.*` are not guessed: the star would expand to them alone.
    """
    try:
        root = build_scope(query)
    except SqlglotError:
        return {}
    if root is None:
        return {}
    scopes = list(root.traverse())
    shown = {table: dict.fromkeys(columns) for table, columns in shown_before.items()}
    starred: set[str] = set()

    def unknown_table(source: exp.Expr | Scope | None) -> str | None:
        if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
            name = canonical_table(source)
            return name if known(name) is None else None
        return None

    def owner(scope: Scope | None, alias: str) -> exp.Table | Scope | None:
        while scope is not None:
            relations = _relations(scope)
            if alias in relations:
                return relations[alias]
            scope = scope.parent
        return None

    bare: list[tuple[Scope, exp.Column]] = []
    for scope in scopes:
        relations = _relations(scope)
        if isinstance(scope.expression, exp.Select):
            for projection in scope.expression.selects:
                if isinstance(projection, exp.Star):
                    starred.update(filter(None, map(unknown_table, relations.values())))
                elif isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star):
                    starred.update(filter(None, [unknown_table(relations.get(projection.table))]))
            for join in scope.expression.args.get("joins") or []:
                for name in join.args.get("using") or []:
                    for source in (join.this, scope.expression.args["from_"].this):
                        table = unknown_table(source)
                        if table:
                            shown.setdefault(table, {})[name.name.lower()] = None
        for column in scope.columns:
            if isinstance(column.this, exp.Star):
                continue
            if column.table:
                table = unknown_table(owner(scope, column.table))
                if table:
                    shown.setdefault(table, {})[column.name.lower()] = None
            elif not _names_alias(scope, column):
                bare.append((scope, column))

    def may_hold(source: exp.Table | Scope, name: str) -> bool | None:
        """True: it has the column; False: it has not; None: its columns are unknown, it may."""
        if isinstance(source, Scope):
            selects = source.expression.selects if isinstance(source.expression, exp.Query) else []
            if any(_is_star(projection) for projection in selects):
                return None
            return name in {select.lower() for select in _selectable(source).named_selects}
        table = unknown_table(source)
        if table is None:
            columns = known(canonical_table(source)) if isinstance(source, exp.Table) else None
            return name in columns if columns is not None else None
        return True if name in shown.get(table, {}) else None

    for innermost, column in bare:
        name = column.name.lower()
        scope_or_outer: Scope | None = innermost
        while scope_or_outer is not None:
            holds = {alias: may_hold(source, name) for alias, source in _relations(scope_or_outer).items()}
            maybe = [alias for alias, held in holds.items() if held is None]
            if any(holds.values()):
                break
            if len(maybe) == 1:
                table = unknown_table(_relations(scope_or_outer)[maybe[0]])
                if table:
                    shown.setdefault(table, {})[name] = None
                break
            if maybe:
                break  # ambiguous: left for the walk to report with its candidates
            scope_or_outer = scope_or_outer.parent  # a correlated reference to an outer query's table
    return {table: list(columns) for table, columns in shown.items() if table not in starred}


def _selectable(scope: Scope) -> exp.Selectable:
    """The scope's query or table function. sqlglot types a scope's expression as any expression, but a
    scope is made only of a query or of a table function (UDTF), both Selectable."""
    return cast(exp.Selectable, scope.expression)


def _names_alias(scope: Scope, column: exp.Column) -> bool:
    """Whether a bare column refers to an output of its own SELECT (`GROUP BY day` for `… AS day`)."""
    select = scope.expression
    if not isinstance(select, exp.Select):
        return False
    name = column.name.lower()
    for projection in select.selects:
        if isinstance(projection, exp.Alias) and projection.alias.lower() == name:
            defining = column.find_ancestor(exp.Alias)
            return defining is None or defining.alias.lower() != name
    return False


def _ambiguity_warnings(edges: Iterable[ColumnEdge]) -> list[str]:
    """One warning per target column fed by a column that several tables may hold, naming them."""
    candidates: dict[tuple[str, str], list[str]] = {}
    for edge in edges:
        if edge.transformation == AMBIGUOUS:
            candidates.setdefault((edge.target_column, edge.source_column), []).append(edge.source)
    return [
        f"target column {target}: {column} is ambiguous, it may be "
        f"{' or '.join(f'{table}.{column}' for table in tables)} (their columns are unknown); "
        "qualify it with its table"
        for (target, column), tables in candidates.items()
    ]


def _own_nodes(node: exp.Expr) -> Iterator[exp.Expr]:
    """The node and its descendants in the same scope: a nested query is yielded but not entered."""
    return node.walk(prune=lambda n: isinstance(n, exp.Query))


def _conjuncts(condition: exp.Expr) -> list[exp.Expr]:
    return list(condition.flatten()) if isinstance(condition, exp.And) else [condition]


def _query_of(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Subquery):
        node = node.this
    return node


# sqlglot counts these window functions as aggregates, but each returns one row's value, aggregating nothing.
_VALUE_FUNCTIONS = (exp.Lag, exp.Lead, exp.FirstValue, exp.LastValue, exp.NthValue)


def _is_aggregate(node: exp.Expr) -> bool:
    return isinstance(node, exp.AggFunc) and not isinstance(node, _VALUE_FUNCTIONS)


def _under_aggregate(column: exp.Expr, stop: exp.Expr) -> bool:
    node = column.parent
    while node is not None and node is not stop:
        if _is_aggregate(node):
            return True
        node = node.parent
    return _is_aggregate(stop)


class _Walker:
    """Resolves a qualified query's columns, scope by scope, down to base tables (memoized per projection)."""

    def __init__(self, root: Scope | None, complete: Mapping[str, Mapping[str, str]]):
        if root is None:
            raise LineageUnavailable("not a query")
        self.root = root
        self.complete = complete  # tables whose columns are all known: a column they lack is not theirs
        self.scopes = {id(scope.expression): scope for scope in root.traverse()}
        self.memo: dict[tuple[int, int], dict[BaseColumn, str]] = {}
        # Scalar subqueries are values of one column: their conditions shape that value, not the rows.
        self.value_scopes: set[int] = set()

    def edges(self, columns: tuple[str, ...]) -> tuple[ColumnEdge, ...]:
        found: dict[tuple[str, str, str], str] = {}
        for index, column in enumerate(columns):
            for (table, source_column), kind in self.projection(self.root, index).items():
                _merge(found, (column, table, source_column), kind)
        for (table, source_column), kind in self.indirect().items():
            _merge(found, (WHOLE_TARGET, table, source_column), kind)
        return tuple(
            ColumnEdge(column, table, source_column, kind)
            for (column, table, source_column), kind in found.items()
        )

    def projection(self, scope: Scope, index: int) -> dict[BaseColumn, str]:
        key = (id(scope), index)
        if key not in self.memo:
            if isinstance(scope.expression, exp.SetOperation):
                result: dict[BaseColumn, str] = {}
                for branch in scope.set_operation_scopes:
                    for base, kind in self.projection(branch, index).items():
                        _merge(result, base, kind)
            else:
                selects = _selectable(scope).selects
                if index >= len(selects):
                    raise LineageUnavailable(f"a query has no column {index + 1}")
                result = self._value(scope, selects[index].unalias())
            self.memo[key] = result
        return self.memo[key]

    def _value(self, scope: Scope, expression: exp.Expr) -> dict[BaseColumn, str]:
        if _is_star(expression):
            raise LineageUnavailable(_UNEXPANDED_STAR)
        result: dict[BaseColumn, str] = {}
        for node in _own_nodes(expression):
            if not isinstance(node, (exp.Column, exp.Query)):
                continue
            kind = (
                IDENTITY
                if node is expression
                else AGGREGATE
                if _under_aggregate(node, expression)
                else EXPRESSION
            )
            found = self._column(scope, node) if isinstance(node, exp.Column) else self._subquery_value(node)
            for base, inner in found.items():
                _merge(result, base, stronger(kind, inner))
        return result

    def _subquery_value(self, node: exp.Expr) -> dict[BaseColumn, str]:
        scope = self.scopes.get(id(_query_of(node)))
        if scope is None:
            raise LineageUnavailable("a subquery could not be scoped")
        self.value_scopes.update(id(inner) for inner in scope.traverse())
        result: dict[BaseColumn, str] = {}
        for index in range(len(_selectable(scope).selects)):
            for base, kind in self.projection(scope, index).items():
                _merge(result, base, kind)
        for inner in scope.traverse():
            for condition in self._conditions(inner):
                for column in (n for n in _own_nodes(condition) if isinstance(n, exp.Column)):
                    for base in self._column(inner, column):
                        _merge(result, base, EXPRESSION)
        return result

    def _column(self, scope: Scope, column: exp.Column) -> dict[BaseColumn, str]:
        table = column.table
        if not table:
            return self._candidates(scope, column)
        owner: Scope | None = scope
        while owner is not None and table not in owner.sources:
            owner = owner.parent
        if owner is None:
            raise LineageUnavailable(f"{table!r} is not a table of the query")
        source = owner.sources[table]
        if isinstance(source, exp.Table):
            return {(canonical_table(source), column.name.lower()): IDENTITY}
        if isinstance(source, Scope) and isinstance(source.expression, exp.Query):
            names = [name.lower() for name in source.expression.named_selects]
            if column.name.lower() not in names:
                raise LineageUnavailable(f"{table!r} has no column {column.name!r}")
            return self.projection(source, names.index(column.name.lower()))
        raise LineageUnavailable(f"{table!r} is neither a table nor a query")

    def _candidates(self, scope: Scope, column: exp.Column) -> dict[BaseColumn, str]:
        """A column qualification left without a table: each table in scope that may hold it (its columns are
        unknown, or known to include it) is a candidate."""
        name = column.name.lower()
        candidates = {}
        for source in _relations(scope).values():
            if not isinstance(source, exp.Table):
                continue
            table = canonical_table(source)
            if table not in self.complete or name in self.complete[table]:
                candidates[(table, name)] = AMBIGUOUS
        if not candidates:
            raise LineageUnavailable(f"column {column.name!r} cannot be tied to a table")
        return candidates

    @staticmethod
    def _conditions(scope: Scope) -> list[exp.Expr]:
        select = scope.expression
        if not isinstance(select, exp.Select):
            return []
        conditions = [select.args[k].this for k in ("where", "having", "qualify") if select.args.get(k)]
        conditions += [join.args["on"] for join in select.args.get("joins") or [] if join.args.get("on")]
        return [conjunct for condition in conditions for conjunct in _conjuncts(condition)]

    def indirect(self) -> dict[BaseColumn, str]:
        """Filter and join-key columns of every scope that shapes the target's rows."""
        result: dict[BaseColumn, str] = {}
        for scope in self.scopes.values():
            if id(scope) in self.value_scopes:
                continue
            filtering = scope.scope_type == ScopeType.SUBQUERY
            for conjunct in self._conditions(scope):
                columns = [n for n in _own_nodes(conjunct) if isinstance(n, exp.Column)]
                between_tables = len({c.table for c in columns}) > 1
                kind = JOIN_KEY if between_tables and not filtering else FILTER
                for column in columns:
                    for base in self._column(scope, column):
                        _merge(result, base, kind)
            if filtering:
                for index in range(len(_selectable(scope).selects)):
                    for base in self.projection(scope, index):
                        _merge(result, base, FILTER)
        return result

    def group_columns(self, columns: tuple[str, ...]) -> tuple[str, ...]:
        """Target columns that are GROUP BY keys of the outermost query."""
        select = self.root.expression
        if not isinstance(select, exp.Select):
            return ()
        group = select.args.get("group")
        if not group:
            return ()
        keys = group.expressions
        return tuple(
            column
            for projection, column in zip(select.selects, columns)
            if any(projection.unalias() == key for key in keys)
        )


@dataclass
class StatementLineage:
    """A statement's lineage in terms of permanent tables and S3 paths: temporary tables collapsed.

    `stage` has temporary tables inlined as CTEs; other tables keep their canonical `schema.table` names.
    """

    parsed: Transformation | CopyLoad
    sources: tuple[str, ...]
    columns: tuple[str, ...]
    edges: tuple[ColumnEdge, ...] | None
    aggregates: bool
    group_columns: tuple[str, ...]
    stage: exp.Query | None
    warnings: list[str] = field(default_factory=list)

    @property
    def target(self) -> str:
        return self.parsed.target

    @property
    def kind(self) -> str:
        return self.parsed.kind

    @property
    def merge_keys(self) -> tuple[str, ...]:
        """The keys a MERGE matches on, or a DELETE … USING deletes by; a COPY has none."""
        return self.parsed.merge_keys if isinstance(self.parsed, Transformation) else ()


@dataclass
class _Temporary:
    """What a temporary table holds, in terms of permanent tables."""

    sources: tuple[str, ...] = ()
    columns: dict[str, dict[BaseColumn, str]] | None = field(default_factory=dict)
    indirect: dict[BaseColumn, str] = field(default_factory=dict)
    definitions: list[exp.Query] = field(default_factory=list)
    changed_in_place: bool = False
    aggregates: bool = False


class TemporaryTables:
    """The temporary tables of one file (one session), through which lineage is collapsed."""

    def __init__(self) -> None:
        self._tables: dict[str, _Temporary] = {}

    def declare(self, name: str) -> None:
        """A CREATE TEMP TABLE without a query: known, and empty."""
        self._tables[name] = _Temporary()

    def is_temporary(self, name: str) -> bool:
        """Whether `name` (canonical) is a temporary table of this session: declared here, or `#name`."""
        return name in self._tables or is_temporary_name(name)

    def collapse(self, parsed: Transformation | CopyLoad, lineage: QueryLineage) -> StatementLineage:
        """The statement's lineage with every temporary table it reads replaced by what that table holds.

        An UPDATE, DELETE or MERGE of a permanent table is not lineage of that table itself; of a temporary
        table it is (SET n = n * 2 computes from what the table held), so self references go after collapsing.
        """
        warnings = list(lineage.warnings)
        read = [t for t in lineage.sources if self.is_temporary(t)]
        for name in read:
            if name not in self._tables:
                warnings.append(
                    f"temporary table {session_name(name)} is not created in this file: "
                    "what it holds is unknown"
                )
                self._tables[name] = _Temporary(columns=None)
        sources = tuple(
            dict.fromkeys(
                source
                for name in lineage.sources
                for source in (self._tables[name].sources if name in read else (name,))
            )
        )
        edges = self._collapse_edges(lineage.edges, read, warnings)
        if parsed.kind in _SELF_EXCLUDED:
            sources = tuple(source for source in sources if source != parsed.target)
            edges = edges if edges is None else tuple(e for e in edges if e.source != parsed.target)
        stage = self._inline(lineage.stage, warnings) if lineage.stage is not None else None
        aggregated = lineage.aggregates or any(self._tables[name].aggregates for name in read)
        return StatementLineage(
            parsed, sources, lineage.columns, edges, aggregated, lineage.group_columns, stage, warnings
        )

    def _collapse_edges(
        self, edges: tuple[ColumnEdge, ...] | None, read: list[str], warnings: list[str]
    ) -> tuple[ColumnEdge, ...] | None:
        if edges is None or any(self._tables[name].columns is None for name in read):
            if edges is not None:
                warnings.append(
                    "column lineage unavailable through a temporary table whose columns are unknown"
                )
            return None
        found: dict[tuple[str, str, str], str] = {}
        for edge in edges:
            if edge.source not in read:
                _merge(found, (edge.target_column, edge.source, edge.source_column), edge.transformation)
                continue
            indirect = edge.target_column == WHOLE_TARGET
            # Every table read has known columns (None returned above); `or {}` says so to the type checker.
            held = self._tables[edge.source].columns or {}
            for (table, column), kind in held.get(edge.source_column, {}).items():
                _merge(
                    found,
                    (edge.target_column, table, column),
                    edge.transformation if indirect else stronger(edge.transformation, kind),
                )
        for name in read:
            for (table, column), kind in self._tables[name].indirect.items():
                _merge(found, (WHOLE_TARGET, table, column), kind)
        return tuple(ColumnEdge(*key, kind) for key, kind in found.items())

    def record(self, result: StatementLineage) -> None:
        """A statement that writes a temporary table: what the table now holds."""
        table = self._tables.setdefault(result.target, _Temporary())
        table.sources = tuple(dict.fromkeys([*table.sources, *result.sources]))
        table.aggregates = table.aggregates or result.aggregates
        if result.edges is None or table.columns is None:
            table.columns = None
        else:
            for column in result.columns:
                table.columns.setdefault(column, {})
            for edge in result.edges:
                into = (
                    table.indirect
                    if edge.target_column == WHOLE_TARGET
                    else table.columns[edge.target_column]
                )
                _merge(into, (edge.source, edge.source_column), edge.transformation)
        if result.stage is None:
            table.changed_in_place = True
        else:
            table.definitions.append(result.stage)

    def _inline(self, stage: exp.Query, warnings: list[str]) -> exp.Query | None:
        """The stage query with each temporary table it reads defined as a CTE, dependencies first."""
        names: dict[str, str] = {}
        ctes: list[exp.CTE] = []
        taken = {cte.alias_or_name.lower() for cte in stage.find_all(exp.CTE)} | {
            table.name.lower() for table in stage.find_all(exp.Table)
        }

        def define(query: exp.Query) -> exp.Query:
            for table in list(query.find_all(exp.Table)):
                if not isinstance(table.this, exp.Identifier) or not self.is_temporary(
                    canonical_table(table)
                ):
                    continue
                name = canonical_table(table)
                if name not in names:
                    temporary = self._tables.get(name)
                    if temporary is None or temporary.changed_in_place or not temporary.definitions:
                        raise LineageUnavailable(name)
                    names[name] = _free_name(re.sub(r"\W", "", session_name(name)) or "tmp", taken)
                    taken.add(names[name])
                    body = define(union_all([d.copy() for d in temporary.definitions]))
                    ctes.append(exp.CTE(this=body, alias=exp.TableAlias(this=exp.to_identifier(names[name]))))
                table.set("this", exp.to_identifier(names[name]))
                table.set("db", None)
            return query

        if not any(
            self.is_temporary(canonical_table(t))
            for t in stage.find_all(exp.Table)
            if isinstance(t.this, exp.Identifier)
        ):
            return stage
        try:
            stage = define(stage.copy())
        except LineageUnavailable as unreplayable:
            warnings.append(
                f"temporary table {session_name(str(unreplayable))} is changed in place or never "
                "filled: the stage cannot replay it, so the statement gives lineage only"
            )
            return None
        if ctes:
            existing = stage.args.get("with_")
            stage.set("with_", exp.With(expressions=[*ctes, *(existing.expressions if existing else [])]))
        return stage


def union_all(queries: list[exp.Query]) -> exp.Query:
    """The queries' rows one after another (UNION ALL), in order; one query is itself."""
    union = queries[0]
    for query in queries[1:]:
        union = exp.union(union, query, distinct=False)
    return union


def _free_name(name: str, taken: set[str]) -> str:
    candidate, suffix = name, 1
    while candidate.lower() in taken:
        suffix += 1
        candidate = f"{name}_{suffix}"
    return candidate
