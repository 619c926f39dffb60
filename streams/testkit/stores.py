"""The state stores a :class:`~streams.testkit.driver.TopologyTestDriver` hands a test: a DSL
store seen with plain values, as Kafka's ``KeyValueStoreFacade`` and ``WindowStoreFacade``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from topology.api.record import ValueAndTimestamp


def _plain(found: Any) -> Any:
    """A stored ``ValueAndTimestamp``'s value (None for none)."""
    return None if found is None else found[0]


class KeyValueStoreFacade:
    """A DSL key-value store seen with plain values (Kafka's ``KeyValueStoreFacade``):
    reads unwrap ``ValueAndTimestamp``, writes wrap with timestamp -1."""

    def __init__(self, store: Any) -> None:
        self.inner = store

    @property
    def name(self) -> str:
        """The store name."""
        return str(self.inner.name)

    def get(self, key: Any) -> Any:
        """Return the value of ``key`` (None if absent)."""
        return _plain(self.inner.get(key))

    def put(self, key: Any, value: Any) -> None:
        """Write ``value`` (None deletes)."""
        self.inner.put(key, None if value is None else ValueAndTimestamp(value, -1))

    def delete(self, key: Any) -> Any:
        """Delete ``key``; return its old value."""
        return _plain(self.inner.delete(key))

    def _unwrap(self, items: Iterator[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
        return ((k, v[0]) for k, v in items)

    def all(self) -> Iterator[tuple[Any, Any]]:
        """Every entry in key order."""
        return self._unwrap(self.inner.all())

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        """Entries with ``from_key <= key <= to_key``."""
        return self._unwrap(self.inner.range(from_key, to_key))

    def approximate_num_entries(self) -> int:
        """About how many entries the store holds."""
        return int(self.inner.approximate_num_entries())


class WindowStoreFacade:
    """A DSL window store seen with plain values (Kafka's ``WindowStoreFacade``): reads
    unwrap ``ValueAndTimestamp``, writes wrap with the window's start as timestamp."""

    def __init__(self, store: Any) -> None:
        self.inner = store

    @property
    def name(self) -> str:
        """The store name."""
        return str(self.inner.name)

    def put(self, key: Any, value: Any, window_start: int) -> None:
        """Write ``value`` (None deletes) for the window of ``key`` starting at
        ``window_start``."""
        wrapped = None if value is None else ValueAndTimestamp(value, window_start)
        self.inner.put(key, wrapped, window_start)

    def fetch_value(self, key: Any, window_start: int) -> Any:
        """The value of ``key``'s window starting at ``window_start`` (None if absent)."""
        return _plain(self.inner.fetch_value(key, window_start))

    def fetch(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        """``key``'s windows starting in ``[time_from, time_to]``: (start, value)."""
        return ((start, found[0]) for start, found in self.inner.fetch(key, time_from, time_to))

    def backward_fetch(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        """:meth:`fetch`, latest window first."""
        found = self.inner.backward_fetch(key, time_from, time_to)
        return ((start, value[0]) for start, value in found)

    def fetch_range(
        self, key_from: Any, key_to: Any, time_from: int, time_to: int
    ) -> Iterator[tuple[Any, Any]]:
        """Windows of keys in ``[key_from, key_to]`` starting in ``[time_from, time_to]``."""
        return self._unwrap(self.inner.fetch_range(key_from, key_to, time_from, time_to))

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Any, Any]]:
        """Every window starting in ``[time_from, time_to]``."""
        return self._unwrap(self.inner.fetch_all(time_from, time_to))

    def all(self) -> Iterator[tuple[Any, Any]]:
        """Every live window."""
        return self._unwrap(self.inner.all())

    def backward_all(self) -> Iterator[tuple[Any, Any]]:
        """Every live window, in reverse."""
        return self._unwrap(self.inner.backward_all())

    @staticmethod
    def _unwrap(items: Iterator[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
        return ((windowed, found[0]) for windowed, found in items)
