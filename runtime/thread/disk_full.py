"""A full disk, or an object store that keeps failing, stops a stream thread's batches,
not the thread.

When ``state.dir`` (or a local storage root) runs out of space, a batch fails where a store
or a staged file is written: RocksDB refuses the write ("IO error: No space left on
device"), a file write raises ``ENOSPC``. The batch's transaction is aborted by its commit
strategy and its tasks are closed dirty by their hosts (a RocksDB store that failed a write
stays read-only until it is opened again), so nothing of it is committed and the task
is rebuilt from its committed state at its next batch. Instead of failing the thread, as
any other error does, the thread says so in one line, waits (2 s, doubling up to 30 s) and
lets the next batch try again, from the same positions; once a batch commits, it says that
space came back.

An object store that answers errors (500, 503 SlowDown, resets) past the retries of
each request (:mod:`runtime.storage.retries`, 20 s at most), on the driver or in a batch's
task on an executor, fails the batch the same way and is waited out the same way, with
its own line; an error whose outcome is unknown (a conditional write whose answer was
lost) is not absorbed.

A failure after a transaction's PrepareCommit (a local root full in the commit phase)
is not absorbed: the producer cannot go on, and the thread fails as before.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Iterator, Sequence

from common.errors import CommitOutcomeUnknownError, StorageError
from runtime.txn.producer import ProducerState, TransactionalProducer

log = logging.getLogger(__name__)

NO_SPACE = "No space left on device"
FIRST_WAIT_S = 2.0
MAX_WAIT_S = 30.0
#: A thread that cannot start on a failing storage is started again this many times in
#: a row (2 s doubling to 30 s: about 5 min) before it fails.
GIVE_UP_AFTER = 13

_BACKOFFS: dict[str, DiskFullBackoff] = {}
_LOCK = threading.Lock()


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every error it was raised from (its causes, then its contexts)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) is a full disk."""
    return any(
        (isinstance(e, OSError) and e.errno == errno.ENOSPC) or NO_SPACE in str(e)
        for e in _chain(exc)
    )


#: Storage errors that waiting does not cure: an outcome to find out (a lost answer).
#: (A log read as damaged is waited out: under a failing store a read can come back short,
#: and real damage says so in the warning every time.)
NOT_WAITED_OUT: tuple[type[StorageError], ...] = (CommitOutcomeUnknownError,)


def storage_failing(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) is the storage failing past its
    retries, here or in a batch's task on an executor (whose error the driver gets back
    as itself: :func:`~runtime.tasks.errors.task_error`), with nothing of unknown outcome
    (a full disk is :func:`disk_full`)."""
    chain = list(_chain(exc))
    if disk_full(exc) or any(isinstance(e, NOT_WAITED_OUT) for e in chain):
        return False
    return any(isinstance(e, StorageError) for e in chain)


class DiskFullBackoff:
    """Absorbs the batches a full disk fails, waiting longer each time.

    Args:
        name: the thread's transactional id (for its log lines).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.failures = 0

    def absorbed(
        self, exc: BaseException, batch_id: int, producers: Sequence[TransactionalProducer]
    ) -> bool:
        """Whether batch ``batch_id``'s failure ``exc`` was a full disk to wait out (the
        thread goes on); False: the thread fails with it."""
        full = disk_full(exc)
        if not (full or storage_failing(exc)) or any(
            p.state is ProducerState.FATAL_ERROR for p in producers
        ):
            return False
        wait = min(MAX_WAIT_S, FIRST_WAIT_S * 2**self.failures)
        self.failures += 1
        what, hint = (
            ("the disk is full", "free space in state.dir, or give it more")
            if full
            else ("the storage kept failing", "check the object store if this repeats")
        )
        log.warning(
            "[thread %s] batch %d: %s (%s); the batch was aborted, nothing of it committed: "
            "trying again in %.0f s (%s)",
            self.name,
            batch_id,
            what,
            _first_line(exc),
            wait,
            hint,
        )
        time.sleep(wait)
        return True

    def query_failed(self, exc: BaseException) -> bool:
        """Whether the thread's Spark query ended on a full disk (its checkpoint, under
        ``state.dir`` when the root is an object store, could not be written); if so, say
        so and wait before the thread is started again. Its checkpoint is disposable (the
        positions live in ``__consumer_offsets``): the new thread starts an empty one."""
        if not disk_full(exc):
            return False
        wait = min(MAX_WAIT_S, FIRST_WAIT_S * 2**self.failures)
        self.failures += 1
        log.warning(
            "[thread %s] Spark's checkpoint could not be written: the disk is full (%s); the "
            "thread starts again in %.0f s from its committed positions (free space in "
            "state.dir, or give it more)",
            self.name,
            _first_line(exc),
            wait,
        )
        time.sleep(wait)
        return True

    def storage_failed(self, exc: BaseException) -> bool:
        """Whether the thread failed outside a batch (its start, a rejoin: fetching its
        positions, fencing its producer) on a storage failing past its retries; if so, say
        so and wait before it is started again from its committed positions. After
        :data:`GIVE_UP_AFTER` such waits in a row (about 5 min, Kafka's default
        ``task.timeout.ms``) the thread fails: a store that never answers (a wrong bucket,
        no permission) is no passing fault."""
        if not storage_failing(exc) or self.failures >= GIVE_UP_AFTER:
            return False
        wait = min(MAX_WAIT_S, FIRST_WAIT_S * 2**self.failures)
        self.failures += 1
        log.warning(
            "[thread %s] the storage kept failing (%s); the thread starts again in %.0f s "
            "from its committed positions (check the object store if this repeats)",
            self.name,
            _first_line(exc),
            wait,
        )
        time.sleep(wait)
        return True

    @classmethod
    def of(cls, name: str) -> DiskFullBackoff:
        """The backoff of transactional id ``name`` in this process: a thread started
        again after a full disk keeps its predecessor's, waiting longer each time."""
        with _LOCK:
            found = _BACKOFFS.get(name)
            if found is None:
                found = _BACKOFFS[name] = cls(name)
            return found

    def committed(self, batch_id: int) -> None:
        """A batch committed: space (or the storage) is back if batches failed for it."""
        if self.failures:
            log.warning(
                "[thread %s] batch %d committed: space is back (or the storage answers) after "
                "%d batches failed on a full disk or a failing storage",
                self.name,
                batch_id,
                self.failures,
            )
            self.failures = 0


def _first_line(exc: BaseException) -> str:
    text = next((line for line in str(exc).splitlines() if NO_SPACE in line), str(exc))
    return text.strip()[:300]
