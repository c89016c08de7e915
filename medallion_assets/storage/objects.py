"""Raw object access with one interface for S3 (``s3://bucket/key``) and local folders (paths or ``file://``).

S3 goes through plain boto3, which finds its endpoint, credentials and region in the environment itself
(``AWS_ENDPOINT_URL_S3`` among them), so the same code talks to AWS, to an S3-compatible server, or to moto.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import boto3
from botocore.exceptions import ClientError

from medallion_assets.errors import SourceNotFound

# The environment boto3 builds an S3 client from. A cached client is only reused while these are unchanged,
# so a test (or a tool) that points AWS_ENDPOINT_URL_S3 elsewhere gets a client for the new endpoint.
_CLIENT_ENVIRONMENT = (
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_PROFILE",
)
# boto3 has no type information: its clients are Any.
_clients: dict[tuple[int | str | None, ...], Any] = {}
_clients_lock = threading.Lock()


@dataclass(frozen=True)
class ObjectInfo:
    """One stored object: its full url, its size in bytes, and a fingerprint that changes when it changes."""

    url: str
    size: int
    etag: str


def list_objects(url: str, source_id: str | None = None) -> list[ObjectInfo]:
    """Every object under ``url`` (recursively), sorted by url.

    ``url`` names a folder (an S3 prefix or a local directory) or a single object. A prefix is matched as
    a folder: ``s3://b/events`` lists ``s3://b/events/...`` and ``s3://b/events`` itself, never
    ``s3://b/events_old/...``. Raises SourceNotFound, naming ``source_id`` when given, when the bucket or
    folder does not exist or holds no objects.
    """
    objects = sorted(_objects(url, source_id), key=lambda info: info.url)
    if not objects:
        raise SourceNotFound(_message(url, "holds no objects", source_id))
    return objects


def any_object(url: str, source_id: str | None = None) -> ObjectInfo:
    """One of the objects ``list_objects`` would list, found from the listing's first page rather than all of
    them: whether a source answers (availability probes, waits for upstream data) costs one request however
    many objects it holds. Raises SourceNotFound as ``list_objects`` does."""
    found = next(_objects(url, source_id), None)
    if found is None:
        raise SourceNotFound(_message(url, "holds no objects", source_id))
    return found


def read_bytes(url: str) -> bytes:
    """The whole content of one object."""
    if _is_s3(url):
        bucket, key = _split_s3(url)
        with _s3_not_found_mapped(url):
            body: bytes = _s3().get_object(Bucket=bucket, Key=key)["Body"].read()
            return body
    try:
        return _local_path(url).read_bytes()
    except FileNotFoundError as error:
        raise SourceNotFound(_message(url, "does not exist")) from error


def write_bytes(url: str, data: bytes) -> None:
    """Create or replace one object; local parent folders are created as needed."""
    if _is_s3(url):
        bucket, key = _split_s3(url)
        with _s3_not_found_mapped(url):
            _s3().put_object(Bucket=bucket, Key=key, Body=data)
        return
    path = _local_path(url)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def copy_object(src: str, dst: str) -> None:
    """Copy one object to ``dst``, replacing it if present. Works within and across S3 and local storage.

    S3 to S3 is a server-side copy; a copy between S3 and a local folder passes through memory.
    """
    if _is_s3(src) and _is_s3(dst):
        src_bucket, src_key = _split_s3(src)
        dst_bucket, dst_key = _split_s3(dst)
        # The managed copy, unlike a single CopyObject request, also handles objects above 5 GB.
        with _s3_not_found_mapped(src, dst):
            _s3().copy({"Bucket": src_bucket, "Key": src_key}, dst_bucket, dst_key)
    elif _is_s3(src) or _is_s3(dst):
        write_bytes(dst, read_bytes(src))
    else:
        target = _local_path(dst)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(_local_path(src), target)
        except FileNotFoundError as error:
            raise SourceNotFound(_message(src, "does not exist")) from error


def delete_object(url: str) -> None:
    """Delete one object. Deleting an object that is already gone is not an error, as on S3."""
    if _is_s3(url):
        bucket, key = _split_s3(url)
        with _s3_not_found_mapped(url):
            _s3().delete_object(Bucket=bucket, Key=key)
        return
    _local_path(url).unlink(missing_ok=True)


def configured_endpoint() -> str | None:
    """The S3 endpoint this process was pointed at, to hand to Spark executors so they read the same store."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


def _s3() -> Any:
    """The S3 client of this process for the current AWS environment, created on first use."""
    # Keyed by process too: a client's connection pool must not be shared with a forked child.
    key = (os.getpid(), *(os.environ.get(name) for name in _CLIENT_ENVIRONMENT))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            # A session of its own: boto3's default session is not safe to create clients from concurrently.
            client = _clients[key] = boto3.session.Session().client("s3")
    return client


def _objects(url: str, source_id: str | None) -> Iterator[ObjectInfo]:
    """The objects under ``url`` in the order they are listed, read page by page as they are consumed."""
    return _list_s3(url, source_id) if _is_s3(url) else _list_local(url, source_id)


def _list_s3(url: str, source_id: str | None) -> Iterator[ObjectInfo]:
    bucket, prefix = _split_s3(url)
    folder = prefix if prefix == "" or prefix.endswith("/") else prefix + "/"
    with _s3_not_found_mapped(url, source_id=source_id):
        for page in _s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                key = item["Key"]
                # Keys ending in "/" are the empty markers consoles create for folders, not data.
                if key.endswith("/") or not (key == prefix or key.startswith(folder)):
                    continue
                yield ObjectInfo(f"s3://{bucket}/{key}", item["Size"], item["ETag"].strip('"'))


def _list_local(url: str, source_id: str | None) -> Iterator[ObjectInfo]:
    root = _local_path(url)
    if root.is_file():
        files: Iterator[Path] = iter([root])
    elif root.is_dir():
        files = (path for path in root.rglob("*") if path.is_file())
    else:
        raise SourceNotFound(_message(url, "does not exist", source_id))
    for path in files:
        stat = path.stat()
        yield ObjectInfo(str(path), stat.st_size, f"{stat.st_size}-{stat.st_mtime_ns}")


@contextmanager
def _s3_not_found_mapped(*urls: str, source_id: str | None = None) -> Iterator[None]:
    """Turn S3's "no such bucket / key" answers into SourceNotFound naming the url concerned."""
    try:
        yield
    except ClientError as error:
        details = error.response.get("Error", {})
        code = details.get("Code")
        if code == "NoSuchBucket":
            bucket = details.get("BucketName") or _split_s3(urls[0])[0]
            url = next((u for u in urls if _split_s3(u)[0] == bucket), urls[0])
            problem = f"does not exist (bucket {bucket} not found)"
            raise SourceNotFound(_message(url, problem, source_id)) from error
        if code in ("NoSuchKey", "404", "NotFound"):
            raise SourceNotFound(_message(urls[0], "does not exist", source_id)) from error
        raise


def _message(url: str, problem: str, source_id: str | None = None) -> str:
    # Local paths are shown absolute: a relative path alone does not say where it was looked for.
    shown = url if _is_s3(url) else str(_local_path(url))
    text = f"{shown} {problem}"
    return f"source {source_id}: {text}" if source_id else text


def _is_s3(url: str) -> bool:
    return url.startswith("s3://")


def _split_s3(url: str) -> tuple[str, str]:
    bucket, _, key = url.removeprefix("s3://").partition("/")
    return bucket, key


def _local_path(url: str) -> Path:
    if url.startswith("file://"):
        return Path(unquote(urlparse(url).path)).absolute()
    return Path(url).absolute()
