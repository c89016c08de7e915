"""A corpus of standard analytical queries: TPC-H's eight tables, generated here at a tiny scale or at one of
TPC-H's scale factors, and a handful of its queries as the specification writes them (with its validation
parameters substituted, as its qgen does), each a gold stage of one catalog.

The queries read the tables by their TPC-H names, which are the catalog's dataset ids: nothing in their text
is changed for Medallion. Q18's sixth output, `sum(l_quantity)`, has no name: it takes the target's declared
name at its place.
"""

from __future__ import annotations

import datetime
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

# Table → column → Spark type, in TPC-H's column order.
TABLES: dict[str, dict[str, str]] = {
    "region": {"r_regionkey": "bigint", "r_name": "string", "r_comment": "string"},
    "nation": {"n_nationkey": "bigint", "n_name": "string", "n_regionkey": "bigint", "n_comment": "string"},
    "supplier": {
        "s_suppkey": "bigint",
        "s_name": "string",
        "s_address": "string",
        "s_nationkey": "bigint",
        "s_phone": "string",
        "s_acctbal": "decimal(12,2)",
        "s_comment": "string",
    },
    "customer": {
        "c_custkey": "bigint",
        "c_name": "string",
        "c_address": "string",
        "c_nationkey": "bigint",
        "c_phone": "string",
        "c_acctbal": "decimal(12,2)",
        "c_mktsegment": "string",
        "c_comment": "string",
    },
    "part": {
        "p_partkey": "bigint",
        "p_name": "string",
        "p_mfgr": "string",
        "p_brand": "string",
        "p_type": "string",
        "p_size": "int",
        "p_container": "string",
        "p_retailprice": "decimal(12,2)",
        "p_comment": "string",
    },
    "partsupp": {
        "ps_partkey": "bigint",
        "ps_suppkey": "bigint",
        "ps_availqty": "int",
        "ps_supplycost": "decimal(12,2)",
        "ps_comment": "string",
    },
    "orders": {
        "o_orderkey": "bigint",
        "o_custkey": "bigint",
        "o_orderstatus": "string",
        "o_totalprice": "decimal(12,2)",
        "o_orderdate": "date",
        "o_orderpriority": "string",
        "o_clerk": "string",
        "o_shippriority": "int",
        "o_comment": "string",
    },
    "lineitem": {
        "l_orderkey": "bigint",
        "l_partkey": "bigint",
        "l_suppkey": "bigint",
        "l_linenumber": "int",
        "l_quantity": "decimal(12,2)",
        "l_extendedprice": "decimal(12,2)",
        "l_discount": "decimal(12,2)",
        "l_tax": "decimal(12,2)",
        "l_returnflag": "string",
        "l_linestatus": "string",
        "l_shipdate": "date",
        "l_commitdate": "date",
        "l_receiptdate": "date",
        "l_shipinstruct": "string",
        "l_shipmode": "string",
        "l_comment": "string",
    },
}

