"""Arrow record batches as a CSV file that PostgreSQL's ``COPY ... FROM STDIN`` reads as they are encoded."""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.csv as pa_csv

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

_CSV_SLICE_ROWS = 65_536


def csv_stream(batches: Iterable[pa.RecordBatch]) -> ChunkReader:
    """The batches as headerless CSV that PostgreSQL's COPY reads back exactly, encoded while COPY sends it.

    Arrow quotes every string and writes nulls as empty unquoted fields, which COPY's CSV format reads as
    NULL, so an empty string and a null stay apart. A worker thread encodes the next slice while COPY
    sends the one before (Arrow encodes without holding the GIL), hiding most of the encoding time; only
    those two slices are held at once, so a stream is never all in memory.
    """
    options = pa_csv.WriteOptions(include_header=False, quoting_style="needed")

    def encode(rows: pa.RecordBatch) -> pa.Buffer:
        sink = pa.BufferOutputStream()
        pa_csv.write_csv(rows, sink, options)
        return sink.getvalue()

    def encoded() -> Iterator[pa.Buffer]:
        slices = (
            batch.slice(start, _CSV_SLICE_ROWS)
            for batch in batches
            for start in range(0, batch.num_rows, _CSV_SLICE_ROWS)
        )
        with ThreadPoolExecutor(max_workers=1) as worker:
            pending: Future[pa.Buffer] | None = None
            for rows in slices:
                following = worker.submit(encode, rows)
                if pending is not None:
                    yield pending.result()
                pending = following
            if pending is not None:
                yield pending.result()

    return ChunkReader(encoded())


class ChunkReader(io.RawIOBase):
    """A read-only file over an iterator of byte chunks, which is what COPY ... FROM STDIN reads.

    ``failure`` keeps the iterator's error, which psycopg2 only reports as a failed read().
    """

    def __init__(self, chunks: Iterator[pa.Buffer]) -> None:
        self._chunks = chunks
        self._pending = memoryview(b"")
        self.failure: Exception | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        target = memoryview(buffer)
        while not self._pending:
            try:
                chunk = next(self._chunks, None)
            except Exception as error:
                self.failure = error
                raise
            if chunk is None:
                return 0
            self._pending = memoryview(chunk).cast("B")
        size = min(len(target), len(self._pending))
        target[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size
