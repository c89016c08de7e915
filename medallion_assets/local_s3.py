"""An S3 API server on loopback (moto's server mode) for the demo and the UI on a machine without AWS.

The framework reaches it exactly as it reaches AWS: plain boto3, with AWS_ENDPOINT_URL_S3 pointing here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
from moto.server import ThreadedMotoServer


@contextmanager
def local_s3(buckets: tuple[str, ...] = ()) -> Iterator[str]:
    """Start the server, point this process's boto3 at it, create `buckets`; yields the endpoint URL."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per S3 request drowns the output
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = {
        name: os.environ.get(name)
        for name in (
            "AWS_ENDPOINT_URL_S3",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_DEFAULT_REGION",
        )
    }
    os.environ.update(
        AWS_ENDPOINT_URL_S3=endpoint,
        AWS_ACCESS_KEY_ID="local",
        AWS_SECRET_ACCESS_KEY="local",
        AWS_DEFAULT_REGION="us-east-1",
    )
    try:
        client = boto3.client("s3")
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        yield endpoint
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def serve_folder(root: Path) -> Iterator[str]:
    """Serve the files under `root/<bucket>/<key>` as S3 objects on loopback, for the embedded home.

    Objects are uploaded from disk at every start, so they outlive the server (their ETags, the MD5 of their
    content, stay the same, so ingestion bookmarks still hold); objects written through S3 meanwhile are not
    kept.
    """
    buckets = sorted(folder.name for folder in root.iterdir() if folder.is_dir())
    with local_s3(buckets=tuple(buckets)) as endpoint:
        client = boto3.client("s3")
        for bucket in buckets:
            for path in sorted((root / bucket).rglob("*")):
                if path.is_file():
                    client.upload_file(str(path), bucket, path.relative_to(root / bucket).as_posix())
        yield endpoint
