"""The rebalance of a classic group: membership, timers and the leader's assignment.

Pure functions of (metadata, time, request) that return the next
:class:`~runtime.group.state.GroupMetadata` or raise the group error Kafka would answer with:
checking a member (:func:`validate_member`), starting a rebalance (:func:`prepare_rebalance`),
removing members (:func:`remove_members`), completing the join phase
(:func:`complete_join`), the due timers (:func:`timers_due`) and SyncGroup
(:func:`decide_sync`). :class:`~runtime.group.coordinator.GroupCoordinator` reads a group,
applies the due timers, decides and appends; JoinGroup is in :mod:`runtime.group.join`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

from runtime.group.assignors import Assignment, TopicPartition
from runtime.group.errors import (
    FencedInstanceIdError,
    GroupError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from runtime.group.state import GroupMetadata, GroupState, MemberMetadata

log = logging.getLogger(__name__)


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
    return complete_join(meta, now)


def complete_join(meta: GroupMetadata, now: int) -> GroupMetadata:
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
    return complete_join(meta, now)


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
