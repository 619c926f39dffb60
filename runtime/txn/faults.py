"""Named points in the commit protocol where a process can be made to die, for tests.

A fault point is armed with the environment variable ``STREAMS_FAULT_POINT`` (or
:func:`arm`), e.g. ``STREAMS_FAULT_POINT=after_participant_2``; when the protocol reaches
it, the process kills itself with SIGKILL (no cleanup, no ``finally``, exactly like a
crash). ``STREAMS_FAULT_HIT=N`` fires on the N-th time the point is reached (default 1).

The points of one transaction commit, in order:

``before_prepare``  buffers drained and staged, PrepareCommit not yet written
``after_prepare``   PrepareCommit written (the point of no return), no participant committed
``after_participant_<k>``  k participant tables committed (1-based, in commit order);
                    in a commit with fewer than k participants, all of them
``before_complete`` every participant committed, CompleteCommit not yet written
``after_complete``  CompleteCommit written, the producer not yet told

and, under at_least_once (no transaction), ``before_offsets_commit``; and at a start with
a changed topology, ``upgrade_after_savepoint`` and ``upgrade_after_state``, and while a
store's initial state loads, ``initial_state_before_commit``: the batch's outputs
are committed, its consumed positions not yet (where at_least_once's duplicates come from).

Two more test-only switches, for the crash harness (:mod:`streams.crash.harness`):

* ``STREAMS_FAULT_STALL=<point>:<seconds>[:<hit>]`` makes the process *sleep* at that point
  instead of dying (a stalled instance, to be fenced by a newer one); the stall ends early
  once the file named by ``STREAMS_FAULT_RELEASE`` exists. The stall is logged as
  ``fault stall at <point>``.
* ``STREAMS_FAULT_BREAK=commit_before_prepare`` breaks exactly-once on purpose: the
  producer commits its output tables *before* PrepareCommit, so a crash in between leaves
  outputs of a transaction that is then aborted and replayed. It exists only so a test can
  show that the harness catches a real violation; never set it otherwise.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from runtime.storage.committer import StagedFile

if TYPE_CHECKING:
    from runtime.storage.topics import TopicAdmin
    from runtime.txn.coordinator import TransactionCoordinator

log = logging.getLogger(__name__)

ENV_POINT = "STREAMS_FAULT_POINT"
ENV_HIT = "STREAMS_FAULT_HIT"
ENV_STALL = "STREAMS_FAULT_STALL"
ENV_RELEASE = "STREAMS_FAULT_RELEASE"
ENV_BREAK = "STREAMS_FAULT_BREAK"
BREAK_COMMIT_BEFORE_PREPARE = "commit_before_prepare"
BREAKS = (BREAK_COMMIT_BEFORE_PREPARE,)

FIXED_POINTS = ("before_prepare", "after_prepare", "before_complete", "after_complete")
PLAIN_POINTS = ("before_offsets_commit",)
#: A start with a changed topology (:mod:`runtime.app.upgrades`): after its savepoint,
#: after the new stores' state was written; a start loading a store's initial state
#: (:mod:`runtime.app.initial_state`): every row staged, the commit not yet made.
UPGRADE_POINTS = ("upgrade_after_savepoint", "upgrade_after_state", "initial_state_before_commit")
_PARTICIPANT = re.compile(r"after_participant_([1-9][0-9]*)")


class _Armed:
    """The armed point (if any), its target hit count and the hits so far."""

    __slots__ = ("hits", "name", "target")

    def __init__(self) -> None:
        self.name: str | None = None
        self.target = 1
        self.hits = 0


_ARMED = _Armed()
_STALL = _Armed()
_STALL_SECONDS = [0.0]


def validate(name: str) -> str:
    """Return ``name`` if it is a known fault point, else raise ValueError listing them."""
    if name in FIXED_POINTS + PLAIN_POINTS + UPGRADE_POINTS or _PARTICIPANT.fullmatch(name):
        return name
    known = FIXED_POINTS + PLAIN_POINTS + UPGRADE_POINTS
    raise ValueError(
        f"unknown fault point {name!r}; known: {', '.join(known)}, after_participant_<k>"
    )


def arm(name: str | None, *, hit: int = 1) -> None:
    """Arm the fault point ``name`` (None disarms) to fire on its ``hit``-th occurrence."""
    _ARMED.name = validate(name) if name else None
    _ARMED.target = max(1, hit)
    _ARMED.hits = 0


def arm_stall(name: str | None, seconds: float = 0.0, *, hit: int = 1) -> None:
    """Make the ``hit``-th arrival at ``name`` sleep ``seconds`` (None disarms)."""
    _STALL.name = validate(name) if name else None
    _STALL.target = max(1, hit)
    _STALL.hits = 0
    _STALL_SECONDS[0] = seconds


def parse_stall(spec: str) -> tuple[str, float, int]:
    """Parse ``<point>:<seconds>[:<hit>]``; raise ValueError naming the expected form."""
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"{ENV_STALL}={spec!r}: expected <point>:<seconds>[:<hit>]")
    hit = int(parts[2]) if len(parts) == 3 else 1
    return validate(parts[0]), float(parts[1]), hit


def broken(name: str) -> bool:
    """Return whether the test-only switch ``name`` of ``STREAMS_FAULT_BREAK`` is on."""
    return name in os.environ.get(ENV_BREAK, "").split(",")


def _from_env() -> None:
    name = os.environ.get(ENV_POINT)
    if name:
        arm(name, hit=int(os.environ.get(ENV_HIT, "1")))
    stall = os.environ.get(ENV_STALL)
    if stall:
        point, seconds, hit = parse_stall(stall)
        arm_stall(point, seconds, hit=hit)


def reached(name: str) -> None:
    """Mark that the protocol reached ``name``; die (or stall) here if that point is armed."""
    if _STALL.name == name:
        _STALL.hits += 1
        if _STALL.hits == _STALL.target:
            _stall(name, _STALL_SECONDS[0])
    if _ARMED.name is None or name != _ARMED.name:
        return
    _ARMED.hits += 1
    if _ARMED.hits >= _ARMED.target:
        log.warning("fault point %s reached: killing pid %d", name, os.getpid())
        os.kill(os.getpid(), signal.SIGKILL)


def reached_participant(k: int, *, last: bool) -> None:
    """Mark that ``k`` participant tables of a commit are committed (``last``: all of them).

    A commit's participants are the tables its batch wrote, so their number varies (a batch
    may leave an output untouched; a repartition topic shuffled inside the batch is never
    written). An armed ``after_participant_<j>`` with ``j > k`` is therefore reached after
    the last participant of a smaller commit, so that every point the crash harness plans
    from the topology is met.
    """
    names = {f"after_participant_{k}"}
    for armed in (_STALL, _ARMED):
        match = _PARTICIPANT.fullmatch(armed.name or "")
        if last and match and int(match.group(1)) > k:
            names.add(match.group(0))
    for name in sorted(names):
        reached(name)


def _stall(name: str, seconds: float) -> None:
    release = os.environ.get(ENV_RELEASE)
    log.warning("fault stall at %s: pid %d sleeps up to %.1f s", name, os.getpid(), seconds)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if release and os.path.exists(release):
            break
        time.sleep(0.05)
    log.warning("fault stall at %s: pid %d resumes", name, os.getpid())


def commit_before_prepare(
    admin: TopicAdmin,
    coordinator: TransactionCoordinator,
    staged: dict[str, list[StagedFile]],
    *,
    keep: Sequence[str] = (),
) -> None:
    """Break exactly-once on purpose (``STREAMS_FAULT_BREAK=commit_before_prepare``).

    Move the staged files of every topic but ``keep`` out of the staging area and commit
    them at once, before the transaction's PrepareCommit; they leave ``staged``, so the
    transaction's own commit phase skips them. A crash before PrepareCommit then aborts a
    transaction whose outputs are already visible, and its input is processed again.
    """
    root = admin.root
    for topic in sorted(staged):
        if topic in keep or not staged[topic]:
            continue
        table, moved = admin.table_path(topic), []
        for f in staged.pop(topic):
            rel = f"partition={f.partition}/broken-{os.path.basename(f.path)}"
            data = root.read_bytes(f"{table}/{f.path}")
            if data is None:
                raise FileNotFoundError(f"{table}/{f.path}")
            root.write_bytes(f"{table}/{rel}", data)
            root.delete_file(f"{table}/{f.path}")
            moved.append(
                StagedFile(rel, f.partition, f.count, f.size, f.min_timestamp, f.max_timestamp)
            )
        coordinator.committer(topic).commit(moved, timeout_ms=coordinator.commit_timeout_ms)
        log.warning(
            "fault break %s: %d files of %s committed before PrepareCommit",
            BREAK_COMMIT_BEFORE_PREPARE,
            len(moved),
            topic,
        )


_from_env()