# name → (the tables it reads, its output columns with the types the catalog declares, the query).
QUERIES: dict[str, tuple[list[str], dict[str, str], str]] = {
    "q1": (
        ["lineitem"],
        {
            "l_returnflag": "string",
            "l_linestatus": "string",
            "sum_qty": "decimal(22,2)",
            "sum_base_price": "decimal(22,2)",
            "sum_disc_price": "decimal(38,4)",
            "sum_charge": "decimal(38,6)",
            "avg_qty": "decimal(16,6)",
            "avg_price": "decimal(16,6)",
            "avg_disc": "decimal(16,6)",
            "count_order": "bigint",
        },
        """\
select
    l_returnflag,
    l_linestatus,
    sum(l_quantity) as sum_qty,
    sum(l_extendedprice) as sum_base_price,
    sum(l_extendedprice * (1 - l_discount)) as sum_disc_price,
    sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as sum_charge,
    avg(l_quantity) as avg_qty,
    avg(l_extendedprice) as avg_price,
    avg(l_discount) as avg_disc,
    count(*) as count_order
from
    lineitem
where
    l_shipdate <= date '1998-09-02'
group by
    l_returnflag,
    l_linestatus
order by
    l_returnflag,
    l_linestatus
""",
    ),
    "q3": (
        ["customer", "orders", "lineitem"],
        {"l_orderkey": "bigint", "revenue": "decimal(38,4)", "o_orderdate": "date", "o_shippriority": "int"},
        """\
select
    l_orderkey,
    sum(l_extendedprice * (1 - l_discount)) as revenue,
    o_orderdate,
    o_shippriority
from
    customer,
    orders,
    lineitem
where
    c_mktsegment = 'BUILDING'
    and c_custkey = o_custkey
    and l_orderkey = o_orderkey
    and o_orderdate < date '1995-03-15'
    and l_shipdate > date '1995-03-15'
group by
    l_orderkey,
    o_orderdate,
    o_shippriority
order by
    revenue desc,
    o_orderdate
limit 10
""",
    ),
    "q4": (
        ["orders", "lineitem"],
        {"o_orderpriority": "string", "order_count": "bigint"},
        """\
select
    o_orderpriority,
    count(*) as order_count
from
    orders
where
    o_orderdate >= date '1993-07-01'
    and o_orderdate < date '1993-10-01'
    and exists (
        select
            *
        from
            lineitem
        where
            l_orderkey = o_orderkey
            and l_commitdate < l_receiptdate
    )
group by
    o_orderpriority
order by
    o_orderpriority
""",
    ),
    "q5": (
        ["customer", "orders", "lineitem", "supplier", "nation", "region"],
        {"n_name": "string", "revenue": "decimal(38,4)"},
        """\
select
    n_name,
    sum(l_extendedprice * (1 - l_discount)) as revenue
from
    customer,
    orders,
    lineitem,
    supplier,
    nation,
    region
where
    c_custkey = o_custkey
    and l_orderkey = o_orderkey
    and l_suppkey = s_suppkey
    and c_nationkey = s_nationkey
    and s_nationkey = n_nationkey
    and n_regionkey = r_regionkey
    and r_name = 'ASIA'
    and o_orderdate >= date '1994-01-01'
    and o_orderdate < date '1995-01-01'
group by
    n_name
order by
    revenue desc
""",
    ),
    "q6": (
        ["lineitem"],
        {"revenue": "decimal(38,4)"},
        """\
select
    sum(l_extendedprice * l_discount) as revenue
from
    lineitem
where
    l_shipdate >= date '1994-01-01'
    and l_shipdate < date '1995-01-01'
    and l_discount between 0.05 and 0.07
    and l_quantity < 24
""",
    ),
    "q12": (
        ["orders", "lineitem"],
        {"l_shipmode": "string", "high_line_count": "bigint", "low_line_count": "bigint"},
        """\
select
    l_shipmode,
    sum(case
        when o_orderpriority = '1-URGENT'
            or o_orderpriority = '2-HIGH'
            then 1
        else 0
    end) as high_line_count,
    sum(case
        when o_orderpriority <> '1-URGENT'
            and o_orderpriority <> '2-HIGH'
            then 1
        else 0
    end) as low_line_count
from
    orders,
    lineitem
where
    o_orderkey = l_orderkey
    and l_shipmode in ('MAIL', 'SHIP')
    and l_commitdate < l_receiptdate
    and l_shipdate < l_commitdate
    and l_receiptdate >= date '1994-01-01'
    and l_receiptdate < date '1995-01-01'
group by
    l_shipmode
order by
    l_shipmode
""",
    ),
    "q13": (
        ["customer", "orders"],
        {"c_count": "bigint", "custdist": "bigint"},
        """\
select
    c_count,
    count(*) as custdist
from
    (
        select
            c_custkey,
            count(o_orderkey)
        from
            customer left outer join orders on
                c_custkey = o_custkey
                and o_comment not like '%special%requests%'
        group by
            c_custkey
    ) as c_orders (c_custkey, c_count)
group by
    c_count
order by
    custdist desc,
    c_count desc
""",
    ),
    "q14": (
        ["lineitem", "part"],
        {"promo_revenue": "decimal(38,6)"},
        """\
select
    100.00 * sum(case
        when p_type like 'PROMO%'
            then l_extendedprice * (1 - l_discount)
        else 0
    end) / sum(l_extendedprice * (1 - l_discount)) as promo_revenue
from
    lineitem,
    part
where
    l_partkey = p_partkey
    and l_shipdate >= date '1995-09-01'
    and l_shipdate < date '1995-10-01'
""",
    ),
    "q17": (
        ["lineitem", "part"],
        {"avg_yearly": "decimal(38,6)"},
        """\
select
    sum(l_extendedprice) / 7.0 as avg_yearly
from
    lineitem,
    part
where
    p_partkey = l_partkey
    and p_brand = 'Brand#23'
    and p_container = 'MED BOX'
    and l_quantity < (
        select
            0.2 * avg(l_quantity)
        from
            lineitem
        where
            l_partkey = p_partkey
    )
""",
    ),
    "q18": (
        ["customer", "orders", "lineitem"],
        {
            "c_name": "string",
            "c_custkey": "bigint",
            "o_orderkey": "bigint",
            "o_orderdate": "date",
            "o_totalprice": "decimal(12,2)",
            "sum_l_quantity": "decimal(22,2)",
        },
        """\
select
    c_name,
    c_custkey,
    o_orderkey,
    o_orderdate,
    o_totalprice,
    sum(l_quantity)
from
    customer,
    orders,
    lineitem
where
    o_orderkey in (
        select
            l_orderkey
        from
            lineitem
        group by
            l_orderkey having
                sum(l_quantity) > 150
    )
    and c_custkey = o_custkey
    and o_orderkey = l_orderkey
group by
    c_name,
    c_custkey,
    o_orderkey,
    o_orderdate,
    o_totalprice
order by
    o_totalprice desc,
    o_orderdate
limit 100
""",
    ),
    "q21": (
        ["supplier", "lineitem", "orders", "nation"],
        {"s_name": "string", "numwait": "bigint"},
        """\
select
    s_name,
    count(*) as numwait
from
    supplier,
    lineitem l1,
    orders,
    nation
where
    s_suppkey = l1.l_suppkey
    and o_orderkey = l1.l_orderkey
    and o_orderstatus = 'F'
    and l1.l_receiptdate > l1.l_commitdate
    and exists (
        select
            *
        from
            lineitem l2
        where
            l2.l_orderkey = l1.l_orderkey
            and l2.l_suppkey <> l1.l_suppkey
    )
    and not exists (
        select
            *
        from
            lineitem l3
        where
            l3.l_orderkey = l1.l_orderkey
            and l3.l_suppkey <> l1.l_suppkey
            and l3.l_receiptdate > l3.l_commitdate
    )
    and s_nationkey = n_nationkey
    and n_name = 'SAUDI ARABIA'
group by
    s_name
order by
    numwait desc,
    s_name
limit 100
""",
    ),
    "q22": (
        ["customer", "orders"],
        {"cntrycode": "string", "numcust": "bigint", "totacctbal": "decimal(22,2)"},
        """\
select
    cntrycode,
    count(*) as numcust,
    sum(c_acctbal) as totacctbal
from
    (
        select
            substring(c_phone from 1 for 2) as cntrycode,
            c_acctbal
        from
            customer
        where
            substring(c_phone from 1 for 2) in
                ('13', '31', '23', '29', '30', '18', '17')
            and c_acctbal > (
                select
                    avg(c_acctbal)
                from
                    customer
                where
                    c_acctbal > 0.00
                    and substring(c_phone from 1 for 2) in
                        ('13', '31', '23', '29', '30', '18', '17')
            )
            and not exists (
                select
                    *
                from
                    orders
                where
                    o_custkey = c_custkey
            )
    ) as custsale
group by
    cntrycode
order by
    cntrycode
""",
    ),
}

