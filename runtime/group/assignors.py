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

import heapq
import logging
from bisect import bisect_left
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from streams.errors import ConfigError, StreamsError

log = logging.getLogger(__name__)

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
        object.__setattr__(self, "owned", _partitions(self.owned, "Subscription.owned"))


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
            self, "partitions", _partitions(self.partitions, "Assignment.partitions")
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


def _partitions(values: Any, what: str) -> tuple[TopicPartition, ...]:
    """Return ``values`` as sorted, distinct ``(topic, partition)`` tuples."""
    try:
        pairs = {(str(topic), int(partition)) for topic, partition in values}
    except (TypeError, ValueError) as exc:
        raise InvalidSubscriptionError(
            f"{what} must hold (topic, partition) pairs, got {values!r}"
        ) from exc
    return tuple(sorted(pairs))


def _partition_count(partitions_per_topic: Mapping[str, int], topic: str) -> int:
    return max(0, int(partitions_per_topic.get(topic, 0)))


def _subscribers(subscriptions: Mapping[str, Subscription]) -> dict[str, list[str]]:
    """Return topic -> the sorted ids of the members subscribing to it, topics sorted."""
    by_topic: dict[str, list[str]] = {}
    for member in sorted(subscriptions):
        for topic in subscriptions[member].topics:
            by_topic.setdefault(topic, []).append(member)
    return dict(sorted(by_topic.items()))


def _result(
    members: Sequence[str], partitions: Mapping[str, Sequence[TopicPartition]]
) -> dict[str, Assignment]:
    return {member: Assignment(tuple(partitions.get(member, ()))) for member in members}


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
        for topic, members in _subscribers(subscriptions).items():
            per_member, extra = divmod(_partition_count(partitions_per_topic, topic), len(members))
            start = 0
            for index, member in enumerate(members):
                count = per_member + (1 if index < extra else 0)
                out.setdefault(member, []).extend((topic, p) for p in range(start, start + count))
                start += count
        return _result(sorted(subscriptions), out)


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
        for topic, subscribed in _subscribers(subscriptions).items():
            indexes = [position[member] for member in subscribed]  # sorted
            for partition in range(_partition_count(partitions_per_topic, topic)):
                # The next subscriber at or after `turn`, wrapping around.
                found = bisect_left(indexes, turn)
                index = indexes[found] if found < len(indexes) else indexes[0]
                out.setdefault(members[index], []).append((topic, partition))
                turn = (index + 1) % len(members)
        return _result(members, out)


# --------------------------------------------------------------------------- sticky core
#
# The sticky assignors and the streams assignor share one placement engine. It places
# "items" (partitions, or tasks), numbered 0..n-1 in their sorted order, each of an
# eligibility class (a topic, or a task's set of topics) that lists the members allowed to
# hold it. It starts from what each member keeps (its valid, conflict-free claims) and
# returns a placement that is balanced first and sticky second.


class _Preference(Protocol):
    """How to place the items that are not kept (the streams assignor's local state)."""

    def order(self, items: Sequence[int]) -> list[int]:
        """Return ``items`` in the order to place them."""
        ...

    def rank(self, member: str, item: int, load: Mapping[str, int]) -> tuple[int, ...]:
        """Return a key for giving ``item`` to ``member``: the lowest key wins."""
        ...

    def fill_uniform(
        self,
        items: Sequence[int],
        placed: dict[str, list[int]],
        full: set[str],
        quota: int,
        spare: int,
    ) -> None:
        """Add ``items`` to ``placed``: a member outside ``full`` may reach ``quota``, and
        ``spare`` of them ``quota + 1``."""
        ...


def _resolve_claims(
    members: Sequence[str],
    claims: Mapping[str, Sequence[int]],
    generations: Mapping[str, int],
) -> dict[str, list[int]]:
    """Return member -> the sorted items it keeps: of several claims on one item, the claim
    of the highest generation wins, ties to the lowest member id."""
    winner: dict[int, tuple[int, str]] = {}
    for member in members:
        key = (-generations[member], member)
        for item in claims.get(member, ()):
            if item not in winner or key < winner[item]:
                winner[item] = key
    kept: dict[str, list[int]] = {member: [] for member in members}
    for item, (_, member) in sorted(winner.items()):
        kept[member].append(item)
    return kept


