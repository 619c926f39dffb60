"""JoinGroup: how a classic group takes a member in (Kafka's ``GroupCoordinator.handleJoinGroup``).

:class:`JoinGroupRequest` is what a member sends; :func:`decide_join` returns the group with
the member added (a new dynamic member), updated (a known member joining again) or replacing
a static member's old instance (KIP-345), and the member's id, after checking that the
member's protocol and topology agree with the other members'. Like the rest of the
transitions it is a pure function of (metadata, time, request); the rebalance it starts or
completes is :mod:`runtime.group.rebalance`'s.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace

from runtime.group.assignors import Subscription
from runtime.group.errors import InconsistentGroupProtocolError, TopologyMismatchError
from runtime.group.rebalance import complete_join, prepare_rebalance, validate_member
from runtime.group.state import GroupMetadata, GroupState, MemberMetadata, same_subscription

log = logging.getLogger(__name__)


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
    return complete_join(replace(meta, members=members, join_not_before_ms=not_before), now)


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
        return complete_join(_set_member(meta, replace(member, joined=True)), now), new_id
    if unchanged:
        return meta, new_id
    return complete_join(prepare_rebalance(meta, now, joined=new_id), now), new_id


def _set_member(meta: GroupMetadata, member: MemberMetadata) -> GroupMetadata:
    return replace(meta, members={**meta.members, member.member_id: member})


def _update_member(
    meta: GroupMetadata, now: int, request: JoinGroupRequest, member_id: str
) -> GroupMetadata:
    """A known member joins again: Kafka's rules for each state."""
    old = meta.members[member_id]
    changed = old.protocol != request.protocol or not same_subscription(
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
        return complete_join(_set_member(meta, replace(member, joined=True)), now)
    # The leader rejoining a Stable group forces a rebalance (it may know of new metadata);
    # a follower with unchanged metadata takes the current generation.
    forced = meta.state is GroupState.STABLE and member_id == meta.leader
    if not changed and not forced:
        if old.generation == meta.generation:
            return meta
        return _set_member(meta, replace(member, generation=meta.generation))
    return complete_join(prepare_rebalance(_set_member(meta, member), now, joined=member_id), now)
