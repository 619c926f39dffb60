"""The client side of a consumer group: one :class:`GroupMember` per consumer or stream thread.

``join()`` runs the classic JoinGroup/SyncGroup exchange against the
:class:`~runtime.group.coordinator.GroupCoordinator`: it sends a join, then polls the
group's log until its generation is Stable with an assignment. When the poll finds this
member the leader of a generation still waiting for its assignment, it runs the assignor
over every member's subscription and sends the result (SyncGroup).

Exactly-once invariant kept here: a member gives up partitions before anyone else can get
them. Under the eager protocol it revokes everything before it rejoins. Under the
cooperative protocol the assignor withholds a partition while its owner still reports it
(``Subscription.owned``); the owner revokes it when its new assignment lacks it and rejoins
at once, and only that follow-up rebalance hands it on.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from enum import Enum

from common.errors import ConfigError, StreamsError
from runtime.group.assignors import Assignment, Assignor, Subscription, TopicPartition
from runtime.group.coordinator import GroupCoordinator
from runtime.group.errors import (
    FencedInstanceIdError,
    GroupError,
    GroupJoinTimeoutError,
    IllegalGenerationError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from runtime.group.join import JoinGroupRequest
from runtime.group.state import GroupMetadata, GroupState, MemberMetadata

log = logging.getLogger(__name__)

#: Seconds between two polls of the group's log while joining.
POLL_INTERVAL_S = 0.05

RevokeCallback = Callable[[tuple[TopicPartition, ...]], None]


class _Next(Enum):
    WAIT = "wait"  # poll again after a pause
    REJOIN = "rejoin"  # send a join now


class GroupMember:
    """A member of a consumer group (Kafka's ``ConsumerCoordinator``, classic protocol).

    Thread-safe for one heartbeat thread beside the thread calling :meth:`join`.

    Args:
        coordinator: the group coordinator of the storage root.
        group: the group id (``group.id``).
        assignor: the partition assignor (``partition.assignment.strategy``); every member
            of a group must use the same one.
        subscription: returns the member's subscription; called again for every join, so
            it can report what the member owns (cooperative) and fresh user data.
        instance_id: ``group.instance.id``: makes the member static (KIP-345).
        client_id: ``client.id``, shown by describe.
        host: the member's host, shown by describe.
        protocol_type: ``"consumer"`` for consumers and stream threads.
        session_timeout_ms: ``session.timeout.ms``: silent longer than this, the member is
            removed.
        heartbeat_interval_ms: ``heartbeat.interval.ms``: how often to call
            :meth:`heartbeat` (and how often ``join()`` refreshes the session meanwhile).
        rebalance_timeout_ms: ``max.poll.interval.ms``: how long a rebalance waits for the
            member to rejoin.

    Raises:
        ConfigError: a timeout is not positive, or the heartbeat interval is not below the
            session timeout.

    Example:
        >>> member = GroupMember(coordinator, "wordcount", assignor=assignor_for("range"),
        ...                      subscription=lambda: Subscription(("words",)))  # doctest: +SKIP
        >>> member.join(timeout_ms=60_000).partitions  # doctest: +SKIP
        (('words', 0), ('words', 1))
    """

    def __init__(
        self,
        coordinator: GroupCoordinator,
        group: str,
        *,
        assignor: Assignor,
        subscription: Callable[[], Subscription],
        instance_id: str | None = None,
        client_id: str = "",
        host: str = "",
        protocol_type: str = "consumer",
        session_timeout_ms: int = 45000,
        heartbeat_interval_ms: int = 3000,
        rebalance_timeout_ms: int = 300000,
    ) -> None:
        _check_config(group, instance_id, session_timeout_ms, heartbeat_interval_ms)
        if rebalance_timeout_ms <= 0:
            raise ConfigError(f"max.poll.interval.ms must be positive, got {rebalance_timeout_ms}")
        self.coordinator = coordinator
        self.group = group
        self.assignor = assignor
        self.subscription = subscription
        self.instance_id = instance_id
        self.client_id = client_id
        self.host = host
        self.protocol_type = protocol_type
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.member_id: str | None = None
        self.generation: int = -1
        self.assignment: Assignment | None = None
        self._lock = threading.RLock()
        self._last_beat_ms: int | None = None

    @property
    def cooperative(self) -> bool:
        """Return True if the assignor uses the cooperative protocol."""
        return self.assignor.protocol == "cooperative"

    # -- the API -----------------------------------------------------------------------

    def join(
        self, timeout_ms: int | None = None, on_revoked: RevokeCallback | None = None
    ) -> Assignment:
        """Join (or rejoin) the group and wait for this member's assignment.

        Eager protocol: every partition owned is revoked (``on_revoked``) before the join.
        Cooperative protocol: the member keeps its partitions; if the new assignment lacks
        some, they are revoked and the member rejoins at once (the follow-up rebalance).

        Args:
            timeout_ms: give up after this long (None: wait as long as it takes).
            on_revoked: called with the partitions the member gives up, before anyone else
                can be given them; commit their offsets and close their tasks in it.

        Returns:
            The member's assignment in the new generation (also in :attr:`assignment`).

        Raises:
            GroupJoinTimeoutError: no Stable generation within ``timeout_ms``; retriable.
            FencedInstanceIdError: a newer instance took this static member's place; fatal.
            InconsistentGroupProtocolError: the group's members use another assignor.
            GroupError: the assignor or ``on_revoked`` failed (the cause is chained).
        """
        with self._lock:
            return self._join(timeout_ms, on_revoked)

    def heartbeat(self) -> None:
        """Tell the group that this member is alive; call it every ``heartbeat_interval_ms``.

        While another thread runs :meth:`join` (which keeps the session alive itself), this
        returns at once.

        Raises:
            RebalanceInProgressError: the group is rebalancing: call :meth:`join`.
            IllegalGenerationError: the group moved to a newer generation: call :meth:`join`.
            UnknownMemberIdError: the member is not in the group (never joined, left,
                expired): call :meth:`join`.
            FencedInstanceIdError: a newer instance took this static member's place; fatal.
        """
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self.member_id is None:
                raise UnknownMemberIdError(
                    f"this member of group {self.group!r} has not joined (or has left): "
                    "call join() first"
                )
            self.coordinator.heartbeat(
                self.group, self.member_id, self.generation, instance_id=self.instance_id
            )
            self._last_beat_ms = self.coordinator.clock()
        finally:
            self._lock.release()

    def leave(self) -> None:
        """Leave the group at once (LeaveGroup); the others rebalance without waiting for
        this member's session timeout. Idempotent."""
        with self._lock:
            member_id, self.member_id = self.member_id, None
            self.generation, self.assignment = -1, None
            if member_id is None:
                return
            try:
                self.coordinator.leave_group(self.group, member_id, instance_id=self.instance_id)
            except (UnknownMemberIdError, FencedInstanceIdError):
                log.debug(
                    "[group %s] member=%s was already out of the group", self.group, member_id
                )

    # -- joining -----------------------------------------------------------------------

    def _join(self, timeout_ms: int | None, on_revoked: RevokeCallback | None) -> Assignment:
        clock = self.coordinator.clock
        deadline = None if timeout_ms is None else clock() + timeout_ms
        if not self.cooperative:  # eager: own nothing across a rejoin
            self._revoke(self._owned(), on_revoked)
            self.assignment = None
        step: _Next | Assignment = _Next.REJOIN
        while True:
            if step is _Next.REJOIN:
                self._send_join(on_revoked)
            meta = self.coordinator.load(self.group).meta
            step = self._step(meta, on_revoked)
            if isinstance(step, Assignment):
                return step
            if deadline is not None and clock() >= deadline:
                raise self._timeout_error(meta, timeout_ms)
            if step is _Next.WAIT:
                self._keep_alive()
                time.sleep(POLL_INTERVAL_S)

    def _step(self, meta: GroupMetadata, on_revoked: RevokeCallback | None) -> Assignment | _Next:
        """Decide what to do after reading the group."""
        me = meta.members.get(self.member_id) if self.member_id is not None else None
        if me is None:  # removed (expired, timed out) or replaced
            self._check_fenced(meta)
            self._lose(on_revoked)
            return _Next.REJOIN
        if meta.state is GroupState.PREPARING_REBALANCE:
            return _Next.WAIT if me.joined else _Next.REJOIN
        if me.generation != meta.generation:
            return _Next.REJOIN  # a static member that missed the join phase
        if meta.state is GroupState.COMPLETING_REBALANCE:
            if meta.leader == self.member_id:
                self._sync(meta)
            return _Next.WAIT
        if meta.state is GroupState.STABLE and me.assignment is not None:
            return self._accept(meta, me, on_revoked)
        return _Next.WAIT

    def _accept(
        self, meta: GroupMetadata, me: MemberMetadata, on_revoked: RevokeCallback | None
    ) -> Assignment | _Next:
        """Take the assignment of a Stable generation; revoke what it lacks, then rejoin."""
        assignment = me.assignment or Assignment(partitions=())
        kept = set(assignment.partitions)
        lost = tuple(tp for tp in self._owned() if tp not in kept)
        self.assignment, self.generation = assignment, meta.generation
        if lost:  # cooperative: give them up, then the follow-up rebalance hands them on
            log.info(
                "[group %s] member=%s revokes %d partitions, rejoining",
                self.group,
                self.member_id,
                len(lost),
            )
            self._revoke(lost, on_revoked)
            return _Next.REJOIN
        log.info(
            "[group %s] member=%s generation=%d partitions=%d",
            self.group,
            self.member_id,
            self.generation,
            len(assignment.partitions),
        )
        return assignment

    def _send_join(self, on_revoked: RevokeCallback | None) -> None:
        request = self._request()
        try:
            self.member_id = self.coordinator.join_group(self.group, request)
        except UnknownMemberIdError:
            if request.member_id is None:
                raise
            self._lose(on_revoked)  # removed meanwhile: join again as a new member
            self.member_id = self.coordinator.join_group(self.group, self._request())
        self._last_beat_ms = self.coordinator.clock()

    def _request(self) -> JoinGroupRequest:
        sub = self.subscription()
        if not self.cooperative:
            sub = dataclasses.replace(sub, owned=(), generation=-1)
        elif not sub.owned and self._owned():
            sub = dataclasses.replace(sub, owned=self._owned(), generation=self.generation)
        return JoinGroupRequest(
            subscription=sub,
            protocol=self.assignor.name,
            member_id=self.member_id,
            instance_id=self.instance_id,
            client_id=self.client_id,
            host=self.host,
            protocol_type=self.protocol_type,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
        )

    def _sync(self, meta: GroupMetadata) -> None:
        """As the leader: run the assignor over every member and send the result."""
        assert self.member_id is not None
        subscriptions = {k: m.subscription for k, m in meta.members.items()}
        counts = self.coordinator.partitions_per_topic(
            t for s in subscriptions.values() for t in s.topics
        )
        try:
            result = self.assignor.assign(counts, subscriptions)
        except StreamsError:
            raise
        except Exception as exc:
            raise GroupError(
                f"group {self.group!r}: assignor {self.assignor.name!r} failed on generation "
                f"{meta.generation} ({exc!r}); fix the assignor or the subscriptions"
            ) from exc
        assignments = {k: result.get(k, Assignment(partitions=())) for k in meta.members}
        try:
            self.coordinator.sync_group(
                self.group, self.member_id, meta.generation, assignments, counts
            )
        except (RebalanceInProgressError, IllegalGenerationError, UnknownMemberIdError) as exc:
            log.debug("[group %s] sync refused, polling again: %s", self.group, exc)

    # -- helpers -----------------------------------------------------------------------

    def _owned(self) -> tuple[TopicPartition, ...]:
        return self.assignment.partitions if self.assignment is not None else ()

    def _revoke(
        self, partitions: tuple[TopicPartition, ...], callback: RevokeCallback | None
    ) -> None:
        if not partitions or callback is None:
            return
        try:
            callback(partitions)
        except StreamsError:
            raise
        except Exception as exc:
            name = getattr(callback, "__qualname__", repr(callback))
            raise GroupError(
                f"group {self.group!r}: on_revoked callback {name} raised {exc!r} while member "
                f"{self.member_id!r} gave up {len(partitions)} partitions; fix the callback"
            ) from exc

    def _lose(self, on_revoked: RevokeCallback | None) -> None:
        """The member is out of the group: its partitions are gone; rejoin as a new one."""
        self._revoke(self._owned(), on_revoked)
        self.member_id, self.generation, self.assignment = None, -1, None

    def _check_fenced(self, meta: GroupMetadata) -> None:
        if self.instance_id is None or self.member_id is None:
            return
        holder = meta.static_member(self.instance_id)
        if holder is not None and holder != self.member_id:
            raise FencedInstanceIdError(
                f"group {self.group!r}: static member {self.member_id!r} (group.instance.id "
                f"{self.instance_id!r}) was replaced by {holder!r}; this one is a zombie: "
                "close it"
            )

    def _keep_alive(self) -> None:
        """Refresh the session while waiting in join(), at the heartbeat interval."""
        now = self.coordinator.clock()
        last = self._last_beat_ms
        if self.member_id is not None and (
            last is None or now - last >= self.heartbeat_interval_ms
        ):
            self.coordinator.record_heartbeat(self.group, self.member_id)
            self._last_beat_ms = now

    def _timeout_error(self, meta: GroupMetadata, timeout_ms: int | None) -> GroupJoinTimeoutError:
        waiting = sorted(k for k, m in meta.members.items() if not m.joined)
        detail = (
            f"waiting for members {waiting} to rejoin"
            if meta.state is GroupState.PREPARING_REBALANCE
            else f"leader {meta.leader!r}"
        )
        return GroupJoinTimeoutError(
            f"member {self.member_id!r} could not join group {self.group!r} within "
            f"{timeout_ms} ms: the group was stuck in {meta.state.value} (generation "
            f"{meta.generation}, {len(meta.members)} members, {detail}); call join() again, "
            "give it more time, or describe the group to find the member holding it up"
        )

    def __repr__(self) -> str:
        return (
            f"GroupMember(group={self.group!r}, member_id={self.member_id!r}, "
            f"generation={self.generation})"
        )


def _check_config(
    group: str, instance_id: str | None, session_timeout_ms: int, heartbeat_interval_ms: int
) -> None:
    if not group:
        raise ConfigError("group.id must not be empty")
    if instance_id is not None and not instance_id:
        raise ConfigError("group.instance.id must not be empty (leave it unset instead)")
    if session_timeout_ms <= 0 or heartbeat_interval_ms <= 0:
        raise ConfigError(
            f"session.timeout.ms ({session_timeout_ms}) and heartbeat.interval.ms "
            f"({heartbeat_interval_ms}) must be positive"
        )
    if heartbeat_interval_ms >= session_timeout_ms:
        raise ConfigError(
            f"heartbeat.interval.ms ({heartbeat_interval_ms}) must be lower than "
            f"session.timeout.ms ({session_timeout_ms}); Kafka advises a third of it"
        )
