"""Column lineage of one query: each target column tied to the base-table columns it is computed from.

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

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar, cast

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import Scope, ScopeType, build_scope

from medallion_assets.onboarding.statements import canonical_table

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
UNEXPANDED_STAR = "SELECT * over a table whose columns are unknown"
SELF_EXCLUDED = ("update", "delete", "merge")

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


def stronger(first: str, second: str) -> str:
    """The stronger of two kinds of the same family (identity < expression < aggregate; filter < join_key)."""
    return first if _STRENGTH[first] >= _STRENGTH[second] else second


def merge_kind(into: dict[K, str], key: K, kind: str) -> None:
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


def is_star(projection: exp.Expr) -> bool:
    return isinstance(projection, exp.Star) or (
        isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)
    )


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
            if any(is_star(projection) for projection in selects):
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


def ambiguity_warnings(edges: Iterable[ColumnEdge]) -> list[str]:
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


class ColumnWalker:
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
                merge_kind(found, (column, table, source_column), kind)
        for (table, source_column), kind in self.indirect().items():
            merge_kind(found, (WHOLE_TARGET, table, source_column), kind)
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
                        merge_kind(result, base, kind)
            else:
                selects = _selectable(scope).selects
                if index >= len(selects):
                    raise LineageUnavailable(f"a query has no column {index + 1}")
                result = self._value(scope, selects[index].unalias())
            self.memo[key] = result
        return self.memo[key]

    def _value(self, scope: Scope, expression: exp.Expr) -> dict[BaseColumn, str]:
        if is_star(expression):
            raise LineageUnavailable(UNEXPANDED_STAR)
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
                merge_kind(result, base, stronger(kind, inner))
        return result

    def _subquery_value(self, node: exp.Expr) -> dict[BaseColumn, str]:
        scope = self.scopes.get(id(_query_of(node)))
        if scope is None:
            raise LineageUnavailable("a subquery could not be scoped")
        self.value_scopes.update(id(inner) for inner in scope.traverse())
        result: dict[BaseColumn, str] = {}
        for index in range(len(_selectable(scope).selects)):
            for base, kind in self.projection(scope, index).items():
                merge_kind(result, base, kind)
        for inner in scope.traverse():
            for condition in self._conditions(inner):
                for column in (n for n in _own_nodes(condition) if isinstance(n, exp.Column)):
                    for base in self._column(inner, column):
                        merge_kind(result, base, EXPRESSION)
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
                        merge_kind(result, base, kind)
            if filtering:
                for index in range(len(_selectable(scope).selects)):
                    for base in self.projection(scope, index):
                        merge_kind(result, base, FILTER)
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