def _place(
    members: Sequence[str],
    item_class: Sequence[int],
    eligible: Sequence[Sequence[str]],
    kept: Mapping[str, Sequence[int]],
    prefer: _Preference | None = None,
) -> dict[str, list[int]]:
    """Return member -> sorted items: balanced first, then keeping as much of ``kept``.

    Args:
        members: All members, sorted.
        item_class: The eligibility class of each item.
        eligible: The sorted members eligible for each class.
        kept: What each member owns now (valid for it, no item twice, sorted).
        prefer: Places the items that are not kept (default: least-loaded member first).
    """
    if not members:
        return {}
    if all(len(eligible[c]) == len(members) for c in set(item_class)):
        return _place_uniform(members, len(item_class), kept, prefer)
    return _Balancer(members, item_class, eligible, kept).place(prefer)


def _place_uniform(
    members: Sequence[str],
    item_count: int,
    kept: Mapping[str, Sequence[int]],
    prefer: _Preference | None,
) -> dict[str, list[int]]:
    """Place items every member may hold: counts differ by at most one, and the members
    owning the most keep one more, which keeps the largest number of owned items."""
    quota, extra = divmod(item_count, len(members))
    over = sorted((m for m in members if len(kept[m]) > quota), key=lambda m: (-len(kept[m]), m))
    full = set(over[:extra])  # members keeping quota + 1
    spare = extra - len(full)  # quota + 1 slots still open to other members
    placed = {m: list(kept[m][: quota + 1 if m in full else quota]) for m in members}
    taken = {item for items in placed.values() for item in items}
    free = [item for item in range(item_count) if item not in taken]

    def open_to(member: str) -> bool:
        have = len(placed[member])
        return member not in full and (have < quota or (have == quota and spare > 0))

    if prefer is None:
        heap = [(len(placed[m]), m) for m in members if open_to(m)]
        heapq.heapify(heap)
        for item in free:
            have, member = heapq.heappop(heap)
            if have == quota:
                spare -= 1  # took a quota + 1 slot
            placed[member].append(item)
            if have + 1 <= quota:
                heapq.heappush(heap, (have + 1, member))
        return {m: sorted(items) for m, items in placed.items()}
    prefer.fill_uniform(free, placed, full, quota, spare)
    return {m: sorted(items) for m, items in placed.items()}


def _ranker(prefer: _Preference, item: int, load: Mapping[str, int]) -> Any:
    def key(member: str) -> tuple[Any, ...]:
        return (prefer.rank(member, item, load), member)

    return key


