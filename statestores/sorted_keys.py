"""A lazily sorted key index beside a dict: O(1) writes, sorted range reads on demand.

The in-memory store and the transactional overlay keep their entries in a plain ``dict``
(the fastest write and point read Python has) and need ordered ranges only now and then.
:class:`SortedKeys` tracks the keys in a sorted list that is brought up to date when a
range is asked for: keys added since the last read are sorted and merged in (Timsort merges
a sorted run with a short sorted tail in linear time), and removed keys are dropped then.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping


def next_key(key: bytes) -> bytes:
    """Return the smallest key greater than ``key`` in unsigned byte order."""
    return key + b"\x00"


def prefix_end(prefix: bytes) -> bytes | None:
    """Return the smallest key greater than every key starting with ``prefix``.

    Returns:
        The exclusive upper bound, or ``None`` when there is none (``prefix`` is all 0xff).
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class SortedKeys:
    """The keys of a dict in unsigned byte order, maintained lazily.

    Args:
        data: the dict whose keys are indexed (read, never written, by this class).
    """

    __slots__ = ("_data", "_keys", "_pending", "_removed")

    def __init__(self, data: Mapping[bytes, object]) -> None:
        self._data = data
        self._keys: list[bytes] = sorted(data)
        self._pending: list[bytes] = []
        self._removed = False

    def added(self, key: bytes) -> None:
        """Note that ``key`` was newly inserted into the dict."""
        self._pending.append(key)

    def added_many(self, keys: list[bytes]) -> None:
        """Note that ``keys`` (each new to the dict, none twice) were inserted."""
        self._pending.extend(keys)

    def removed(self) -> None:
        """Note that some key was removed from the dict."""
        self._removed = True

    def reset(self, keys: Iterable[bytes] = ()) -> None:
        """Forget everything; index ``keys`` (the dict's new content) instead."""
        self._keys = sorted(keys)
        self._pending = []
        self._removed = False

    def _refresh(self) -> list[bytes]:
        if self._removed:
            self._keys = sorted(self._data)
            self._pending, self._removed = [], False
        elif self._pending:
            keys = self._keys
            keys.extend(self._pending)
            keys.sort()
            self._pending = []
        return self._keys

    def between(self, lo: bytes | None, hi: bytes | None, *, reverse: bool = False) -> list[bytes]:
        """Return a copy of the keys ``lo <= key <= hi`` (``None``: open), sorted.

        Args:
            lo: the smallest key included, or ``None``.
            hi: the greatest key included, or ``None``.
            reverse: descending order instead.

        Returns:
            A new list, so the caller may iterate it while the dict changes.
        """
        keys = self._refresh()
        start = 0 if lo is None else bisect_left(keys, lo)
        end = len(keys) if hi is None else bisect_right(keys, hi)
        if start >= end:
            return []
        chosen = keys[start:end]
        if reverse:
            chosen.reverse()
        return chosen

    def below(self, hi: bytes) -> list[bytes]:
        """Return the keys strictly below ``hi``, ascending."""
        keys = self._refresh()
        return keys[: bisect_left(keys, hi)]
