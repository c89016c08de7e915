"""Statements that make a table of raw files in S3: Redshift's COPY (its options read from the statement's own
tokens) and CREATE EXTERNAL TABLE (Spectrum); each becomes a source and its bronze dataset."""

from __future__ import annotations

from sqlglot import TokenType, exp
from sqlglot.dialects.dialect import Dialect

from medallion_assets.onboarding.statements import (
    CopyLoad,
    CopyOption,
    SqlStatement,
    StatementError,
    canonical_table,
    is_temporary_table,
    table_and_columns,
)

_EXTERNAL_FORMATS = {"PARQUET": "parquet", "TEXTFILE": "csv"}
EXTERNAL_READABLE = (
    "CREATE EXTERNAL TABLE: only ROW FORMAT DELIMITED text, STORED AS TEXTFILE or STORED AS PARQUET "
    "with a LOCATION 's3://…' become sources (a SerDe is not read)"
)


def external_table(statement: SqlStatement, create: exp.Create) -> CopyLoad:
    """`CREATE EXTERNAL TABLE … LOCATION 's3://…'` (Redshift Spectrum): the files there are a raw source and
    the table their bronze dataset, as a COPY of every column would make it."""
    properties = create.args["properties"]
    location = properties.find(exp.LocationProperty)
    if location is None or not location.this.name.startswith("s3://"):
        raise StatementError(statement.line, "CREATE EXTERNAL TABLE needs LOCATION 's3://…'")
    if properties.find(exp.RowFormatSerdeProperty):
        raise StatementError(statement.line, EXTERNAL_READABLE)
    stored = properties.find(exp.FileFormatProperty)
    stored_as = stored.name.upper() if stored else "TEXTFILE"
    if stored_as not in _EXTERNAL_FORMATS:
        raise StatementError(
            statement.line,
            f"CREATE EXTERNAL TABLE STORED AS {stored_as}: the bronze ingest reads "
            "text (CSV), JSON lines and parquet files",
        )
    options: dict[str, CopyOption] = {}
    warnings: list[str] = []
    if _EXTERNAL_FORMATS[stored_as] == "csv":
        delimited = properties.find(exp.RowFormatDelimitedProperty)
        fields = delimited.args.get("fields") if delimited else None
        # Hive's default field delimiter is \x01 (Ctrl-A), Spectrum's too.
        options = {
            "delimiter": fields.name.encode().decode("unicode_escape") if fields else "\x01",
            "header": False,
        }
    if properties.find(exp.PartitionedByProperty):
        warnings.append(
            "PARTITIONED BY: the partition columns live in the S3 keys, which the bronze ingest does "
            "not read as columns"
        )
    declared = {
        d.name.lower(): d.args["kind"]
        for d in create.this.expressions
        if isinstance(d, exp.ColumnDef) and d.args.get("kind")
    }
    return CopyLoad(
        statement,
        canonical_table(create.this.this),
        False,
        tuple(declared),
        location.this.name,
        _EXTERNAL_FORMATS[stored_as],
        options,
        tuple(warnings),
        kind="create_external_table",
        declared=declared,
    )


# Redshift COPY parameters. Options are parsed here from the tokens: sqlglot pairs Redshift's
# space-separated options with the wrong values (CSV IGNOREHEADER 1 → CSV=IGNOREHEADER, 1=…).
_COPY_FORMATS = {"CSV": "csv", "JSON": "jsonl", "PARQUET": "parquet"}
_READS = "it reads CSV, JSON lines and parquet"
_COPY_UNREADABLE = {
    "AVRO": f"Avro files ({_READS}: export them as parquet)",
    "ORC": f"ORC files ({_READS}: export them as parquet)",
    "FIXEDWIDTH": f"fixed-width files ({_READS}: export them delimited)",
    "SHAPEFILE": f"shapefiles ({_READS})",
    "LZOP": "lzop-compressed files (it reads gzip, bzip2 and zstd)",
    "ENCRYPTED": "client-side encrypted files (use server-side encryption, which S3 undoes on read)",
    "SSH": "SSH sources (it reads S3)",
    "MANIFEST": "manifests, which list the files to load (point the COPY at the files' prefix instead)",
}
_COPY_COMPRESSIONS = {"GZIP": "gzip", "BZIP2": "bzip2", "ZSTD": "zstd"}
# Credentials come from the environment, never the catalog; bad records are quarantined whatever the
# error tolerance; statistics are the warehouse's business. So these change nothing in Medallion.
_COPY_NO_EFFECT = {
    "IAM_ROLE",
    "CREDENTIALS",
    "ACCESS_KEY_ID",
    "SECRET_ACCESS_KEY",
    "SESSION_TOKEN",
    "MASTER_SYMMETRIC_KEY",
    "REGION",
    "MAXERROR",
    "IGNOREALLERRORS",
    "COMPUPDATE",
    "STATUPDATE",
    "COMPROWS",
    "IGNOREBLANKLINES",
}
_COPY_NOT_CARRIED = {
    "ACCEPTANYDATE",
    "ACCEPTINVCHARS",
    "BLANKSASNULL",
    "EMPTYASNULL",
    "ESCAPE",
    "EXPLICIT_IDS",
    "FILLRECORD",
    "REMOVEQUOTES",
    "ROUNDEC",
    "TRIMBLANKS",
    "TRUNCATECOLUMNS",
    "READRATIO",
    "NOLOAD",
    "SERIALIZETOJSON",
    "ENCODING",
    "DATEFORMAT",
    "TIMEFORMAT",
}
_COPY_DEFAULTS = {("DATEFORMAT", "AUTO"), ("TIMEFORMAT", "AUTO"), ("ENCODING", "UTF8")}
_COPY_CARRIED = {"FORMAT", "DELIMITER", "QUOTE", "IGNOREHEADER", "NULL", *_COPY_FORMATS}
_COPY_OPTIONS = (
    _COPY_CARRIED | set(_COPY_UNREADABLE) | set(_COPY_COMPRESSIONS) | _COPY_NO_EFFECT | _COPY_NOT_CARRIED
)


