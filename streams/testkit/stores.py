"""The state stores a :class:`~streams.testkit.driver.TopologyTestDriver` hands a test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from topology.api.record import ValueAndTimestamp


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
        found = self.inner.get(key)
        return None if found is None else found[0]

    def put(self, key: Any, value: Any) -> None:
        """Write ``value`` (None deletes)."""
        self.inner.put(key, None if value is None else ValueAndTimestamp(value, -1))

    def delete(self, key: Any) -> Any:
        """Delete ``key``; return its old value."""
        found = self.inner.delete(key)
        return None if found is None else found[0]

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
