"""The group coordinator: Kafka's classic consumer-group protocol over compare-and-swap logs.

Each group has one compare-and-swap log (``<root>/_groups/<group>/``, see
:mod:`runtime.txn.cas_log`) whose newest document is the group's :class:`GroupMetadata`:
state, generation, protocol, leader, and the members with their subscriptions and
assignments. There is no coordinator process. Every request (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup) and every due timer is computed from the newest version and appended
as the next one; of two racing writers exactly one wins, and the other re-reads and decides
again. Nothing is believed before its append wins. The transitions are pure functions of
(metadata, time, request); :class:`GroupCoordinator` reads, decides and appends.

Liveness stays out of the log: a heartbeat overwrites ``heartbeats/<member>`` beside the log
with the time of the beat. Timers are soft state: whoever looks at a group (a member's
heartbeat or join poll, :meth:`GroupCoordinator.expire`, :meth:`GroupCoordinator.describe`)
applies the session and rebalance timeouts that are due, as an ordinary append.

Exactly-once invariant kept here: the generation grows at every completed join phase, and
:meth:`GroupCoordinator.validate_generation` accepts an offset commit only from a member of
the current generation (KIP-447), so a zombie that lost its partitions cannot commit.
"""

from __future__ import annotations

import enum
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from runtime.group.assignors import Assignment, Subscription, TopicPartition
from runtime.group.errors import (
    FencedInstanceIdError,
    GroupError,
    GroupIdNotFoundError,
    GroupNotEmptyError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from runtime.storage.topics import TopicAdmin
from runtime.txn.cas_log import CasLog
from runtime.txn.coordinator import id_dir, now_ms
from streams.errors import ConfigError, CoordinatorError, StorageError

if TYPE_CHECKING:
    from runtime.group.member import GroupMember

__all__ = [
    "GroupCoordinator",
    "GroupDescription",
    "GroupMember",
    "GroupSnapshot",
    "GroupState",
    "JoinGroupRequest",
    "MemberDescription",
]

log = logging.getLogger(__name__)

GROUPS_DIR = "_groups"
HEARTBEATS_DIR = "heartbeats"
#: Compact a group's log every this many versions, keeping the newest ``KEEP_VERSIONS``.
COMPACT_EVERY = 32
KEEP_VERSIONS = 8
_MAX_ATTEMPTS = 1000
_T = TypeVar("_T")


def __getattr__(name: str) -> Any:
    """Re-export :class:`GroupMember` lazily (its module imports this one)."""
    if name == "GroupMember":
        from runtime.group.member import GroupMember

        return GroupMember
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class GroupState(enum.Enum):
    """The states of a classic group (Kafka's ``ClassicGroupState``)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_EMPTY = GroupState.EMPTY
_PREPARING = GroupState.PREPARING_REBALANCE
_COMPLETING = GroupState.COMPLETING_REBALANCE
_STABLE = GroupState.STABLE
_DEAD = GroupState.DEAD

#: The allowed transitions (target -> allowed sources), as Kafka's ``validPreviousStates``.
_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    _EMPTY: frozenset({_PREPARING}),
    _PREPARING: frozenset({_EMPTY, _COMPLETING, _STABLE}),
    _COMPLETING: frozenset({_PREPARING}),
    _STABLE: frozenset({_COMPLETING}),
    _DEAD: frozenset({_EMPTY, _PREPARING, _COMPLETING, _STABLE, _DEAD}),
}


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """A member as a tool shows it (Kafka's DescribeGroups member)."""

    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    last_heartbeat_ms: int
    subscription: Subscription
    assignment: Assignment


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    """A JoinGroup request: who joins, with what subscription and assignor (``protocol``)."""

    subscription: Subscription
    protocol: str
    member_id: str | None = None
    instance_id: str | None = None
    client_id: str = ""
    host: str = ""
    protocol_type: str = "consumer"
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 300_000


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """A member as the group's log stores it.

    ``generation`` is the generation the member belongs to (-1: none yet); ``joined`` says
    that it rejoined the rebalance in progress; ``seen_ms`` is its last join or sync (the
    session timer also reads the member's heartbeat file).
    """

    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol: str
    subscription: Subscription
    assignment: Assignment | None = None
    generation: int = -1
    joined: bool = False
    seen_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        """Return the member as a JSON-able dict."""
        sub, assignment = self.subscription, self.assignment
        return {
            "instance_id": self.instance_id,
            "client_id": self.client_id,
            "host": self.host,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "protocol": self.protocol,
            "subscription": _subscription_json(sub),
            "assignment": None
            if assignment is None
            else {"partitions": [list(tp) for tp in assignment.partitions]}
            | {"user_data": dict(assignment.user_data)},
            "generation": self.generation,
            "joined": self.joined,
            "seen_ms": self.seen_ms,
        }

    @classmethod
    def from_json(cls, member_id: str, doc: Mapping[str, Any]) -> MemberMetadata:
        """Rebuild a member from :meth:`to_json`'s output."""
        sub, assignment = doc["subscription"], doc["assignment"]
        return cls(
            member_id=member_id,
            instance_id=doc["instance_id"],
            client_id=doc["client_id"],
            host=doc["host"],
            session_timeout_ms=int(doc["session_timeout_ms"]),
            rebalance_timeout_ms=int(doc["rebalance_timeout_ms"]),
            protocol=doc["protocol"],
            subscription=Subscription(
                topics=tuple(sub["topics"]),
                owned=tuple((str(t), int(p)) for t, p in sub["owned"]),
                generation=int(sub["generation"]),
                user_data=sub["user_data"],
            ),
            assignment=None
            if assignment is None
            else Assignment(
                partitions=tuple((str(t), int(p)) for t, p in assignment["partitions"]),
                user_data=assignment["user_data"],
            ),
            generation=int(doc["generation"]),
            joined=bool(doc["joined"]),
            seen_ms=int(doc["seen_ms"]),
        )


def _subscription_json(sub: Subscription) -> dict[str, Any]:
    return {
        "topics": list(sub.topics),
        "owned": [list(tp) for tp in sub.owned],
        "generation": sub.generation,
        "user_data": dict(sub.user_data),
    }


def _same_subscription(a: Subscription, b: Subscription) -> bool:
    """Compare as stored (JSON), so a tuple in user data equals the list read back."""
    return json.dumps(_subscription_json(a), sort_keys=True) == json.dumps(
        _subscription_json(b), sort_keys=True
    )


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """A group as the newest version of its log stores it (Kafka's GroupMetadataValue).

    ``state_timestamp_ms`` is when the current state began (the rebalance timers count
    from it); ``join_not_before_ms`` holds the initial rebalance delay back;
    ``topic_partitions`` are the partition counts of the last assignment.
    """

    group: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str = ""
    protocol: str | None = None
    leader: str | None = None
    members: Mapping[str, MemberMetadata] = field(default_factory=dict)
    state_timestamp_ms: int = 0
    join_not_before_ms: int | None = None
    topic_partitions: Mapping[str, int] = field(default_factory=dict)

    def transition(self, state: GroupState, now: int, **changes: Any) -> GroupMetadata:
        """Return the group moved to ``state`` at ``now``, with ``changes`` applied.

        Raises:
            GroupError: Kafka's state machine does not allow the move (a bug).
        """
        if self.state not in _PREVIOUS[state]:
            raise GroupError(
                f"group {self.group!r}: illegal state transition {self.state.value} -> "
                f"{state.value}"
            )
        return replace(self, state=state, state_timestamp_ms=now, **changes)

    def static_member(self, instance_id: str) -> str | None:
        """Return the member id holding ``instance_id``, or None."""
        for member_id, member in self.members.items():
            if member.instance_id == instance_id:
                return member_id
        return None

    @property
    def rebalance_timeout_ms(self) -> int:
        """Return the group's rebalance timeout: the largest of its members'."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def to_json(self) -> dict[str, Any]:
        """Return the group as the JSON document of one log version."""
        return {
            "group": self.group,
            "state": self.state.value,
            "generation": self.generation,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            "leader": self.leader,
            "members": {k: m.to_json() for k, m in sorted(self.members.items())},
            "state_timestamp_ms": self.state_timestamp_ms,
            "join_not_before_ms": self.join_not_before_ms,
            "topic_partitions": dict(sorted(self.topic_partitions.items())),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> GroupMetadata:
        """Rebuild a group from :meth:`to_json`'s output.

        Raises:
            CoordinatorError: the document is not a group (a corrupt or foreign log).
        """
        try:
            return cls(
                group=doc["group"],
                state=GroupState(doc["state"]),
                generation=int(doc["generation"]),
                protocol_type=doc["protocol_type"],
                protocol=doc["protocol"],
                leader=doc["leader"],
                members={k: MemberMetadata.from_json(k, v) for k, v in doc["members"].items()},
                state_timestamp_ms=int(doc["state_timestamp_ms"]),
                join_not_before_ms=doc["join_not_before_ms"],
                topic_partitions={k: int(v) for k, v in doc["topic_partitions"].items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CoordinatorError(
                f"a group log holds a document that is not a group ({exc!r}); the log under "
                f"{GROUPS_DIR}/ is corrupt or was written by something else: delete it"
            ) from exc


# -- the transitions (pure: metadata, time and request in, metadata out) -------------------


def validate_member(meta: GroupMetadata, member_id: str, instance_id: str | None) -> None:
    """Check that ``member_id`` (and its static ``instance_id``) is in the group.

    Raises:
        FencedInstanceIdError: ``instance_id`` now belongs to another member id.
        UnknownMemberIdError: the member is not in the group.
        GroupIdNotFoundError: the group has no log.
    """
    if meta.state is GroupState.DEAD:
        raise GroupIdNotFoundError(
            f"group {meta.group!r} does not exist (deleted, or never joined), so member "
            f"{member_id!r} is unknown: rejoin the group"
        )
    holder = None if instance_id is None else meta.static_member(instance_id)
    if holder is not None and holder != member_id:
        raise FencedInstanceIdError(
            f"group {meta.group!r}: static member {member_id!r} (group.instance.id "
            f"{instance_id!r}) was replaced by the newer member {holder!r}; this one is a "
            "zombie: close it (and give each running process its own instance id)"
        )
    if member_id not in meta.members:
        raise UnknownMemberIdError(
            f"group {meta.group!r} has no member {member_id!r} (it left, its session timed "
            "out, or it missed the rebalance): rejoin the group with a new member id"
        )


def _prepare_rebalance(meta: GroupMetadata, now: int, joined: str | None = None) -> GroupMetadata:
    """Stable/CompletingRebalance -> PreparingRebalance: every member (but ``joined``) must
    rejoin."""
    members = {k: replace(m, joined=k == joined) for k, m in meta.members.items()}
    return meta.transition(GroupState.PREPARING_REBALANCE, now, members=members)


def _remove_members(meta: GroupMetadata, gone: set[str], now: int) -> GroupMetadata:
    """Remove members (left, expired, or failed a rebalance); the others rebalance."""
    members = {k: m for k, m in meta.members.items() if k not in gone}
    leader = None if meta.leader in gone else meta.leader
    meta = replace(meta, members=members, leader=leader)
    if meta.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
        meta = _prepare_rebalance(meta, now)
    return _complete_join(meta, now)


def _complete_join(meta: GroupMetadata, now: int) -> GroupMetadata:
    """PreparingRebalance -> CompletingRebalance (or Empty) when every member rejoined and
    the initial delay is over, or when the rebalance timeout expired (then dynamic members
    that did not rejoin are removed; static ones keep their place, as in Kafka)."""
    if meta.state is not GroupState.PREPARING_REBALANCE:
        return meta
    timed_out = now >= meta.state_timestamp_ms + meta.rebalance_timeout_ms
    waiting = not all(m.joined for m in meta.members.values()) or (
        meta.join_not_before_ms is not None and now < meta.join_not_before_ms
    )
    if waiting and not timed_out:
        return meta
    members = {k: m for k, m in meta.members.items() if m.joined or m.instance_id is not None}
    if not members:
        return meta.transition(
            GroupState.EMPTY,
            now,
            generation=meta.generation + 1,
            members={},
            protocol=None,
            leader=None,
            join_not_before_ms=None,
            topic_partitions={},
        )
    joined = sorted(k for k, m in members.items() if m.joined)
    if not joined:  # only static members that did not rejoin: wait another timeout
        return replace(meta, members=members, state_timestamp_ms=now)
    generation = meta.generation + 1
    leader = meta.leader if meta.leader in joined else joined[0]
    members = {
        k: replace(m, joined=False, generation=generation) if m.joined else m
        for k, m in members.items()
    }
    return meta.transition(
        GroupState.COMPLETING_REBALANCE,
        now,
        generation=generation,
        leader=leader,
        protocol=members[leader].protocol,
        members=members,
        join_not_before_ms=None,
    )


def _timers_due(
    meta: GroupMetadata, now: int, last_heartbeat: Callable[[str, MemberMetadata], int]
) -> GroupMetadata:
    """Apply the timers due at ``now``: session expiry, rebalance and sync timeouts.

    Returns ``meta`` itself when nothing is due.
    """
    if meta.state in (GroupState.EMPTY, GroupState.DEAD):
        return meta
    expired = {
        k
        for k, m in meta.members.items()
        if now - m.seen_ms > m.session_timeout_ms
        and now - last_heartbeat(meta.group, m) > m.session_timeout_ms
    }
    if expired:
        log.info("[group %s] session timeout of members %s", meta.group, sorted(expired))
        meta = _remove_members(meta, expired, now)
    if (
        meta.state is GroupState.COMPLETING_REBALANCE
        and meta.leader is not None
        and now >= meta.state_timestamp_ms + meta.rebalance_timeout_ms
    ):
        log.warning("[group %s] leader %s never sent the assignment", meta.group, meta.leader)
        return _remove_members(meta, {meta.leader}, now)
    return _complete_join(meta, now)


def _decide_join(
    meta: GroupMetadata, now: int, request: JoinGroupRequest, delay_ms: int
) -> tuple[GroupMetadata, str]:
    """JoinGroup: return the group with the member added or updated, and its member id."""
    if meta.state is GroupState.DEAD:
        meta = GroupMetadata(meta.group)  # a new (or re-created) group
    _check_protocol(meta, request)
    member_id, instance_id = request.member_id, request.instance_id
    if instance_id is not None:
        holder = meta.static_member(instance_id)
        if holder is not None and member_id is None:
            return _replace_static(meta, now, request, holder)
        if member_id is not None:
            validate_member(meta, member_id, instance_id)
    if member_id is None:
        member_id = f"{instance_id or request.client_id or request.protocol_type}-{uuid.uuid4()}"
        return _add_member(meta, now, request, member_id, delay_ms), member_id
    validate_member(meta, member_id, instance_id)
    return _update_member(meta, now, request, member_id), member_id


def _check_protocol(meta: GroupMetadata, request: JoinGroupRequest) -> None:
    others = [
        m
        for k, m in meta.members.items()
        if k != request.member_id
        and (request.instance_id is None or m.instance_id != request.instance_id)
    ]
    if others and (
        meta.protocol_type != request.protocol_type
        or any(m.protocol != request.protocol for m in others)
    ):
        raise InconsistentGroupProtocolError(
            f"group {meta.group!r} uses protocol type {meta.protocol_type!r} with assignor "
            f"{others[0].protocol!r}, but a member asked to join with "
            f"{request.protocol_type!r}/{request.protocol!r}: configure the same "
            "partition.assignment.strategy in every member, or use another group id"
        )


def _new_member(request: JoinGroupRequest, member_id: str, now: int) -> MemberMetadata:
    return MemberMetadata(
        member_id=member_id,
        instance_id=request.instance_id,
        client_id=request.client_id,
        host=request.host,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        protocol=request.protocol,
        subscription=request.subscription,
        joined=True,
        seen_ms=now,
    )


def _add_member(
    meta: GroupMetadata, now: int, request: JoinGroupRequest, member_id: str, delay_ms: int
) -> GroupMetadata:
    member = _new_member(request, member_id, now)
    if meta.state is GroupState.EMPTY:
        meta = meta.transition(
            GroupState.PREPARING_REBALANCE,
            now,
            protocol_type=request.protocol_type,
            join_not_before_ms=now + delay_ms if delay_ms > 0 else None,
        )
    elif meta.state is not GroupState.PREPARING_REBALANCE:
        meta = _prepare_rebalance(meta, now)
    members = {**meta.members, member_id: member}
    not_before = meta.join_not_before_ms
    if not_before is not None and now < not_before:  # Kafka's InitialDelayedJoin: extend
        bound = meta.state_timestamp_ms + max(
            meta.rebalance_timeout_ms, member.rebalance_timeout_ms
        )
        not_before = max(not_before, min(now + delay_ms, bound))
    return _complete_join(replace(meta, members=members, join_not_before_ms=not_before), now)


def _replace_static(
    meta: GroupMetadata, now: int, request: JoinGroupRequest, old_id: str
) -> tuple[GroupMetadata, str]:
    """KIP-345: a static member's new instance takes the old one's place (the old id is
    fenced). With unchanged topics the group keeps its generation and assignment."""
    old = meta.members[old_id]
    new_id = f"{request.instance_id}-{uuid.uuid4()}"
    member = replace(
        _new_member(request, new_id, now),
        assignment=old.assignment,
        generation=old.generation,
        joined=old.joined,
    )
    members = {k: m for k, m in meta.members.items() if k != old_id} | {new_id: member}
    leader = new_id if meta.leader == old_id else meta.leader
    meta = replace(meta, members=members, leader=leader)
    unchanged = old.protocol == request.protocol and set(old.subscription.topics) == set(
        request.subscription.topics
    )
    log.info("[group %s] static member %s replaced %s", meta.group, new_id, old_id)
    if meta.state is GroupState.PREPARING_REBALANCE:
        return _complete_join(_set_member(meta, replace(member, joined=True)), now), new_id
    if unchanged:
        return meta, new_id
    return _complete_join(_prepare_rebalance(meta, now, joined=new_id), now), new_id


def _set_member(meta: GroupMetadata, member: MemberMetadata) -> GroupMetadata:
    return replace(meta, members={**meta.members, member.member_id: member})


def _update_member(
    meta: GroupMetadata, now: int, request: JoinGroupRequest, member_id: str
) -> GroupMetadata:
    """A known member joins again: Kafka's rules for each state."""
    old = meta.members[member_id]
    changed = old.protocol != request.protocol or not _same_subscription(
        old.subscription, request.subscription
    )
    member = replace(
        old,
        client_id=request.client_id,
        host=request.host,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        protocol=request.protocol,
        subscription=request.subscription,
        seen_ms=now,
    )
    if meta.state is GroupState.PREPARING_REBALANCE:
        return _complete_join(_set_member(meta, replace(member, joined=True)), now)
    # The leader rejoining a Stable group forces a rebalance (it may know of new metadata);
    # a follower with unchanged metadata takes the current generation.
    forced = meta.state is GroupState.STABLE and member_id == meta.leader
    if not changed and not forced:
        if old.generation == meta.generation:
            return meta
        return _set_member(meta, replace(member, generation=meta.generation))
    return _complete_join(_prepare_rebalance(_set_member(meta, member), now, joined=member_id), now)


def _decide_sync(
    meta: GroupMetadata,
    now: int,
    *,
    member_id: str,
    generation: int,
    assignments: Mapping[str, Assignment],
    partitions_per_topic: Mapping[str, int],
) -> tuple[GroupMetadata, None]:
    """SyncGroup from the leader: CompletingRebalance -> Stable with every assignment."""
    validate_member(meta, member_id, None)
    group = meta.group
    if generation != meta.generation:
        raise IllegalGenerationError(
            f"group {group!r}: the assignment is for generation {generation} but the group "
            f"is at generation {meta.generation}: rejoin the group"
        )
    if meta.state is GroupState.PREPARING_REBALANCE:
        raise RebalanceInProgressError(f"group {group!r} is rebalancing again: rejoin")
    if meta.state is GroupState.STABLE:
        return meta, None  # a retried sync of the same generation
    if member_id != meta.leader:
        raise GroupError(
            f"group {group!r}: member {member_id!r} sent an assignment but the leader is "
            f"{meta.leader!r}; only the leader assigns (a bug in the caller)"
        )
    if set(assignments) != set(meta.members):
        raise RebalanceInProgressError(
            f"group {group!r}: the members changed while the leader assigned: recompute"
        )
    _check_disjoint(group, assignments)
    members = {
        k: replace(m, assignment=assignments[k], seen_ms=now if k == member_id else m.seen_ms)
        for k, m in meta.members.items()
    }
    new = meta.transition(
        GroupState.STABLE, now, members=members, topic_partitions=dict(partitions_per_topic)
    )
    return new, None


def _check_disjoint(group: str, assignments: Mapping[str, Assignment]) -> None:
    """Refuse an assignment that gives one partition to two members (an assignor bug)."""
    owner: dict[TopicPartition, str] = {}
    for member_id, assignment in sorted(assignments.items()):
        for tp in assignment.partitions:
            other = owner.setdefault(tp, member_id)
            if other != member_id:
                raise GroupError(
                    f"group {group!r}: the assignor gave partition {tp[0]}-{tp[1]} to both "
                    f"{other!r} and {member_id!r}; fix the assignor"
                )


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
        for info in self.root.list_dir(self.root.path(GROUPS_DIR)):
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
        """
        snap, member_id = self._update(
            group,
            lambda meta, now: _decide_join(meta, now, request, self.initial_rebalance_delay_ms),
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
            lambda meta, now: _decide_sync(
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
            return _remove_members(meta, {member_id}, now), None

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
            current = _timers_due(snap.meta, now, self._last_heartbeat)
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
                return _prepare_rebalance(current, now), None
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
