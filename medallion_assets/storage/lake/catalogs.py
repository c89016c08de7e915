"""Which Iceberg catalog holds the lake's tables, chosen by configuration alone.

`MEDALLION_LAKE_CATALOG` names the catalog called `lake` (tables `lake.<layer>.<dataset>`):

- unset: Iceberg's JDBC catalog on a SQLite file inside the lake folder, `<lake>/iceberg_catalog.db`, which
  needs no server. The lake folder then holds its tables and their catalog together;
- `sqlite:///file` or `postgresql://user@host/db` (SQLAlchemy's form, as MEDALLION_CATALOG_URL): the JDBC
  catalog in that database, e.g. the same PostgreSQL database as Medallion's own catalog;
- `glue`: the AWS Glue Data Catalog, tables' files written with S3FileIO. Endpoints and credentials are the
  AWS SDK's own settings (AWS_ENDPOINT_URL_GLUE, AWS_ENDPOINT_URL_S3, AWS_REGION, the credential chain);
- `http(s)://…`: an Iceberg REST catalog (S3 Tables, Polaris, Nessie, Lakekeeper).

Further catalogs, which a target picks with `lake_table.catalog`, are `MEDALLION_LAKE_CATALOG__<NAME>` in
the same forms. Spark reaches each through Iceberg's SparkCatalog; the Dagster process reads table metadata
through pyiceberg with the same settings, without a JVM.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import unquote, urlparse

from medallion_assets import config
from medallion_assets.naming import check_identifier
from medallion_assets.redaction import scrub

# pyiceberg is imported when a table's metadata is first read, not with this module: `medallion plan` and
# `catalog validate` import it and, on most catalogs, read none (pyiceberg costs a third of a plan's CPU).
if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

CATALOG_ENV = "MEDALLION_LAKE_CATALOG"
DEFAULT_CATALOG = "lake"
_NAMED_PREFIX = f"{CATALOG_ENV}__"
_S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
# The JDBC catalog's current tables (with views), which pyiceberg's SQL catalog reads too.
_JDBC = {"jdbc.schema-version": "V1"}
# Static settings the lake needs from any Spark, a driver Medallion starts or a Connect server (whose start
# command sets them, with the jars): Iceberg's SQL extensions give MERGE, branches and procedures. The
# catalogs themselves are registered when a session first uses the lake (`LakeCatalog.spark_conf`).
LAKE_SPARK_CONF = {
    "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
}


class LakeCatalogError(RuntimeError):
    """A lake catalog that is not configured, not understood, or does not answer: names the setting."""


@dataclass(frozen=True)
class LakeCatalog:
    """One Iceberg catalog: its name in Spark (`<name>.<namespace>.<table>`), the setting that configured it,
    and the lake root its tables' files go under."""

    name: str
    url: str
    warehouse: str

    @property
    def kind(self) -> Literal["jdbc", "glue", "rest"]:
        scheme = urlparse(self.url).scheme
        if self.url == "glue" or scheme == "glue":
            return "glue"
        if scheme in ("http", "https"):
            return "rest"
        if scheme.split("+")[0] in ("sqlite", "postgresql"):
            return "jdbc"
        raise LakeCatalogError(
            f"{self.setting}={self.shown}: not a lake catalog; use sqlite:///file, postgresql://…, glue, "
            "or the http(s) URL of an Iceberg REST catalog"
        )

    @property
    def setting(self) -> str:
        """The environment variable that configures this catalog."""
        return catalog_setting(self.name)

    @property
    def shown(self) -> str:
        return scrub(self.url)

    def spark_conf(self) -> dict[str, str]:
        """The session settings that make this catalog Spark's catalog `name`."""
        prefix = f"spark.sql.catalog.{self.name}"
        properties = {"": "org.apache.iceberg.spark.SparkCatalog", **self._java_properties()}
        return {f"{prefix}.{key}" if key else prefix: value for key, value in properties.items()}

    def _java_properties(self) -> dict[str, str]:
        # The AWS SDK for Java reads AWS_REGION only; AWS_DEFAULT_REGION (boto3's) is passed on too.
        region = _defined({"client.region": _aws_region()}) if self.kind == "glue" or self._on_s3() else {}
        # Spark's table cache would let a run read a version another process has since replaced.
        common = {"warehouse": self.warehouse, "cache-enabled": "false", **self._file_io(), **region}
        if self.kind == "glue":
            return {"type": "glue", **_defined({"glue.endpoint": _aws_endpoint("GLUE")}), **common}
        if self.kind == "rest":
            return {"type": "rest", "uri": self.url, **common}
        parsed = urlparse(self.url)
        if parsed.scheme.startswith("sqlite"):
            return {"type": "jdbc", "uri": f"jdbc:sqlite:{self.sqlite_file()}", **_JDBC, **common}
        port = f":{parsed.port}" if parsed.port else ""
        return {
            "type": "jdbc",
            "uri": f"jdbc:postgresql://{parsed.hostname}{port}{parsed.path}",
            **_JDBC,
            **_defined({"jdbc.user": unquote(parsed.username or ""), "jdbc.password": _password(parsed)}),
            **common,
        }

    def sqlite_file(self) -> Path | None:
        """The file of a catalog on SQLite (`sqlite:///relative` or `sqlite:////absolute`, as SQLAlchemy
        writes them), its folder made when missing; None for other catalogs."""
        if not urlparse(self.url).scheme.startswith("sqlite"):
            return None
        file = Path(unquote(self.url.split(":///", 1)[1])).absolute()
        file.parent.mkdir(parents=True, exist_ok=True)
        return file

    def _file_io(self) -> dict[str, str]:
        """Tables on S3 are written with Iceberg's own S3 client (no Hadoop s3a connector needed)."""
        if self.kind != "glue" and not self._on_s3():
            return {}
        endpoint = _aws_endpoint("S3")
        path_style = {"s3.path-style-access": "true"} if endpoint else {}
        return {"io-impl": _S3_FILE_IO, **_defined({"s3.endpoint": endpoint}), **path_style}

    def _on_s3(self) -> bool:
        return self.warehouse.startswith(("s3://", "s3a://"))

    def pyiceberg_properties(self) -> dict[str, str]:
        """The same catalog as pyiceberg's properties."""
        s3 = _defined({"s3.endpoint": _aws_endpoint("S3"), "s3.region": _aws_region()})
        if self.kind == "glue":
            glue = _defined({"glue.endpoint": _aws_endpoint("GLUE"), "glue.region": _aws_region()})
            return {"type": "glue", "warehouse": self.warehouse, **glue, **s3}
        if self.kind == "rest":
            return {"type": "rest", "uri": self.url, "warehouse": self.warehouse, **s3}
        sqlite_file = self.sqlite_file()
        url = (
            f"sqlite:///{sqlite_file}"
            if sqlite_file
            else self.url.replace("postgresql://", "postgresql+psycopg2://", 1)
        )
        return {"type": "sql", "uri": url, "warehouse": _as_uri(self.warehouse), **s3}

    def metadata(self) -> Catalog:
        """pyiceberg's view of the catalog, for reading table metadata in the Dagster process."""
        return _pyiceberg(self.name, tuple(sorted(self.pyiceberg_properties().items())))