REGIONS = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"]
NATIONS = [
    ("ALGERIA", 0), ("ARGENTINA", 1), ("BRAZIL", 1), ("CANADA", 1), ("EGYPT", 4), ("ETHIOPIA", 0),
    ("FRANCE", 3), ("GERMANY", 3), ("INDIA", 2), ("INDONESIA", 2), ("IRAN", 4), ("IRAQ", 4), ("JAPAN", 2),
    ("JORDAN", 4), ("KENYA", 0), ("MOROCCO", 0), ("MOZAMBIQUE", 0), ("PERU", 1), ("CHINA", 2),
    ("ROMANIA", 3), ("SAUDI ARABIA", 4), ("VIETNAM", 2), ("RUSSIA", 3), ("UNITED KINGDOM", 3),
    ("UNITED STATES", 1),
]  # fmt: skip
ASIA = [8, 12, 18]  # INDIA, JAPAN, CHINA: where Q5's suppliers and customers meet
SEGMENTS = ["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"]
PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]
SHIPMODES = ["REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"]
CONTAINERS = ["SM CASE", "MED BOX", "LG PACK", "JUMBO JAR"]


# Rows per table at scale factor 1, as TPC-H's dbgen makes them (partsupp: 4 a part; lineitem: 1-7 an order).
SCALE_FACTOR_1 = {"supplier": 10_000, "customer": 150_000, "part": 200_000, "orders": 1_500_000}
# Without a scale factor: a few hundred line items, enough for every query to find rows.
TINY = {"supplier": 12, "customer": 40, "part": 20, "orders": 160}


