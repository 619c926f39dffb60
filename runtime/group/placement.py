"""The placement engine shared by the sticky assignors and the streams assignor.

It places "items" (partitions, or tasks), numbered 0..n-1 in their sorted order, each of
an eligibility class (a topic, or a task's set of topics) that lists the members allowed to
hold it. It starts from what each member keeps (its valid, conflict-free claims) and
returns a placement that is balanced first and sticky second. Deterministic: members and
items are always visited in sorted order.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class Preference(Protocol):
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


def resolve_claims(
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


def place(
    members: Sequence[str],
    item_class: Sequence[int],
    eligible: Sequence[Sequence[str]],
    kept: Mapping[str, Sequence[int]],
    prefer: Preference | None = None,
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
    prefer: Preference | None,
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


def _ranker(prefer: Preference, item: int, load: Mapping[str, int]) -> Any:
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

    def place(self, prefer: Preference | None) -> dict[str, list[int]]:
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

    def _fill(self, cls: int, items: list[int], prefer: Preference | None) -> None:
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


def free_for(member: str, owners: set[str] | None) -> bool:
    """Whether ``member`` may hold a partition (task) now: nobody owns it, or it does (a
    conflicting stale claim then loses it; giving it adds no second owner)."""
    return not owners or member in owners