@cache
def _pyiceberg(name: str, properties: tuple[tuple[str, str], ...]) -> Catalog:
    from pyiceberg.catalog import load_catalog

    return load_catalog(name, **dict(properties))


def catalog_setting(name: str) -> str:
    """The environment variable that configures catalog `name`."""
    return CATALOG_ENV if name == DEFAULT_CATALOG else f"{_NAMED_PREFIX}{name.upper()}"


def configured_catalogs(root: str) -> dict[str, LakeCatalog]:
    """Every lake catalog the environment configures for the lake at `root` (resolved, by `root.Lake`, which
    asks once): `lake` always, and each MEDALLION_LAKE_CATALOG__NAME."""
    catalogs = {DEFAULT_CATALOG: LakeCatalog(DEFAULT_CATALOG, default_catalog_url(root), root)}
    for variable, url in sorted(config.environment().items()):
        if variable.startswith(_NAMED_PREFIX) and url:
            name = check_identifier(
                variable.removeprefix(_NAMED_PREFIX).lower(), f"{variable}'s catalog name"
            )
            catalogs[name] = LakeCatalog(name, url, root)
    return catalogs


def default_catalog_url(root: str) -> str:
    configured = os.environ.get(CATALOG_ENV)
    if configured:
        return configured
    if "://" in root and not root.startswith("file://"):
        raise LakeCatalogError(
            f"MEDALLION_LAKE_URL={scrub(root)} is not a local folder, so the lake's tables need a "
            f"shared catalog: set {CATALOG_ENV} to glue, a postgresql:// database or an Iceberg REST URL"
        )
    folder = root.removeprefix("file://")
    return f"sqlite:///{os.path.abspath(folder)}/iceberg_catalog.db"


def _defined(properties: dict[str, str | None]) -> dict[str, str]:
    return {key: value for key, value in properties.items() if value}


def _aws_endpoint(service: str) -> str | None:
    """The AWS SDKs' own endpoint settings: the service's, then the global one."""
    return os.environ.get(f"AWS_ENDPOINT_URL_{service}") or os.environ.get("AWS_ENDPOINT_URL")


def _aws_region() -> str | None:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")


def _password(parsed: object) -> str | None:
    password = getattr(parsed, "password", None)
    return unquote(password) if password else None


def _as_uri(warehouse: str) -> str:
    return warehouse if "://" in warehouse else f"file://{os.path.abspath(warehouse)}"
