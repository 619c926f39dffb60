"""The group coordinator: Kafka's classic consumer-group protocol over compare-and-swap logs.

Each group has one compare-and-swap log (``<root>/_groups/<group>/``, see
:mod:`runtime.txn.cas_log`) whose newest document is the group's :class:`GroupMetadata`:
state, generation, protocol, leader, and the members with their subscriptions and
assignments. There is no coordinator process. Every request (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup) and every due timer is computed from the newest version and appended
as the next one; of two racing writers exactly one wins, and the other re-reads and decides
again. Nothing is believed before its append wins. The transitions are pure functions of
(metadata, time, request) in :mod:`runtime.group.rebalance` and :mod:`runtime.group.join`;
:class:`GroupCoordinator` reads, decides and appends.

Liveness stays out of the log: a heartbeat overwrites ``heartbeats/<member>`` beside the log
with the time of the beat. Timers are soft state: whoever looks at a group (a member's
heartbeat or join poll, :meth:`GroupCoordinator.expire`, :meth:`GroupCoordinator.describe`)
applies the session and rebalance timeouts that are due, as an ordinary append.

Exactly-once invariant kept here: the generation grows at every completed join phase, and
:meth:`GroupCoordinator.validate_generation` accepts an offset commit only from a member of
the current generation (KIP-447), so a zombie that lost its partitions cannot commit.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from typing import TypeVar

from common.errors import ConfigError, CoordinatorError, StorageError
from runtime.group.assignors import Assignment
from runtime.group.errors import (
    GroupError,
    GroupIdNotFoundError,
    GroupNotEmptyError,
    IllegalGenerationError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from runtime.group.join import JoinGroupRequest, decide_join
from runtime.group.rebalance import (
    decide_sync,
    prepare_rebalance,
    remove_members,
    timers_due,
    validate_member,
)
from runtime.group.state import (
    GROUPS_DIR,
    GroupMetadata,
    GroupState,
    MemberDescription,
    MemberMetadata,
)
from runtime.storage.topics import TopicAdmin
from runtime.txn.cas_log import CasLog
from runtime.txn.coordinator import now_ms
from runtime.txn.staging import id_dir

__all__ = [
    "GroupCoordinator",
    "GroupDescription",
    "GroupSnapshot",
    "GroupState",
    "JoinGroupRequest",
    "MemberDescription",
]

log = logging.getLogger(__name__)

HEARTBEATS_DIR = "heartbeats"
#: Compact a group's log every this many versions, keeping the newest ``KEEP_VERSIONS``.
COMPACT_EVERY = 32
KEEP_VERSIONS = 8
_MAX_ATTEMPTS = 1000
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as a tool shows it (Kafka's DescribeGroups)."""

    group: str
    state: GroupState
    generation: int
    protocol_type: str
    protocol: str | None
    leader: str | None
    members: tuple[MemberDescription, ...]  # sorted by member_id


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """A group's metadata as of one version of its log (-1: the group has no log)."""

    version: int
    meta: GroupMetadata


