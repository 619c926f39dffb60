"""Kafka's sticky assignors: ``sticky`` (eager) and ``cooperative-sticky``."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from runtime.group.assignment import (
    Assignment,
    AssignorProtocol,
    Subscription,
    TopicPartition,
    assignments_of,
    partition_count,
    subscribers,
)
from runtime.group.placement import free_for, place, resolve_claims

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Partitions:
    """The subscribed partitions of one assignment round, numbered in sorted order."""

    members: list[str]
    items: list[TopicPartition]
    index: dict[TopicPartition, int]
    item_class: list[int]
    eligible: list[list[str]]

    @classmethod
    def of(
        cls, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> _Partitions:
        items: list[TopicPartition] = []
        item_class: list[int] = []
        eligible: list[list[str]] = []
        for topic, members in subscribers(subscriptions).items():
            count = partition_count(partitions_per_topic, topic)
            if count:
                items.extend((topic, p) for p in range(count))
                item_class.extend([len(eligible)] * count)
                eligible.append(members)
        index = {tp: i for i, tp in enumerate(items)}
        return cls(sorted(subscriptions), items, index, item_class, eligible)

    def kept(self, subscriptions: Mapping[str, Subscription]) -> dict[str, list[int]]:
        """Return what each member keeps of its claims (existing, subscribed, not lost)."""
        claims = {
            m: [
                self.index[tp]
                for tp in subscriptions[m].owned
                if tp in self.index and tp[0] in subscriptions[m].topics
            ]
            for m in self.members
        }
        generations = {m: subscriptions[m].generation for m in self.members}
        return resolve_claims(self.members, claims, generations)


class StickyAssignor:
    """Kafka's ``StickyAssignor``: balanced first, then as little movement as possible.

    1. Claims on one partition (:attr:`Subscription.owned`) are settled: the highest
       generation wins, ties to the lowest member id (Kafka drops a partition claimed twice
       in one generation altogether). Claims on partitions that no longer exist or whose
       topic the member dropped are ignored.
    2. With equal subscriptions, counts differ by at most one; the members owning the most
       keep one more than the rest, each keeps its lowest owned partitions up to its count,
       and the partitions left over fill the others. This keeps the largest possible number
       of owned partitions. A new member owning nothing is counted like any other.
    3. With unequal subscriptions, the assignment is as balanced as the subscriptions allow
       (least sum of squared counts), and owned partitions move only when that needs it.
    """

    name: str = "sticky"
    protocol: AssignorProtocol = "eager"

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        """Return the balanced, sticky assignment; see the class docstring."""
        parts = _Partitions.of(partitions_per_topic, subscriptions)
        placed = place(parts.members, parts.item_class, parts.eligible, parts.kept(subscriptions))
        return assignments_of(
            parts.members, {m: [parts.items[i] for i in items] for m, items in placed.items()}
        )


class CooperativeStickyAssignor:
    """Kafka's ``CooperativeStickyAssignor``: the sticky target, reached in two rounds.

    The target is :class:`StickyAssignor`'s. A partition the target moves to a member while
    another member still reports owning it (in :attr:`Subscription.owned`, any generation)
    is left out of this round: the owner's assignment lacks it, so the owner revokes it and
    rejoins, and the follow-up rebalance, finding it unowned, assigns it at once. A partition
    nobody owns (its owner left, its topic grew, it was revoked last round) is assigned at
    once. Partitions that stay are never revoked; of two claims on one partition, the
    winning one (as in :class:`StickyAssignor`) keeps it. So no partition gains a second owner, and
    two rounds without membership change reach the balanced target, which then stays put.
    """

    name: str = "cooperative-sticky"
    protocol: AssignorProtocol = "cooperative"

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        """Return the sticky target minus the partitions still owned elsewhere."""
        target = StickyAssignor().assign(partitions_per_topic, subscriptions)
        owners: dict[TopicPartition, set[str]] = {}
        for member, subscription in subscriptions.items():
            for tp in subscription.owned:
                owners.setdefault(tp, set()).add(member)
        out: dict[str, list[TopicPartition]] = {}
        for member, assignment in target.items():
            out[member] = [tp for tp in assignment.partitions if free_for(member, owners.get(tp))]
            withheld = len(assignment.partitions) - len(out[member])
            if withheld:
                log.debug("[assignor cooperative-sticky] member=%s withheld=%d", member, withheld)
        return assignments_of(sorted(target), out)