def generate(seed: int = 26, scale: float | None = None) -> dict[str, list[tuple[Any, ...]]]:
    """Rows of every table, in TPC-H's column order: TPC-H's cardinalities at scale factor `scale` (lineitem
    about 6M rows a unit), or a tiny set without it; dates over TPC-H's 1992-1998, with enough hits for every
    query's predicates (Saudi suppliers, suppliers and customers in Asia, BUILDING customers, Brand#23 MED
    BOX parts, customers without orders)."""
    pick = random.Random(seed)
    sizes = TINY if scale is None else {table: round(rows * scale) for table, rows in SCALE_FACTOR_1.items()}
    suppliers, customers, parts, orders = (sizes[t] for t in ("supplier", "customer", "part", "orders"))

    def money(low: int, high: int) -> Decimal:
        return Decimal(pick.randint(low * 100, high * 100)) / 100

    def day(low: str, high: str) -> datetime.date:
        start, end = datetime.date.fromisoformat(low), datetime.date.fromisoformat(high)
        return start + datetime.timedelta(days=pick.randint(0, (end - start).days))

    def phone(nation: int) -> str:
        return f"{10 + nation}-{pick.randint(100, 999)}-{pick.randint(100, 999)}-{pick.randint(1000, 9999)}"

    tables: dict[str, list[tuple[Any, ...]]] = {
        "region": [(key, name, f"region {name.lower()}") for key, name in enumerate(REGIONS)],
        "nation": [(key, name, region, f"nation {key}") for key, (name, region) in enumerate(NATIONS)],
        "supplier": [
            (
                key,
                f"Supplier#{key:09d}",
                f"address {key}",
                20 if key % 4 == 0 else ASIA[key % 3],
                phone(key % 25),
                money(-999, 9999),
                f"supplier {key}",
            )
            for key in range(1, suppliers + 1)
        ],  # fmt: skip
        "customer": [
            (
                key,
                f"Customer#{key:09d}",
                f"address {key}",
                ASIA[key % 3] if key % 2 else key % 25,
                phone(pick.choice([3, 21, 13, 19, 7, 8])),
                money(-999, 9999),
                SEGMENTS[key % 5],
                f"customer {key}",
            )
            for key in range(1, customers + 1)
        ],  # fmt: skip
        "part": [
            (
                key,
                f"part {key}",
                f"Manufacturer#{key % 5 + 1}",
                "Brand#23" if key % 3 == 0 else f"Brand#{key % 5}1",
                "PROMO BURNISHED COPPER" if key % 5 == 0 else "STANDARD POLISHED TIN",
                pick.randint(1, 50),
                CONTAINERS[key % 4],
                money(900, 2000),
                f"part {key}",
            )
            for key in range(1, parts + 1)
        ],  # fmt: skip
    }
    tables["partsupp"] = [
        (part, supplier, pick.randint(1, 9999), money(1, 1000), f"partsupp {part}-{supplier}")
        for part in range(1, parts + 1)
        for supplier in pick.sample(range(1, suppliers + 1), 4)
    ]
    tables["orders"], tables["lineitem"] = [], []
    # Customers whose key is a multiple of 3 place no orders (TPC-H leaves a third of them without any).
    buyers = [key for key in range(1, customers + 1) if key % 3 != 0]
    for order in range(1, orders + 1):
        ordered = day("1992-01-01", "1998-08-02")
        items = []
        for line in range(1, pick.randint(1, 7) + 1):
            shipped = ordered + datetime.timedelta(days=pick.randint(1, 121))
            committed = ordered + datetime.timedelta(days=pick.randint(30, 90))
            received = shipped + datetime.timedelta(days=pick.randint(1, 30))
            quantity = Decimal(pick.randint(1, 50))
            items.append(
                (order, (part := pick.randint(1, parts)), pick.randint(1, suppliers), line, quantity,
                 quantity * money(900, 2000), Decimal(pick.randint(0, 10)) / 100,
                 Decimal(pick.randint(0, 8)) / 100, pick.choice("RAN"), pick.choice("OF"), shipped,
                 committed, received, "DELIVER IN PERSON", pick.choice(SHIPMODES),
                 f"line {order}-{line} of part {part}")
            )  # fmt: skip
        statuses = {item[9] for item in items}
        tables["orders"].append(
            (order, pick.choice(buyers), statuses.pop() if len(statuses) == 1 else "P",
             sum((item[5] for item in items), Decimal(0)), ordered, pick.choice(PRIORITIES),
             f"Clerk#{pick.randint(1, 20):09d}", 0,
             "special requests" if order % 7 == 0 else f"order {order}")
        )  # fmt: skip
        tables["lineitem"].extend(items)
    return tables


