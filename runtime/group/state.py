"""A classic consumer group's state and the document its log holds (Kafka's ``ClassicGroup``).

:class:`GroupState` is the group's lifecycle with Kafka's allowed transitions;
:class:`GroupMetadata` is the document each version of a group's compare-and-swap log holds
(state, generation, protocol, leader, and the members as :class:`MemberMetadata` with their
subscriptions and assignments), with its JSON form; :class:`MemberDescription` is a member
as a tool shows it. The decisions that move a group from one document to the next live in
:mod:`runtime.group.rebalance` and :mod:`runtime.group.join`.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from common.errors import CoordinatorError
from runtime.group.assignors import Assignment, Subscription
from runtime.group.errors import GroupError

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


def same_subscription(a: Subscription, b: Subscription) -> bool:
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
