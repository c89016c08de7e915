"""SQL files → typed statements (`statements`): split with file and line, parsed by sqlglot one at a time,
classified; COPY and external tables are read in `raw_loads`.

Each statement is parsed on its own, so one that does not parse is reported with its file, line and the
parser's reason while the others are still onboarded. Classification says what a statement does for the
catalog: a transformation (rows flow from tables into a table or S3), a COPY from S3, a table schema, or
nothing (GRANT, VACUUM, SET…: skipped). Nothing here executes SQL or reads the catalog.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from medallion_assets.onboarding.raw_loads import EXTERNAL_READABLE, copy_load, external_table
from medallion_assets.onboarding.statements import (
    Failed,
    Parsed,
    ParseFunction,
    Skipped,
    SqlStatement,
    StatementError,
    TableSchema,
    Transformation,
    canonical_table,
    is_temporary_table,
    split_statements,
    table_and_columns,
)

_TOKEN_REPR = re.compile(r"<Token token_type: [^,]+, text: (.*?), line: \d+, col: \d+, [^>]*>")
_UNLOAD = re.compile(r"^\(\s*'((?:[^'\\]|\\.|'')*)'\s*\)\s*TO\s*'([^']+)'", re.S | re.I)
_APPEND = re.compile(
    r"^TABLE\s+([\w.#\"]+)\s+APPEND\s+FROM\s+([\w.#\"]+)(?:\s+(IGNOREEXTRA|FILLTARGET))?\s*$", re.I
)
_CREATE_EXTERNAL = re.compile(r"^CREATE\s+EXTERNAL\s+TABLE\b", re.I)


def parse_file(path: str | Path, dialect: str, parse: ParseFunction | None = None) -> list[Parsed]:
    """Every statement of a file, parsed and classified; `parse` (text → expressions) may cache."""
    # A byte that is not UTF-8 fails the statement it is in (it parses as no SQL), not the whole file.
    text = Path(path).read_text(errors="replace")
    return [parse_statement(statement, dialect, parse) for statement in split_statements(str(path), text)]


def unexpected_error(error: BaseException) -> str:
    """The reason a statement failed in a way nobody foresaw (a bug of ours or of sqlglot): what and why."""
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def parse_statement(statement: SqlStatement, dialect: str, parse: ParseFunction | None = None) -> Parsed:
    """One statement → what it does. Never raises: bad SQL, or a failure while reading it, is a `Failed`
    with line and reason."""
    try:
        expressions = (parse or parse_sql)(statement.text, dialect)
    except (ParseError, TokenError) as error:
        line, reason = _parse_failure(statement, error, dialect)
        return Failed(statement, "unparseable", line, reason)
    except Exception as error:  # noqa: BLE001 (one statement's failure never stops the others)
        return Failed(statement, "unparseable", statement.line, unexpected_error(error))
    if len(expressions) != 1 or expressions[0] is None:
        return Failed(statement, "unparseable", statement.line, "expected exactly one statement")
    try:
        return _classify(statement, expressions[0], dialect, parse)
    except StatementError as error:
        return Failed(statement, _kind_name(expressions[0]), error.line, error.reason)
    except Exception as error:  # noqa: BLE001 (one statement's failure never stops the others)
        return Failed(statement, _kind_name(expressions[0]), statement.line, unexpected_error(error))


def _parse_failure(statement: SqlStatement, error: ParseError | TokenError, dialect: str) -> tuple[int, str]:
    """The file line a parse error points at, and the parser's own reason."""
    if isinstance(error, TokenError):
        return statement.line, f"cannot be tokenized as {dialect}: {error}"
    first = error.errors[0] if error.errors else {}
    # sqlglot describes the offending token by its repr; its text is what the reader wrote.
    reason = _TOKEN_REPR.sub(r"'\1'", first.get("description") or str(error))
    return statement.line + (first.get("line") or 1) - 1, f"does not parse as {dialect}: {reason}"


def parse_sql(text: str, dialect: str) -> list[exp.Expr | None]:
    """sqlglot.parse, without its warning for statements it keeps as commands (UNLOAD, VACUUM): those are
    ours."""
    with _commands_quiet():
        return sqlglot.parse(text, read=dialect)


