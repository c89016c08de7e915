"""What Spark executors run to read raw objects: fetch, decompress, split into numbered lines, parse JSON
lines where Arrow parses them as Spark would, look for drift.

These functions run inside `mapInArrow` tasks, so raw bytes never pass through the Dagster process. They
are shipped to executors by value (see `ingest.py`), so a cluster needs only what Spark's Arrow functions
and the S3 API need, pyarrow and boto3, and not Medallion itself. Objects are streamed: an executor holds
one chunk of decompressed text at a time, whatever the size of the object (parquet, which must be read
from its footer, is the exception and is held whole by the task that reads it).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, cast
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

# Decompressed bytes per Arrow batch: large enough that per-batch costs vanish, small enough for any executor.
CHUNK_BYTES = 8 << 20
# Schema drift is looked for in the first lines of every new object: a producer that adds a field adds it to
# every record it writes from then on, so the head of a file shows it without a scan of the whole file.
DRIFT_SAMPLE_LINES = 50
HEAD_BYTES = 1 << 16
_CODECS = {".gz": "gzip", ".gzip": "gzip", ".bz2": "bz2", ".zst": "zstd", ".zstd": "zstd"}
_DECLARED_CODECS = {"gzip": "gzip", "bzip2": "bz2", "zstd": "zstd", "none": None}
_JSON_TYPES = ((bool, "boolean"), (int, "bigint"), (float, "double"))
# A task cannot raise a typed exception to the driver; this marker, followed by JSON, lets the driver tell an
# unreadable object apart from any other task failure and raise CorruptSourceObject for it.
UNREADABLE_MARKER = "medallion-unreadable-object"
# The marker of a task that stopped because an object's head is not ingestible as it is (see HeadCheck).
HEAD_FINDING_MARKER = "medallion-head-finding"
# Records name their object by its index in the listing, looked up in Spark: a url repeated on every
# line would cost more to move from Python to the JVM than the line itself. The helper columns' names hold a
# space, which no declared column's name can (naming.check_identifier): they never collide.
OBJECT_INDEX, RAW_LINE, UNREADABLE = "object index", "raw line", "unreadable"
# What a line Arrow may parse starts and ends with ("}\r": a file with Windows line ends).
OBJECT_START, OBJECT_ENDS = "{", ("}", "}\r")
# Which records a read keeps: every one; those Arrow did not parse; those not shaped like an object, which
# needs no parse (a second read, for rejects, when no line shaped like an object was rejected).
KEEP_ALL, KEEP_UNPARSED, KEEP_UNSHAPED = "all", "unparsed", "unshaped"
# A group of lines Arrow's JSON reader refuses is halved to find the lines it refuses; groups this small are
# left whole to Spark's parser, so a file of bad lines costs a few reparses per line, not one per bisection.
_SMALLEST_REFUSED_GROUP = 8
_ARROW_JSON_READ = pj.ReadOptions(use_threads=False)
FINDINGS_SCHEMA = "url string, kind string, detail string, new_columns string"


def codec(url: str, compression: str) -> str | None:
    """The Arrow codec of an object: the source's declared compression, or (auto) the key's ending."""
    if compression != "auto":
        return _DECLARED_CODECS[compression]
    return next((name for ending, name in _CODECS.items() if url.lower().endswith(ending)), None)


def s3_client(endpoint_url: str | None) -> Any:
    """An S3 client for this Python worker, made from boto3's default session, which keeps what every client
    is built from: a session of its own per object cost 0.13 CPU seconds, more than reading 10 MB of it.
    A worker runs its tasks one at a time in one thread, so no two threads share the default session."""
    import boto3  # executors import boto3 only for S3

    return boto3.client("s3", endpoint_url=endpoint_url)


def open_object(url: str, etag: str, endpoint_url: str | None) -> BinaryIO:
    """A stream of the object's bytes; on S3, only the version that was listed (its ETag) is read."""
    if url.startswith("s3://"):
        bucket, _, key = url.removeprefix("s3://").partition("/")
        response = s3_client(endpoint_url).get_object(Bucket=bucket, Key=key, IfMatch=etag)
        # A blocking raw file: its read() returns bytes, never None, as BinaryIO's does.
        return cast(BinaryIO, _Body(response["Body"]))
    path = unquote(urlparse(url).path) if url.startswith("file://") else url
    return open(path, "rb")


