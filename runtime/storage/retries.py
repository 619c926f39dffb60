"""Transient storage errors retried with backoff, where retrying is safe.

An object store answers 500 or 503 (SlowDown), resets a connection or times out now and
then. delta-rs retries what it knows to be idempotent; a conditional write (put-if-absent)
whose answer is lost it cannot retry, and neither can we blindly: the write may have
landed. :func:`retried` retries an operation that is safe to run again (a read, or a
write that a read-back showed did not land) with jittered exponential backoff, and lets
through at once an error saying the outcome is unknown.

A caller that learns meanwhile that the work cannot be used any more (a stream thread out
of its group, whose batch can never commit) stops the retries of its own thread:
:func:`abort_when` names a check that :func:`retried` asks after each failed attempt.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from deltalake.exceptions import DeltaError

from common.errors import CommitOutcomeUnknownError, StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Errors a retry may cure: the store's or the network's.
TRANSIENT = (OSError, StorageError, DeltaError)
ATTEMPTS = 7
FIRST_S = 0.05
MAX_S = 2.0
#: The longest :func:`retried` goes on: an operation still failing after it fails its
#: batch, which is aborted and tried again later (a batch held open for minutes outlives
#: its transaction's timeout).
BUDGET_S = 20.0


#: Per thread: what :func:`retried` asks before trying again (see :func:`abort_when`).
_abort = threading.local()


@contextlib.contextmanager
def abort_when(check: Callable[[], BaseException | None]) -> Iterator[None]:
    """Within the block, this thread's retries stop once ``check()`` returns an error:
    that error is raised (from the failed attempt's) instead of trying again."""
    previous = getattr(_abort, "check", None)
    _abort.check = check
    try:
        yield
    finally:
        _abort.check = previous


class WriteNotLandedError(StorageError):
    """A write failed and reading back showed it did not land: safe to run again."""


def retried(
    fn: Callable[[], T],
    *,
    what: str,
    never: tuple[type[BaseException], ...] = (),
    attempts: int = ATTEMPTS,
) -> T:
    """``fn()``, run again on a transient error (at most ``attempts`` times in all, about
    6 s of waits, and not past :data:`BUDGET_S` since the first, though always once: a
    first attempt that hung past the budget, its process paused or its request timed
    out, is tried again); an error of ``never`` or :class:`CommitOutcomeUnknownError` is
    raised at once."""
    fatal: tuple[type[BaseException], ...] = (CommitOutcomeUnknownError, *never)
    started = time.monotonic()
    for attempt in range(attempts):
        try:
            return fn()
        except fatal:
            raise
        except TRANSIENT as exc:
            check = getattr(_abort, "check", None)
            reason = check() if check is not None else None
            if reason is not None:
                raise reason from exc
            delay = min(MAX_S, FIRST_S * 2**attempt) * random.uniform(0.5, 1.0)
            spent = attempt > 0 and time.monotonic() + delay - started > BUDGET_S
            if attempt == attempts - 1 or spent:
                raise
            log.info("[storage] %s failed (%s); again in %.2f s", what, _first_line(exc), delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