class GroupCoordinator:
    """Runs the classic group protocol of every group under one storage root.

    Safe to share between threads; processes sharing the root coordinate through the logs.

    Args:
        admin: the topic admin of the storage root (partition counts come from it).
        clock: returns the time in epoch milliseconds; every timer reads it.
        initial_rebalance_delay_ms: ``group.initial.rebalance.delay.ms``: how long the first
            rebalance of an empty group waits for more members (0: no wait).

    Raises:
        ConfigError: ``initial_rebalance_delay_ms`` is negative.
    """

    def __init__(
        self,
        admin: TopicAdmin,
        *,
        clock: Callable[[], int] = now_ms,
        initial_rebalance_delay_ms: int = 3000,
    ) -> None:
        if initial_rebalance_delay_ms < 0:
            raise ConfigError(
                "group.initial.rebalance.delay.ms must be 0 or more, got "
                f"{initial_rebalance_delay_ms}"
            )
        self.admin = admin
        self.root = admin.root
        self.clock = clock
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self._logs: dict[str, CasLog] = {}
        self._lock = threading.RLock()  # CasLog and TopicAdmin objects are not thread-safe

    # -- tools -------------------------------------------------------------------------

    def list_groups(self) -> list[str]:
        """Return every group that has a log (in any state but Dead), sorted."""
        names = []
        for info in self.root.list_subdirs(self.root.path(GROUPS_DIR)):
            with self._lock:
                latest = CasLog(self.root, (GROUPS_DIR, info.base_name)).read_latest()
            if latest is not None:
                meta = GroupMetadata.from_json(latest[1])
                if meta.state is not GroupState.DEAD:
                    names.append(meta.group)
        return sorted(names)

    def describe(self, group: str) -> GroupDescription:
        """Return the group after applying its due timers (an unknown group is Dead)."""
        return self._describe(self.load(group).meta)

    def expire(self, group: str) -> GroupDescription:
        """Remove members past their session timeout and end overdue rebalance phases.

        Returns:
            The group afterwards (a removal starts a rebalance).
        """
        return self.describe(group)

    def delete_group(self, group: str) -> None:
        """Delete the group's log (Kafka's DeleteGroups); no error if it has none.

        Committed offsets live in ``__consumer_offsets`` and are not touched here.

        Raises:
            GroupNotEmptyError: the group has members; stop them (or wait for their session
                timeout) first.
        """

        def decide(meta: GroupMetadata, now: int) -> tuple[GroupMetadata, None]:
            if meta.state is GroupState.DEAD:
                return meta, None
            if meta.state is not GroupState.EMPTY:
                raise GroupNotEmptyError(
                    f"group {group!r} is {meta.state.value} with {len(meta.members)} "
                    f"member(s) ({', '.join(sorted(meta.members))}); stop them or wait for "
                    "their session timeout, then delete the group"
                )
            return meta.transition(GroupState.DEAD, now), None

        snap, _ = self._update(group, decide)
        if snap.version >= 0:  # Dead is written first, so a racing join cannot be lost
            with self._lock:
                self.cas_log(group).delete()
            log.info("[group %s] deleted", group)

    def validate_generation(self, group: str, member_id: str, generation: int) -> None:
        """Check that ``member_id`` may commit offsets for ``generation`` (KIP-447).

        Due expiries are applied first. A commit of the current generation is accepted
        while the group rebalances, as in Kafka. An empty member id with generation -1 is a
        "simple" commit, allowed only while the group has no members.

        Raises:
            UnknownMemberIdError: the member is not in the group (left, expired, removed).
            GroupIdNotFoundError: the group has no log (never joined, or deleted).
            IllegalGenerationError: ``generation`` is not the group's current generation.
        """
        snap = self.load(group)
        meta = snap.meta
        if not member_id and generation < 0:
            if meta.state in (GroupState.EMPTY, GroupState.DEAD):
                return
            raise UnknownMemberIdError(
                f"group {group!r} has {len(meta.members)} active member(s): offsets may only "
                "be committed with a member id and generation of the group, or once it is "
                "Empty"
            )
        if snap.version < 0 or meta.state is GroupState.DEAD:
            raise GroupIdNotFoundError(
                f"group {group!r} does not exist, so member {member_id!r} of generation "
                f"{generation} is fenced: rejoin the group before committing"
            )
        validate_member(meta, member_id, None)
        if generation != meta.generation:
            raise IllegalGenerationError(
                f"group {group!r}: member {member_id!r} commits for generation {generation} "
                f"but the group is at generation {meta.generation}; its partitions may have "
                "moved: rejoin the group"
            )

    # -- the protocol ------------------------------------------------------------------

    def load(self, group: str) -> GroupSnapshot:
        """Return the newest version of the group after applying its due timers."""
        snap, _ = self._update(group, lambda meta, now: (meta, None))
        return snap

    def join_group(self, group: str, request: JoinGroupRequest) -> str:
        """Run JoinGroup: add or update the member, starting a rebalance when needed.

        Returns at once; the member then polls :meth:`load` until its generation is Stable.

        Returns:
            The member id (a new one when ``request.member_id`` is None).

        Raises:
            UnknownMemberIdError: ``request.member_id`` is not in the group: join without it.
            FencedInstanceIdError: the static member id was replaced by a newer instance.
            InconsistentGroupProtocolError: the other members use another protocol.
            TopologyMismatchError: the request's ``topology`` fingerprint (streams members)
                differs from another process's member's.
        """
        snap, member_id = self._update(
            group,
            lambda meta, now: decide_join(meta, now, request, self.initial_rebalance_delay_ms),
        )
        log.debug("[group %s] join member=%s state=%s", group, member_id, snap.meta.state.value)
        return member_id

    def sync_group(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: Mapping[str, Assignment],
        partitions_per_topic: Mapping[str, int],
    ) -> None:
        """Run the leader's SyncGroup: store every member's assignment; the group is Stable.

        Args:
            group: the group.
            member_id: the leader.
            generation: the generation the assignment was computed for.
            assignments: one assignment per member of that generation.
            partitions_per_topic: the partition counts the assignment was computed from
                (a later change of them starts a rebalance).

        Raises:
            RebalanceInProgressError: a new rebalance began, or the membership changed
                since the leader read it: read the group again and recompute.
            IllegalGenerationError: ``generation`` is not the current one.
            UnknownMemberIdError: the leader is not in the group any more.
        """
        self._update(
            group,
            lambda meta, now: decide_sync(
                meta,
                now,
                member_id=member_id,
                generation=generation,
                assignments=assignments,
                partitions_per_topic=partitions_per_topic,
            ),
        )

    def heartbeat(
        self, group: str, member_id: str, generation: int, *, instance_id: str | None = None
    ) -> None:
        """Run Heartbeat: record that the member is alive, and check the group.

        In a Stable group the partition counts of the subscribed topics are compared with
        those of the last assignment; a change starts a rebalance.

        Raises:
            RebalanceInProgressError: the group is rebalancing: rejoin.
            IllegalGenerationError: ``generation`` is stale: rejoin.
            UnknownMemberIdError: the member is not in the group: rejoin.
            FencedInstanceIdError: a newer instance took this static member's place.
        """
        meta = self.load(group).meta
        validate_member(meta, member_id, instance_id)
        if generation != meta.generation:
            raise IllegalGenerationError(
                f"group {group!r}: member {member_id!r} is at generation {generation} but the "
                f"group is at generation {meta.generation}: rejoin the group"
            )
        self.record_heartbeat(group, member_id)
        if meta.state is GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgressError(
                f"group {group!r} is rebalancing (generation {meta.generation}): rejoin"
            )
        if meta.state is GroupState.STABLE:
            self._check_metadata(meta)

    def leave_group(self, group: str, member_id: str, *, instance_id: str | None = None) -> None:
        """Run LeaveGroup: remove the member at once; the others rebalance.

        Raises:
            UnknownMemberIdError: the member is not in the group (already gone).
            FencedInstanceIdError: a newer instance took this static member's place.
        """

        def decide(meta: GroupMetadata, now: int) -> tuple[GroupMetadata, None]:
            validate_member(meta, member_id, instance_id)
            return remove_members(meta, {member_id}, now), None

        self._update(group, decide)
        log.info("[group %s] member=%s left", group, member_id)

    def record_heartbeat(self, group: str, member_id: str) -> None:
        """Write the member's liveness file (the time now); the session timer reads it."""
        data = str(self.clock()).encode()
        self.root.write_bytes(self._heartbeat_path(group, member_id), data)

    def partitions_per_topic(self, topics: Iterable[str]) -> dict[str, int]:
        """Return the partition count of each existing topic of ``topics``."""
        with self._lock:
            return {t: self.admin.num_partitions(t) for t in sorted(set(topics)) if self._has(t)}

    def cas_log(self, group: str) -> CasLog:
        """Return the compare-and-swap log of ``group``."""
        with self._lock:
            found = self._logs.get(group)
            if found is None:
                found = CasLog(self.root, (GROUPS_DIR, id_dir(group)), keep=KEEP_VERSIONS)
                self._logs[group] = found
            return found

    # -- internals ---------------------------------------------------------------------

    def _update(
        self, group: str, decide: Callable[[GroupMetadata, int], tuple[GroupMetadata, _T]]
    ) -> tuple[GroupSnapshot, _T]:
        """Read, apply due timers, decide, append; on a lost race read and decide again.

        When ``decide`` refuses (raises), the due timers are still appended.
        """
        for _ in range(_MAX_ATTEMPTS):
            snap = self._read(group)
            now = self.clock()
            current = timers_due(snap.meta, now, self._last_heartbeat)
            try:
                new, result = decide(current, now)
            except GroupError:
                if current is not snap.meta:
                    self._append(snap, current)
                raise
            if new is snap.meta:
                return snap, result
            if self._append(snap, new):
                return GroupSnapshot(snap.version + 1, new), result
        raise CoordinatorError(
            f"group {group!r}: lost {_MAX_ATTEMPTS} compare-and-swap races in a row on "
            f"{self.cas_log(group).location}; retry"
        )

    def _read(self, group: str) -> GroupSnapshot:
        with self._lock:
            latest = self.cas_log(group).read_latest()
        if latest is None:
            return GroupSnapshot(-1, GroupMetadata(group, state=GroupState.DEAD))
        return GroupSnapshot(latest[0], GroupMetadata.from_json(latest[1]))

    def _append(self, snap: GroupSnapshot, new: GroupMetadata) -> bool:
        cas = self.cas_log(new.group)
        with self._lock:
            if not cas.append(snap.version, new.to_json()):
                return False
        old = snap.meta
        if old.state is not new.state or old.generation != new.generation:
            log.info(
                "[group %s] %s -> %s generation=%d leader=%s members=%d",
                new.group,
                old.state.value,
                new.state.value,
                new.generation,
                new.leader,
                len(new.members),
            )
        for member_id in set(old.members) - set(new.members):
            self._forget_heartbeat(new.group, member_id)
        if (snap.version + 1) % COMPACT_EVERY == 0:
            with self._lock:
                cas.compact()
        return True

    def _check_metadata(self, meta: GroupMetadata) -> None:
        """Start a rebalance if a subscribed topic's partition count changed since sync."""
        topics = {t for m in meta.members.values() for t in m.subscription.topics}
        counts = self.partitions_per_topic(topics)
        if counts == dict(meta.topic_partitions):
            return

        def decide(current: GroupMetadata, now: int) -> tuple[GroupMetadata, None]:
            if current.state is GroupState.STABLE and current.generation == meta.generation:
                return prepare_rebalance(current, now), None
            return current, None

        self._update(meta.group, decide)
        log.info("[group %s] partition counts changed to %s: rebalancing", meta.group, counts)
        raise RebalanceInProgressError(
            f"group {meta.group!r}: the partition count of a subscribed topic changed "
            f"({dict(meta.topic_partitions)} -> {counts}); rejoin for a new assignment"
        )

    def _has(self, topic: str) -> bool:
        try:
            return self.admin.exists(topic)
        except ValueError:  # an invalid topic name cannot exist
            return False

    def _heartbeat_path(self, group: str, member_id: str) -> str:
        return self.root.path(GROUPS_DIR, id_dir(group), HEARTBEATS_DIR, id_dir(member_id))

    def _last_heartbeat(self, group: str, member: MemberMetadata) -> int:
        """Return the member's last sign of life: its last join or sync, or heartbeat."""
        raw = self.root.read_bytes(self._heartbeat_path(group, member.member_id))
        try:
            beat = int(raw) if raw else 0
        except ValueError:  # a torn write cannot happen (atomic), but never trust a file
            beat = 0
        return max(member.seen_ms, beat)

    def _forget_heartbeat(self, group: str, member_id: str) -> None:
        with suppress(StorageError):
            self.root.delete_file(self._heartbeat_path(group, member_id))

    def _describe(self, meta: GroupMetadata) -> GroupDescription:
        members = tuple(
            MemberDescription(
                member_id=m.member_id,
                instance_id=m.instance_id,
                client_id=m.client_id,
                host=m.host,
                session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                last_heartbeat_ms=self._last_heartbeat(meta.group, m),
                subscription=m.subscription,
                assignment=m.assignment or Assignment(partitions=()),
            )
            for _, m in sorted(meta.members.items())
        )
        return GroupDescription(
            group=meta.group,
            state=meta.state,
            generation=meta.generation,
            protocol_type=meta.protocol_type,
            protocol=meta.protocol,
            leader=meta.leader,
            members=members,
        )