def _copy_options(statement: SqlStatement, dialect: str) -> list[tuple[str, list[str], int]]:
    """(option, values, line) after the FROM 's3://…' of a COPY, from the statement's own tokens."""
    tokens = Dialect.get_or_raise(dialect).tokenize(statement.text)
    start = next(i for i, token in enumerate(tokens) if token.token_type == TokenType.FROM) + 2
    options: list[tuple[str, list[str], int]] = []
    for token in tokens[start:]:
        word = token.text.upper()
        line = statement.line + token.line - 1
        if token.token_type not in (TokenType.STRING, TokenType.NUMBER) and word in _COPY_OPTIONS:
            options.append((word, [], line))
        elif word != "AS" and token.token_type != TokenType.SEMICOLON:
            if not options:
                raise StatementError(line, f"unknown COPY option {token.text!r}")
            options[-1][1].append(token.text)
    return options


def copy_load(statement: SqlStatement, copy: exp.Copy, dialect: str) -> CopyLoad:
    table, columns = table_and_columns(copy.this)
    files = copy.args.get("files") or []
    if len(files) != 1 or not files[0].name.startswith("s3://"):
        raise StatementError(statement.line, "COPY must read FROM one 's3://…' path")
    file_format: str | None = None
    compression = "auto"
    options: dict[str, CopyOption] = {}
    warnings: list[str] = []
    for name, values, line in _copy_options(statement, dialect):
        value = values[0] if values else None
        if name in _COPY_UNREADABLE:
            raise StatementError(line, f"COPY {name}: the bronze ingest cannot read {_COPY_UNREADABLE[name]}")
        if name in _COPY_COMPRESSIONS:
            compression = _COPY_COMPRESSIONS[name]
        if name in _COPY_FORMATS:
            file_format = _COPY_FORMATS[name]
            if name == "JSON" and value and not value.lower().startswith(("auto", "noshred")):
                raise StatementError(
                    line, f"COPY JSON {value}: JSONPaths files are not supported, use 'auto'"
                )
        elif name == "DELIMITER":
            options["delimiter"] = value
        elif name == "QUOTE":
            options["quote"] = value
        elif name == "NULL":
            options["nullValue"] = value
        elif name == "IGNOREHEADER":
            if value not in ("0", "1"):
                warnings.append(f"IGNOREHEADER {value}: the bronze ingest skips one header line at most")
            options["header"] = value != "0"
        elif name in _COPY_NOT_CARRIED and (name, (value or "").upper()) not in _COPY_DEFAULTS:
            warnings.append(f"COPY option {name} is not carried over to the bronze ingest")
    if file_format is None:
        # Without a format, Redshift reads pipe-delimited text; CSV with that delimiter is the nearest reader.
        file_format = "csv"
        options.setdefault("delimiter", "|")
        warnings.append(
            "Redshift's default text format is read as CSV with delimiter "
            f"{options['delimiter']!r}; backslash escapes are not interpreted"
        )
    if file_format == "csv":
        options.setdefault("header", False)
    else:
        options = {}
    return CopyLoad(
        statement,
        canonical_table(table),
        is_temporary_table(table),
        columns,
        files[0].name,
        file_format,
        options,
        tuple(warnings),
        compression=compression,
    )
