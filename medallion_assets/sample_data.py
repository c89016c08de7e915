"""Deterministic sample raw data with a known number of bad records of each kind.

Four datasets land under one root (an ``s3://`` prefix or a local folder), as a source system would leave
them: JSONL user events, CSV orders, a parquet customer table and the customers' change events (JSONL, two
exports). The same seed always gives byte-identical files, and the returned summary says exactly how many
defects of each kind were written, so tests and benchmarks can check what the pipeline kept, quarantined and
deduplicated.
"""

from __future__ import annotations

import gzip
import io
import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from itertools import islice
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from medallion_assets.storage import objects

LINES_PER_FILE = 250_000
MIN_ROWS = 10

# Defect shares in per mille of a dataset's rows, rounded up so that small samples hold each kind too.
# A bad value is an event_ts that is not a timestamp, or an order amount that is not a number.
MALFORMED_PER_MILLE = 5
BAD_VALUE_PER_MILLE = 2
DUPLICATE_PER_MILLE = 10
_DEFECT_PER_MILLE = (MALFORMED_PER_MILLE, BAD_VALUE_PER_MILLE, DUPLICATE_PER_MILLE)

_SPAN_DAYS = 7
_DAYS = tuple((date(2026, 11, 1) + timedelta(days=offset)).isoformat() for offset in range(_SPAN_DAYS))
_SPAN_SECONDS = _SPAN_DAYS * 86_400
# Repetition weights the draw: mostly views, few signups, as in real click streams.
_EVENT_TYPES = ("view",) * 12 + ("click",) * 5 + ("purchase",) * 2 + ("signup",)
_NULL_VALUE_SHARE = 0.2
_EVENT_LINE = '{"event_id": "e%09d", "user_id": "u%06d", "event_type": "%s", "event_ts": "%s", "value": %s}'
_GARBAGE_LINES = ("#### partial upload ####", "<html>503 Service Unavailable</html>", "null, null, null")
_ORDERS_HEADER = "order_id,customer_id,order_ts,amount"
_COUNTRIES = ("US", "DE", "FR", "GB", "JP", "BR")
_FIRST_NAMES = ("Ada", "Ben", "Chloe", "Dmitri", "Emma", "Felipe", "Grace", "Hiro", "Ines", "Jonas")
_LAST_NAMES = ("Garcia", "Kim", "Muller", "Dubois", "Smith", "Tanaka", "Silva", "Brown", "Rossi", "Novak")
_FIRST_SIGNUP = date(2024, 1, 1)
_SIGNUP_SPAN_DAYS = (date(2026, 10, 31) - _FIRST_SIGNUP).days
# The customer change feed: every customer is inserted in the month before the orders' week; during the week a
# quarter of them change segment (a new version of the customer) and a tenth change email (the same version).
_SEGMENTS = ("standard", "plus", "premium")
_FIRST_INSERT = datetime(2026, 10, 1, tzinfo=UTC)
_INSERT_SPAN_SECONDS = 31 * 86_400
_WEEK_START = datetime.fromisoformat(_DAYS[0]).replace(tzinfo=UTC)
# The second export is taken the day after the week: its delete happens then.
_SECOND_EXPORT = _WEEK_START + timedelta(days=_SPAN_DAYS)


@dataclass(frozen=True)
class SampleSummary:
    """What write_sample_data wrote: the object urls, the data lines per dataset and each defect count.

    Duplicates are exact copies of an earlier good line (same id, same content), possibly in another file.
    """

    objects: tuple[str, ...]
    event_lines: int
    order_lines: int
    customer_rows: int
    malformed_events: int
    bad_timestamp_events: int
    duplicate_events: int
    wrong_field_count_orders: int
    bad_amount_orders: int
    duplicate_orders: int
    customer_change_events: int