class _Body(io.RawIOBase):
    """An S3 response body as a file: once the last byte is read it answers b"", as files do, where the
    HTTP response underneath would report that it is closed."""

    def __init__(self, body: Any) -> None:
        super().__init__()
        self._body, self._ended = body, False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = b"" if self._ended else self._body.read(len(buffer))
        self._ended = not data
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._body.close()
        super().close()


def decompressed(raw: BinaryIO, codec_name: str | None) -> Any:
    """A readable stream of the object's content; Arrow decompresses in C++, chunk by chunk."""
    return pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), codec_name) if codec_name else raw


def unreadable(url: str, reason: str) -> RuntimeError:
    return RuntimeError(f"{UNREADABLE_MARKER} {json.dumps({'url': url, 'reason': reason})}")


@dataclass(frozen=True)
class HeadCheck:
    """What the head of an object must agree with before any of its records is read (see findings): the
    source's format, declared columns and parser options."""

    file_format: str
    columns: dict[str, str]
    options: dict[str, Any]


@dataclass(frozen=True)
class RecordReading:
    """How a task reads the records of an object of text (see numbered_records)."""

    compression: str
    skip_header: bool
    declared: pa.Schema
    parse_json: bool
    keep: str  # one of KEEP_*
    endpoint_url: str | None
    head_check: HeadCheck | None  # None: the objects' heads were checked already


def _stop_on(url: str, finding: dict[str, str] | None) -> None:
    """Fail the task when the head of the object at `url` is not ingestible as it is: the job then commits
    nothing, and the driver probes every object's head to say why, for all of them at once
    (ingest._check_heads)."""
    if finding:
        raise RuntimeError(f"{HEAD_FINDING_MARKER} {url}")


def numbered_records(index: int, url: str, etag: str, reading: RecordReading) -> Iterator[pa.RecordBatch]:
    """The object's non-blank lines with their 1-based line numbers, in batches of about CHUNK_BYTES, each as
    a record: the `declared` columns, parsed here when `parse_json` and Arrow parses the line, else the line
    itself (`raw line`) for Spark to parse. Which records are kept (`keep`): every one, or only some of those
    left to Spark, among which are the only ones that can be rejected.

    A line that is not UTF-8 keeps its number and is marked `unreadable`, so it is quarantined with that
    reason while the rest of the object is ingested. The object's head is checked first (`head_check`).
    """
    first_line = 1
    with open_object(url, etag, reading.endpoint_url) as raw:
        stream = decompressed(raw, codec(url, reading.compression))
        carry = _read_decompressed(stream, url, HEAD_BYTES)
        if reading.head_check:
            _stop_on(url, text_findings(url, carry, reading.head_check))
        while True:
            chunk = _read_decompressed(stream, url, CHUNK_BYTES)
            data = carry + chunk
            if chunk:
                cut = data.rfind(b"\n") + 1
                data, carry = data[:cut], data[cut:]
            if data:
                lines = _lines_batch(index, data, first_line, reading.skip_header)
                first_line += data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
                records = _kept_records(lines, reading.declared, reading.parse_json, reading.keep)
                if records.num_rows:
                    yield records
            if not chunk:
                return


def _read_decompressed(stream: Any, url: str, size: int) -> bytes:
    try:
        return cast(bytes, stream.read(size))
    except (OSError, pa.ArrowInvalid) as error:
        raise unreadable(url, f"cannot decompress ({error})") from None


