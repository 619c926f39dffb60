"""Named points in the commit protocol where a process can be made to die, for tests.

A fault point is armed with the environment variable ``STREAMS_FAULT_POINT`` (or
:func:`arm`), e.g. ``STREAMS_FAULT_POINT=after_participant_2``; when the protocol reaches
it, the process kills itself with SIGKILL (no cleanup, no ``finally``, exactly like a
crash). ``STREAMS_FAULT_HIT=N`` fires on the N-th time the point is reached (default 1).

The points of one transaction commit, in order:

``before_prepare``  buffers drained and staged, PrepareCommit not yet written
``after_prepare``   PrepareCommit written (the point of no return), no participant committed
``after_participant_<k>``  k participant tables committed (1-based, in commit order)
``before_complete`` every participant committed, CompleteCommit not yet written
``after_complete``  CompleteCommit written, the producer not yet told
"""

from __future__ import annotations

import logging
import os
import re
import signal

log = logging.getLogger(__name__)

ENV_POINT = "STREAMS_FAULT_POINT"
ENV_HIT = "STREAMS_FAULT_HIT"

FIXED_POINTS = ("before_prepare", "after_prepare", "before_complete", "after_complete")
_PARTICIPANT = re.compile(r"after_participant_([1-9][0-9]*)")


class _Armed:
    """The armed point (if any), its target hit count and the hits so far."""

    __slots__ = ("hits", "name", "target")

    def __init__(self) -> None:
        self.name: str | None = None
        self.target = 1
        self.hits = 0


_ARMED = _Armed()


def validate(name: str) -> str:
    """Return ``name`` if it is a known fault point, else raise ValueError listing them."""
    if name in FIXED_POINTS or _PARTICIPANT.fullmatch(name):
        return name
    raise ValueError(
        f"unknown fault point {name!r}; known: {', '.join(FIXED_POINTS)}, after_participant_<k>"
    )


def arm(name: str | None, *, hit: int = 1) -> None:
    """Arm the fault point ``name`` (None disarms) to fire on its ``hit``-th occurrence."""
    _ARMED.name = validate(name) if name else None
    _ARMED.target = max(1, hit)
    _ARMED.hits = 0


def _from_env() -> None:
    name = os.environ.get(ENV_POINT)
    if name:
        arm(name, hit=int(os.environ.get(ENV_HIT, "1")))


def reached(name: str) -> None:
    """Mark that the protocol reached ``name``; die here if that point is armed."""
    if _ARMED.name is None or name != _ARMED.name:
        return
    _ARMED.hits += 1
    if _ARMED.hits >= _ARMED.target:
        log.warning("fault point %s reached: killing pid %d", name, os.getpid())
        os.kill(os.getpid(), signal.SIGKILL)


_from_env()
