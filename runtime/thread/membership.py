"""A stream thread's membership of its application's consumer group.

Every stream thread is one member of the group ``application.id`` (as each Kafka Streams
thread has its own consumer). Its ``group.instance.id`` is ``<processId>-<threadIndex>``:
the member is static (KIP-345), so a process restarted after a crash, with the same state
directory and therefore the same process id, takes its old place back with its old tasks
and no rebalance. The streams assignor gives whole tasks (all source partitions of one
task together), balanced over the members, sticky, preferring the member whose process
holds the task's local state, and cooperative: a task leaves its owner in one rebalance and
reaches the new one in the next, so no task ever runs in two places at once.

A background thread heartbeats every ``heartbeat.interval.ms``. It only *notes* that the
group rebalances; the stream thread rejoins between batches (:meth:`poll`), when nothing
is in flight: a transaction committed with its batch already, and at_least_once commits
its waiting positions first (Kafka's commit before revocation).
A batch that runs longer than ``max.poll.interval.ms`` makes the member leave the group
(Kafka's poll timeout), and its tasks move; the group's only member stays and warns (no
other could take its tasks; its thread reads less per batch from then on).

Before a transaction's PrepareCommit, once its offsets are registered with it, the thread
checks its generation (:meth:`validate`, KIP-447): a member that was paused past its
session timeout, or missed a rebalance, is refused and stops with ``TaskMigratedError``;
whatever it staged is aborted. A new owner fetches the positions of its new tasks with
``require_stable``, so it waits for a transaction still holding offsets of the group; one
that outlives its ``transaction.timeout.ms`` is aborted (Kafka's transaction timeout), which
also fences its producer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from common.config import StreamsConfig
from common.errors import GenerationFencedError, StreamsError
from runtime.group.assignors import Assignment, StreamsAssignor, Subscription, TopicPartition
from runtime.group.coordinator import GroupCoordinator, GroupState
from runtime.group.errors import (
    FencedInstanceIdError,
    GroupError,
    RebalanceInProgressError,
)
from runtime.group.member import GroupMember
from runtime.storage.topics import TopicAdmin

log = logging.getLogger(__name__)

_TASK_DIR = re.compile(r"^\d+_\d+$")


class ThreadMembership:
    """One stream thread's member of the application's group.

    Args:
        admin: the storage root's topic admin.
        config: the application configuration (group timeouts).
        instance_id: the member's ``group.instance.id`` (``<processId>-<threadIndex>``).
        client_id: shown by ``streams-eos groups --describe``.
        tasks: every task of the topology -> its source topic partitions.
        process_id: the instance's process id (the assignor spreads tasks over processes
            and prefers the process holding a task's local state).
        description: the topology's ``describe()`` text; with ``tasks`` it makes the
            fingerprint that the group compares between processes (one application.id,
            one topology: a differing instance is refused with ``TopologyMismatchError``).
    """

    def __init__(
        self,
        admin: TopicAdmin,
        config: StreamsConfig,
        *,
        instance_id: str,
        client_id: str,
        tasks: Mapping[str, Sequence[TopicPartition]],
        process_id: str,
        description: str = "",
    ) -> None:
        self.config = config
        self.group = config.application_id
        self.process_id = process_id
        self.tasks = {task: tuple(parts) for task, parts in tasks.items()}
        self.topics = tuple(sorted({t for parts in self.tasks.values() for t, _ in parts}))
        self.fingerprint = topology_fingerprint(description, self.tasks)
        self.coordinator = GroupCoordinator(
            admin, initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms
        )
        self.member = GroupMember(
            self.coordinator,
            self.group,
            assignor=StreamsAssignor(self.tasks),
            subscription=self._subscription,
            instance_id=instance_id,
            client_id=client_id,
            host=socket.gethostname(),
            protocol_type="consumer",
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            rebalance_timeout_ms=config.max_poll_interval_ms,
        )
        #: The tasks this member runs (of the newest generation it joined).
        self.owned: frozenset[str] = frozenset()
        #: Each owned task's incarnation: a new number each time the task comes to this
        #: member (a rebalance gave it, or the member lost its tasks and got it back). A
        #: host holding the task from an earlier incarnation rebuilds it from committed
        #: state: another member may have committed batches of it meanwhile.
        self.incarnations: dict[str, int] = {}
        self._incarnation = 0
        self.rebalances = 0
        #: The seconds each join took (taken by the thread's metrics).
        self.join_seconds: list[float] = []
        self._rejoin = threading.Event()
        self._lost: BaseException | None = None
        self._batch_started: float | None = None
        #: The batch (its start) already warned about as the group's only member.
        self._overrun_warned: float | None = None
        self._stop = threading.Event()
        self._beater: threading.Thread | None = None
        #: Called (from the heartbeat thread) when the member must rejoin: the stream
        #: thread then runs a batch soon, even without new records, and rejoins in it.
        self.on_rebalance: Callable[[], None] | None = None
        #: Called (from the heartbeat thread) when the member finds itself out of the
        #: group while a batch runs: that batch can never commit, and is cancelled rather
        #: than run to its end (its Spark job may wait for an executor a pause lost).
        self.on_lost: Callable[[], None] | None = None
        #: Why the batch in flight was cancelled (None: it was not).
        self.cancelled: BaseException | None = None

    # -- the stream thread's side ------------------------------------------------------

    def join(self) -> frozenset[str]:
        """Join the group and return the tasks assigned to this member (blocking)."""
        started = time.perf_counter()
        assignment = self.member.join(timeout_ms=self._join_timeout_ms())
        self.join_seconds.append(time.perf_counter() - started)
        self._adopt(assignment)
        if self._beater is None or not self._beater.is_alive():
            self._beater = threading.Thread(
                target=self._beat, name=f"heartbeat-{self.member.instance_id}", daemon=True
            )
            self._beater.start()
        return self.owned

    def poll(self) -> frozenset[str] | None:
        """Between batches: rejoin if the group rebalances (or dropped this member); return
        the new set of tasks when it changed, else None.

        Raises:
            FencedInstanceIdError: another process took this member's instance id.
        """
        lost = self._lost
        if lost is not None:
            self._lost = None
            if isinstance(lost, FencedInstanceIdError):
                raise lost
            log.warning("[group %s] %s lost its tasks (%s); rejoining", self.group, self, lost)
        elif not self._rejoin.is_set():
            return None
        self._rejoin.clear()
        before = self.owned
        self.rebalances += 1
        started = time.perf_counter()
        assignment = self.member.join(timeout_ms=self._join_timeout_ms())
        self.join_seconds.append(time.perf_counter() - started)
        self._adopt(assignment, lost=lost is not None)
        # tasks lost and given back are new to the thread too (their positions moved)
        return self.owned if self.owned != before or lost is not None else None

    @property
    def rejoin_pending(self) -> bool:
        """Whether the member must rejoin (the group rebalances, or dropped it)."""
        return self._rejoin.is_set() or self._lost is not None

    def validate(self) -> None:
        """The KIP-447 check before a commit: this member and generation are current.

        Raises:
            GenerationFencedError: they are not (the cause is chained).
        """
        member_id, generation = self.member.member_id, self.member.generation
        try:
            self.coordinator.validate_generation(self.group, member_id or "", generation)
        except GroupError as exc:
            self._rejoin.set()
            raise GenerationFencedError(
                f"member {member_id} of group {self.group!r} (generation {generation}) may "
                f"not commit: {exc}"
            ) from exc

    def settled(self) -> bool:
        """Whether the group is stable with every task of the topology owned (by this
        member or another)."""
        group = self.coordinator.describe(self.group)
        if group.state is not GroupState.STABLE:
            return False
        owned = {str(t) for m in group.members for t in m.assignment.user_data.get("tasks", [])}
        return owned >= set(self.tasks)

    def replaced(self) -> bool:
        """Whether another process took this member's place: its ``group.instance.id`` is
        held by another member id (a second process with this one's process id: a zombie
        must stop, Kafka's ``FencedInstanceIdException``), rather than the member having
        lost its tasks by a timeout or a missed rebalance (it rejoins)."""
        if isinstance(self._lost, FencedInstanceIdError):
            return True
        try:
            meta = self.coordinator.load(self.group).meta
        except StreamsError as exc:
            log.warning("[group %s] %s: cannot read the group (%s)", self.group, self, exc)
            return False
        holder = meta.static_member(self.member.instance_id or "")
        return holder is not None and holder != self.member.member_id

    def batch_started(self) -> None:
        """Note that a batch runs (the heartbeat thread enforces max.poll.interval.ms).

        Raises:
            GenerationFencedError: the member left the group since the thread last polled
                it (a pause past the session timeout: the heartbeat after it found the
                member gone while the batch was planned); the batch could never commit.
                Run, it failed only at its commit, 22 s later in a campaign's pause.
            FencedInstanceIdError: another process took this member's instance id.
        """
        self.cancelled = None  # of an earlier batch (one that committed all the same)
        lost = self._lost
        if isinstance(lost, FencedInstanceIdError):
            raise lost
        if lost is not None:
            raise GenerationFencedError(
                f"member {self.member.member_id} of group {self.group!r} is out of the group "
                f"({lost}): the batch cannot commit; the thread rejoins"
            ) from lost
        self._batch_started = time.monotonic()

    def batch_finished(self) -> None:
        """Note that the batch ended."""
        self._batch_started = None

    def close(self, *, leave: bool = True) -> None:
        """Stop heartbeating and (``leave``) leave the group, so the others rebalance at
        once instead of after the session timeout."""
        self._stop.set()
        if self._beater is not None:
            self._beater.join(timeout=5)
            self._beater = None
        if leave:
            try:
                self.member.leave()
            except StreamsError as exc:
                log.warning("[group %s] %s could not leave: %s", self.group, self, exc)

    def __repr__(self) -> str:
        return f"member {self.member.instance_id} ({self.member.member_id})"

    # -- internals ----------------------------------------------------------------------

    def _adopt(self, assignment: Assignment, *, lost: bool = False) -> None:
        tasks = assignment.user_data.get("tasks", [])
        self.owned = frozenset(str(t) for t in tasks)
        self._incarnation += 1
        kept = {} if lost else self.incarnations
        self.incarnations = {t: kept.get(t, self._incarnation) for t in sorted(self.owned)}
        log.info(
            "[group %s] %s generation %d: tasks %s",
            self.group,
            self,
            self.member.generation,
            sorted(self.owned),
        )

    def _subscription(self) -> Subscription:
        # What the member holds right now: inside a cooperative join() that is the newest
        # assignment (revoked tasks already gone), not yet adopted by the stream thread.
        current = self.member.assignment
        owned = (
            self.owned
            if current is None
            else frozenset(str(t) for t in current.user_data.get("tasks", []))
        )
        owned_parts = tuple(sorted(tp for task in owned for tp in self.tasks.get(task, ())))
        return Subscription(
            topics=self.topics,
            owned=owned_parts,
            generation=self.member.generation,
            user_data={
                "process_id": self.process_id,
                "topology": self.fingerprint,
                "owned_tasks": sorted(owned),
                "local_tasks": self._local_tasks(),
            },
        )

    def _local_tasks(self) -> dict[str, int]:
        """Tasks with a state directory of this application on this machine (offset sums
        are not known here: 0 marks "has local state")."""
        base = os.path.join(self.config.state_dir, self.group)
        try:
            names = os.listdir(base)
        except OSError:
            return {}
        return {name: 0 for name in sorted(names) if _TASK_DIR.match(name) and name in self.tasks}

    def _join_timeout_ms(self) -> int:
        # A rebalance waits up to the members' rebalance timeout, after the initial delay.
        return self.config.max_poll_interval_ms + self.config.group_initial_rebalance_delay_ms

    def _overran(self, started: float) -> bool:
        """A batch has run past ``max.poll.interval.ms``: leave the group so its tasks move
        (Kafka's poll timeout) and return True (the thread rejoins at its next batch, and
        the heartbeats go on); but the group's only member stays (no other member could
        take its tasks, and leaving would fence it for its own slowness): it warns once
        per batch and returns False."""
        limit_ms = self.config.max_poll_interval_ms
        if self._overrun_warned == started:
            return False
        try:
            members = self.coordinator.describe(self.group).members
            alone = all(m.member_id == self.member.member_id for m in members)
        except Exception:  # cannot tell: leave, as Kafka's consumer would
            alone = False
        if alone:
            self._overrun_warned = started
            log.warning(
                "[group %s] %s: a batch has run longer than max.poll.interval.ms (%d ms); as "
                "the group's only member it keeps its tasks (later batches read less: raise "
                "max.poll.interval.ms, or lower max.poll.records, if this repeats)",
                self.group,
                self,
                limit_ms,
            )
            return False
        log.warning(
            "[group %s] %s: a batch has run longer than max.poll.interval.ms (%d ms); leaving "
            "the group so its tasks move (raise max.poll.interval.ms or lower "
            "max.poll.records)",
            self.group,
            self,
            limit_ms,
        )
        self._lost = GenerationFencedError("left the group after max.poll.interval.ms")
        self.member.leave()
        return True

    def _beat(self) -> None:
        interval = self.config.heartbeat_interval_ms / 1000
        limit = self.config.max_poll_interval_ms / 1000
        last = time.monotonic()
        while not self._stop.wait(interval):
            if self._lost is not None:
                continue  # out of the group: the stream thread rejoins at its next poll
            started = self._batch_started
            overran = started is not None and time.monotonic() - started > limit
            if overran and self._overran(started or 0.0):
                self._wake_thread()  # its next batch rejoins; the beating goes on after that
                continue
            try:
                sent = time.monotonic()
                self.member.heartbeat()
                last = self._beaten(last, sent)
                continue
            except RebalanceInProgressError:
                self._rejoin.set()
            except GroupError as exc:
                self._lost = exc
                self._cancel_batch(exc)
            except Exception:  # storage hiccup: the next beat tries again
                log.warning("[group %s] %s heartbeat failed", self.group, self, exc_info=True)
                continue
            self._wake_thread()

    def _cancel_batch(self, exc: BaseException) -> None:
        if self._batch_started is None or self.on_lost is None:
            return
        log.warning(
            "[group %s] %s is out of the group (%s): cancelling the batch in flight, which "
            "cannot commit; the thread rejoins",
            self.group,
            self,
            exc,
        )
        self.cancelled = exc
        try:
            self.on_lost()
        except Exception:  # the batch then fails at its commit, as before
            log.warning("[group %s] %s: cancelling failed", self.group, self, exc_info=True)

    def _beaten(self, last: float, sent: float) -> float:
        """A heartbeat sent at ``sent`` was answered; the one before at ``last``. Say so
        when the gap neared the session timeout (what kept the member quiet: a slow
        answer, or a process that did not run); return when this one was answered."""
        now = time.monotonic()
        gap, session = now - last, self.config.session_timeout_ms / 1000
        if gap > session / 2:
            log.warning(
                "[group %s] %s: %.1f s since its last heartbeat (this one took %.1f s; the "
                "session ends after %.0f s without one)",
                self.group,
                self,
                gap,
                now - sent,
                session,
            )
        return now

    def _wake_thread(self) -> None:
        """Tell the stream thread to run a batch soon (it rejoins at its start)."""
        if self.on_rebalance is not None:
            try:
                self.on_rebalance()
            except Exception:
                log.warning("[group %s] %s: wake-up failed", self.group, self, exc_info=True)


def topology_fingerprint(description: str, tasks: Mapping[str, Sequence[TopicPartition]]) -> str:
    """Return a short hash of a topology's description and its tasks' source partitions
    (the same topology code gives the same fingerprint in every process)."""
    text = json.dumps([description, sorted((t, list(map(list, p))) for t, p in tasks.items())])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def task_partitions(
    tasks: Mapping[int, int], sources: Mapping[str, int], partitions: Callable[[str], int]
) -> dict[str, tuple[TopicPartition, ...]]:
    """Return every task id -> its source topic partitions.

    Args:
        tasks: sub-topology -> number of tasks.
        sources: source topic -> the sub-topology reading it.
        partitions: a topic's partition count.
    """
    out: dict[str, tuple[TopicPartition, ...]] = {}
    for sub, count in sorted(tasks.items()):
        topics = sorted(t for t, s in sources.items() if s == sub)
        for p in range(count):
            out[f"{sub}_{p}"] = tuple((t, p) for t in topics if p < partitions(t))
    return out