def _lines_batch(index: int, data: bytes, first_line: int, skip_header: bool) -> pa.RecordBatch:
    lines = pc.split_pattern(pa.array([data], pa.large_binary()), b"\n").flatten()
    if data.endswith(b"\n"):
        lines = lines.slice(0, len(lines) - 1)
    numbers = pa.array(np.arange(first_line, first_line + len(lines), dtype=np.int64))
    try:
        text, bad = lines.cast(pa.large_string()), pa.nulls(len(lines), pa.string())
    except pa.ArrowInvalid:  # rare: decode line by line, so only the bad lines are marked
        decoded = [_decoded_line(line) for line in lines.to_pylist()]
        text = pa.array([value for value, _ in decoded], pa.large_string())
        bad = pa.array([problem for _, problem in decoded], pa.string())
    batch = pa.RecordBatch.from_arrays(
        [pa.array(np.full(len(lines), index, dtype=np.int32)), numbers, text.cast(pa.string()), bad],
        names=[OBJECT_INDEX, "_source_line", RAW_LINE, UNREADABLE],
    )
    blank = pc.or_(pc.equal(pc.binary_length(batch[RAW_LINE]), 0), pc.utf8_is_space(batch[RAW_LINE]))
    keep = pc.invert(blank)
    if skip_header:
        keep = pc.and_(keep, pc.greater(numbers, 1))
    return batch if pc.all(keep).as_py() else batch.filter(keep)


def _kept_records(lines: pa.RecordBatch, declared: pa.Schema, parse_json: bool, keep: str) -> pa.RecordBatch:
    """The records of `lines` that a read keeps (KEEP_*)."""
    if keep == KEEP_UNSHAPED:  # nothing to parse: a line shaped like an object would be parsed or left alone
        return _records(lines.filter(pc.invert(pa.array(_object_shaped(lines)))), declared, parse_json=False)
    records = _records(lines, declared, parse_json)
    return records.filter(pc.is_valid(records[RAW_LINE])) if keep == KEEP_UNPARSED else records


def _object_shaped(lines: pa.RecordBatch) -> np.ndarray:
    """Which lines Arrow may parse: readable, and shaped like one JSON object, starting with OBJECT_START
    and ending with one of OBJECT_ENDS (see _parsed_by_arrow for why that matters). Padded lines are not."""
    text = lines[RAW_LINE]
    ends = pc.or_(*[pc.ends_with(text, end) for end in OBJECT_ENDS])
    shaped = pc.and_(pc.and_(pc.starts_with(text, OBJECT_START), ends), pc.is_null(lines[UNREADABLE]))
    return np.asarray(shaped.to_numpy(zero_copy_only=False), dtype=bool)


def _records(lines: pa.RecordBatch, declared: pa.Schema, parse_json: bool) -> pa.RecordBatch:
    """The lines with the declared columns of those Arrow parsed here (null elsewhere), and the raw line
    only of those it did not, which Spark parses (or quarantines) in the JVM."""
    text = lines[RAW_LINE]
    if parse_json:
        # A line not shaped like an object is read as {}, no values, and left to Spark.
        shaped = _object_shaped(lines)
        objects = text if shaped.all() else pc.if_else(pa.array(shaped), text, pa.scalar("{}"))
        table, parsed = _parsed_by_arrow(objects, declared)
        parsed_here = parsed & shaped
        columns = [table.column(field.name).combine_chunks() for field in declared]
    else:
        parsed_here = np.zeros(len(text), dtype=bool)
        columns = [pa.nulls(len(text), field.type) for field in declared]
    return pa.RecordBatch.from_arrays(
        [
            lines[OBJECT_INDEX],
            lines["_source_line"],
            *columns,
            text if not parsed_here.any() else pc.if_else(pa.array(parsed_here), None, text),
            lines[UNREADABLE],
        ],
        names=[OBJECT_INDEX, "_source_line", *declared.names, RAW_LINE, UNREADABLE],
    )