@contextlib.contextmanager
def _commands_quiet() -> Iterator[None]:
    logger = logging.getLogger("sqlglot")

    def keep(record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


_KIND_NAMES = {"Transaction": "begin", "TruncateTable": "truncate"}


def _kind_name(expression: exp.Expr) -> str:
    """A statement's kind as SQL calls it: VACUUM → vacuum, TruncateTable → truncate, Grant → grant."""
    if isinstance(expression, exp.Command):
        return expression.name.lower()
    name = type(expression).__name__
    return _KIND_NAMES.get(name) or re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _classify(
    statement: SqlStatement, expression: exp.Expr, dialect: str, parse: ParseFunction | None
) -> Parsed:
    expression = _derived_tables_named(expression)
    if isinstance(expression, exp.Create):
        return _create(statement, expression)
    if isinstance(expression, exp.Insert) and isinstance(expression.expression, exp.Query):
        table, columns = table_and_columns(expression.this)
        query = _with_statement_ctes(expression, _unwrapped(expression.expression))
        return Transformation(
            statement, "insert", canonical_table(table), is_temporary_table(table), query, columns, query
        )
    if isinstance(expression, exp.Query) and (into := _leftmost(expression).args.get("into")):
        # `SELECT … INTO t FROM a UNION ALL SELECT … FROM b`: the INTO sits in the first SELECT.
        query = expression.copy()
        _leftmost(query).set("into", None)
        return Transformation(
            statement,
            "select_into",
            canonical_table(into.this),
            bool(into.args.get("temporary")) or is_temporary_table(into.this),
            query,
            None,
            query,
        )
    if isinstance(expression, exp.Merge):
        return _merge(statement, expression)
    if isinstance(expression, exp.Update):
        return _update(statement, expression)
    if isinstance(expression, exp.Delete):
        return _delete(statement, expression)
    if isinstance(expression, exp.Copy):
        return copy_load(statement, expression, dialect)
    if isinstance(expression, exp.Command):
        return _command(statement, expression, dialect, parse)
    if isinstance(expression, exp.Insert) and isinstance(expression.expression, exp.Values):
        return _insert_values(statement, expression)
    if isinstance(expression, exp.Insert):
        return Skipped(statement, "insert_default_values", "DEFAULT VALUES inserts no data the SQL shows")
    if isinstance(expression, exp.Select):
        return Skipped(statement, "select", "returns rows to the client and writes no table")
    return Skipped(statement, _kind_name(expression))


def _command(
    statement: SqlStatement, command: exp.Command, dialect: str, parse: ParseFunction | None
) -> Parsed:
    """Statements sqlglot keeps as text: UNLOAD, ALTER TABLE … APPEND, CALL, and those it cannot parse
    further."""
    name = command.name.upper()
    if name == "UNLOAD":
        return _unload(statement, command, dialect, parse)
    if name == "CALL":
        return Skipped(
            statement,
            "call",
            "a stored procedure's body is not in the statement: onboard the SQL "
            "it runs (its CREATE PROCEDURE body) as statements of their own",
        )
    if name == "ALTER" and (append := _APPEND.match(command.text("expression").strip())):
        return _alter_table_append(statement, append, dialect)
    if name == "CREATE" and _CREATE_EXTERNAL.match(statement.text):
        raise StatementError(statement.line, EXTERNAL_READABLE)
    return Skipped(statement, _kind_name(command))


def _insert_values(statement: SqlStatement, insert: exp.Insert) -> Transformation:
    """`INSERT … VALUES`: rows of literals (a reference table), which no stage makes; a value may be a
    subquery (`(SELECT max(id) FROM a)`), whose tables are then the target's sources."""
    table, columns = table_and_columns(insert.this)
    first, *others = insert.expression.expressions
    # The first row says which column each value feeds; later rows matter only for the tables they read.
    # A long VALUES list is a list of literals: one SELECT per row would make its lineage query huge.
    rows = [first, *(row for row in others if row.find(exp.Query))]
    selects = [
        exp.Select(
            expressions=[value.copy() for value in (row.expressions if isinstance(row, exp.Tuple) else [row])]
        )
        for row in rows
    ]
    query: exp.Query = selects[0] if len(selects) == 1 else exp.union(*selects, distinct=False)
    reads = any(row.find(exp.Query) for row in rows)
    return Transformation(
        statement,
        "insert_values",
        canonical_table(table),
        is_temporary_table(table),
        query,
        columns,
        None,
        warnings=(
            ()
            if reads
            else (
                "literal rows: a reference table with no sources, which no stage makes "
                "(put its rows in a raw file for one)",
            )
        ),
    )


def _alter_table_append(statement: SqlStatement, append: re.Match[str], dialect: str) -> Transformation:
    """`ALTER TABLE target APPEND FROM source`: moves every row of source into target, columns matched by
    name."""
    target, source = (exp.to_table(name, dialect=dialect) for name in append.group(1, 2))
    query = exp.select("*").from_(source)
    warnings = (
        ()
        if (append.group(3) or "").upper() != "FILLTARGET"
        else (
            "FILLTARGET: target columns the source lacks are filled with their defaults, which the stage "
            "does not know: they are NULL",
        )
    )
    return Transformation(
        statement,
        "alter_table_append",
        canonical_table(target),
        is_temporary_table(target),
        query,
        None,
        query,
        warnings=warnings,
    )


def _derived_tables_named(expression: exp.Expr) -> exp.Expr:
    """`expression`, or a copy with each unnamed subquery in a FROM or JOIN named `_derived_<n>`: PostgreSQL
    16 allows `FROM (SELECT …) LEFT JOIN (SELECT …) USING (c)`, which sqlglot cannot qualify unnamed. (The
    parsed expression may be a cache's: it is never changed.)"""

    def unnamed(tree: exp.Expr) -> list[exp.Subquery]:
        return [
            subquery
            for subquery in tree.find_all(exp.Subquery)
            if not subquery.alias and isinstance(subquery.parent, (exp.From, exp.Join))
        ]

    if not unnamed(expression):
        return expression
    expression = expression.copy()
    for number, subquery in enumerate(unnamed(expression)):
        subquery.set("alias", exp.TableAlias(this=exp.to_identifier(f"_derived_{number}")))
    return expression


def _unwrapped(query: exp.Query) -> exp.Query:
    """`(SELECT …)` → `SELECT …`: a parenthesized query yields the same columns."""
    while isinstance(query, exp.Subquery):
        query = query.this
    return query


def _leftmost(query: exp.Query) -> exp.Query:
    """The first SELECT of a set operation (the query itself otherwise): where an INTO is written."""
    while isinstance(query, exp.SetOperation):
        query = query.this
    return query


def _with_statement_ctes(statement: exp.Expr, query: exp.Query) -> exp.Query:
    """`WITH c AS (…) INSERT INTO t SELECT … FROM c`: the query with the statement's CTEs (ahead of its
    own), so that c is read through, never taken for a table."""
    ctes = statement.args.get("with_")
    if ctes is None:
        return query
    query = query.copy()
    own = query.args.get("with_")
    query.set(
        "with_",
        exp.With(
            expressions=[cte.copy() for cte in ctes.expressions] + (list(own.expressions) if own else []),
            recursive=ctes.args.get("recursive") or (own is not None and own.args.get("recursive")),
        ),
    )
    return query


def _create(statement: SqlStatement, create: exp.Create) -> Parsed:
    kind = (create.args.get("kind") or "").upper()
    query = create.expression if isinstance(create.expression, exp.Query) else None
    if kind in ("PROCEDURE", "FUNCTION"):
        return Skipped(
            statement,
            f"create_{kind.lower()}",
            f"a {kind.lower()} body runs only when called: "
            "onboard the SQL it runs as statements of their own",
        )
    if kind not in ("TABLE", "VIEW") or not isinstance(create.this, (exp.Table, exp.Schema)):
        return Skipped(statement, f"create_{kind.lower() or 'other'}")
    properties = create.args.get("properties")
    if properties and properties.find(exp.ExternalProperty):
        return external_table(statement, create)
    table, columns = table_and_columns(create.this)
    temporary = is_temporary_table(table) or bool(properties and properties.find(exp.TemporaryProperty))
    if query is not None:
        query = _unwrapped(query)
        return Transformation(
            statement,
            "create_view" if kind == "VIEW" else "create_table_as",
            canonical_table(table),
            temporary,
            query,
            columns,
            query,
        )
    if kind == "VIEW":
        return Skipped(statement, "create_view", "a view without a query")
    definitions = create.this.expressions if isinstance(create.this, exp.Schema) else []
    like = next((d for d in definitions if isinstance(d, exp.LikeProperty)), None)
    types = {
        d.name.lower(): d.args["kind"]
        for d in definitions
        if isinstance(d, exp.ColumnDef) and d.args.get("kind")
    }
    return TableSchema(
        statement,
        canonical_table(table),
        types,
        temporary,
        canonical_table(like.this) if like is not None else None,
    )


def _reference(table: exp.Table) -> str:
    """How columns refer to a table in the statement: its alias, else its name."""
    return table.alias_or_name


def _equi_join_keys(condition: exp.Expr | None, target: exp.Table) -> tuple[str, ...]:
    """Target columns equated to another table's columns in `condition`'s top-level ANDs: the rows' keys."""
    if condition is None:
        return ()
    reference = _reference(target)
    keys = []
    for conjunct in condition.flatten() if isinstance(condition, exp.And) else [condition]:
        if isinstance(conjunct, exp.EQ) and all(
            isinstance(side, exp.Column) for side in (conjunct.this, conjunct.expression)
        ):
            tables = [conjunct.this.table, conjunct.expression.table]
            if tables.count(reference) == 1:
                keys.append((conjunct.this if tables[0] == reference else conjunct.expression).name.lower())
    return tuple(keys)


def _synthetic_select(
    projections: list[exp.Expr], target: exp.Table, joins: list[exp.Join], where: exp.Expr | None
) -> exp.Select:
    """A SELECT over the target and the tables an UPDATE, DELETE or MERGE reads, for lineage only."""
    select = exp.Select(expressions=projections or [exp.Literal.number(1)])
    select.set("from_", exp.From(this=target.copy()))
    select.set("joins", joins)
    if where is not None:
        select.set("where", exp.Where(this=where.copy()))
    return select


def _comma_joins(tables: list[exp.Expr]) -> list[exp.Join]:
    """`FROM a, b JOIN c ON …` of an UPDATE or `USING a, b` of a DELETE, as joins of the synthetic SELECT."""
    joins = []
    for table in tables:
        table = table.copy()
        nested = table.args.pop("joins", None) or []
        joins.append(exp.Join(this=table))
        joins.extend(nested)
    return joins


def _update(statement: SqlStatement, update: exp.Update) -> Transformation:
    target = update.this
    from_ = update.args.get("from_")
    joins = _comma_joins([from_.this] if from_ else [])
    where = update.args["where"].this if update.args.get("where") else None
    columns = tuple(assignment.this.name.lower() for assignment in update.expressions)
    projections = [
        exp.alias_(assignment.expression.copy(), name)
        for assignment, name in zip(update.expressions, columns)
    ]
    return Transformation(
        statement,
        "update",
        canonical_table(target),
        is_temporary_table(target),
        _synthetic_select(projections, target, joins, where),
        columns,
        None,
        _equi_join_keys(where, target),
    )


def _delete(statement: SqlStatement, delete: exp.Delete) -> Transformation:
    target = delete.this
    where = delete.args["where"].this if delete.args.get("where") else None
    joins = _comma_joins(delete.args.get("using") or [])
    return Transformation(
        statement,
        "delete",
        canonical_table(target),
        is_temporary_table(target),
        _synthetic_select([], target, joins, where),
        (),
        None,
        _equi_join_keys(where, target),
    )


def _merge(statement: SqlStatement, merge: exp.Merge) -> Transformation:
    target, source, on = merge.this, merge.args["using"], merge.args["on"]
    names: list[str] = []
    projections: list[exp.Expr] = []
    conditions: list[exp.Expr] = []
    insert_row: dict[str, exp.Expr] | None = None
    updates: dict[str, exp.Expr] = {}
    unnamed_values = 0
    warnings = []
    for when in merge.args["whens"].expressions:
        if when.args.get("condition") is not None:
            conditions.append(when.args["condition"])
        action = when.args.get("then")
        if isinstance(action, exp.Update):
            for assignment in action.expressions:
                updates[assignment.this.name.lower()] = assignment.expression
        elif isinstance(action, exp.Insert):
            columns, values = _merge_insert(statement, action)
            if columns is None:
                # The target's columns, in order, which only the analysis knows: named there.
                unnamed_values = len(values)
                columns = [f"_col_{place}" for place in range(unnamed_values)]
            insert_row = dict(zip(columns, values))
            if when.args.get("condition") is not None:
                warnings.append(
                    "the condition on WHEN NOT MATCHED is not applied by the stage: it loads every "
                    "source row by key"
                )
    for name, value in [*updates.items(), *(insert_row or {}).items()]:
        names.append(name)
        projections.append(exp.alias_(value.copy(), name))
    where = exp.and_(*[c.copy() for c in conditions]) if conditions else None
    lineage_query = _synthetic_select(
        projections, target, [exp.Join(this=source.copy(), on=on.copy())], where
    )
    keys = _equi_join_keys(on, target)
    stage_query = None
    if insert_row is None:
        warnings.append(
            "MERGE without WHEN NOT MATCHED … INSERT only changes rows in place: lineage only, no stage"
        )
    else:
        stage_query = exp.Select(expressions=[exp.alias_(v.copy(), k) for k, v in insert_row.items()])
        stage_query.set("from_", exp.From(this=source.copy()))
        differing = sorted(k for k, v in updates.items() if k not in insert_row or v != insert_row[k])
        if differing and not unnamed_values:
            warnings.append(
                f"WHEN MATCHED sets {', '.join(differing)} differently from the INSERT: the stage "
                "replaces matched rows by key with the INSERT's values"
            )
    if not keys:
        raise StatementError(
            statement.line, "MERGE ON must equate target columns to source columns (the merge keys)"
        )
    return Transformation(
        statement,
        "merge",
        canonical_table(target),
        is_temporary_table(target),
        lineage_query,
        tuple(names),
        stage_query,
        keys,
        tuple(warnings),
        unnamed_values,
    )


def _merge_insert(statement: SqlStatement, insert: exp.Insert) -> tuple[list[str] | None, list[exp.Expr]]:
    """A MERGE's `INSERT (a, b) VALUES (…)`: its columns (None when it lists none) and values. Without a
    column list, sqlglot reads Redshift's VALUES as a function call in place of the columns."""
    if isinstance(insert.expression, exp.Tuple):
        columns = [column.name.lower() for column in insert.this.expressions] if insert.this else None
        return columns, list(insert.expression.expressions)
    listed = insert.this.expressions if isinstance(insert.this, exp.Tuple) else []
    if len(listed) == 1 and isinstance(listed[0], exp.Anonymous) and listed[0].name.upper() == "VALUES":
        return None, list(listed[0].expressions)
    raise StatementError(statement.line, "MERGE … INSERT must read INSERT [(columns)] VALUES (…)")


def _unload(
    statement: SqlStatement, command: exp.Command, dialect: str, parse: ParseFunction | None
) -> Transformation:
    match = _UNLOAD.match(command.expression.name.strip())
    if not match:
        raise StatementError(statement.line, "UNLOAD must read UNLOAD ('query') TO 's3://…'")
    query_text = match.group(1).replace("''", "'").replace("\\'", "'")
    try:
        expressions = (parse or parse_sql)(query_text, dialect)
    except (ParseError, TokenError) as error:
        line, reason = _parse_failure(statement, error, dialect)
        raise StatementError(line, f"the UNLOAD query {reason}") from None
    query = expressions[0] if len(expressions) == 1 else None
    if not isinstance(query, exp.Query) or query.args.get("into"):
        raise StatementError(statement.line, "the UNLOAD query must be one SELECT")
    return Transformation(statement, "unload", match.group(2), False, query, None, query)
