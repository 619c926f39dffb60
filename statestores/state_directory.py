"""Kafka's ``StateDirectory``: ``state.dir/<application.id>/<task id>/``, locks and cleanup.

A task directory is locked with ``fcntl.flock`` on its ``.lock`` file while a process owns
the task: a second process (another worker, another instance) gets a
:class:`TaskDirectoryLockedError` instead of opening the same RocksDB. The lock dies with
the process, so a SIGKILL-ed owner never leaves a stale lock. Directories of tasks this
process does not own and that nobody locks are deleted once they have been idle for
``state.cleanup.delay.ms`` (Kafka's cleaner).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import time
from typing import IO

from common.errors import StreamsError

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
CLEANUP_DELAY_KEY = "state.cleanup.delay.ms"
DEFAULT_CLEANUP_DELAY_MS = 600_000
_TASK_ID = re.compile(r"\d+_\d+")


class TaskDirectoryLockedError(StreamsError):
    """Another process holds the lock of a task's state directory (it owns the task). Wait
    for it to release the task (rebalance), or stop the other process; two processes must
    never open the same stores."""


class StateDirectory:
    """Manages the task directories of one application under ``state.dir``.

    Args:
        state_dir: the ``state.dir`` configuration.
        application_id: the application id.
    """

    def __init__(self, state_dir: str, application_id: str) -> None:
        self.app_dir = os.path.join(os.path.abspath(state_dir), application_id)
        self._locks: dict[str, IO[bytes]] = {}

    def task_dir(self, task_id: str) -> str:
        """Return (and create) the directory of ``task_id``."""
        path = os.path.join(self.app_dir, task_id)
        os.makedirs(path, exist_ok=True)
        return path

    def lock(self, task_id: str, *, wait_ms: int = 0) -> str:
        """Lock the directory of ``task_id`` for this process; return its path.

        Args:
            task_id: the task.
            wait_ms: how long to wait for another process to release it (a task being
                handed over: its previous holder closes it, or dies).

        Raises:
            TaskDirectoryLockedError: another process holds the lock.
        """
        path = self.task_dir(task_id)
        if task_id in self._locks:
            return path
        handle = open(os.path.join(path, LOCK_FILE), "ab")  # noqa: SIM115 - held until unlock
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                handle.close()
                raise TaskDirectoryLockedError(
                    f"the state directory of task {task_id} ({path}) is locked by another "
                    f"process (waited {wait_ms} ms); it still owns the task: stop the other "
                    "instance using this state.dir, or give this one its own state.dir"
                ) from None
        self._locks[task_id] = handle
        os.utime(path)
        return path

    def unlock(self, task_id: str) -> None:
        """Release the lock of ``task_id`` (no error if not held)."""
        handle = self._locks.pop(task_id, None)
        if handle is not None:
            os.utime(os.path.dirname(handle.name))
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            handle.close()

    def locked(self) -> set[str]:
        """Return the task ids this process holds locks for."""
        return set(self._locks)

    def task_ids(self) -> list[str]:
        """Return the task ids that have a directory."""
        if not os.path.isdir(self.app_dir):
            return []
        return sorted(n for n in os.listdir(self.app_dir) if _TASK_ID.fullmatch(n))

    def wipe(self, task_id: str) -> None:
        """Delete everything in the task directory except its lock file."""
        path = self.task_dir(task_id)
        for name in os.listdir(path):
            if name == LOCK_FILE:
                continue
            full = os.path.join(path, name)
            if os.path.isdir(full):
                shutil.rmtree(full, ignore_errors=True)
            else:
                os.remove(full)

    def clean_removed_tasks(self, cleanup_delay_ms: int = DEFAULT_CLEANUP_DELAY_MS) -> list[str]:
        """Delete directories of tasks not locked here, unlocked elsewhere, and idle for
        more than ``cleanup_delay_ms``; return their task ids."""
        now = time.time()
        removed = []
        for task_id in self.task_ids():
            if task_id in self._locks:
                continue
            path = os.path.join(self.app_dir, task_id)
            if (now - os.path.getmtime(path)) * 1000 <= cleanup_delay_ms:
                continue
            try:
                self.lock(task_id)
            except TaskDirectoryLockedError:
                continue
            try:
                shutil.rmtree(path, ignore_errors=True)
            finally:
                handle = self._locks.pop(task_id)
                handle.close()
            removed.append(task_id)
            log.info("[state-dir] removed idle task directory %s", path)
        return removed

    def close(self) -> None:
        """Release every lock."""
        for task_id in list(self._locks):
            self.unlock(task_id)