def _parsed_by_arrow(lines: pa.Array, declared: pa.Schema) -> tuple[pa.Table, np.ndarray]:
    """The lines as parsed by Arrow's JSON reader, a row per line (of nulls where it refused the line), and
    which lines it parsed.

    Lines are parsed many at a time, joined by newlines. Arrow's reader reads a stream of JSON values, so a
    group is taken only if it yields exactly one record per line: then no value can span two lines, because
    every line starts with "{" and ends with "}" (outside a string, a "}" that leaves a value open must be
    followed by "," or a closing bracket, never by the next line's "{"; inside one, the newline is a control
    character JSON forbids). A group Arrow refuses is halved until its refused lines are found.
    """
    options = pj.ParseOptions(explicit_schema=declared, unexpected_field_behavior="ignore")
    parsed = np.zeros(len(lines), dtype=bool)
    tables: list[pa.Table] = []

    def parse(start: int, stop: int) -> None:
        group = lines.slice(start, stop - start)
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(group)], pa.int32()), group), "\n")
        try:
            table = pj.read_json(
                pa.BufferReader(joined[0].as_buffer()), read_options=_ARROW_JSON_READ, parse_options=options
            )
        except pa.ArrowInvalid:
            table = None
        if table is not None and table.num_rows == len(group):
            tables.append(table.select(declared.names))
            parsed[start:stop] = True
        elif stop - start > _SMALLEST_REFUSED_GROUP:
            middle = (start + stop) // 2
            parse(start, middle)
            parse(middle, stop)
        else:
            tables.append(
                pa.Table.from_arrays([pa.nulls(len(group), f.type) for f in declared], schema=declared)
            )

    if len(lines):
        parse(0, len(lines))
    return (pa.concat_tables(tables) if tables else declared.empty_table()), parsed


def _decoded_line(line: bytes) -> tuple[str, str | None]:
    try:
        return line.decode("utf-8"), None
    except UnicodeDecodeError as error:
        return line.decode("utf-8", errors="replace"), f"not UTF-8 text (byte {error.start} of the line)"


def parquet_rows(
    index: int, url: str, etag: str, declared: pa.Schema, endpoint_url: str | None, check: HeadCheck | None
) -> Iterator[pa.RecordBatch]:
    """The object's rows cast to the declared schema as records (see numbered_records), each with its 1-based
    row number as `_source_line`, once its schema is checked (`check`)."""
    with open_object(url, etag, endpoint_url) as raw:
        data = raw.read()
    if check:
        _stop_on(url, parquet_findings(url, data, check.columns))
    parquet = pq.ParquetFile(io.BytesIO(data))
    first = 1
    for batch in parquet.iter_batches(columns=declared.names):
        rows = batch.num_rows
        columns = [
            pa.array(np.full(rows, index, dtype=np.int32)),
            pa.array(np.arange(first, first + rows, dtype=np.int64)),
            *[batch.column(field.name).cast(field.type) for field in declared],
            pa.nulls(rows, pa.string()),
            pa.nulls(rows, pa.string()),
        ]
        first += rows
        yield pa.RecordBatch.from_arrays(
            columns, names=[OBJECT_INDEX, "_source_line", *declared.names, RAW_LINE, UNREADABLE]
        )


def findings(
    url: str, etag: str, check: HeadCheck, compression: str, endpoint_url: str | None
) -> dict[str, str] | None:
    """What the head of one object says, read on its own (the probe after a failed write): unreadable
    (`corrupt`), declared fields gone (`breaking`), undeclared fields (`drift`, with their inferred types), or
    nothing (None). A reading task judges the head it has read with the same text_findings and
    parquet_findings."""
    try:
        with open_object(url, etag, endpoint_url) as raw:
            if check.file_format == "parquet":
                return parquet_findings(url, raw.read(), check.columns)
            head = decompressed(raw, codec(url, compression)).read(HEAD_BYTES)
    except (OSError, pa.ArrowInvalid) as error:
        return {"kind": "corrupt", "detail": f"cannot decompress ({error})"}
    return text_findings(url, head, check)


def parquet_findings(url: str, data: bytes, columns: dict[str, str]) -> dict[str, str] | None:
    """What the schema of a parquet object says (see findings)."""
    try:
        schema = pq.read_schema(io.BytesIO(data))
    except (pa.ArrowInvalid, OSError) as error:
        return {"kind": "corrupt", "detail": f"not a parquet file ({error})"}
    found = {field.name: column_type(field.type) for field in schema}
    missing = [name for name in columns if name not in found]
    if missing:
        return {"kind": "breaking", "detail": f"{url} lacks declared column(s) {', '.join(missing)}"}
    return _drift({name: kind for name, kind in found.items() if name not in columns})


