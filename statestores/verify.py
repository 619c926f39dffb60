"""Verify a RocksDB store's blocks in the background, so that opening it costs nothing.

RocksDB checks a block's checksum when a read loads it: a point read of a damaged block
fails (:func:`statestores.base.rocksdb_error`), and so does every range read here, whose
iterator's status is checked when it ends (an iterator stops at a damaged block without an
error, and only its status tells). What no read has touched yet is checked by
:class:`BackgroundVerification`: when a store opens, a RocksDB checkpoint of it (hard links
to its immutable SST files, made in milliseconds) is read block by block by another
process, so a store of any size opens at once and the scan costs the task's threads
nothing. A damage found is kept as a marker file in the store's directory: the store's next
write fails with :class:`~common.errors.StoreCorruptedError` (the batch is aborted, the task
rebuilt: see :func:`runtime.tasks.manager.corruption_of`), and the next open of the
directory finds the marker and rebuilds the store from its snapshot and changelog, as for a
damage found by a read.

    python -m statestores.verify CHECKPOINT_DIR   # exit 0: whole; 3: damaged (stderr says)
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import queue
import shutil
import subprocess
import sys
import threading
import uuid
from typing import Any

from rocksdict import AccessType, Checkpoint, Options, Rdict

log = logging.getLogger(__name__)

#: The marker a damaged store's directory holds (RocksDB's own files never take this name).
DAMAGE_MARKER = "STREAMS-DAMAGED"
_DAMAGED_EXIT = 3


def scan(handle: Any) -> str | None:
    """Iterate over every entry of ``handle`` (a database or column family); return the
    error that stopped it, if any (an iterator ends at a corrupt block: only its status
    says so)."""
    it = handle.iter()
    it.seek_to_first()
    step, valid = it.next, it.valid
    while valid():
        step()
    try:
        it.status()
    except Exception as exc:
        return str(exc)
    return None


def verify_directory(path: str) -> str | None:
    """Read every block of the RocksDB database at ``path`` (read-only, every column
    family); return what is damaged, or None."""
    try:
        families = Rdict.list_cf(path)
        options = {name: Options(raw_mode=True) for name in families if name != "default"}
        db = Rdict(
            path,
            Options(raw_mode=True),
            column_families=options or None,
            access_type=AccessType.read_only(),
        )
    except Exception as exc:
        return f"cannot open it: {exc}"
    try:
        for name in families:
            handle = db if name == "default" else db.get_column_family(name)
            problem = scan(handle)
            if problem is not None:
                return problem
        return None
    finally:
        db.close()


def damage_of(path: str) -> str | None:
    """Return the damage a background verification recorded for the store at ``path``."""
    try:
        with open(os.path.join(path, DAMAGE_MARKER), encoding="utf-8") as f:
            return f.read().strip() or "damaged"
    except FileNotFoundError:
        return None


class BackgroundVerification:
    """Verify the open database ``db`` at ``path`` in another process, over a checkpoint.

    The checks of one process run one at a time, in order, on one worker thread (a host
    opening a hundred stores starts one verifying process at a time). :meth:`damage`
    returns what was found so far without waiting; :meth:`wait` waits; :meth:`stop` ends
    the check (the store is closing: no checkpoint of it is made after, and a running
    check is killed). Whatever the outcome, the checkpoint is removed.
    """

    def __init__(self, db: Rdict, path: str) -> None:
        self.path = path
        for stale in glob.glob(f"{glob.escape(_checkpoint_prefix(path))}*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a process that died
        self._db: Rdict | None = db
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._proc: subprocess.Popen[str] | None = None
        self._found: str | None = None
        _worker().put(self)

    def damage(self) -> str | None:
        """Return the damage found (None: none, or the check has not ended)."""
        return self._found

    def wait(self, timeout_s: float | None = None) -> str | None:
        """Wait for the check to end; return the damage found, or None."""
        self._done.wait(timeout_s)
        return self._found

    def stop(self) -> None:
        """End the check: the store closes (call before closing ``db``)."""
        with self._lock:
            self._db = None
            proc = self._proc
            if proc is not None and proc.poll() is None:
                proc.kill()

    def run(self) -> None:
        """Check the store (on the worker thread)."""
        checkpoint = f"{_checkpoint_prefix(self.path)}{uuid.uuid4().hex[:8]}"
        try:
            with self._lock:
                if self._db is None:
                    return
                Checkpoint(self._db).create_checkpoint(checkpoint)
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "statestores.verify", checkpoint],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    env={**os.environ, "PYTHONPATH": _package_path()},
                )
            _, err = self._proc.communicate()
            with self._lock:
                if self._db is not None:
                    self._outcome(self._proc.returncode, err or "")
        except Exception as exc:  # no checkpoint or no process: reads still check blocks
            log.warning(
                "cannot verify the RocksDB store at %s in the background: %s", self.path, exc
            )
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)
            self._done.set()

    def _outcome(self, code: int, err: str) -> None:
        if code == _DAMAGED_EXIT:
            found = err.strip() or "a block does not match its checksum"
            with open(os.path.join(self.path, DAMAGE_MARKER), "w", encoding="utf-8") as f:
                f.write(found)
            self._found = found
            log.error("RocksDB store at %s is damaged: %s", self.path, found)
        elif code != 0:
            log.warning(
                "the background check of the RocksDB store at %s failed: %s",
                self.path,
                err.strip()[-500:],
            )


_queue: queue.SimpleQueue[BackgroundVerification] | None = None
_queue_pid = -1
_queue_lock = threading.Lock()


def _worker() -> queue.SimpleQueue[BackgroundVerification]:
    """The process's queue of checks, and its worker thread (started on first use, and
    again in a forked child: a thread does not survive a fork)."""
    global _queue, _queue_pid
    with _queue_lock:
        if _queue is None or _queue_pid != os.getpid():
            jobs: queue.SimpleQueue[BackgroundVerification] = queue.SimpleQueue()

            def work() -> None:
                while True:
                    jobs.get().run()

            threading.Thread(target=work, name="store-verification", daemon=True).start()
            _queue, _queue_pid = jobs, os.getpid()
        return _queue


def _checkpoint_prefix(path: str) -> str:
    """Where the checks of the store at ``path`` put their checkpoints: hidden beside it
    (``rocksdb/.<store>.verify-<id>``)."""
    parent, name = os.path.split(path.rstrip(os.sep))
    return os.path.join(parent, f".{name}.verify-")


def _package_path() -> str:
    """Where this package is importable from (for the verifying process)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    inherited = os.environ.get("PYTHONPATH")
    return here if not inherited else os.pathsep.join([here, inherited])


def main(argv: list[str]) -> int:
    """Verify the checkpoint directory ``argv[0]``; exit 3 naming the damage. At the
    lowest CPU priority: a background check yields to the batches it runs beside."""
    with contextlib.suppress(OSError):
        os.nice(19)
    problem = verify_directory(argv[0])
    if problem is None:
        return 0
    print(problem, file=sys.stderr)
    return _DAMAGED_EXIT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