class _Balancer:
    """Placement under unequal eligibility: as balanced as eligibility allows.

    Items not kept go to the least-loaded eligible member. Then, while a member can hand
    one item along a chain of eligible members to a member holding at least two fewer
    (a "cost-reducing path"), that chain is moved. An assignment without such a path has
    the least possible sum of squared counts (Harvey et al., "Semi-matchings for bipartite
    graphs and load balancing"), so it is as balanced as the subscriptions allow. Chains
    moving only items that were not kept are exhausted first, so kept items move only when
    balance needs it.
    """

    def __init__(
        self,
        members: Sequence[str],
        item_class: Sequence[int],
        eligible: Sequence[Sequence[str]],
        kept: Mapping[str, Sequence[int]],
    ) -> None:
        self.members = list(members)
        self.item_class = item_class
        self.eligible = eligible
        # Per member and class: items it kept (moved last) and items it was given.
        self.pinned: dict[str, dict[int, list[int]]] = {m: {} for m in members}
        self.given: dict[str, dict[int, list[int]]] = {m: {} for m in members}
        self.load = {m: len(kept[m]) for m in members}
        for member in members:
            for item in kept[member]:
                self.pinned[member].setdefault(item_class[item], []).append(item)

    def place(self, prefer: _Preference | None) -> dict[str, list[int]]:
        taken = {
            item for lists in self.pinned.values() for items in lists.values() for item in items
        }
        by_class: dict[int, list[int]] = {}
        for item, cls in enumerate(self.item_class):
            if item not in taken:
                by_class.setdefault(cls, []).append(item)
        for cls in sorted(by_class, key=lambda c: (len(self.eligible[c]), c)):
            self._fill(cls, by_class[cls], prefer)
        self._balance(move_pinned=False)
        self._balance(move_pinned=True)
        return {
            m: sorted(
                i for lists in (self.pinned[m], self.given[m]) for v in lists.values() for i in v
            )
            for m in self.members
        }

    def _give(self, member: str, cls: int, item: int) -> None:
        self.given[member].setdefault(cls, []).append(item)
        self.load[member] += 1

    def _fill(self, cls: int, items: list[int], prefer: _Preference | None) -> None:
        """Give each item of ``cls`` to the least-loaded eligible member."""
        candidates = self.eligible[cls]
        if not candidates:
            return  # nobody may hold these items
        if prefer is None:
            heap = [(self.load[m], m) for m in candidates]
            heapq.heapify(heap)
            for item in items:
                _, member = heapq.heappop(heap)
                self._give(member, cls, item)
                heapq.heappush(heap, (self.load[member], member))
            return
        for item in prefer.order(items):
            rank = _ranker(prefer, item, self.load)
            member = min(candidates, key=lambda m: (self.load[m], rank(m)))
            self._give(member, cls, item)

    def _balance(self, *, move_pinned: bool) -> None:
        """Apply cost-reducing paths, highest-loaded members first, until none is left.

        A failed search from the members of the highest load L freezes every member it
        reached: all hold at least L - 1 and can only reach each other, so no later move
        can involve them.
        """
        frozen: set[str] = set()
        while True:
            live = [m for m in self.members if m not in frozen]
            if not live:
                return
            top = max(self.load[m] for m in live)
            if top - min(self.load[m] for m in live) < 2:
                return
            sources = [m for m in live if self.load[m] == top]
            path, reached = self._search(sources, top - 2, frozen, move_pinned)
            if path is None:
                frozen |= reached
            else:
                self._move(path, move_pinned)

    def _movable(self, member: str, move_pinned: bool) -> list[int]:
        classes = {c for c, items in self.given[member].items() if items}
        if move_pinned:
            classes.update(c for c, items in self.pinned[member].items() if items)
        return sorted(classes)

    def _search(
        self, sources: list[str], limit: int, frozen: set[str], move_pinned: bool
    ) -> tuple[list[tuple[str, int, str]] | None, set[str]]:
        """Breadth-first search from ``sources`` to a member holding ``limit`` or fewer.

        Returns the path as (giver, class, taker) hops, or None, and the members reached.
        """
        parent: dict[str, tuple[str, int]] = {}
        reached = set(sources)
        seen_classes: set[int] = set()
        queue = deque(sources)
        while queue:
            giver = queue.popleft()
            for cls in self._movable(giver, move_pinned):
                if cls in seen_classes:
                    continue
                seen_classes.add(cls)
                for taker in self.eligible[cls]:
                    if taker in reached or taker in frozen:
                        continue
                    reached.add(taker)
                    parent[taker] = (giver, cls)
                    if self.load[taker] <= limit:
                        return self._path(parent, taker), reached
                    queue.append(taker)
        return None, reached

    @staticmethod
    def _path(parent: Mapping[str, tuple[str, int]], end: str) -> list[tuple[str, int, str]]:
        hops: list[tuple[str, int, str]] = []
        while end in parent:
            giver, cls = parent[end]
            hops.append((giver, cls, end))
            end = giver
        return hops[::-1]

    def _move(self, path: list[tuple[str, int, str]], move_pinned: bool) -> None:
        for giver, cls, taker in path:
            given = self.given[giver].get(cls)
            source = given if given else self.pinned[giver][cls]
            assert given or move_pinned
            self._give(taker, cls, source.pop())
            self.load[giver] -= 1


# --------------------------------------------------------------------------- sticky


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
        for topic, members in _subscribers(subscriptions).items():
            count = _partition_count(partitions_per_topic, topic)
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
        return _resolve_claims(self.members, claims, generations)


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
        placed = _place(parts.members, parts.item_class, parts.eligible, parts.kept(subscriptions))
        return _result(
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
            out[member] = [tp for tp in assignment.partitions if _free_for(member, owners.get(tp))]
            withheld = len(assignment.partitions) - len(out[member])
            if withheld:
                log.debug("[assignor cooperative-sticky] member=%s withheld=%d", member, withheld)
        return _result(sorted(target), out)


def _free_for(member: str, owners: set[str] | None) -> bool:
    """Whether ``member`` may hold a partition (task) now: nobody owns it, or it does (a
    conflicting stale claim then loses it; giving it adds no second owner)."""
    return not owners or member in owners


# --------------------------------------------------------------------------- streams


def task_sort_key(task_id: str) -> tuple[tuple[int, int | str], ...]:
    """Return the sort key of a task id: numeric parts compare as numbers ("0_9" < "0_10").

    Args:
        task_id: ``<subtopology>_<partition>``, e.g. ``"0_3"``.
    """
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in task_id.split("_"))


