"""The S3-compatible server of the object-storage tests (:mod:`streams.crash.s3server`):
one per test session, a new bucket per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime.storage.fs import register_storage_options
from streams.crash.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server, start_server

__all__ = ["ACCESS_KEY", "REGION", "SECRET_KEY", "S3Server", "s3_root", "s3_server"]


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
