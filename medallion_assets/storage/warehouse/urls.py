"""Warehouse URLs: which adapter, and its connection settings.

An adapter's module, and its driver with it, is imported only when a URL names it: DuckDB alone takes
longer to import than the rest of the warehouse package, and a PostgreSQL or Redshift deployment (or a code
server, which loads nothing) never needs it.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlsplit

from medallion_assets.storage.warehouse.base import Warehouse

SCHEMES = ("duckdb", "postgresql", "postgresql+psycopg2", "redshift")


def warehouse_from_url(url: str) -> Warehouse:
    """The warehouse a URL names.

    - ``duckdb:///relative/file.duckdb`` or ``duckdb:////absolute/file.duckdb`` (as SQLAlchemy's sqlite URLs);
      the parent folder is created. ``duckdb:///:memory:`` is an in-memory database.
    - ``postgresql://user@host:port/db`` or ``postgresql+psycopg2://...``; query parameters go to libpq.
    - ``redshift://user:password@host:port/db?s3_staging=s3://bucket/prefix/&iam_role=arn:aws:iam::...``.

    A password comes from the URL or from libpq's own ``PGPASSWORD``; it never appears in errors or reprs.
    """
    scheme, separator, rest = url.partition("://")
    if not separator or scheme not in SCHEMES:
        # Without "://" the whole text would be the "scheme", and it may hold a password: never shown.
        shown = repr(scheme) if separator else "(none)"
        raise ValueError(f"unknown warehouse URL scheme {shown}; supported: {', '.join(SCHEMES)}")
    if scheme == "duckdb":
        from medallion_assets.storage.warehouse.duckdb_file import DuckDBWarehouse

        return DuckDBWarehouse(rest.removeprefix("/"))
    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query))
    connect_kwargs = {
        name: value
        for name, value in {
            "host": parts.hostname,
            "port": parts.port or (5439 if scheme == "redshift" else 5432),
            "user": unquote(parts.username or ""),
            "password": unquote(parts.password or ""),
            "dbname": unquote(parts.path.lstrip("/")),
            **options,
        }.items()
        # Absent parts are left to libpq, which then reads PGHOST, PGUSER, PGPASSWORD and the like.
        if value
    }
    if scheme != "redshift":
        from medallion_assets.storage.warehouse.postgres import PostgresWarehouse

        return PostgresWarehouse(**connect_kwargs)
    # Query parameters are text; an absent one is "", refused below as an empty one is.
    s3_staging = str(connect_kwargs.pop("s3_staging", ""))
    iam_role = str(connect_kwargs.pop("iam_role", ""))
    if not (s3_staging and iam_role):
        raise ValueError(
            "a redshift:// URL needs the query parameters s3_staging=s3://bucket/prefix/ "
            "and iam_role=arn:aws:iam::..."
        )
    from medallion_assets.storage.warehouse.redshift import RedshiftWarehouse

    return RedshiftWarehouse(s3_staging, iam_role, **connect_kwargs)
