"""The orders Kafka's ``TopologyDescription`` prints a node's neighbours in, reproduced.

Kafka (``InternalTopologyBuilder.describeSubtopology``) connects a sub-topology's nodes
while it walks them in a ``HashMap``'s order, and keeps each node's successors and
predecessors in a ``TreeSet`` ordered by the size of the sub-graph a node roots
(descending), then by name. Sizes grow as nodes are connected, and a ``TreeSet`` keeps the
place an element got when it was inserted: the printed ``-->``/``<--`` lists are the
result of that walk, not of sorting by the final sizes. This module replays it:

* :func:`hash_map_order`: the iteration order of a ``java.util.HashMap`` (or ``HashSet``)
  of strings filled in a given order (``String.hashCode``, the spread of ``HashMap.hash``,
  power-of-two tables grown at a 0.75 load factor, buckets in index order, a bucket's
  entries in insertion order);
* :class:`TreeSet`: a red-black tree inserting as ``java.util.TreeMap.put`` does
  (``fixAfterInsertion``), iterated in order;
* :func:`neighbour_orders`: the walk itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

_MASK = 0xFFFFFFFF


def java_string_hash(text: str) -> int:
    """``String.hashCode`` as an unsigned 32-bit value (UTF-16 code units)."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK
    return h


def hash_map_order(keys: Sequence[str]) -> list[str]:
    """The order a ``HashMap``/``HashSet`` of ``keys`` (inserted in this order) iterates."""
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2
    position = {key: i for i, key in enumerate(keys)}

    def bucket(key: str) -> int:
        h = java_string_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys, key=lambda key: (bucket(key), position[key]))


@dataclass(eq=False)
class _Entry:
    item: str
    parent: _Entry | None
    left: _Entry | None = None
    right: _Entry | None = None
    black: bool = True


@dataclass(eq=False)
class TreeSet:
    """``java.util.TreeSet`` with a comparator: insertion as ``TreeMap.put``."""

    compare: Callable[[str, str], int]
    root: _Entry | None = None
    _items: set[str] = field(default_factory=set)

    def add(self, item: str) -> None:
        """Insert ``item`` where the comparator places it now (nothing if present)."""
        if item in self._items:
            return
        self._items.add(item)
        node = self.root
        if node is None:
            self.root = _Entry(item, None)
            return
        while True:
            cmp = self.compare(item, node.item)
            child = node.left if cmp < 0 else node.right
            if child is None:
                break
            node = child
        entry = _Entry(item, node)
        if cmp < 0:
            node.left = entry
        else:
            node.right = entry
        self._fix_after_insertion(entry)

    def __iter__(self) -> Iterator[str]:
        stack: list[_Entry] = []
        node = self.root
        while stack or node is not None:
            while node is not None:
                stack.append(node)
                node = node.left
            node = stack.pop()
            yield node.item
            node = node.right

    def _fix_after_insertion(self, x: _Entry | None) -> None:
        assert x is not None
        x.black = False
        while x is not None and x is not self.root and not _black(x.parent):
            parent = _parent(x)
            grand = _parent(parent)
            if parent is _left(grand):
                uncle = _right(grand)
                if not _black(uncle):
                    _paint(parent, black=True)
                    _paint(uncle, black=True)
                    _paint(grand, black=False)
                    x = grand
                else:
                    if x is _right(parent):
                        x = parent
                        self._rotate_left(x)
                    _paint(_parent(x), black=True)
                    _paint(_parent(_parent(x)), black=False)
                    self._rotate_right(_parent(_parent(x)))
            else:
                uncle = _left(grand)
                if not _black(uncle):
                    _paint(parent, black=True)
                    _paint(uncle, black=True)
                    _paint(grand, black=False)
                    x = grand
                else:
                    if x is _left(parent):
                        x = parent
                        self._rotate_right(x)
                    _paint(_parent(x), black=True)
                    _paint(_parent(_parent(x)), black=False)
                    self._rotate_left(_parent(_parent(x)))
        assert self.root is not None
        self.root.black = True

    def _replace(self, old: _Entry, new: _Entry) -> None:
        new.parent = old.parent
        if old.parent is None:
            self.root = new
        elif old.parent.left is old:
            old.parent.left = new
        else:
            old.parent.right = new

    def _rotate_left(self, p: _Entry | None) -> None:
        if p is None or p.right is None:
            return
        r = p.right
        p.right = r.left
        if r.left is not None:
            r.left.parent = p
        self._replace(p, r)
        r.left = p
        p.parent = r

    def _rotate_right(self, p: _Entry | None) -> None:
        if p is None or p.left is None:
            return
        left = p.left
        p.left = left.right
        if left.right is not None:
            left.right.parent = p
        self._replace(p, left)
        left.right = p
        p.parent = left


def _black(entry: _Entry | None) -> bool:
    return entry is None or entry.black


def _paint(entry: _Entry | None, *, black: bool) -> None:
    if entry is not None:
        entry.black = black


def _parent(entry: _Entry | None) -> _Entry | None:
    return None if entry is None else entry.parent


def _left(entry: _Entry | None) -> _Entry | None:
    return None if entry is None else entry.left


def _right(entry: _Entry | None) -> _Entry | None:
    return None if entry is None else entry.right


def neighbour_orders(
    nodes: Sequence[str], parents: Mapping[str, Sequence[str]]
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Each node's successors and predecessors in the order Kafka's description prints
    them, for a sub-topology of ``nodes`` (in the order they were added to the topology)
    whose node ``n`` was added with the parents ``parents[n]`` (in their order).

    Returns:
        (successors, predecessors) of every node.
    """
    size = dict.fromkeys(nodes, 1)

    def compare(a: str, b: str) -> int:
        if a == b:
            return 0
        if size[a] != size[b]:
            return size[b] - size[a]
        return -1 if a < b else 1

    successors = {n: TreeSet(compare) for n in nodes}
    predecessors = {n: TreeSet(compare) for n in nodes}

    def grow(node: str, delta: int) -> None:
        size[node] += delta
        for before in predecessors[node]:
            grow(before, delta)

    # Kafka fills a HashSet in the order nodes were added, then a HashMap in that set's
    # order: the same table size, so the map iterates as the set does
    for node in hash_map_order(list(nodes)):
        for parent in parents.get(node, ()):
            if parent not in size:
                continue
            predecessors[node].add(parent)
            successors[parent].add(node)
            grow(parent, size[node])
    return (
        {n: list(s) for n, s in successors.items()},
        {n: list(p) for n, p in predecessors.items()},
    )
