"""Thread pools shared by a process, made anew in a forked child.

A task host is forked from a server process that may already hold pools; a child
inherits the executor objects but not their threads, so a pool taken from here is always
one whose threads run in the calling process.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_POOLS: dict[str, tuple[int, ThreadPoolExecutor]] = {}
_LOCK = threading.Lock()


def shared_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """The process's pool called ``name`` (its threads are named after it), with
    ``workers`` threads at most (as first asked for)."""
    with _LOCK:
        found = _POOLS.get(name)
        if found is None or found[0] != os.getpid():
            found = _POOLS[name] = (os.getpid(), ThreadPoolExecutor(workers, name))
        return found[1]
