"""The change-logging layer: every write below it is also sent to the store's changelog.

Kafka's ``ChangeLoggingKeyValueBytesStore``: ``put(key, value)`` writes the inner store and
sends ``(key, value)`` (``None``: a tombstone) to ``context.changelog``, which the runtime
writes to ``<application.id>-<store>-changelog`` (partition = the task's) in the same
transaction as the task's outputs. Retention deletes (:meth:`delete_range`) are local and
not logged, as Kafka's segment drops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from statestores.api import ChangelogCollector, StateStoreContext
from statestores.bytes_layer import BytesKeyValue, WrappingBytesStore


class ChangeLoggingBytesStore(WrappingBytesStore):
    """Sends each change of the inner store to the task's changelog collector.

    Args:
        wrapped: the inner bytes store.
    """

    def __init__(self, wrapped: BytesKeyValue) -> None:
        super().__init__(wrapped)
        self._collector: ChangelogCollector | None = None
        self._send: Callable[[str, bytes, bytes | None, int], None] | None = None
        self._timestamp: Callable[[], int] = _zero
        self._inner_put = wrapped.put

    def init(self, context: StateStoreContext) -> None:
        """Open the inner store; remember the collector (None: nothing is logged)."""
        self.wrapped.init(context)
        self._collector = context.changelog
        self._send = None if self._collector is None else self._collector.send_change
        self._timestamp = context.timestamp
        self._inner_put = self.wrapped.put

    def put(self, key: bytes, value: bytes | None) -> None:
        """Write ``key`` below and log the change."""
        self._inner_put(key, value)
        send = self._send
        if send is not None:
            send(self.name, key, value, self._timestamp())

    def put_many(
        self, keys: list[bytes], values: list[bytes | None], timestamps: list[int]
    ) -> None:
        """Write the keys below and log each change with its timestamp."""
        self.wrapped.put_many(keys, values, timestamps)
        send = self._send
        if send is None:
            return
        many = getattr(self._collector, "send_changes", None)
        if many is not None:  # a collector that takes a batch of changes at once
            many(self.name, keys, values, timestamps)
            return
        name = self.name
        for key, value, timestamp in zip(keys, values, timestamps, strict=True):
            send(name, key, value, timestamp)

    def items(
        self, lo: bytes | None, hi: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Return the inner store's entries."""
        return self.wrapped.items(lo, hi, reverse=reverse)


def _zero() -> int:
    return 0
