"""An S3-compatible server for the tests: moto's server mode, started as a process of its
own on a free local port, with a new bucket per test.

Everything reaches it through storage options (``storage.options.<NAME>`` keys, as delta-rs
takes them), never through the environment: Spark's Python workers, started before a test,
would not see variables set by it.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import boto3
import pytest

from runtime.storage.fs import register_storage_options

ACCESS_KEY = "streams-test"
SECRET_KEY = "streams-test-secret"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    """A running S3-compatible server."""

    endpoint: str

    def options(self) -> dict[str, str]:
        """The storage options that reach it (delta-rs names)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def config(self) -> dict[str, str]:
        """The options as configuration keys."""
        return {f"storage.options.{k}": v for k, v in self.options().items()}

    def new_bucket(self) -> str:
        """Create a bucket; return its name."""
        name = f"streams-{uuid.uuid4().hex[:12]}"
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )
        client.create_bucket(Bucket=name)
        return name


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(timeout_s: float = 30.0) -> tuple[subprocess.Popen[bytes], S3Server]:
    """Start moto's server; return its process and address once it answers."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                return process, S3Server(endpoint)
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"the S3 test server did not start on port {port}") from None
            time.sleep(0.1)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One S3-compatible server for the test session."""
    process, server = start_server()
    try:
        yield server
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def s3_root(s3_server: S3Server) -> str:
    """A storage root in a new bucket, its options registered in this process."""
    root = f"s3://{s3_server.new_bucket()}/root"
    register_storage_options(root, s3_server.options())
    return root
