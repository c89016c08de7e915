"""SQL text → statements, and what a classified statement is: a transformation, a COPY, a table schema, or
nothing; with the naming of tables every step shares (schema-qualified, temporary or not)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import exp

DEFAULT_SCHEMA = "public"
TEMP_PREFIX = "#"
LOAD_KINDS = ("copy", "create_external_table")
"""Statements that make a table of raw files (a source and its bronze dataset)."""
DIRECT_KINDS = (
    "create_table_as",
    "insert",
    "insert_values",
    "select_into",
    "create_view",
    "merge",
    "unload",
    "alter_table_append",
)
"""Statements whose rows become the target's rows: each makes a stage. UPDATE and DELETE change rows in
place."""

CopyOption = str | bool | None
"""A reader option of the bronze ingest: a delimiter, quote or null marker, or whether files have a header."""

ParseFunction = Callable[[str, str], list[exp.Expr | None]]
"""Text and dialect → sqlglot expressions: sqlglot.parse, or a cache in front of it."""

# Strings, quoted identifiers, comments and dollar-quoted bodies may hold semicolons that end nothing.
_SPLITTER = re.compile(
    r"""'(?:[^'\\]|\\.|'')*'|"(?:[^"]|"")*"|--[^\n]*|/\*.*?\*/|\$(\w*)\$.*?\$\1\$|;""", re.S
)
_LEADING_NOISE = re.compile(r"(?:\s+|--[^\n]*|/\*.*?\*/)*", re.S)


@dataclass(frozen=True)
class SqlStatement:
    """One statement as written: its file, the line its first token is on, and its text."""

    file: str
    line: int
    text: str

    def where(self) -> str:
        """`file:line`, as messages cite a statement."""
        return f"{self.file}:{self.line}"


class StatementError(Exception):
    """A statement that cannot be onboarded, with the line (in its file) the reason points at."""

    def __init__(self, line: int, reason: str):
        super().__init__(reason)
        self.line = line
        self.reason = reason


@dataclass(frozen=True)
class Transformation:
    """Rows read from tables flowing into a table (or, for UNLOAD, into S3).

    `lineage_query` is a SELECT whose i-th projection feeds `target_columns[i]` (names may repeat, as in a
    MERGE's UPDATE and INSERT clauses); for UPDATE, DELETE and MERGE it is built from the statement, with the
    target as one of its sources. `stage_query`, when set, yields exactly the rows the target receives.
    """

    statement: SqlStatement
    kind: str
    target: str
    temporary: bool
    lineage_query: exp.Query
    target_columns: tuple[str, ...] | None
    stage_query: exp.Query | None
    merge_keys: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    unnamed_values: int = 0
    """How many of the last target columns a MERGE's INSERT feeds without naming them: the target's
    columns, in order (placeholders until the analysis names them)."""


@dataclass(frozen=True)
class CopyLoad:
    """`COPY table FROM 's3://…'`: raw files feeding a table, with what the bronze ingest needs to read
    them."""

    statement: SqlStatement
    target: str
    temporary: bool
    columns: tuple[str, ...] | None
    s3_path: str
    file_format: str
    options: dict[str, CopyOption] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    kind: str = "copy"
    compression: str = "auto"
    declared: dict[str, exp.DataType] | None = None
    """The columns' SQL types, when the statement declares them (CREATE EXTERNAL TABLE)."""


@dataclass(frozen=True)
class TableSchema:
    """`CREATE TABLE` without a query: column names and SQL types (or those of the `LIKE` table)."""

    statement: SqlStatement
    target: str
    columns: dict[str, exp.DataType]
    temporary: bool
    like: str | None = None
    kind: str = "create_table"


@dataclass(frozen=True)
class Skipped:
    """Not a transformation (GRANT, VACUUM, ANALYZE, SET, DROP, CALL…): listed with the reason, nothing
    onboarded."""

    statement: SqlStatement
    kind: str
    reason: str = "moves no rows between tables"


@dataclass(frozen=True)
class Failed:
    """Could not be parsed or understood; `line` is where the reason points."""

    statement: SqlStatement
    kind: str
    line: int
    error: str


Parsed = Transformation | CopyLoad | TableSchema | Skipped | Failed


def split_statements(file: str, text: str) -> list[SqlStatement]:
    """Statements separated by semicolons outside strings, quoted names and comments, with their first
    line."""
    statements, start, line, counted = [], 0, 1, 0

    def add(end: int) -> None:
        nonlocal line, counted
        noise = _LEADING_NOISE.match(text, start, end)
        # The pattern matches the empty string, so it matches at any position: `noise` is never None.
        first = noise.end() if noise else start
        body = text[first:end].rstrip()
        if body:
            line += text.count("\n", counted, first)
            counted = first
            statements.append(SqlStatement(file, line, body))

    for match in _SPLITTER.finditer(text):
        if match.group() == ";":
            add(match.start())
            start = match.end()
    add(len(text))
    return statements


def canonical_table(table: exp.Table) -> str:
    """`schema.table` in lower case, unqualified names in Redshift's default schema."""
    return f"{(table.db or DEFAULT_SCHEMA).lower()}.{table.name.lower()}"


def is_temporary_name(canonical: str) -> bool:
    """Whether a table is temporary by its name alone (`#name`); CREATE TEMP TABLE says so in the
    statement."""
    return canonical.rpartition(".")[2].startswith(TEMP_PREFIX)


def session_name(canonical: str) -> str:
    """A temporary table as written: it lives in the session, not in the schema qualification gave it."""
    return canonical.rpartition(".")[2]


def is_temporary_table(table: exp.Table) -> bool:
    return table.name.startswith(TEMP_PREFIX)


def table_and_columns(node: exp.Table | exp.Schema) -> tuple[exp.Table, tuple[str, ...] | None]:
    """`t` or `t (a, b)` (a Schema node) → the table and its column list, if written."""
    if isinstance(node, exp.Schema):
        return node.this, tuple(column.name.lower() for column in node.expressions)
    return node, None
