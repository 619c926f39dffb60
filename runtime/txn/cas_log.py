"""A durable compare-and-swap log: versions 0, 1, 2, ... each holding one JSON document.

Appending version ``V + 1`` is a put-if-absent: when many processes race, exactly one wins
and the others learn that they lost (``append`` returns False; they re-read and decide
again). It carries the transaction log (one :class:`CasLog` per transactional id), the
producer-id block allocator and the group coordinator.

pyarrow.fs has no conditional put, so the backend is chosen from ``StorageRoot.is_local``:

* **file** (local or shared POSIX filesystem): version ``V`` is ``<dir>/<V:020d>.json``. The
  document goes to a unique temporary file in the same directory, is fsynced, and is then
  hard-linked to its version name. ``link(2)`` is atomic and fails with ``EEXIST`` when the
  name is taken, so exactly one writer wins, and a reader never sees a half-written version
  (it was complete before it got its name). The directory is fsynced after a won link. (On
  NFS a retransmitted ``link`` may report ``EEXIST`` although it worked: the temporary
  file's link count tells.) Readers remember the newest version seen and probe forward with
  ``stat``; a cold reader lists the directory once.
* **delta** (object stores: ``s3://``, ``gs://``, ``abfs://``): the log is a small Delta
  table written by delta-rs, whose log stores implement put-if-absent (S3 conditional
  writes or a DynamoDB lock, GCS and Azure preconditions). Our version ``V`` *is* delta
  version ``V``: version 0 is the CREATE commit and every later one an action-less commit
  made from the table loaded at ``V - 1`` with ``max_commit_retries=0`` (the CREATE too:
  left to retry, a losing CREATE lands as version 1); the document rides
  in ``commitInfo["cas.document"]``, with a random nonce so that a commit reported failed
  but landed (a retried PUT) is still known as ours. Documents are read straight from
  ``_delta_log/<V:020d>.json``; delta-rs writes a checkpoint every 20 versions.
  ``max_commit_retries=0`` is not quite a put-if-absent: delta-rs looks for newer versions
  before its first attempt and moves an action-less commit, which cannot conflict, past
  them. So each commit also records the version it was meant for (``cas.version``); one
  that landed elsewhere is *void*: its writer is told it lost, readers skip it (the newest
  version's document is then the newest valid one below it), and compaction always keeps
  the newest valid version.

Compaction keeps the newest ``keep`` versions and never removes the newest. Deleting a
version frees its name, and put-if-absent cannot tell a freed name from a new one: a writer
that read version ``V`` and stalled while others appended and compacted could re-create
``V + 1``. The file backend rules that out: an append holds a shared ``flock`` on
``<dir>/.lock`` while it checks that ``expected_version`` still exists and links, and
compaction and ``delete()`` hold it exclusively (on NFS, Linux maps ``flock`` to NFS
byte-range locks). Object stores have no such lock, so the
delta backend (like Delta Lake's own log retention) deletes only versions older than
``retention_seconds``; a writer stalled longer than that between its read and its commit
(or between its commit and checking where it landed) is the one case it cannot fence.
"""

from __future__ import annotations

import fcntl
import json
import operator
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, Literal

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from runtime.storage.fs import StorageRoot
from streams.errors import CoordinatorError, StorageError

#: Key of the document in a delta commit's commitInfo.
DOCUMENT_KEY = "cas.document"
#: Key of the writer's nonce in a delta commit's commitInfo.
NONCE_KEY = "cas.nonce"
#: Key of the version a delta commit was meant for; a commit that landed elsewhere is void.
TARGET_KEY = "cas.version"


class _Void:
    """A delta version whose commit landed past the version it was written for."""

    def __repr__(self) -> str:
        return "VOID"


#: The document of a void version: it holds nothing; read the version below it.
VOID = _Void()

Backend = Literal["file", "delta"]

_VERSION_FILE = re.compile(r"^(\d{20})\.json$")
_LOG_FILE = re.compile(r"^(\d{20})\.")  # any delta log file of a version (commit, checkpoint)
_TMP_FILE = re.compile(r"^\.\d{20}\.[0-9a-f]{32}\.tmp$")
_LOCK_NAME = ".lock"
_LOCK_WAIT_SECONDS = 0.5
_READ_ATTEMPTS = 5
_SCHEMA = pa.schema([("x", pa.int32())])
_TABLE_CONFIG: dict[str, str | None] = {"delta.checkpointInterval": "20"}
_HOOKS = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
_key = operator.itemgetter(0)


