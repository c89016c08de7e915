"""What a stage's `transform_sql` may be: one query that reads only the datasets its stage declares.

Checked on sqlglot's syntax tree, at `catalog validate`/`load` and again just before Spark runs it; Spark then
runs the SQL generated from the checked tree, never the text as written, so no difference between sqlglot's
parser and Spark's can smuggle a second meaning past the check.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterator, Mapping, Sequence
from functools import cache, lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.resolver import Resolver
from sqlglot.optimizer.scope import Scope, traverse_scope
from sqlglot.schema import MappingSchema

# Spark functions that call into the JVM by class and method name: arbitrary code from a string.
JVM_ESCAPES = frozenset({"reflect", "java_method", "try_reflect"})
# Table functions that generate rows from their arguments and read nothing.
ROW_GENERATORS = frozenset(
    {"range", "explode", "explode_outer", "inline", "inline_outer", "posexplode", "posexplode_outer", "stack"}
)
# Nodes that only statements with side effects (or script execution) hold, wherever they are nested.
_FORBIDDEN_NODES = (
    exp.DDL,
    exp.DML,
    exp.Command,
    exp.Set,
    exp.QueryTransform,
    exp.Use,
    exp.Cache,
    exp.Uncache,
    exp.Refresh,
    exp.Pragma,
    exp.Directory,
)


# Families of types a declared column's cast cannot cross without losing every value (a date to a number):
# the SQL's type and the declared one must be in the same family, unless either is text (conform parses text,
# and anything casts to text).
_TYPE_FAMILIES = {
    "number": exp.DataType.NUMERIC_TYPES,
    "date or time": exp.DataType.TEMPORAL_TYPES,
    "boolean": {exp.DataType.Type.BOOLEAN},
}


class UnsafeSql(ValueError):
    """`transform_sql` is not a single query over the stage's declared inputs, or names columns they lack.
    `line` is the line of the SQL the problem is on, when known (1 is the SQL's first line)."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.line = line


@lru_cache(maxsize=1024)  # bounded: a sensor's process lives through many catalog edits
def _statements(sql: str, dialect: str) -> tuple[exp.Expr, ...]:
    return tuple(statement for statement in sqlglot.parse(sql, read=dialect) if statement is not None)


def parsed_statements(sql: str, dialect: str) -> list[exp.Expr]:
    """sqlglot's statements of `sql`, parsed once per text and dialect in a process (a plan checks,
    categorises and fingerprints the same SQL): each call gets its own copies, which checks and the optimizer
    change. A text that does not parse raises sqlglot's error each time."""
    return [statement.copy() for statement in _statements(sql, dialect)]


def checked_query(
    sql: str,
    dialect: str,
    inputs: Collection[str],
    schemas: Mapping[str, Mapping[str, str]] | None = None,
    output: Mapping[str, str] | None = None,
    names: Sequence[str] | None = (),
) -> exp.Query:
    """The parsed query, after checking it reads only `inputs` (temporary views named by dataset id) and
    every column it outputs has a plain name.

    `names` are the target's declared columns in order: an output without a name takes the one at its place
    when the target declares as many columns as the query outputs, as a derived column list
    (`CREATE TABLE t (a, b) AS SELECT …`) names them; `named_by_place` lists those. None when the query is
    only analyzed and the names of its outputs do not matter.

    With `schemas` (each input's declared columns, name → Spark type), every column the query names must
    resolve by SQL's scoping rules; with `output` too (the target's declared columns), the query must
    produce each of them, of a type that casts to the declared one.
    """
    try:
        statements = parsed_statements(sql, dialect)
    except ParseError as error:
        # The error's own text underlines the spot with terminal escape codes; the parts say it plainly.
        first = error.errors[0] if error.errors else {}
        raise UnsafeSql(
            f"does not parse as {dialect}: {first.get('description', error)} "
            f"(line {first.get('line')}, column {first.get('col')})",
            first.get("line"),
        ) from None
    except ValueError as error:
        raise UnsafeSql(f"does not parse as {dialect}: {error}") from None
    if len(statements) != 1:
        raise UnsafeSql(f"must be exactly one query; found {len(statements)} statements")
    query = statements[0]
    if not isinstance(query, (exp.Select, exp.SetOperation)):
        raise UnsafeSql(
            f"must be a query (SELECT, WITH … SELECT, or a UNION/INTERSECT/EXCEPT of them), "
            f"not {_kind(query)}"
        )
    declared = {name.lower() for name in inputs}
    named_subqueries = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    for node in query.walk():
        if isinstance(node, _FORBIDDEN_NODES):
            raise UnsafeSql(f"holds {_kind(node)} ({_excerpt(node)}); only a query is allowed")
        if isinstance(node, exp.Table):
            _check_relation(node, declared, named_subqueries, inputs)
        elif isinstance(node, exp.Func) and _function_name(node) in JVM_ESCAPES:
            raise UnsafeSql(f"calls {_function_name(node)}(), which runs JVM code; it is not allowed")
    if names is not None:
        _name_outputs(query, names)
    if schemas is not None:
        # Spark resolves names regardless of case, as sqlglot does once they are lower case.
        schemas = {
            name.lower(): {c.lower(): t for c, t in columns.items()} for name, columns in schemas.items()
        }
        qualified = _check_columns(query, schemas, dialect)
        if output is not None:
            _check_output(qualified, schemas, {c.lower(): t for c, t in output.items()}, dialect)
    return query


_NAMED_BY_PLACE = "named_by_place"


def _name_outputs(query: exp.Query, names: Sequence[str]) -> None:
    """Spark names an unnamed expression after its text (`sum(x)`), which no declared column or later
    stage can name plainly: it takes the declared name at its place, or is refused."""
    select = query
    while isinstance(select, exp.SetOperation):  # a UNION's outputs are named by its first query's
        select = select.this
    declared = len(names) == len(select.selects)
    for position, item in enumerate(select.selects, start=1):
        if isinstance(item, (exp.Alias, exp.Column, exp.Star, exp.Dot)):
            continue
        if not declared:
            raise UnsafeSql(
                f"output column {position}, {_excerpt(item)}, has no name: give it one with AS"
                + (
                    f" (the target declares {len(names)} columns for its {len(select.selects)}, so none is "
                    "taken by place)"
                    if names
                    else ""
                ),
                _line(item),
            )
        named = exp.alias_(item.copy(), names[position - 1])
        named.meta[_NAMED_BY_PLACE] = True
        item.replace(named)


def named_by_place(query: exp.Query) -> list[tuple[str, int | None]]:
    """What `checked_query` named after the target's declared columns: one line per output, with the line of
    the SQL it is on."""
    return [
        (
            f"output column {position}, {_excerpt(item.this)}, has no name: it takes the target's declared "
            f"name {item.alias} at its place",
            _line(item.this),
        )
        for position, item in enumerate(query.selects, start=1)
        if item.meta.get(_NAMED_BY_PLACE)
    ]


def checked_condition(sql: str, dialect: str = "spark") -> str:
    """A row condition (a CDC target's `apply_as_deletes`) as Spark SQL generated from its checked tree: one
    boolean expression over the row's columns, reading no table (no subquery) and calling no function that
    runs code (JVM escapes, user-defined functions: names sqlglot does not know)."""
    try:
        expression = sqlglot.parse_one(sql, read=dialect, into=exp.Condition)
    except (ParseError, ValueError) as error:
        raise UnsafeSql(f"does not parse as a {dialect} condition: {error}") from None
    for node in expression.walk():
        if isinstance(node, (*_FORBIDDEN_NODES, exp.Query, exp.Subquery, exp.Table)):
            raise UnsafeSql(f"holds {_kind(node)} ({_excerpt(node)}); only a condition on the row is allowed")
        if isinstance(node, exp.Anonymous) or (
            isinstance(node, exp.Func) and _function_name(node) in JVM_ESCAPES
        ):
            raise UnsafeSql(f"calls {_function_name(node)}(), which is not a known SQL function")
    return expression.sql(dialect="spark")


def _check_relation(
    table: exp.Table, declared: set[str], named_subqueries: set[str], inputs: Collection[str]
) -> None:
    listed = ", ".join(sorted(inputs)) or "none"
    if isinstance(table.this, exp.Func) and _function_name(table.this) in ROW_GENERATORS:
        return
    if not isinstance(table.this, exp.Identifier):
        raise UnsafeSql(
            f"reads from the table function {_excerpt(table)}; it may read only its declared inputs "
            f"({listed})"
        )
    if table.args.get("db") or table.args.get("catalog"):
        raise UnsafeSql(
            f"reads {_excerpt(table)} by path or qualified name; it may read only its declared "
            f"inputs ({listed}), by id"
        )
    if table.name.lower() not in declared | named_subqueries:
        raise UnsafeSql(f"reads {table.name!r}, which the stage does not declare; declared inputs: {listed}")


def _check_columns(query: exp.Query, schemas: Mapping[str, Mapping[str, str]], dialect: str) -> exp.Query:
    """The query qualified by sqlglot (every column resolved to its relation by SQL's scoping rules: inner
    scope first, derived-table column lists, USING and NATURAL joins, lateral aliases where the dialect has
    them); raises UnsafeSql for the first column no relation in its scope has."""
    try:
        qualified = qualify(
            query.copy(),
            dialect=dialect,
            schema=_schema(schemas, dialect),
            # Unknown columns are left for the walk below, which says what the scope has instead.
            allow_partial_qualification=True,
            validate_qualify_columns=False,
            quote_identifiers=False,
            identify=False,
        )
    except OptimizeError as error:
        raise UnsafeSql(f"cannot be resolved: {error}") from None
    for scope in traverse_scope(qualified):
        for column in scope.columns:
            if (
                isinstance(scope.expression, exp.SetOperation)
                and column.name in scope.expression.named_selects
            ):
                continue  # the ORDER BY of a UNION names its output columns
            known = _offered(scope, column.table, schemas) if column.table else None
            if column.table and known is None:
                if not _visible(scope, column.table):
                    raise UnsafeSql(
                        f"names column {column.table}.{column.name}, but reads no relation {column.table!r}",
                        _line(column),
                    )
                continue  # a relation whose columns are not known (a table function's)
            if known is not None and column.name in known:
                continue
            # qualify resolved every column some relation in scope has; this one no relation has.
            offered = known if known is not None else _in_scope(scope, schemas)
            if offered is None:
                continue
            if column.name in offered:  # left unqualified by qualify although a relation has it
                raise UnsafeSql(
                    f"names column {column.name!r}, which more than one of its inputs has: qualify it",
                    _line(column),
                )
            where = f"{column.table}.{column.name}" if column.table else column.name
            close = difflib.get_close_matches(column.name, offered, n=3, cutoff=0.6)
            hint = (
                f"did you mean {' or '.join(close)}?"
                if close
                else f"it has {', '.join(sorted(set(offered)))}"
            )
            raise UnsafeSql(f"names column {where!r}, which its input does not have; {hint}", _line(column))
    return qualified


@cache
def _spark_type(type_name: str) -> exp.DataType:
    """A catalog column type (a Spark type) parsed once: a catalog of 1,000 stages names a handful of types
    thousands of times, and parsing them was a tenth of its validation."""
    return exp.DataType.build(type_name, dialect="spark")


def _schema(schemas: Mapping[str, Mapping[str, str]], dialect: str) -> MappingSchema:
    """The inputs' declared columns, typed in Spark's words (the catalog's types are Spark types)."""
    return MappingSchema(
        {
            name: {column: _spark_type(type_name) for column, type_name in columns.items()}
            for name, columns in schemas.items()
        },
        dialect=dialect,
        normalize=False,
    )


def _visible_scopes(scope: Scope) -> Iterator[Scope]:
    """The scopes whose relations a column of `scope` may name: its own, then, for a subquery in an
    expression (a correlated one), the enclosing scopes'. A derived table or a CTE sees only its own."""
    current: Scope | None = scope
    while current is not None:
        yield current
        current = current.parent if current.is_subquery else None


def _offered(scope: Scope, relation: str, schemas: Mapping[str, Mapping[str, str]]) -> list[str] | None:
    """The columns of `relation` as the scope sees it (its own sources first, then enclosing scopes'), or None
    when they are not known."""
    for current in _visible_scopes(scope):
        if relation in current.sources:
            source = current.sources[relation]
            if isinstance(source, exp.Table):
                columns = schemas.get(source.name)
                return list(columns) if columns is not None else None
            names = list(Resolver(current, MappingSchema(dict(schemas))).get_source_columns(relation))
            return None if not names or "*" in names else names
    return None


def _in_scope(scope: Scope, schemas: Mapping[str, Mapping[str, str]]) -> list[str] | None:
    """Every column an unqualified name could mean in the scope, its relations' and enclosing scopes', once
    each; None when some relation's columns are not known."""
    offered: list[str] = []
    for current in _visible_scopes(scope):
        for name in current.sources:
            columns = _offered(current, name, schemas)
            if columns is None:
                return None
            offered.extend(columns)
    return list(dict.fromkeys(offered))


def _check_output(
    qualified: exp.Query,
    schemas: Mapping[str, Mapping[str, str]],
    output: Mapping[str, str],
    dialect: str,
) -> None:
    """Each declared column of the target is produced, of a type in the declared type's family."""
    typed = annotate_types(qualified, schema=_schema(schemas, dialect), dialect=dialect)
    produced = {item.alias_or_name: item for item in typed.selects}
    if any(isinstance(item, exp.Star) or item.is_star for item in produced.values()):
        return  # a star's columns are the inputs', checked by the stage that made them
    missing = [name for name in output if name not in produced]
    if missing:
        raise UnsafeSql(
            f"does not produce the target's declared column(s) {', '.join(missing)}; it produces "
            f"{', '.join(produced)}"
        )
    for name, type_name in output.items():
        declared, actual = _spark_type(type_name), produced[name].type
        family, actual_family = _family(declared), _family(actual)
        if actual is not None and family and actual_family and family != actual_family:
            raise UnsafeSql(
                f"produces column {name} as {actual.sql('spark')} (a {actual_family}), but the target "
                f"declares it {type_name} (a {family})",
                _line(produced[name]),
            )


def _family(data_type: exp.DataType | None) -> str | None:
    """The family of a type whose casts Medallion checks; None for text, unknown and other types."""
    if data_type is None:
        return None
    return next((family for family, types in _TYPE_FAMILIES.items() if data_type.this in types), None)


def _visible(scope: Scope, relation: str) -> bool:
    """A relation of this scope, or of an enclosing one (a correlated subquery)."""
    return any(relation in s.sources or relation in s.lateral_sources for s in _visible_scopes(scope))


def _line(node: exp.Expr) -> int | None:
    """The SQL line a node starts on, from the tokens sqlglot parsed it from."""
    lines = [part.meta["line"] for part in node.walk() if "line" in part.meta]
    return min(lines) if lines else None


def _function_name(function: exp.Func) -> str:
    return (function.name if isinstance(function, exp.Anonymous) else function.sql_name()).lower()


def _kind(node: exp.Expr) -> str:
    return node.key.upper()


def _excerpt(node: exp.Expr) -> str:
    text = node.sql()
    return text if len(text) <= 80 else text[:77] + "..."