def text_findings(url: str, head: bytes, check: HeadCheck) -> dict[str, str] | None:
    """What the first HEAD_BYTES of an object of text (decompressed) say (see findings)."""
    # The head may end inside a line (and a character): judge only its complete lines.
    complete = head[: head.rfind(b"\n") + 1] if len(head) == HEAD_BYTES else head
    try:
        text = complete.decode("utf-8")
    except UnicodeDecodeError as error:
        return {"kind": "corrupt", "detail": f"not UTF-8 text (byte {error.start})"}
    lines = [line for line in text.split("\n")[:DRIFT_SAMPLE_LINES] if line.strip()]
    if check.file_format == "csv":
        return _csv_findings(url, lines, check.columns, check.options)
    return _drift(_json_fields(lines, check.columns))


def _csv_findings(
    url: str, lines: list[str], columns: dict[str, str], options: dict[str, Any]
) -> dict[str, str] | None:
    if not (lines and options.get("header", True)):
        return None
    delimiter = str(options.get("sep", options.get("delimiter", ",")))
    header = [name.strip().strip('"') for name in lines[0].split(delimiter)]
    missing = [name for name in columns if name not in header]
    if missing:
        return {
            "kind": "breaking",
            "detail": f"{url}:1 header lacks declared column(s) {', '.join(missing)}; "
            f"header is {', '.join(header)}",
        }
    return _drift({name: "string" for name in header if name not in columns})


def _json_fields(lines: list[str], columns: dict[str, str]) -> dict[str, str]:
    new: dict[str, str] = {}
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a malformed line is a record problem, quarantined with its reason later
        if isinstance(record, dict):
            for name, value in record.items():
                if name not in columns and name not in new:
                    new[name] = next((kind for test, kind in _JSON_TYPES if type(value) is test), "string")
    return new


def _drift(new_columns: dict[str, str]) -> dict[str, str] | None:
    return {"kind": "drift", "detail": "", "new_columns": json.dumps(new_columns)} if new_columns else None


def column_type(arrow_type: pa.DataType) -> str:
    """The catalog's name for an Arrow type (catalog/models.COLUMN_TYPE); anything unusual reads as string."""
    if pa.types.is_decimal(arrow_type):
        return f"decimal({arrow_type.precision},{arrow_type.scale})"
    for test, name in (
        (pa.types.is_boolean, "boolean"),
        (pa.types.is_int32, "int"),
        (pa.types.is_integer, "bigint"),
        (pa.types.is_float32, "float"),
        (pa.types.is_floating, "double"),
        (pa.types.is_date, "date"),
        (pa.types.is_timestamp, "timestamp"),
    ):
        if test(arrow_type):
            return name
    return "string"


# The functions Spark runs over a frame of (url, etag) rows, one per object. Built here, not in ingest.py,
# so that they too are shipped by value.
ArrowTask = Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]


def _each_object(read_object: Callable[[int, str, str], Iterator[pa.RecordBatch]]) -> ArrowTask:
    """A task over rows of (index, url, etag), one per object, yielding what `read_object` reads of each."""

    def read(objects: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in objects:
            for index, url, etag in zip(*(batch[name].to_pylist() for name in ("index", "url", "etag"))):
                yield from read_object(index, url, etag)

    return read


def records_task(reading: RecordReading) -> ArrowTask:
    return _each_object(lambda index, url, etag: numbered_records(index, url, etag, reading))


def parquet_task(declared: pa.Schema, endpoint_url: str | None, check: HeadCheck | None) -> ArrowTask:
    return _each_object(
        lambda index, url, etag: parquet_rows(index, url, etag, declared, endpoint_url, check)
    )


def findings_task(check: HeadCheck, compression: str, endpoint_url: str | None) -> ArrowTask:
    def probe(objects: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in objects:
            found = []
            for url, etag in zip(batch["url"].to_pylist(), batch["etag"].to_pylist()):
                finding = findings(url, etag, check, compression, endpoint_url)
                if finding:
                    found.append({"url": url, "new_columns": None, **finding})
            yield pa.RecordBatch.from_pylist(
                found,
                schema=pa.schema([(name, pa.string()) for name in ("url", "kind", "detail", "new_columns")]),
            )

    return probe


def paths_seen(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Whether each `path` exists where the task runs (is the lake a folder the executors share?)."""
    for batch in batches:
        yield pa.RecordBatch.from_pydict(
            {"seen": [os.path.exists(path) for path in batch["path"].to_pylist()]}
        )
