"""Allocate producer ids uniquely across processes, a block at a time.

The allocator is a compare-and-swap log (``<root>/_internal/producer_ids``) whose newest
document holds the next unallocated id; a process takes ``BLOCK_SIZE`` ids with one append,
as Kafka's ProducerIdManager takes blocks from the controller, so ids stay unique however
many processes allocate at once.
"""

from __future__ import annotations

import threading

from common.errors import CoordinatorError
from runtime.storage.fs import StorageRoot
from runtime.txn.cas_log import CasLog

BLOCK_SIZE = 1000
_MAX_ATTEMPTS = 1000


class ProducerIdManager:
    """Hands out producer ids from blocks claimed in the shared allocator log."""

    def __init__(self, root: StorageRoot, *, block_size: int = BLOCK_SIZE) -> None:
        self._log = CasLog(root, ("_internal", "producer_ids"))
        self._block_size = block_size
        self._next = 0
        self._end = 0
        self._lock = threading.Lock()

    def generate(self) -> int:
        """Return a producer id no other process will ever get."""
        with self._lock:
            if self._next >= self._end:
                self._next, self._end = self._claim_block()
            pid = self._next
            self._next += 1
            return pid

    def _claim_block(self) -> tuple[int, int]:
        for _ in range(_MAX_ATTEMPTS):
            latest = self._log.read_latest()
            version, start = (-1, 0) if latest is None else (latest[0], int(latest[1]["next"]))
            end = start + self._block_size
            if self._log.append(version, {"next": end}):
                if version % 100 == 99:
                    self._log.compact()
                return start, end
        raise CoordinatorError("could not claim a block of producer ids: too much contention")
