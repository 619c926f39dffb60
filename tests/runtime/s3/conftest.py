"""The S3-compatible server of these tests (see :mod:`tests.s3server`)."""

from tests.s3server import s3_root, s3_server

__all__ = ["s3_root", "s3_server"]
