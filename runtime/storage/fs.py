"""The storage root: a local directory or an object-store URI, seen through pyarrow.fs.

Everything under the root (Delta logs, data files, offset-index snapshots) is reached
through one :class:`StorageRoot`, so local paths and ``s3://``/``gs://``/``abfs://`` URIs
behave alike. Errors of the filesystem are wrapped as :class:`StorageError`.

An object store's options (endpoint, credentials, region) are delta-rs's storage options
(``storage.options.<NAME>`` in the configuration), registered once per process for the
root's bucket (:func:`register_storage_options`: by the driver from its configuration, by
each executor from the batch plan's). Every :class:`StorageRoot` and every delta-rs table
of that bucket then uses them (:func:`storage_options`); pyarrow's S3 filesystem gets them
translated. Without registered options both libraries read the ``AWS_*`` environment.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from common.errors import StorageError
from runtime.storage.retries import retried

log = logging.getLogger(__name__)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

#: scheme://bucket -> the delta-rs storage options registered for it.
_OPTIONS: dict[str, dict[str, str]] = {}
_OPTIONS_LOCK = threading.Lock()

#: delta-rs (object_store) S3 option names -> pyarrow S3FileSystem arguments.
_S3_ARGUMENTS = {
    "aws_access_key_id": "access_key",
    "access_key_id": "access_key",
    "aws_secret_access_key": "secret_key",
    "secret_access_key": "secret_key",
    "aws_session_token": "session_token",
    "session_token": "session_token",
    "aws_region": "region",
    "aws_default_region": "region",
    "region": "region",
}
_S3_ENDPOINTS = ("aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint")


def _bucket(uri: str) -> str:
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""


def register_storage_options(root: str, options: Mapping[str, str]) -> None:
    """Use ``options`` (delta-rs storage options) for the bucket of ``root`` in this
    process (nothing for a local root or no options)."""
    bucket = _bucket(root)
    if bucket and options and not root.startswith("file://"):
        with _OPTIONS_LOCK:
            _OPTIONS[bucket] = {str(k): str(v) for k, v in options.items()}


#: delta-rs's defaults for an object store unless the options set them: its reads are
#: retried for 20 s at most (object_store's own default, 3 min, held a batch past its
#: transaction's timeout; what still fails fails the batch, which is tried again).
DELTA_RS_DEFAULTS = {"retry_timeout": "20s"}


def storage_options(uri: str) -> dict[str, str] | None:
    """Return the storage options registered for the bucket of ``uri`` (for delta-rs)."""
    options = _OPTIONS.get(_bucket(uri))
    return {**DELTA_RS_DEFAULTS, **options} if options else None


#: Attempts of each S3 request by pyarrow's filesystem (the AWS SDK's backoff between,
#: jittered and doubling up to 20 s: 10 attempts held one call for 75 s against a store
#: answering SlowDown, past a transaction's timeout and a member's session; 4 take a few
#: seconds, and what still fails is retried by :func:`~runtime.storage.retries.retried`
#: where that is safe, or fails the batch, which is aborted and tried again).
S3_ATTEMPTS = 4


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's filesystem of ``uri`` and the path in it, with the registered options."""
    options = _OPTIONS.get(_bucket(uri))
    if not options or not uri.startswith(("s3://", "s3a://")):
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, str(path)
    kwargs: dict[str, object] = {}
    for name, value in options.items():
        lowered = name.lower()
        if lowered in _S3_ARGUMENTS:
            kwargs[_S3_ARGUMENTS[lowered]] = value
        elif lowered in _S3_ENDPOINTS:
            endpoint = urlsplit(value)
            kwargs["endpoint_override"] = endpoint.netloc or value
            kwargs["scheme"] = endpoint.scheme or "https"
    parts = urlsplit(uri)
    # the AWS SDK's standard retries (5xx, SlowDown, resets), a few seconds at most
    kwargs["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=S3_ATTEMPTS)
    kwargs["allow_delayed_open"] = True
    return pafs.S3FileSystem(**kwargs), f"{parts.netloc}{parts.path}"


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
                fs, base = _filesystem(text)
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
        """List the direct children of ``path`` (empty when it does not exist).

        Other processes change directories while they are listed (an application
        creates a topic's log, the log cleaner removes Delta commit files, the vacuum
        merged data files): a directory not there when it is opened lists as empty,
        and an entry gone between the directory read and its stat is not listed, as if
        the listing had come a moment earlier or later. (pyarrow's local listing raised
        when the directory appeared between its open and its existence check.)
        """
        if self.is_local:
            return _list_local(path)
        return retried(lambda: self._list_remote(path), what=f"list {path}")

    def _list_remote(self, path: str) -> list[pafs.FileInfo]:
        try:
            return list(self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))
        except Exception as exc:
            raise StorageError(f"cannot list {path}: {exc}") from exc

    def list_subdirs(self, path: str) -> list[pafs.FileInfo]:
        """List the directories directly under ``path``; a file there (an editor's backup,
        ``.DS_Store``) is skipped and named in a warning, never read as a directory."""
        found = []
        for info in self.list_dir(path):
            if info.type == pafs.FileType.Directory:
                found.append(info)
            else:
                log.warning(
                    "skipping %s: a stray file where only directories belong; move it away",
                    info.path,
                )
        return found

    def read_bytes(self, path: str) -> bytes | None:
        """Return a file's content, or None when it does not exist. On an object store a
        failed read is tried again (:mod:`runtime.storage.retries`): the AWS SDK does not
        retry a response cut off in its body."""
        if self.is_local:
            return self._read_bytes(path)
        return retried(lambda: self._read_bytes(path), what=f"read {path}")

    def _read_bytes(self, path: str) -> bytes | None:
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
        if not self.is_local:  # one PUT, whole or nothing: again after a 503 or a reset
            retried(lambda: self._put(path, data), what=f"write {path}")
            return
        try:
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
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
            with self._open_output(path) as out:
                yield out
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc

    def write_file_bytes(self, path: str, data: bytes | pa.Buffer) -> int:
        """Write a new file at ``path`` (parent directories created) in one write; return
        its size. Unlike :meth:`write_bytes` it is not renamed into place: for files no
        reader looks for until a commit names them (data files). On an object store a
        failed PUT is sent again (a data file's name is its own: the same bytes again)."""
        if not self.is_local:
            retried(lambda: self._put(path, data), what=f"write {path}")
        else:
            try:
                with self._open_output(path) as out:
                    out.write(data)
            except OSError as exc:
                raise StorageError(f"cannot write {path}: {exc}") from exc
        return len(data) if isinstance(data, bytes) else data.size

    def _put(self, path: str, data: bytes | pa.Buffer) -> None:
        """One PUT of ``data`` at ``path`` on an object store (a plain write, not a
        conditional one: sending it again leaves the same object)."""
        try:
            with self._open_output(path) as out:
                out.write(data)
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc}") from exc

    def _open_output(self, path: str) -> pafs.NativeFile:
        parent = path.rsplit("/", 1)[0]
        if not self.is_local:
            # an object store has no directories: a key's prefixes are seen as directories
            # once it exists, and the marker objects a create_dir would PUT (one per level,
            # after a HEAD of the bucket) cost a dozen requests per commit for nothing
            return self.fs.open_output_stream(path, compression=None)
        try:  # a local directory usually exists: no mkdir for every file
            return self.fs.open_output_stream(path, compression=None)
        except FileNotFoundError:
            self.fs.create_dir(parent, recursive=True)
            return self.fs.open_output_stream(path, compression=None)

    def _info(self, path: str) -> pafs.FileInfo:
        if self.is_local:
            return self._stat(path)
        return retried(lambda: self._stat(path), what=f"stat {path}")

    def _stat(self, path: str) -> pafs.FileInfo:
        try:
            return self.fs.get_file_info(path)
        except Exception as exc:
            raise StorageError(f"cannot stat {path}: {exc}") from exc

    def __repr__(self) -> str:
        return f"StorageRoot({self.uri!r})"


def _list_local(path: str) -> list[pafs.FileInfo]:
    """List a local directory, skipping entries deleted while it is read."""
    infos: list[pafs.FileInfo] = []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    st = entry.stat()
                except FileNotFoundError:
                    continue
                if entry.is_dir():
                    infos.append(
                        pafs.FileInfo(entry.path, pafs.FileType.Directory, mtime_ns=st.st_mtime_ns)
                    )
                else:
                    infos.append(
                        pafs.FileInfo(
                            entry.path, pafs.FileType.File, mtime_ns=st.st_mtime_ns, size=st.st_size
                        )
                    )
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StorageError(f"cannot list {path}: {exc}") from exc
    return infos


def storage_message(exc: BaseException) -> str:
    """Return a storage library's error as one plain line: delta-rs prints its causes on
    indented lines with terminal colour codes, which a log line or a CLI error must not
    carry."""
    text = _ANSI.sub("", str(exc))
    parts = (line.strip().lstrip("\u21b3").strip() for line in text.splitlines())
    return "; ".join(p for p in parts if p)
