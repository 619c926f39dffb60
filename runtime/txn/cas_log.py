"""A durable compare-and-swap log: versions 0, 1, 2, ... each holding one JSON document.

:class:`CasLog` carries the transaction log (one per transactional id), the producer-id
block allocator and the group coordinator. Appending version ``V + 1`` is a put-if-absent:
when many processes race, exactly one wins and the others learn that they lost (``append``
returns False; they re-read and decide again). pyarrow.fs has no conditional put, so the
backend is chosen from ``StorageRoot.is_local``: version files in a POSIX directory
(:mod:`runtime.txn.cas_file`) or a small Delta table for object stores
(:mod:`runtime.txn.cas_delta`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from deltalake.exceptions import DeltaError

from common.errors import CoordinatorError, StorageError
from runtime.storage.fs import StorageRoot
from runtime.storage.retries import retried
from runtime.txn.cas_backend import READ_ATTEMPTS, VersionStore, Void
from runtime.txn.cas_delta import DeltaLog
from runtime.txn.cas_file import FileLog

Backend = Literal["file", "delta"]


class CasLog:
    """A compare-and-swap log of JSON documents under ``root``/``path_parts``.

    Compaction keeps the newest ``keep`` versions and never removes the newest. Deleting a
    version frees its name, and put-if-absent cannot tell a freed name from a new one: a
    writer that read version ``V`` and stalled while others appended and compacted could
    re-create ``V + 1``. The file backend rules that out with a lock; the delta backend
    deletes only versions older than ``retention_seconds`` (see their class docstrings).

    Args:
        root: the storage root.
        path_parts: the log's directory below the root.
        keep: how many of the newest versions :meth:`compact` keeps (at least 1).
        backend: ``"file"`` or ``"delta"``; default ``"file"`` for local roots, else
            ``"delta"`` (which also works on local roots).
        retention_seconds: delta backend only: compaction deletes a version only when it is
            also older than this (see :class:`~runtime.txn.cas_delta.DeltaLog`).

    Raises:
        ValueError: ``keep`` < 1, no ``path_parts``, or ``"file"`` on a non-local root.
    """

    def __init__(
        self,
        root: StorageRoot,
        path_parts: tuple[str, ...],
        *,
        keep: int = 10,
        backend: Backend | None = None,
        retention_seconds: float = 3600.0,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        if not path_parts:
            raise ValueError("path_parts must name a directory below the root")
        chosen: Backend = backend or ("file" if root.is_local else "delta")
        if chosen == "file" and not root.is_local:
            raise ValueError(f"the file backend needs a local root, not {root.uri}")
        self.keep = keep
        self.backend = chosen
        self.location = root.uri_of(*path_parts)
        self._latest = -1  # newest version seen; -1 = none (cold: list once)
        self._log: VersionStore = (
            FileLog(root.path(*path_parts))
            if chosen == "file"
            else DeltaLog(root, path_parts, retention_seconds)
        )

    def read_latest(self) -> tuple[int, dict[str, Any]] | None:
        """Return the newest version and its document, or None when the log is empty.

        Raises:
            CoordinatorError: the storage failed, or a version holds no valid document.
        """
        with self._errors("read"):
            return retried(self._read_latest, what=f"read {self.location}")

    def _read_latest(self) -> tuple[int, dict[str, Any]] | None:
        for _ in range(READ_ATTEMPTS):
            if self._latest < 0:
                self._latest = max(self._log.versions(), default=-1)
            version = self._latest
            while self._log.has(version + 1):
                version += 1
            if version < 0:
                return None
            document = self._valid_document(version)
            self._latest = -1 if document is None else version  # None: compacted, list
            if document is not None:
                return version, document
        raise CoordinatorError(f"{self.location}: versions kept vanishing while reading")

    def _valid_document(self, version: int) -> dict[str, Any] | None:
        """Return the document of ``version``, or of the newest valid version below it when
        it is void; None when one of them was compacted away meanwhile."""
        for at in range(version, -1, -1):
            document = self._log.document(at)
            if not isinstance(document, Void):
                return document
        raise CoordinatorError(f"{self.location}: every version up to {version} is void")

    def append(
        self, expected_version: int, document: dict[str, Any], *, durable: bool = True
    ) -> bool:
        """Write version ``expected_version + 1`` if it does not exist yet.

        ``durable=False`` skips the fsyncs on a local filesystem: the version is visible to
        every process at once and survives a process crash, but a power loss may forget or
        tear it (delta-rs does not fsync Delta commits either). Use it only for versions that
        recovery can re-derive; a torn newest version is reported by name, to be deleted.

        ``expected_version=-1`` creates version 0 of an empty log. Returns True if this call
        wrote the version; False if another writer did, or ``expected_version`` is not in
        the log (compacted away, deleted, never written): re-read and decide again.

        Raises:
            CoordinatorError: the storage failed; nothing was written.
            TypeError: the document is not JSON-serialisable.
            ValueError: ``expected_version`` < -1.
        """
        if expected_version < -1:
            raise ValueError(f"expected_version must be -1 or more, got {expected_version}")
        data = json.dumps(document, separators=(",", ":"))
        with self._errors("append to"):
            # on an object store an error before the write, or one whose read-back showed
            # it did not land, is safe to try again; an unknown outcome is not (and a local
            # file system's errors are the disk's)
            won = (
                retried(
                    lambda: self._log.append(expected_version, data, durable),
                    what=f"append to {self.location}",
                    never=(CoordinatorError,),
                )
                if self.backend == "delta"
                else self._log.append(expected_version, data, durable)
            )
        if won:
            self._latest = expected_version + 1
        return won

    def versions(self) -> list[int]:
        """Return the versions present, oldest first.

        Raises:
            CoordinatorError: the storage failed.
        """
        with self._errors("list"):
            return retried(self._log.versions, what=f"list {self.location}")

    def compact(self) -> None:
        """Delete all but the newest ``keep`` versions (never the newest one).

        Best effort: skipped when appenders keep the log busy; a later call catches up.

        Raises:
            CoordinatorError: the storage failed.
        """
        with self._errors("compact"):
            self._log.compact(self.keep)

    def delete(self) -> None:
        """Remove the whole log (no error when it does not exist).

        Raises:
            CoordinatorError: the storage failed, or appenders kept the log busy.
        """
        self._latest = -1
        with self._errors("delete"):
            self._log.delete()

    def has_after(self, version: int) -> bool:
        """Return True if a (valid) version newer than ``version`` was written (one stat:
        cheap enough for a fencing check on every send).

        Raises:
            CoordinatorError: the storage failed.
        """
        with self._errors("read"):
            return retried(lambda: self._log.has_after(version), what=f"read {self.location}")

    def exists(self) -> bool:
        """Return True if the log holds at least one version.

        Raises:
            CoordinatorError: the storage failed.
        """
        return bool(self.versions())

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except CoordinatorError:
            raise
        except (OSError, StorageError, DeltaError) as exc:
            raise CoordinatorError(f"cannot {what} the log {self.location}: {exc}") from exc

    def __repr__(self) -> str:
        return f"CasLog({self.location!r}, backend={self.backend!r}, keep={self.keep})"
