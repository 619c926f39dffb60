"""A classic consumer group's state and its transitions (Kafka's ``ClassicGroup``).

:class:`GroupMetadata` is the document each version of a group's compare-and-swap log holds:
state, generation, protocol, leader, and the members with their subscriptions and
assignments. The transitions are pure functions of (metadata, time, request) that return
the next metadata or raise the group error Kafka would answer with;
:class:`~runtime.group.coordinator.GroupCoordinator` reads a group, applies the due timers
(:func:`timers_due`), decides (:func:`decide_join`, :func:`decide_sync`, ...) and appends.
"""

from __future__ import annotations

import enum
import json
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from runtime.group.assignors import Assignment, Subscription, TopicPartition
from runtime.group.errors import (
    FencedInstanceIdError,
    GroupError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    RebalanceInProgressError,
    TopologyMismatchError,
    UnknownMemberIdError,
)
from streams.errors import CoordinatorError

log = logging.getLogger(__name__)

#: The directory of the groups' logs under the storage root.
GROUPS_DIR = "_groups"


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


def prepare_rebalance(meta: GroupMetadata, now: int, joined: str | None = None) -> GroupMetadata:
    """Stable/CompletingRebalance -> PreparingRebalance: every member (but ``joined``) must
    rejoin."""
    members = {k: replace(m, joined=k == joined) for k, m in meta.members.items()}
    return meta.transition(GroupState.PREPARING_REBALANCE, now, members=members)


def remove_members(meta: GroupMetadata, gone: set[str], now: int) -> GroupMetadata:
    """Remove members (left, expired, or failed a rebalance); the others rebalance."""
    members = {k: m for k, m in meta.members.items() if k not in gone}
    leader = None if meta.leader in gone else meta.leader
    meta = replace(meta, members=members, leader=leader)
    if meta.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
        meta = prepare_rebalance(meta, now)
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


def timers_due(
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
        meta = remove_members(meta, expired, now)
    if (
        meta.state is GroupState.COMPLETING_REBALANCE
        and meta.leader is not None
        and now >= meta.state_timestamp_ms + meta.rebalance_timeout_ms
    ):
        log.warning("[group %s] leader %s never sent the assignment", meta.group, meta.leader)
        return remove_members(meta, {meta.leader}, now)
    return _complete_join(meta, now)


def decide_join(
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
    _check_topology(meta.group, others, request.subscription)


def _check_topology(group: str, others: list[MemberMetadata], sub: Subscription) -> None:
    """Refuse a streams member whose topology differs from other processes' members (the
    threads of its own process may still hold a slot of the topology it ran before a
    restart: they rejoin with the new one next)."""
    topology, process = sub.user_data.get("topology"), sub.user_data.get("process_id")
    if topology is None:
        return
    running = {
        str(m.subscription.user_data.get("process_id")): m.subscription.user_data["topology"]
        for m in others
        if m.subscription.user_data.get("topology") not in (None, topology)
        and m.subscription.user_data.get("process_id") != process
    }
    if running:
        processes = ", ".join(f"{p} (topology {t})" for p, t in sorted(running.items()))
        raise TopologyMismatchError(
            f"application {group!r}: process {process} runs topology {topology}, but the "
            f"running instances {processes} run another one; every instance of one "
            "application.id must run the same topology. Stop the old instances first (a "
            "stopped instance's members expire after session.timeout.ms), or give the "
            "changed topology a new application.id, or run streams-eos application-reset"
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
        meta = prepare_rebalance(meta, now)
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
    return _complete_join(prepare_rebalance(meta, now, joined=new_id), now), new_id


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
    return _complete_join(prepare_rebalance(_set_member(meta, member), now, joined=member_id), now)


def decide_sync(
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
