"""What Spark executors run to read raw objects: fetch, decompress, split into numbered lines, look for drift.

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
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, cast
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
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
# Lines name their object by its index in the listing (`_object`), joined to its url in Spark: a url repeated
# on every line would cost more to move from Python to the JVM than the line itself.
LINES_SCHEMA = "_object int, _source_line bigint, value string, _unreadable string"
FINDINGS_SCHEMA = "url string, kind string, detail string, new_columns string"


def codec(url: str, compression: str) -> str | None:
    """The Arrow codec of an object: the source's declared compression, or (auto) the key's ending."""
    if compression != "auto":
        return _DECLARED_CODECS[compression]
    return next((name for ending, name in _CODECS.items() if url.lower().endswith(ending)), None)


def open_object(url: str, etag: str, endpoint_url: str | None) -> BinaryIO:
    """A stream of the object's bytes; on S3, only the version that was listed (its ETag) is read."""
    if url.startswith("s3://"):
        import boto3  # executors import boto3 only for S3 sources

        bucket, _, key = url.removeprefix("s3://").partition("/")
        client = boto3.session.Session().client("s3", endpoint_url=endpoint_url)
        # A blocking raw file: its read() returns bytes, never None, as BinaryIO's does.
        return cast(BinaryIO, _Body(client.get_object(Bucket=bucket, Key=key, IfMatch=etag)["Body"]))
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


def numbered_lines(
    index: int, url: str, etag: str, compression: str, skip_header: bool, endpoint_url: str | None
) -> Iterator[pa.RecordBatch]:
    """The object's non-blank lines with their 1-based line numbers, in batches of about CHUNK_BYTES.

    A line that is not UTF-8 keeps its number and is marked `_unreadable`, so it is quarantined with that
    reason while the rest of the object is ingested.
    """
    carry, first_line = b"", 1
    with open_object(url, etag, endpoint_url) as raw:
        stream = decompressed(raw, codec(url, compression))
        while True:
            try:
                chunk = stream.read(CHUNK_BYTES)
            except (OSError, pa.ArrowInvalid) as error:
                raise unreadable(url, f"cannot decompress ({error})") from None
            data = carry + chunk
            if chunk:
                cut = data.rfind(b"\n") + 1
                data, carry = data[:cut], data[cut:]
            if data:
                batch = _lines_batch(index, data, first_line, skip_header)
                first_line += data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
                if batch.num_rows:
                    yield batch
            if not chunk:
                return


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
        names=["_object", "_source_line", "value", "_unreadable"],
    )
    keep = pc.not_equal(pc.utf8_trim_whitespace(batch["value"]), "")
    if skip_header:
        keep = pc.and_(keep, pc.greater(numbers, 1))
    return batch.filter(keep)


def _decoded_line(line: bytes) -> tuple[str, str | None]:
    try:
        return line.decode("utf-8"), None
    except UnicodeDecodeError as error:
        return line.decode("utf-8", errors="replace"), f"not UTF-8 text (byte {error.start} of the line)"


def parquet_rows(
    index: int, url: str, etag: str, arrow_schema: pa.Schema, endpoint_url: str | None
) -> Iterator[pa.RecordBatch]:
    """The object's rows cast to the declared schema, each with its 1-based row number as `_source_line`."""
    with open_object(url, etag, endpoint_url) as raw:
        parquet = pq.ParquetFile(io.BytesIO(raw.read()))
    first = 1
    declared = list(arrow_schema)[2:-1]  # between the file and line columns and the (empty) corrupt record
    for batch in parquet.iter_batches(columns=[field.name for field in declared]):
        rows = batch.num_rows
        columns = [
            pa.array(np.full(rows, index, dtype=np.int32)),
            pa.array(np.arange(first, first + rows, dtype=np.int64)),
        ]
        columns += [batch.column(field.name).cast(field.type) for field in declared]
        columns.append(pa.nulls(rows, pa.string()))
        first += rows
        yield pa.RecordBatch.from_arrays(columns, schema=arrow_schema)


def findings(
    url: str,
    etag: str,
    file_format: str,
    compression: str,
    columns: dict[str, str],
    options: dict[str, Any],
    endpoint_url: str | None,
) -> dict[str, str] | None:
    """What the head of one object says before anything is ingested: unreadable (`corrupt`), declared fields
    gone (`breaking`), undeclared fields (`drift`, with their inferred types), or nothing (None)."""
    try:
        if file_format == "parquet":
            with open_object(url, etag, endpoint_url) as raw:
                try:
                    schema = pq.read_schema(io.BytesIO(raw.read()))
                except (pa.ArrowInvalid, OSError) as error:
                    return {"kind": "corrupt", "detail": f"not a parquet file ({error})"}
            found = {field.name: column_type(field.type) for field in schema}
            missing = [name for name in columns if name not in found]
            if missing:
                return {"kind": "breaking", "detail": f"{url} lacks declared column(s) {', '.join(missing)}"}
            return _drift({name: kind for name, kind in found.items() if name not in columns})
        with open_object(url, etag, endpoint_url) as raw:
            head = decompressed(raw, codec(url, compression)).read(HEAD_BYTES)
    except (OSError, pa.ArrowInvalid) as error:
        return {"kind": "corrupt", "detail": f"cannot decompress ({error})"}
    # The head may end inside a line (and a character): judge only its complete lines.
    complete = head[: head.rfind(b"\n") + 1] if len(head) == HEAD_BYTES else head
    try:
        text = complete.decode("utf-8")
    except UnicodeDecodeError as error:
        return {"kind": "corrupt", "detail": f"not UTF-8 text (byte {error.start})"}
    lines = [line for line in text.split("\n")[:DRIFT_SAMPLE_LINES] if line.strip()]
    if file_format == "csv":
        return _csv_findings(url, lines, columns, options)
    return _drift(_json_fields(lines, columns))


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
ArrowTask = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def lines_task(compression: str, skip_header: bool, endpoint_url: str | None) -> ArrowTask:
    def read(objects: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in objects:
            for index, url, etag in zip(*(batch[name].to_pylist() for name in ("index", "url", "etag"))):
                yield from numbered_lines(index, url, etag, compression, skip_header, endpoint_url)

    return read


def parquet_task(arrow_schema: pa.Schema, endpoint_url: str | None) -> ArrowTask:
    def read(objects: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in objects:
            for index, url, etag in zip(*(batch[name].to_pylist() for name in ("index", "url", "etag"))):
                yield from parquet_rows(index, url, etag, arrow_schema, endpoint_url)

    return read


def findings_task(
    file_format: str,
    compression: str,
    columns: dict[str, str],
    options: dict[str, Any],
    endpoint_url: str | None,
) -> ArrowTask:
    def probe(objects: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in objects:
            found = []
            for url, etag in zip(batch["url"].to_pylist(), batch["etag"].to_pylist()):
                finding = findings(url, etag, file_format, compression, columns, options, endpoint_url)
                if finding:
                    found.append({"url": url, "new_columns": None, **finding})
            yield pa.RecordBatch.from_pylist(
                found,
                schema=pa.schema([(name, pa.string()) for name in ("url", "kind", "detail", "new_columns")]),
            )

    return probe


def paths_seen(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Whether each `path` exists where the task runs (is the lake a folder the executors share?)."""
    for batch in batches:
        yield pa.RecordBatch.from_pydict(
            {"seen": [os.path.exists(path) for path in batch["path"].to_pylist()]}
        )
