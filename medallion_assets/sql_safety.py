"""What a stage's `transform_sql` may be: one query that reads only the datasets its stage declares.

Checked on sqlglot's syntax tree, at `catalog validate`/`load` and again just before Spark runs it; Spark then
runs the SQL generated from the checked tree, never the text as written, so no difference between sqlglot's
parser and Spark's can smuggle a second meaning past the check.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError
from sqlglot.optimizer.scope import Scope, traverse_scope

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


class UnsafeSql(ValueError):
    """`transform_sql` is not a single query over the stage's declared inputs, or names columns they lack."""


def checked_query(
    sql: str, dialect: str, inputs: Collection[str], schemas: Mapping[str, Collection[str]] | None = None
) -> exp.Query:
    """The parsed query, after checking it reads only `inputs` (temporary views named by dataset id).

    With `schemas` (each input's declared column names), every column the query names must exist.
    """
    try:
        statements = [statement for statement in sqlglot.parse(sql, read=dialect) if statement is not None]
    except ParseError as error:
        # The error's own text underlines the spot with terminal escape codes; the parts say it plainly.
        first = error.errors[0] if error.errors else {}
        raise UnsafeSql(
            f"does not parse as {dialect}: {first.get('description', error)} "
            f"(line {first.get('line')}, column {first.get('col')})"
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
    if schemas is not None:
        _check_columns(query, schemas)
    return query


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


def _check_columns(query: exp.Query, schemas: Mapping[str, Collection[str]]) -> None:
    """Every column reference resolves against the declared columns of the relation it reads from."""
    for scope in traverse_scope(query.copy()):
        offered = {name: _columns_of(scope, name, schemas) for name in scope.sources}
        for column in scope.columns:
            if column.table:
                if not _visible(scope, column.table):
                    raise UnsafeSql(
                        f"names column {column.table}.{column.name}, but reads no relation {column.table!r}"
                    )
                known = offered.get(column.table)
            elif any(columns is None for columns in offered.values()):
                known = None
            else:  # unqualified: any relation's column, or an alias of the select list (GROUP BY, ORDER BY)
                # No relation's columns are None here (the branch above); `or ()` says so to the type checker.
                known = [name for columns in offered.values() for name in columns or ()] + _aliases(
                    scope.expression
                )
            if known is None or column.name.lower() in {name.lower() for name in known}:
                continue
            where = f"{column.table}.{column.name}" if column.table else column.name
            close = difflib.get_close_matches(column.name, known, n=3, cutoff=0.6)
            hint = (
                f"did you mean {' or '.join(close)}?" if close else f"it has {', '.join(sorted(set(known)))}"
            )
            raise UnsafeSql(f"names column {where!r}, which its input does not have; {hint}")


def _columns_of(scope: Scope, source_name: str, schemas: Mapping[str, Collection[str]]) -> list[str] | None:
    """The column names a relation of the scope offers, or None when they are not known."""
    source = scope.sources.get(source_name)
    if isinstance(source, exp.Table):
        columns = schemas.get(source.name)
        return list(columns) if columns is not None else None
    if isinstance(source, Scope) and isinstance(source.expression, (exp.Select, exp.SetOperation)):
        names = list(source.expression.named_selects)
        return None if "*" in names else names
    return None


def _visible(scope: Scope | None, relation: str) -> bool:
    """A relation of this scope, or of an enclosing one (a correlated subquery)."""
    while scope is not None:
        if relation in scope.sources or relation in scope.lateral_sources:
            return True
        scope = scope.parent
    return False


def _aliases(expression: exp.Expr) -> list[str]:
    return (
        [item.alias for item in expression.expressions if isinstance(item, exp.Alias)]
        if isinstance(expression, exp.Select)
        else []
    )


def _function_name(function: exp.Func) -> str:
    return (function.name if isinstance(function, exp.Anonymous) else function.sql_name()).lower()


def _kind(node: exp.Expr) -> str:
    return node.key.upper()


def _excerpt(node: exp.Expr) -> str:
    text = node.sql()
    return text if len(text) <= 80 else text[:77] + "..."
