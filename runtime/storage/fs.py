"""The storage root: a local directory or an object-store URI, seen through pyarrow.fs.

Everything under the root (Delta logs, data files, offset-index snapshots) is reached
through one :class:`StorageRoot`, so local paths and ``s3://``/``gs://``/``abfs://`` URIs
behave alike. Errors of the filesystem are wrapped as :class:`StorageError`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow.fs as pafs

from common.errors import StorageError


class StorageRoot:
    """A storage root (``topics.root``) with path helpers.

    Args:
        root: a local path, ``file://`` URI, or an object-store URI that pyarrow knows.
    """

    __slots__ = ("base", "fs", "is_local", "uri")

    def __init__(self, root: str | os.PathLike[str]) -> None:
        text = os.fspath(root)
        if not text:
            raise StorageError("the storage root is empty; set topics.root (or --root)")
        if "://" in text and not text.startswith("file://"):
            try:
                fs, base = pafs.FileSystem.from_uri(text)
            except Exception as exc:
                raise StorageError(f"cannot open storage root {text!r}: {exc}") from exc
            self.fs: pafs.FileSystem = fs
            self.base: str = base.rstrip("/")
            self.uri: str = text.rstrip("/")
            self.is_local = False
        else:
            path = os.path.abspath(text.removeprefix("file://"))
            self.fs = pafs.LocalFileSystem()
            self.base = path
            self.uri = path
            self.is_local = True

    def path(self, *parts: str) -> str:
        """Return the filesystem path of ``parts`` under the root."""
        return "/".join([self.base, *parts])

    def uri_of(self, *parts: str) -> str:
        """Return the URI (or local path) of ``parts`` under the root, for delta-rs."""
        return "/".join([self.uri, *parts])

    def exists(self, path: str) -> bool:
        """Return True if a file or directory exists at ``path``."""
        return bool(self._info(path).type != pafs.FileType.NotFound)

    def is_dir(self, path: str) -> bool:
        """Return True if ``path`` is a directory."""
        return bool(self._info(path).type == pafs.FileType.Directory)

    def list_dir(self, path: str) -> list[pafs.FileInfo]:
        """List the direct children of ``path`` (empty when it does not exist)."""
        try:
            return list(self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))
        except Exception as exc:
            raise StorageError(f"cannot list {path}: {exc}") from exc

    def read_bytes(self, path: str) -> bytes | None:
        """Return a file's content, or None when it does not exist."""
        try:
            with self.fs.open_input_stream(path, compression=None) as stream:
                return bytes(stream.readall())
        except FileNotFoundError:
            return None
        except OSError as exc:
            if self._info(path).type == pafs.FileType.NotFound:
                return None
            raise StorageError(f"cannot read {path}: {exc}") from exc

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` so a reader sees all of it or nothing.

        Local files are written under a temporary name and renamed; object stores make a
        single PUT visible at once.
        """
        try:
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            if not self.is_local:
                with self.fs.open_output_stream(path, compression=None) as out:
                    out.write(data)
                return
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc

    def delete_dir(self, path: str) -> None:
        """Delete a directory and everything below it (no error if it is missing)."""
        try:
            if self.exists(path):
                self.fs.delete_dir(path)
        except OSError as exc:
            raise StorageError(f"cannot delete {path}: {exc}") from exc

    def delete_file(self, path: str) -> None:
        """Delete one file (no error if it is missing)."""
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            if self.exists(path):
                raise StorageError(f"cannot delete {path}: {exc}") from exc

    def file_size(self, path: str) -> int:
        """Return the size of a file in bytes."""
        info = self._info(path)
        if info.type != pafs.FileType.File or info.size is None:
            raise StorageError(f"expected a file at {path}")
        return int(info.size)

    @contextmanager
    def output(self, path: str) -> Iterator[pafs.NativeFile]:
        """Open ``path`` for writing (parent directories created)."""
        try:
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
            with self.fs.open_output_stream(path, compression=None) as out:
                yield out
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc

    def _info(self, path: str) -> pafs.FileInfo:
        try:
            return self.fs.get_file_info(path)
        except Exception as exc:
            raise StorageError(f"cannot stat {path}: {exc}") from exc

    def __repr__(self) -> str:
        return f"StorageRoot({self.uri!r})"