@dataclass(frozen=True)
class _StreamsMember:
    """The streams fields of one member's subscription user data."""

    process_id: str
    owned_tasks: tuple[str, ...]
    local_tasks: Mapping[str, int]

    @classmethod
    def parse(cls, member: str, subscription: Subscription) -> _StreamsMember:
        data = subscription.user_data
        process_id = data.get("process_id", member)
        owned = data.get("owned_tasks", [])
        local = data.get("local_tasks", {})
        if not isinstance(process_id, str):
            raise _bad_user_data(member, "process_id", "a string", process_id)
        if isinstance(owned, str) or not all(isinstance(t, str) for t in owned):
            raise _bad_user_data(member, "owned_tasks", "a list of task ids", owned)
        if not isinstance(local, Mapping) or not all(
            isinstance(t, str) and isinstance(o, int) and not isinstance(o, bool) and o >= -1
            for t, o in local.items()
        ):
            raise _bad_user_data(
                member, "local_tasks", "a map of task id to offset sum (>= 0, or -1)", local
            )
        return cls(process_id, tuple(owned), dict(local))


def _bad_user_data(member: str, key: str, expected: str, value: Any) -> InvalidSubscriptionError:
    return InvalidSubscriptionError(
        f"member {member}: user_data[{key!r}] must be {expected}, got {value!r}; "
        "the member runs an incompatible client: upgrade it and rejoin"
    )


_NO_STATE = -2  # below Kafka Streams' -1 ("local state, offset sum unknown")


class _LocalState:
    """Places tasks that are not kept: on the process holding the most of their local
    state, else on the process holding the fewest tasks; then on its least-loaded member."""

    def __init__(self, tasks: Sequence[str], infos: Mapping[str, _StreamsMember]) -> None:
        self.process_of = {m: info.process_id for m, info in infos.items()}
        self.process_members: dict[str, list[str]] = {}
        for member in sorted(infos):
            self.process_members.setdefault(infos[member].process_id, []).append(member)
        index = {t: i for i, t in enumerate(tasks)}
        # process -> item -> the largest offset sum its members report (sparse)
        self.state: dict[str, dict[int, int]] = {p: {} for p in self.process_members}
        for info in infos.values():
            held = self.state[info.process_id]
            for task, offset_sum in info.local_tasks.items():
                if task in index:
                    held[index[task]] = max(held.get(index[task], _NO_STATE), offset_sum)
        self.holders: dict[int, list[tuple[str, int]]] = {}  # item -> (process, offset sum)
        for process in sorted(self.state):
            for item, offset_sum in sorted(self.state[process].items()):
                self.holders.setdefault(item, []).append((process, offset_sum))

    def order(self, items: Sequence[int]) -> list[int]:
        """Return ``items``, those with the most local state first."""
        best = {i: max((s for _, s in self.holders.get(i, ())), default=_NO_STATE) for i in items}
        return sorted(items, key=lambda i: (-best[i], i))

    def rank(self, member: str, item: int, load: Mapping[str, int]) -> tuple[int, ...]:
        process = self.process_of[member]
        process_load = sum(load[m] for m in self.process_members[process])
        return (-self.state[process].get(item, _NO_STATE), process_load, load[member])

    def fill_uniform(
        self,
        items: Sequence[int],
        placed: dict[str, list[int]],
        full: set[str],
        quota: int,
        spare: int,
    ) -> None:
        process_load = {
            p: sum(len(placed[m]) for m in ms) for p, ms in self.process_members.items()
        }
        heaps = {
            p: [(len(placed[m]), m) for m in ms if m not in full]
            for p, ms in sorted(self.process_members.items())
        }
        for heap in heaps.values():
            heapq.heapify(heap)

        def open_member(process: str) -> str | None:
            """Return the least-loaded member of ``process`` with room, if any."""
            heap = heaps[process]
            while heap:
                have, member = heap[0]
                if have != len(placed[member]):  # stale entry: loads only grow
                    heapq.heapreplace(heap, (len(placed[member]), member))
                elif have < quota or (have == quota and spare > 0):
                    return member
                else:
                    heapq.heappop(heap)  # full for good
            return None

        for item in self.order(items):
            choices: list[tuple[int, int, int, str]] = []
            for process, offset_sum in self.holders.get(item, ()):
                if (member := open_member(process)) is not None:
                    choices.append(
                        (-offset_sum, process_load[process], len(placed[member]), member)
                    )
            if not choices:
                for process in heaps:
                    if (member := open_member(process)) is not None:
                        choices.append((0, process_load[process], len(placed[member]), member))
            member = min(choices)[3]
            if len(placed[member]) == quota:
                spare -= 1
            placed[member].append(item)
            process_load[self.process_of[member]] += 1


