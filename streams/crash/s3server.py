"""An S3-compatible server for tests and crash campaigns: moto's server mode (the ``dev``
extra), started as a process of its own on a free local port, with a new bucket per use.

Everything reaches it through storage options (``storage.options.<NAME>`` keys, as delta-rs
takes them), never through the environment: Spark's Python workers, started before, would
not see variables set after them.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass

from streams.crash.inputs import CrashTestError

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
        """Create a bucket; return its name (moto takes an unsigned CreateBucket)."""
        name = f"streams-{uuid.uuid4().hex[:12]}"
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
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
        [sys.executable, "-m", "streams.crash.s3serve", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{endpoint}/", timeout=1):  # ListBuckets
                return process, S3Server(endpoint)
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise CrashTestError(
                    f"the S3-compatible server (moto) did not start on port {port}"
                ) from None
            time.sleep(0.1)