def catalog_yaml(queries: dict[str, tuple[list[str], dict[str, str], str]] = QUERIES) -> str:
    """One pipeline: each table a silver dataset (typed from a raw source through bronze) named as TPC-H
    names it, and each query a gold stage over the tables it reads, SQL as a literal block."""
    lines = ["pipelines:", "  - {pipeline_id: tpch}", "sources:"]
    for table, columns in TABLES.items():
        raw = ", ".join(f"{name}: string" for name in columns)
        lines.append(
            f"  - {{source_id: raw_{table}, s3_path: 's3://tpch/{table}/', file_format: csv, "
            f"columns: {{{raw}}}}}"
        )
    lines.append("targets:")
    for table, columns in TABLES.items():
        typed = ", ".join(f"{name}: '{type_name}'" for name, type_name in columns.items())
        lines.append(f"  - {{target_id: bronze_{table}, layer: bronze}}")
        lines.append(f"  - {{target_id: {table}, layer: silver, columns: {{{typed}}}}}")
    for name, (_, output, _) in queries.items():
        typed = ", ".join(f"{column}: '{type_name}'" for column, type_name in output.items())
        lines.append(f"  - {{target_id: {name}, layer: gold, columns: {{{typed}}}}}")
    lines.append("stages:")
    order = 0
    for table in TABLES:
        for stage, source, target in [
            ("ingest", f"raw_{table}", f"bronze_{table}"),
            ("type", f"bronze_{table}", table),
        ]:
            order += 1
            lines.append(
                f"  - {{pipeline_id: tpch, stage_order: {order}, stage_name: {stage}_{table}, "
                f"input_id: {source}, target_id: {target}}}"
            )
    for name, (tables, _, sql) in queries.items():
        order += 1
        lines += [
            "  - pipeline_id: tpch",
            f"    stage_order: {order}",
            f"    stage_name: {name}",
            f"    input_id: {tables[0]}",
            f"    inputs: [{', '.join(tables[1:])}]",
            f"    target_id: {name}",
            "    transform_sql: |",
            *[f"      {line}" if line else "" for line in sql.splitlines()],
        ]
    return "\n".join(lines) + "\n"


def write_catalog(folder: Path, queries: dict[str, tuple[list[str], dict[str, str], str]] = QUERIES) -> Path:
    path = folder / "tpch.yaml"
    path.write_text(catalog_yaml(queries))
    return path


DUCKDB_TYPES = {"bigint": "BIGINT", "int": "INTEGER", "string": "VARCHAR", "date": "DATE"}


def duckdb_type(spark_type: str) -> str:
    """The DuckDB type of a column TABLES types in Spark's words (decimals are spelled alike)."""
    return DUCKDB_TYPES.get(spark_type, spark_type.upper())


def answer(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows as both engines' answers can be compared: numbers to 4 decimal places (Spark's averages are
    decimals of scale 6, DuckDB's doubles), in a stable order."""

    def value(v: Any) -> Any:
        return round(float(v), 4) if isinstance(v, (Decimal, float)) else v

    return sorted((tuple(value(v) for v in row) for row in rows), key=repr)
