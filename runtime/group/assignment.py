"""What a consumer group's members send and get: subscriptions, assignments, and the
protocol every partition assignor (:mod:`runtime.group.assignors`) implements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from common.errors import StreamsError

TopicPartition = tuple[str, int]
"""A partition of a topic: ``(topic, partition number)``."""

AssignorProtocol = Literal["eager", "cooperative"]


class InvalidSubscriptionError(StreamsError, ValueError):
    """A member's subscription is malformed (a topic list given as a string, an owned
    partition that is not ``(topic, partition)``, or streams user data of the wrong shape).

    Raised by :class:`Subscription` or by an assignor; the message names the member and the
    field. The member's client is out of date or broken: fix or upgrade it and rejoin.
    """


@dataclass(frozen=True)
class Subscription:
    """What a member sends when it joins: its topics and what it owns now.

    Attributes:
        topics: The topics the member subscribes to (stored sorted, without duplicates).
        owned: The partitions the member owns now (stored sorted, without duplicates); the
            sticky assignors keep them where balance allows.
        generation: The group generation in which ``owned`` was assigned (-1: none). When
            two members claim one partition, the claim of the highest generation wins.
        user_data: JSON-able assignor data; the streams assignor reads ``process_id``,
            ``owned_tasks`` and ``local_tasks`` from it.
    """

    topics: tuple[str, ...]
    owned: tuple[TopicPartition, ...] = ()
    generation: int = -1
    user_data: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if isinstance(self.topics, str):
            raise InvalidSubscriptionError(
                f"Subscription.topics must be a sequence of topic names, not the string "
                f"{self.topics!r}; write ({self.topics!r},)"
            )
        object.__setattr__(self, "topics", tuple(sorted(set(self.topics))))
        object.__setattr__(self, "owned", partition_pairs(self.owned, "Subscription.owned"))


@dataclass(frozen=True)
class Assignment:
    """What a member is given: its partitions and the assignor's data for it.

    Attributes:
        partitions: The member's partitions (stored sorted, without duplicates).
        user_data: JSON-able assignor data; the streams assignor puts the member's sorted
            task ids under ``"tasks"``.
    """

    partitions: tuple[TopicPartition, ...]
    user_data: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "partitions", partition_pairs(self.partitions, "Assignment.partitions")
        )


class Assignor(Protocol):
    """A partition assignor, run by the group leader over all members' subscriptions."""

    name: str
    protocol: AssignorProtocol

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        """Return every member's assignment (keys sorted by member id).

        Args:
            partitions_per_topic: Partition count of each existing topic; a subscribed
                topic missing here is not created yet and gets no partitions.
            subscriptions: Each member's subscription, by member id.
        """
        ...


def partition_pairs(values: Any, what: str) -> tuple[TopicPartition, ...]:
    """Return ``values`` as sorted, distinct ``(topic, partition)`` tuples."""
    try:
        pairs = {(str(topic), int(partition)) for topic, partition in values}
    except (TypeError, ValueError) as exc:
        raise InvalidSubscriptionError(
            f"{what} must hold (topic, partition) pairs, got {values!r}"
        ) from exc
    return tuple(sorted(pairs))


def partition_count(partitions_per_topic: Mapping[str, int], topic: str) -> int:
    return max(0, int(partitions_per_topic.get(topic, 0)))


def subscribers(subscriptions: Mapping[str, Subscription]) -> dict[str, list[str]]:
    """Return topic -> the sorted ids of the members subscribing to it, topics sorted."""
    by_topic: dict[str, list[str]] = {}
    for member in sorted(subscriptions):
        for topic in subscriptions[member].topics:
            by_topic.setdefault(topic, []).append(member)
    return dict(sorted(by_topic.items()))


def assignments_of(
    members: Sequence[str], partitions: Mapping[str, Sequence[TopicPartition]]
) -> dict[str, Assignment]:
    return {member: Assignment(tuple(partitions.get(member, ()))) for member in members}
