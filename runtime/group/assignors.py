"""Partition and task assignors of consumer groups.

The group leader runs one of these over every member's :class:`Subscription` and hands each
member its :class:`Assignment`. Five assignors, by their protocol names:

- ``range`` (eager): Kafka's classic ``RangeAssignor``. Per topic, the members subscribing to
  it sorted by member id get ``P // M`` consecutive partitions each, the first ``P % M`` one
  more.
- ``roundrobin`` (eager): Kafka's ``RoundRobinAssignor``. All subscribed partitions sorted by
  (topic, partition) are dealt over the sorted members in turn, skipping a member that does
  not subscribe to the partition's topic.
- ``sticky`` (eager): Kafka's ``StickyAssignor``. Balance first, then keep as much of the
  current ownership (:attr:`Subscription.owned`) as that balance allows.
- ``cooperative-sticky`` (cooperative): the sticky target, except that a partition moving
  away from a member that still owns it is withheld for one round; see
  :class:`CooperativeStickyAssignor`.
- ``streams`` (cooperative): the task assignor of a streams application; see
  :class:`StreamsAssignor`.

Every assignor is a pure, deterministic function of its input: members, topics, partitions
and tasks are always visited in sorted order, never in set or dict order, and nothing is
random, so every member computing an assignment from the same input gets the same result.

Exactly-once invariant kept here (with the group coordinator's follow-up rebalance): a
cooperative assignor never gives a partition (or task) to a member while another member
still reports owning it, so no partition, and no state store behind it, has two owners.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from typing import Any

from common.errors import ConfigError
from runtime.group.assignment import (
    Assignment,
    Assignor,
    AssignorProtocol,
    InvalidSubscriptionError,
    Subscription,
    TopicPartition,
    assignments_of,
    partition_count,
    subscribers,
)
from runtime.group.sticky import CooperativeStickyAssignor, StickyAssignor
from runtime.group.streams_assignor import StreamsAssignor, task_sort_key

__all__ = [
    "KNOWN_ASSIGNORS",
    "Assignment",
    "Assignor",
    "AssignorProtocol",
    "CooperativeStickyAssignor",
    "InvalidSubscriptionError",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "StreamsAssignor",
    "Subscription",
    "TopicPartition",
    "assignor_for",
    "task_sort_key",
]


# --------------------------------------------------------------------------- range


class RangeAssignor:
    """Kafka's classic ``RangeAssignor``: consecutive partition ranges per topic.

    For each topic, the ``M`` members subscribing to it, sorted by member id, get
    ``P // M`` consecutive partitions each and the first ``P % M`` of them one more. The
    same low-sorted members take the extra partitions of every topic, so several topics can
    add up to an uneven total (two 7-partition topics over 3 members: 6/4/4); in exchange,
    members hold the same partition numbers of co-partitioned topics.
    """

    name: str = "range"
    protocol: AssignorProtocol = "eager"

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        """Assign consecutive ranges of each topic; see the class docstring."""
        out: dict[str, list[TopicPartition]] = {}
        for topic, members in subscribers(subscriptions).items():
            per_member, extra = divmod(partition_count(partitions_per_topic, topic), len(members))
            start = 0
            for index, member in enumerate(members):
                count = per_member + (1 if index < extra else 0)
                out.setdefault(member, []).extend((topic, p) for p in range(start, start + count))
                start += count
        return assignments_of(sorted(subscriptions), out)


# --------------------------------------------------------------------------- roundrobin


class RoundRobinAssignor:
    """Kafka's classic ``RoundRobinAssignor``: partitions dealt over members in turn.

    All subscribed partitions, sorted by (topic, partition), are dealt in turn over the
    members sorted by member id; a member that does not subscribe to a partition's topic is
    skipped for it. With equal subscriptions the counts differ by at most one.
    """

    name: str = "roundrobin"
    protocol: AssignorProtocol = "eager"

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        """Deal the sorted partitions over the sorted members; see the class docstring."""
        members = sorted(subscriptions)
        position = {member: index for index, member in enumerate(members)}
        out: dict[str, list[TopicPartition]] = {}
        turn = 0  # index of the member whose turn it is
        for topic, subscribed in subscribers(subscriptions).items():
            indexes = [position[member] for member in subscribed]  # sorted
            for partition in range(partition_count(partitions_per_topic, topic)):
                # The next subscriber at or after `turn`, wrapping around.
                found = bisect_left(indexes, turn)
                index = indexes[found] if found < len(indexes) else indexes[0]
                out.setdefault(members[index], []).append((topic, partition))
                turn = (index + 1) % len(members)
        return assignments_of(members, out)


# --------------------------------------------------------------------------- lookup

_NO_OPTIONS: dict[
    str, type[RangeAssignor | RoundRobinAssignor | StickyAssignor | CooperativeStickyAssignor]
] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "sticky": StickyAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}
KNOWN_ASSIGNORS: tuple[str, ...] = (*_NO_OPTIONS, "streams")
"""The assignor names :func:`assignor_for` accepts."""


def assignor_for(name: str, **options: Any) -> Assignor:
    """Return the assignor called ``name``.

    Args:
        name: One of :data:`KNOWN_ASSIGNORS`.
        **options: ``tasks`` for ``streams`` (see :class:`StreamsAssignor`); the other
            assignors take none.

    Raises:
        ConfigError: The name is unknown (the message lists the known ones), or the options
            do not fit the assignor.
    """
    if name == "streams":
        if set(options) != {"tasks"}:
            raise ConfigError(
                f"assignor 'streams' takes exactly the option 'tasks' (task id -> partitions), "
                f"got {sorted(options)}"
            )
        return StreamsAssignor(options["tasks"])
    factory = _NO_OPTIONS.get(name)
    if factory is None:
        raise ConfigError(
            f"unknown assignor {name!r}; known assignors: {', '.join(KNOWN_ASSIGNORS)}"
        )
    if options:
        raise ConfigError(f"assignor {name!r} takes no options, got {sorted(options)}")
    return factory()
