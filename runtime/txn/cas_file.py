"""The file backend of the compare-and-swap log: version files in a POSIX directory.

:class:`FileLog` stores version ``V`` as ``<dir>/<V:020d>.json`` on a local or shared POSIX
filesystem and appends with link-after-fsync, under a shared ``flock`` on ``<dir>/.lock``
that compaction and deletion take exclusively; the ``flock`` helpers and the directory
fsync are here too.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from common.errors import CoordinatorError
from runtime.txn.cas_backend import VERSION_FILE, parse_document

_TMP_FILE = re.compile(r"^\.\d{20}\.[0-9a-f]{32}\.tmp$")
_LOCK_NAME = ".lock"
_LOCK_WAIT_SECONDS = 0.5
#: A shared lock not granted this long is said in a warning (then every 30 s): another
#: process holds the log exclusively (compacting or deleting it) or died holding it.
_LOCK_WARN_SECONDS = 5.0

log = logging.getLogger(__name__)


class _LogBusyError(CoordinatorError):
    """Appenders held the log too long for compaction or deletion to lock it."""


class FileLog:
    """Version files in a POSIX directory, appended with link-after-fsync.

    The document goes to a unique temporary file in the same directory, is fsynced, and is
    then hard-linked to its version name. ``link(2)`` is atomic and fails with ``EEXIST``
    when the name is taken, so exactly one writer wins, and a reader never sees a
    half-written version (it was complete before it got its name). The directory is fsynced
    after a won link. (On NFS a retransmitted ``link`` may report ``EEXIST`` although it
    worked: the temporary file's link count tells.) :class:`~runtime.txn.cas_log.CasLog`
    remembers the newest version seen and probes forward with ``stat``; a cold reader lists
    the directory once.

    Compaction cannot free the name a stalled writer is about to take: an append holds a
    shared ``flock`` on ``<dir>/.lock`` while it checks that ``expected_version`` still
    exists and links, and compaction and :meth:`delete` hold it exclusively (on NFS, Linux
    maps ``flock`` to NFS byte-range locks).
    """

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
        return sorted(int(m.group(1)) for n in self._names() if (m := VERSION_FILE.match(n)))

    def has(self, version: int) -> bool:
        return os.path.exists(self._file(version))

    def has_after(self, version: int) -> bool:
        return self.has(version + 1)

    def document(self, version: int) -> dict[str, Any] | None:
        path = self._file(version)
        try:
            with open(path, "rb") as stream:
                return parse_document(stream.read(), path)
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
            _flock(fd, exclusive, deadline, self._lock_path)
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


def _flock(fd: int, exclusive: bool, deadline: float, path: str) -> None:
    """Lock ``fd`` (the lock file ``path``); an exclusive lock is polled for until
    ``deadline``, a shared one for as long as it takes, said in a warning after
    :data:`_LOCK_WARN_SECONDS`.

    Raises:
        _LogBusyError: the exclusive lock was not granted in time.
    """
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    started = time.monotonic()
    warn_at = started + _LOCK_WARN_SECONDS
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            now = time.monotonic()
            if exclusive and now > deadline:
                raise _LogBusyError("appenders hold the log; try again later") from None
            if now >= warn_at:
                log.warning(
                    "waiting %.0f s for the lock %s: another process holds it exclusively "
                    "(compacting or deleting this log); if none should, find it with "
                    "'fuser %s'",
                    now - started,
                    path,
                    path,
                )
                warn_at = now + 30.0
            time.sleep(0.002 if exclusive else 0.01)


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