class CasLog:
    """A compare-and-swap log of JSON documents under ``root``/``path_parts``.

    Args:
        root: the storage root.
        path_parts: the log's directory below the root.
        keep: how many of the newest versions :meth:`compact` keeps (at least 1).
        backend: ``"file"`` or ``"delta"``; default ``"file"`` for local roots, else
            ``"delta"`` (which also works on local roots).
        retention_seconds: delta backend only: compaction deletes a version only when it is
            also older than this (see the module docstring).

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
        self._log: _FileLog | _DeltaLog = (
            _FileLog(root.path(*path_parts))
            if chosen == "file"
            else _DeltaLog(root, path_parts, retention_seconds)
        )

    def read_latest(self) -> tuple[int, dict[str, Any]] | None:
        """Return the newest version and its document, or None when the log is empty.

        Raises:
            CoordinatorError: the storage failed, or a version holds no valid document.
        """
        with self._errors("read"):
            for _ in range(_READ_ATTEMPTS):
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
            if not isinstance(document, _Void):
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
            won = self._log.append(expected_version, data, durable)
        if won:
            self._latest = expected_version + 1
        return won

    def versions(self) -> list[int]:
        """Return the versions present, oldest first.

        Raises:
            CoordinatorError: the storage failed.
        """
        with self._errors("list"):
            return self._log.versions()

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
            return self._log.has_after(version)

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


def _parse_document(raw: bytes | str, where: str) -> dict[str, Any]:
    """Decode one version's document.

    Raises:
        CoordinatorError: it is not a JSON object (the version is corrupt).
    """
    try:
        document = json.loads(raw)
    except ValueError as exc:
        raise CoordinatorError(f"{where}: corrupt version, not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise CoordinatorError(f"{where}: corrupt version, not a JSON object")
    return document


class _LogBusyError(CoordinatorError):
    """Appenders held the log too long for compaction or deletion to lock it."""


class _FileLog:
    """Version files in a POSIX directory, appended with link-after-fsync."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self._lock_path = os.path.join(directory, _LOCK_NAME)
        self._fd: int | None = None

    def __del__(self) -> None:
        if self._fd is not None:
            with suppress(OSError):
                os.close(self._fd)

    def _file(self, version: int) -> str:
        return os.path.join(self.dir, f"{version:020d}.json")

    def _names(self) -> list[str]:
        try:
            return os.listdir(self.dir)
        except FileNotFoundError:
            return []

    def versions(self) -> list[int]:
        return sorted(int(m.group(1)) for n in self._names() if (m := _VERSION_FILE.match(n)))

    def has(self, version: int) -> bool:
        return os.path.exists(self._file(version))

    def has_after(self, version: int) -> bool:
        return self.has(version + 1)

    def document(self, version: int) -> dict[str, Any] | None:
        path = self._file(version)
        try:
            with open(path, "rb") as stream:
                return _parse_document(stream.read(), path)
        except FileNotFoundError:
            return None

    @contextmanager
    def _locked(self, exclusive: bool) -> Iterator[bool]:
        """Hold the log's lock; yield False (no lock) when the directory does not exist.

        Raises:
            _LogBusyError: an exclusive lock was not granted within ``_LOCK_WAIT_SECONDS``.
        """
        deadline = time.monotonic() + _LOCK_WAIT_SECONDS
        while True:
            fd = self._fd
            if fd is None:  # the lock file stays open between appends (one open saved)
                try:
                    fd = self._fd = os.open(self._lock_path, os.O_RDONLY | os.O_CREAT, 0o644)
                except FileNotFoundError:
                    yield False
                    return
            _flock(fd, exclusive, deadline)
            if _same_file(fd, self._lock_path):
                try:
                    yield True
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                return
            fcntl.flock(fd, fcntl.LOCK_UN)  # deleted meanwhile: open the new one
            os.close(fd)
            self._fd = None

    def append(self, expected_version: int, data: str, durable: bool) -> bool:
        with self._locked(exclusive=False) as locked:
            if locked:
                return self._append_locked(expected_version, data, durable)
        if expected_version >= 0:
            return False  # the log was deleted
        os.makedirs(self.dir, exist_ok=True)
        _fsync_dir(os.path.dirname(self.dir))
        with self._locked(exclusive=False) as locked:
            return locked and self._append_locked(expected_version, data, durable)

    def _append_locked(self, expected_version: int, data: str, durable: bool) -> bool:
        if expected_version < 0:
            if self.versions():
                return False
        elif not self.has(expected_version):
            return False  # compaction cannot run now, so the successor's name was never freed
        target = expected_version + 1
        tmp = os.path.join(self.dir, f".{target:020d}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with open(fd, "w", encoding="utf-8", closefd=False) as out:
                out.write(data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, self._file(target))
            won = True
        except FileExistsError:
            won = os.stat(tmp).st_nlink > 1  # NFS: a retried link that had worked
        finally:
            with suppress(FileNotFoundError):
                os.unlink(tmp)
        if won and durable:
            _fsync_dir(self.dir)
        return won

    def compact(self, keep: int) -> None:
        with suppress(_LogBusyError), self._locked(exclusive=True) as locked:
            if not locked:
                return
            for version in self.versions()[:-keep]:
                with suppress(FileNotFoundError):
                    os.unlink(self._file(version))
            for name in self._names():  # no appender is running: temp files are orphans
                if _TMP_FILE.match(name):
                    with suppress(FileNotFoundError):
                        os.unlink(os.path.join(self.dir, name))
            _fsync_dir(self.dir)

    def delete(self) -> None:
        with self._locked(exclusive=True) as locked:
            if locked:
                shutil.rmtree(self.dir)


def _flock(fd: int, exclusive: bool, deadline: float) -> None:
    """Lock ``fd``; an exclusive lock is polled for until ``deadline``.

    Raises:
        _LogBusyError: the exclusive lock was not granted in time.
    """
    if not exclusive:
        fcntl.flock(fd, fcntl.LOCK_SH)
        return
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise _LogBusyError("appenders hold the log; try again later") from None
            time.sleep(0.002)


def _same_file(fd: int, path: str) -> bool:
    """Return True if ``path`` still names the file open as ``fd`` (not deleted meanwhile)."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _DeltaLog:
    """A Delta table whose commits are the versions; delta-rs does the put-if-absent."""

    def __init__(self, root: StorageRoot, parts: tuple[str, ...], retention: float) -> None:
        self.root = root
        self.uri = root.uri_of(*parts)
        self.path = root.path(*parts)
        self.retention = retention
        self._table: DeltaTable | None = None

    def _commit_file(self, version: int) -> str:
        return f"{self.path}/_delta_log/{version:020d}.json"

    def versions(self) -> list[int]:
        names = (info.base_name for info in self.root.list_dir(f"{self.path}/_delta_log"))
        return sorted(int(m.group(1)) for name in names if (m := _VERSION_FILE.match(name)))

    def has(self, version: int) -> bool:
        return self.root.exists(self._commit_file(version))

    def has_after(self, version: int) -> bool:
        at = version + 1
        while self.has(at):
            if not isinstance(self.document(at), _Void):
                return True  # valid, or compacted meanwhile (so newer ones exist)
            at += 1
        return False

    def document(self, version: int) -> dict[str, Any] | _Void | None:
        info = self._commit_info(version)
        if info is None:
            return None
        target = info.get(TARGET_KEY)  # absent in commits written before it was recorded
        if target is not None and str(target) != str(version):
            return VOID
        raw = info.get(DOCUMENT_KEY)
        if not isinstance(raw, str):
            raise CoordinatorError(f"{self._commit_file(version)}: no {DOCUMENT_KEY!r} in it")
        return _parse_document(raw, self._commit_file(version))

    def _commit_info(self, version: int) -> dict[str, Any] | None:
        path = self._commit_file(version)
        raw = self.root.read_bytes(path)
        if raw is None:
            return None
        for line in raw.splitlines():
            if b'"commitInfo"' in line:
                info = _parse_document(line, path).get("commitInfo")
                if isinstance(info, dict):
                    return info
        raise CoordinatorError(f"{path}: corrupt version, no commitInfo")

    def _load(self) -> DeltaTable | None:
        """Return the table at its newest version, or None if it does not exist.

        Raises:
            DeltaError: it could not be loaded (a file vanished under a compaction, thrice).
        """
        if self._table is not None:
            with suppress(DeltaError):
                self._table.update_incremental()
                return self._table
        self._table = None
        for attempt in range(_READ_ATTEMPTS):
            try:
                self._table = DeltaTable(self.uri)
                break
            except TableNotFoundError:
                break
            except DeltaError:
                if attempt == _READ_ATTEMPTS - 1:
                    raise
        return self._table

    def append(self, expected_version: int, data: str, durable: bool) -> bool:
        del durable  # an object-store PUT is durable when it returns
        nonce = uuid.uuid4().hex
        target = expected_version + 1
        metadata = {DOCUMENT_KEY: data, NONCE_KEY: nonce, TARGET_KEY: str(target)}
        props = CommitProperties(custom_metadata=metadata, max_commit_retries=0)
        try:
            if expected_version < 0:  # "ignore" returns quietly when the table exists
                self._table = DeltaTable.create(
                    self.uri,
                    _SCHEMA,
                    mode="ignore",
                    configuration=_TABLE_CONFIG,
                    commit_properties=props,
                    post_commithook_properties=_HOOKS,
                )
                return self._landed(target, nonce)
            table = self._table
            if table is None or table.version() != expected_version:
                table = self._load()
            if table is None or table.version() != expected_version:
                return False
            table.create_write_transaction(
                [], "append", _SCHEMA, commit_properties=props, post_commithook_properties=_HOOKS
            )
        except CommitFailedError:
            return self._landed(target, nonce)
        except DeltaError:
            if self._landed(target, nonce):
                return True
            raise
        return self._committed_at(target, nonce)

    def _landed(self, version: int, nonce: str) -> bool:
        info = self._commit_info(version)
        return info is not None and info.get(NONCE_KEY) == nonce

    def _committed_at(self, target: int, nonce: str) -> bool:
        """After delta-rs reported the commit done: True if it landed at ``target``, False
        if delta-rs moved it past (void). When ``target`` was compacted away meanwhile,
        the commit is looked for among the newer versions; compaction's retention keeps
        both from vanishing before this check (see the module docstring)."""
        info = self._commit_info(target)
        if info is not None:
            return info.get(NONCE_KEY) == nonce
        at = target + 1
        while (later := self._commit_info(at)) is not None:
            if later.get(NONCE_KEY) == nonce:
                return False
            at += 1
        return True

    def compact(self, keep: int) -> None:
        files = [
            (int(m.group(1)), info)
            for info in self.root.list_dir(f"{self.path}/_delta_log")
            if (m := _LOG_FILE.match(info.base_name))
        ]
        commits = sorted((c for c in files if _VERSION_FILE.match(c[1].base_name)), key=_key)
        if len(commits) <= keep:
            return
        newest_valid = self._newest_valid([version for version, _ in commits])
        if newest_valid is None:
            return  # another compactor is deleting: leave it to that one
        cut = min(commits[-keep][0], newest_valid)  # the oldest version kept
        too_young = time.time() - self.retention
        for version, info in commits:  # delete a prefix only: readers rely on no gaps
            if version >= cut or info.mtime is None or info.mtime.timestamp() > too_young:
                cut = version
                break
        if cut <= commits[0][0]:
            return
        try:
            DeltaTable(self.uri, version=cut).create_checkpoint()  # the log now starts at cut
        except DeltaError:
            if self.versions()[:1] > [commits[0][0]]:
                return  # another compactor is deleting: leave it to that one
            raise
        for _version, path in sorted((v, i.path) for v, i in files if v < cut):
            self.root.delete_file(path)

    def _newest_valid(self, versions: list[int]) -> int | None:
        """Return the newest of ``versions`` that is not void (None: one vanished)."""
        for version in reversed(versions):
            document = self.document(version)
            if document is None:
                return None
            if not isinstance(document, _Void):
                return version
        raise CoordinatorError(f"{self.uri}: every version of the log is void")

    def delete(self) -> None:
        self._table = None
        self.root.delete_dir(self.path)