class StreamsAssignor:
    """The task assignor of a streams application (cooperative).

    It assigns whole tasks, so the co-partitioned input partitions of a task always go to
    one member. In order of priority:

    1. Balance: members' task counts differ by at most one (when every member subscribes
       to every task's topics; otherwise as balanced as that allows).
    2. Stickiness: a member keeps the tasks it owns (``owned_tasks``); of several claims on
       one task the highest generation wins, ties to the lowest member id.
    3. Local state: a task that is not kept goes to a member whose process holds its local
       state, the largest committed changelog offset sum first (``local_tasks``).
    4. Spread: otherwise to a member of the process holding the fewest tasks.

    Like :class:`CooperativeStickyAssignor`, a task moving away from a member that still
    owns it (its task id, or any of its partitions) is left out of this round and assigned
    in the follow-up rebalance.

    Subscription user data: ``{"process_id": str, "owned_tasks": [task id],
    "local_tasks": {task id: offset sum, or -1 when unknown}}``; each key may be missing
    (the process id then defaults to the member id). Assignment user data:
    ``{"tasks": [task id]}``, sorted by :func:`task_sort_key`.

    Compared with Kafka Streams' ``HighAvailabilityTaskAssignor`` there are no standby or
    warm-up tasks and no acceptable-lag threshold, and balance is per member (stream
    thread), not per client capacity.
    """

    name: str = "streams"
    protocol: AssignorProtocol = "cooperative"

    def __init__(self, tasks: Mapping[str, Sequence[TopicPartition]]) -> None:
        """Create the assignor for the tasks of a topology.

        Args:
            tasks: Task id (``"<subtopology>_<partition>"``) -> its source partitions.

        Raises:
            ConfigError: A task has no partitions, or a partition belongs to two tasks.
        """
        owner: dict[TopicPartition, str] = {}
        self._tasks: dict[str, tuple[TopicPartition, ...]] = {}
        for task in sorted(tasks, key=task_sort_key):
            if not task or not tasks[task]:
                raise ConfigError(f"streams assignor: task {task!r} has no source partitions")
            partitions = _partitions(tasks[task], f"the partitions of task {task}")
            for tp in partitions:
                if tp in owner:
                    raise ConfigError(
                        f"streams assignor: partition {tp[0]}-{tp[1]} belongs to tasks "
                        f"{owner[tp]} and {task}; each partition feeds exactly one task"
                    )
                owner[tp] = task
            self._tasks[task] = partitions

    @property
    def tasks(self) -> Mapping[str, tuple[TopicPartition, ...]]:
        """Task id -> its source partitions, in task order."""
        return dict(self._tasks)

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> dict[str, Assignment]:
        """Return each member's tasks and their partitions; see the class docstring.

        Raises:
            InvalidSubscriptionError: A member's user data has the wrong shape.
        """
        members = sorted(subscriptions)
        infos = {m: _StreamsMember.parse(m, subscriptions[m]) for m in members}
        tasks = [
            t
            for t, parts in self._tasks.items()
            if all(p < _partition_count(partitions_per_topic, topic) for topic, p in parts)
        ]
        index = {t: i for i, t in enumerate(tasks)}
        classes: dict[tuple[str, ...], int] = {}
        item_class = [
            classes.setdefault(tuple(sorted({tp[0] for tp in self._tasks[t]})), len(classes))
            for t in tasks
        ]
        eligible = [
            [m for m in members if set(topics) <= set(subscriptions[m].topics)]
            for topics in classes
        ]
        claims = {
            m: sorted(
                {
                    index[t]
                    for t in infos[m].owned_tasks
                    if t in index and m in eligible[item_class[index[t]]]
                }
            )
            for m in members
        }
        kept = _resolve_claims(members, claims, {m: subscriptions[m].generation for m in members})
        placed = _place(members, item_class, eligible, kept, _LocalState(tasks, infos))
        owners = self._owners(subscriptions, infos)
        out: dict[str, Assignment] = {}
        for member in members:
            mine = [tasks[i] for i in placed[member] if _free_for(member, owners.get(tasks[i]))]
            partitions = tuple(tp for t in mine for tp in self._tasks[t])
            out[member] = Assignment(partitions, {"tasks": mine})
        return out

    def _owners(
        self, subscriptions: Mapping[str, Subscription], infos: Mapping[str, _StreamsMember]
    ) -> dict[str, set[str]]:
        """Return task -> the members that still own it (the task, or one of its partitions)."""
        task_of = {tp: t for t, parts in self._tasks.items() for tp in parts}
        owners: dict[str, set[str]] = {}
        for member, subscription in subscriptions.items():
            for task in infos[member].owned_tasks:
                owners.setdefault(task, set()).add(member)
            for tp in subscription.owned:
                if tp in task_of:
                    owners.setdefault(task_of[tp], set()).add(member)
        return owners


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