def write_sample_data(
    to_url: str, rows: int, seed: int = 7, *, lines_per_file: int = LINES_PER_FILE, gzipped: bool = False
) -> SampleSummary:
    """Write ``rows`` user events, ``max(rows // 5, 10)`` orders, their customers and the customers' change
    events under ``to_url``.

    Layout: ``user_events/part-NNNNN.jsonl`` and ``orders/part-NNNNN.csv`` (at most ``lines_per_file``
    data lines each; ``.jsonl.gz`` and ``.csv.gz`` when ``gzipped``), ``customers/customers.parquet`` and
    ``customer_changes/part-00000.jsonl`` and ``part-00001.jsonl`` (see `_customer_changes`).
    Objects of the same name are replaced; other objects under ``to_url`` are left alone.
    """
    if rows < MIN_ROWS:
        raise ValueError(f"rows must be at least {MIN_ROWS}, got {rows}")
    rng = random.Random(seed)
    root = to_url.rstrip("/")
    n_orders = max(rows // 5, 10)
    n_customers = max(rows // 100, 5)

    event_defects = _place_defects(rng, rows)
    event_lines = _event_lines(rng, rows, event_defects)
    event_urls = _write_parts(f"{root}/user_events", "jsonl", None, event_lines, lines_per_file, gzipped)
    order_defects = _place_defects(rng, n_orders)
    order_lines = _order_lines(rng, n_orders, n_customers, order_defects)
    order_urls = _write_parts(f"{root}/orders", "csv", _ORDERS_HEADER, order_lines, lines_per_file, gzipped)
    customers_url = f"{root}/customers/customers.parquet"
    objects.write_bytes(customers_url, _customers_parquet(rng, n_customers))
    # Drawn last, so that the datasets before keep the bytes they had before the change feed was added.
    exports = _customer_changes(rng, n_customers)
    change_urls = [
        _write_lines(f"{root}/customer_changes/part-{number:05d}.jsonl", export, gzipped)
        for number, export in enumerate(exports)
    ]

    return SampleSummary(
        objects=(*event_urls, *order_urls, customers_url, *change_urls),
        event_lines=rows,
        order_lines=n_orders,
        customer_rows=n_customers,
        malformed_events=len(event_defects.malformed),
        bad_timestamp_events=len(event_defects.bad_value),
        duplicate_events=len(event_defects.duplicate_of),
        wrong_field_count_orders=len(order_defects.malformed),
        bad_amount_orders=len(order_defects.bad_value),
        duplicate_orders=len(order_defects.duplicate_of),
        customer_change_events=sum(map(len, exports)),
    )


@dataclass(frozen=True)
class _Defects:
    """Which line numbers of a dataset are broken, and how. ``duplicate_of`` maps a copy to its original."""

    malformed: frozenset[int]
    bad_value: frozenset[int]
    duplicate_of: dict[int, int]


def _place_defects(rng: random.Random, n: int) -> _Defects:
    n_malformed, n_bad, n_copies = (-(-n * per_mille // 1000) for per_mille in _DEFECT_PER_MILLE)
    # Line 0 stays good so that every duplicate has an earlier good line to copy.
    chosen = rng.sample(range(1, n), n_malformed + n_bad + n_copies)
    malformed = frozenset(chosen[:n_malformed])
    bad_value = frozenset(chosen[n_malformed : n_malformed + n_bad])
    copies = sorted(chosen[n_malformed + n_bad :])
    broken = set(chosen)
    duplicate_of = {}
    for copy in copies:
        original = int(rng.random() * copy)
        while original in broken:
            original = int(rng.random() * copy)
        duplicate_of[copy] = original
    return _Defects(malformed, bad_value, duplicate_of)


def _timestamp(second: int) -> str:
    day, second = divmod(second, 86_400)
    hour, second = divmod(second, 3_600)
    minute, second = divmod(second, 60)
    return f"{_DAYS[day]}T{hour:02d}:{minute:02d}:{second:02d}Z"


def _event_lines(rng: random.Random, rows: int, defects: _Defects) -> Iterator[str]:
    draw = rng.random
    n_users = max(rows // 20, 1)
    originals = set(defects.duplicate_of.values())
    kept: dict[int, str] = {}
    for i in range(rows):
        original = defects.duplicate_of.get(i)
        if original is not None:
            yield kept[original]
            continue
        user = int(draw() * n_users)
        event_type = _EVENT_TYPES[int(draw() * len(_EVENT_TYPES))]
        second = int(draw() * _SPAN_SECONDS)
        event_ts = "not-a-date" if i in defects.bad_value else _timestamp(second)
        cents = int(draw() * 50_000)
        value = "null" if draw() < _NULL_VALUE_SHARE else f"{cents // 100}.{cents % 100:02d}"
        line = _EVENT_LINE % (i + 1, user, event_type, event_ts, value)
        if i in defects.malformed:
            line = _malformed(rng, line, i)
        elif i in originals:
            kept[i] = line
        yield line


def _malformed(rng: random.Random, line: str, i: int) -> str:
    """Half truncated writes (a proper prefix of a JSON object is never valid JSON), half foreign text."""
    if i % 2:
        return _GARBAGE_LINES[i % len(_GARBAGE_LINES)]
    return line[: 1 + int(rng.random() * (len(line) - 2))]


def _order_lines(rng: random.Random, n_orders: int, n_customers: int, defects: _Defects) -> Iterator[str]:
    draw = rng.random
    originals = set(defects.duplicate_of.values())
    kept: dict[int, str] = {}
    for i in range(n_orders):
        original = defects.duplicate_of.get(i)
        if original is not None:
            yield kept[original]
            continue
        customer = int(draw() * n_customers)
        order_ts = _timestamp(int(draw() * _SPAN_SECONDS))
        cents = 100 + int(draw() * 49_900)
        amount = "abc" if i in defects.bad_value else f"{cents // 100}.{cents % 100:02d}"
        fields = [f"o{i + 1:09d}", f"c{customer:05d}", order_ts, amount]
        if i in defects.malformed:
            # Alternately a field missing and a field too many.
            fields = fields[:3] if i % 2 else [*fields, "gift"]
        line = ",".join(fields)
        if i in originals:
            kept[i] = line
        yield line


def _customers_parquet(rng: random.Random, n_customers: int) -> bytes:
    draw = rng.random
    names, countries, signups = [], [], []
    for _ in range(n_customers):
        first = _FIRST_NAMES[int(draw() * len(_FIRST_NAMES))]
        names.append(f"{first} {_LAST_NAMES[int(draw() * len(_LAST_NAMES))]}")
        countries.append(_COUNTRIES[int(draw() * len(_COUNTRIES))])
        signups.append(_FIRST_SIGNUP + timedelta(days=int(draw() * _SIGNUP_SPAN_DAYS)))
    table = pa.table(
        {
            "customer_id": pa.array([f"c{n:05d}" for n in range(n_customers)], pa.string()),
            "name": pa.array(names, pa.string()),
            "country": pa.array(countries, pa.string()),
            "signup_date": pa.array(signups, pa.date32()),
        }
    )
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


class _Change(NamedTuple):
    """A change event: the customer's whole row after the change; a delete carries its key and time alone."""

    changed_at: datetime
    customer: int
    op: str
    segment: str | None
    email: str | None

    def line(self) -> str:
        return json.dumps(
            {
                "customer_id": f"c{self.customer:05d}",
                "op": self.op,
                "changed_at": self.changed_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "segment": self.segment,
                "email": self.email,
            }
        )


def _customer_changes(rng: random.Random, n_customers: int) -> tuple[list[str], list[str]]:
    """The CRM's change events of customers ``c00000``… as two exports of JSON lines. The first holds, in
    time order, an insert of every customer and the updates of the week; the second, taken the day after, one
    late update (in time between a customer's insert and its segment change of the week, which the first
    export already held: a version in between) and the deletion of another customer."""
    draw = rng.random

    def in_the_week() -> datetime:
        return _WEEK_START + timedelta(seconds=int(draw() * _SPAN_SECONDS))

    inserts = [
        _Change(
            _FIRST_INSERT + timedelta(seconds=int(draw() * _INSERT_SPAN_SECONDS)),
            n,
            "I",
            _SEGMENTS[int(draw() * len(_SEGMENTS))],
            f"c{n:05d}@mail.example",
        )
        for n in range(n_customers)
    ]
    segment_changers = sorted(rng.sample(range(n_customers), max(n_customers // 4, 2)))
    email_changers = sorted(rng.sample(range(n_customers), max(n_customers // 10, 1)))
    # (when, customer, column, new value)
    updates = [
        (in_the_week(), n, "segment", rng.choice([s for s in _SEGMENTS if s != inserts[n].segment]))
        for n in segment_changers
    ] + [(in_the_week(), n, "email", f"c{n:05d}@work.example") for n in email_changers]
    rows, events = list(inserts), list(inserts)
    for changed_at, n, column, value in sorted(updates):
        row = rows[n]._replace(changed_at=changed_at, op="U")
        rows[n] = row._replace(segment=value) if column == "segment" else row._replace(email=value)
        events.append(rows[n])

    # A customer whose only events are its insert and its segment change, so that the late event's row (the
    # insert's, with another segment) is the whole row the CRM had at that time.
    late_customer = rng.choice([n for n in segment_changers if n not in email_changers])
    inserted, changed = inserts[late_customer], rows[late_customer]
    # Over a day: the inserts end before the week starts.
    gap_seconds = int((changed.changed_at - inserted.changed_at).total_seconds())
    late = inserted._replace(
        changed_at=inserted.changed_at + timedelta(seconds=1 + int(draw() * (gap_seconds - 1))),
        op="U",
        segment=next(s for s in _SEGMENTS if s not in (inserted.segment, changed.segment)),
    )
    deleted = rng.choice([n for n in range(n_customers) if n != late_customer])
    deletion = _Change(_SECOND_EXPORT + timedelta(seconds=int(draw() * 86_400)), deleted, "D", None, None)
    return [e.line() for e in sorted(events)], [late.line(), deletion.line()]


def _write_parts(
    prefix: str, extension: str, header: str | None, lines: Iterable[str], lines_per_file: int, gzipped: bool
) -> list[str]:
    """Write ``lines`` as numbered parts of at most ``lines_per_file`` data lines, each under ``header``."""
    urls: list[str] = []
    lines = iter(lines)
    while chunk := list(islice(lines, lines_per_file)):
        if header is not None:
            chunk.insert(0, header)
        urls.append(_write_lines(f"{prefix}/part-{len(urls):05d}.{extension}", chunk, gzipped))
    return urls


def _write_lines(url: str, lines: list[str], gzipped: bool) -> str:
    """Write ``lines`` at ``url`` (gzip-compressed at ``url.gz`` when ``gzipped``); returns where."""
    data = ("\n".join(lines) + "\n").encode()
    if not gzipped:
        objects.write_bytes(url, data)
        return url
    # mtime=0: the same sample compresses to the same bytes, so reruns keep their ETags.
    objects.write_bytes(f"{url}.gz", gzip.compress(data, mtime=0))
    return f"{url}.gz"


def write_weather_sample(to_url: str, seed: int = 7) -> str:
    """Write daily weather per country for the sample's days and the week after them, as JSON lines under
    ``weather/`` (the forecast example of metadata_seed/revenue_forecast.v2.yaml.example reads it); returns
    the object's url. About a third of the days are rainy (10 mm or more)."""
    rng = random.Random(seed)
    first = date.fromisoformat(_DAYS[0])
    days = [(first + timedelta(days=offset)).isoformat() for offset in range(2 * _SPAN_DAYS)]
    lines = [
        json.dumps(
            {
                "weather_date": day,
                "country": country,
                "rain_mm": round(rng.random() * 30, 1),
                "temperature_c": round(rng.uniform(-5, 30), 1),
            }
        )
        for day in days
        for country in _COUNTRIES
    ]
    url = f"{to_url.rstrip('/')}/weather/part-00000.jsonl"
    objects.write_bytes(url, ("\n".join(lines) + "\n").encode())
    return url
