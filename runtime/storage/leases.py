"""Files this process's readers planned and have not read yet (the vacuum keeps them).

A batch plans its reads (file slices) on the driver and its Spark tasks read them later,
seconds later when the batch is slow (its first, a restore). A file the log cleaner removed
from a topic in between must stay until they have: the stream threads hold a lease on every
file of their batch's plan until the batch is over, and the vacuum of the same process
skips leased files (other processes are covered by ``file.delete.delay.ms``).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable
from typing import Any


class FileLeases:
    """Leases on files (full paths), held by in-flight readers of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, frozenset[str]] = {}
        self._tokens = itertools.count(1)

    def __getstate__(self) -> dict[str, Any]:
        return {}  # leases are this process's: a copy elsewhere starts empty

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

    def hold(self, paths: Iterable[str]) -> int:
        """Lease ``paths``; return the token that releases them."""
        with self._lock:
            token = next(self._tokens)
            self._held[token] = frozenset(paths)
            return token

    def release(self, token: int) -> None:
        """Release the lease ``token`` (no error if it was released already)."""
        with self._lock:
            self._held.pop(token, None)

    def held(self) -> set[str]:
        """Return every leased path."""
        with self._lock:
            return set().union(*self._held.values()) if self._held else set()
