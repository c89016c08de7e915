"""How Medallion names what its OpenLineage events speak of: jobs and datasets.

Jobs live in the namespace `OPENLINEAGE_NAMESPACE` (default "medallion"), named `<pipeline>`,
`<pipeline>.<dataset>` or `<pipeline>.<dataset>.<part>`. Datasets are named by the OpenLineage naming
conventions through the client's `openlineage.client.naming.dataset` helpers: S3 objects, local files,
PostgreSQL and Redshift tables; DuckDB, which has no convention, as `duckdb://<file>` and
`<catalog>.<schema>.<table>` like the other warehouses.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from openlineage.client.naming.dataset import S3, DatasetNaming, LocalFileSystem, Postgres, Redshift

from medallion_assets import config
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.naming import check_identifier, split_qualified
from medallion_assets.storage.lake.root import Lake


def namespace() -> str:
    """The job namespace, read at each event so a deployment can change it."""
    return config.openlineage_namespace()


def job_name(pipeline_id: str, dataset: str | None = None, part: str | None = None) -> str:
    """`pipeline`, `pipeline.dataset` or `pipeline.dataset.part`, each piece a checked identifier."""
    pieces = [pipeline_id, dataset, part]
    return ".".join(check_identifier(piece, "job name part") for piece in pieces if piece is not None)


# --------------------------------------------------------------------------------------------------- datasets


@dataclass(frozen=True)
class DatasetLocation:
    """Where a dataset lives: a lake or raw url (s3://…, a local path), or a warehouse url and its table."""

    dataset_id: str
    url: str
    table: str | None = None
    columns: Mapping[str, str] = field(default_factory=dict)

    def naming(self) -> tuple[str, str]:
        """(namespace, name) per the OpenLineage naming conventions; never carries credentials."""
        if self.table is None:
            return _file_naming(self.url)
        return _table_naming(self.url, self.table)


def _file_naming(url: str) -> tuple[str, str]:
    naming: DatasetNaming
    if url.startswith("s3://"):
        bucket, _, key = url.removeprefix("s3://").partition("/")
        # A prefix names a folder of objects; the convention names it without the trailing slash.
        naming = S3(bucket_name=bucket, object_key=key.rstrip("/") or "/")
    else:
        path = unquote(urlsplit(url).path) if url.startswith("file://") else url
        naming = LocalFileSystem(path=str(Path(path).absolute()))
    return naming.get_namespace(), naming.get_name()


def _table_naming(url: str, table: str) -> tuple[str, str]:
    scheme = url.partition("://")[0]
    *schema_part, table_name = split_qualified(table)
    if scheme == "duckdb":
        file = Path(url.partition("://")[2].removeprefix("/")).absolute()
        # DuckDB names a file's catalog after the file, and its default schema "main".
        return f"duckdb://{file}", f"{file.stem}.{(schema_part or ['main'])[0]}.{table_name}"
    parts = urlsplit(url)
    # Parts missing from the URL are libpq's to fill from the environment, as the warehouse connection does.
    host = parts.hostname or os.environ.get("PGHOST", "localhost")
    database = unquote(parts.path.lstrip("/")) or os.environ.get("PGDATABASE", "postgres")
    schema_name = (schema_part or ["public"])[0]
    naming: DatasetNaming
    if scheme == "redshift":
        cluster, region = _redshift_cluster(host)
        naming = Redshift(
            cluster_identifier=cluster,
            region=region,
            port=str(parts.port or 5439),
            database=database,
            schema=schema_name,
            table=table_name,
        )
    else:
        naming = Postgres(
            host=host, port=str(parts.port or 5432), database=database, schema=schema_name, table=table_name
        )
    return naming.get_namespace(), naming.get_name()


_REDSHIFT_HOST = re.compile(
    r"(?P<cluster>[^.]+)\.[^.]+\.(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+)\.redshift(?:-serverless)?\.amazonaws\.com"
)


def _redshift_cluster(host: str) -> tuple[str, str]:
    """(cluster or workgroup, region) of an AWS endpoint; other hosts (CNAMEs) fall back on the AWS region."""
    if match := _REDSHIFT_HOST.fullmatch(host):
        return match["cluster"], match["region"]
    return host.split(".")[0], os.environ.get("AWS_REGION") or os.environ.get(
        "AWS_DEFAULT_REGION"
    ) or "unknown"


def dataset_location(snapshot: CatalogSnapshot, dataset_id: str, lake: Lake) -> DatasetLocation:
    """A source's raw prefix, or a target's table location in the lake, with the columns the catalog
    declares."""
    if source := snapshot.sources.get(dataset_id):
        return DatasetLocation(dataset_id, source.s3_path, columns=source.columns)
    target = snapshot.targets[dataset_id]
    return DatasetLocation(dataset_id, lake.table_location(target), columns=target.columns or {})
