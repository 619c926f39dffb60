"""The task assignor of a streams application: whole tasks, balanced, sticky, preferring
the process that holds a task's local state, and cooperative."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.errors import ConfigError
from runtime.group.assignment import (
    Assignment,
    AssignorProtocol,
    InvalidSubscriptionError,
    Subscription,
    TopicPartition,
    partition_count,
    partition_pairs,
)
from runtime.group.placement import free_for, place, resolve_claims


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
            partitions = partition_pairs(tasks[task], f"the partitions of task {task}")
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
            if all(p < partition_count(partitions_per_topic, topic) for topic, p in parts)
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
        kept = resolve_claims(members, claims, {m: subscriptions[m].generation for m in members})
        placed = place(members, item_class, eligible, kept, _LocalState(tasks, infos))
        owners = self._owners(subscriptions, infos)
        out: dict[str, Assignment] = {}
        for member in members:
            mine = [tasks[i] for i in placed[member] if free_for(member, owners.get(tasks[i]))]
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
