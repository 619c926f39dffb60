"""The typed versioned key-value store (Kafka's ``MeteredVersionedKeyValueStore``).

The stack is metered (serdes, counters, the versions' layout: :mod:`statestores.versioned`)
→ change-logging (when enabled) → the transactional bytes store, as every store kind's;
versioned stores have no cache, as Kafka's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from common.serdes import Serde
from statestores.api import VersionedRecord
from statestores.bytes_layer import BytesKeyValue
from statestores.metered import MeteredStore
from statestores.versioned import MAX_TIME, MIN_TIME, RawVersion, Versions

K = TypeVar("K")
V = TypeVar("V")


class MeteredVersionedKeyValueStore(MeteredStore, Generic[K, V]):
    """A typed :class:`~statestores.api.VersionedKeyValueStore` over a bytes stack.

    Args:
        wrapped: the bytes stack.
        key_serde: serde of the keys.
        value_serde: serde of the values.
        history_retention_ms: how long old versions stay queryable.
        segment_interval_ms: the width of the expiry segments.
    """

    def __init__(
        self,
        wrapped: BytesKeyValue,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        history_retention_ms: int,
        segment_interval_ms: int,
    ) -> None:
        super().__init__(wrapped, key_serde, value_serde)
        self.versions = Versions(wrapped, history_retention_ms, segment_interval_ms)

    @property
    def history_retention(self) -> int:
        """The history retention in ms."""
        return self.versions.retention

    def observed_stream_time(self) -> int:
        """The largest timestamp put into the store."""
        return self.versions.stream_time

    def _bind(self) -> None:
        self.versions.load()

    def on_restored(self) -> None:
        """Read the observed stream time back from the restored entries."""
        self.versions.load()

    def abort(self) -> None:
        """Discard uncommitted writes; stream time goes back to the committed one."""
        super().abort()
        self.versions.load()

    def _raw_key(self, key: K) -> bytes:
        if key is None:
            raise TypeError(f"store {self.name}: the key cannot be None")
        raw: bytes = self.key_serde.serialize(self.topic, key)
        return raw

    def _typed(self, found: RawVersion | None) -> VersionedRecord[V] | None:
        if found is None:
            return None
        value = self.value_serde.deserialize(self.topic, found.value)
        return VersionedRecord(value, found.valid_from, found.valid_to)

    def put(self, key: K, value: V | None, timestamp: int) -> int:
        """Put a version of ``key`` valid from ``timestamp`` (``None``: a tombstone).

        Returns:
            The version's ``valid_to`` (the next version's timestamp),
            ``PUT_RETURN_CODE_VALID_TO_UNDEFINED`` (-1) when it is the latest, or
            ``PUT_RETURN_CODE_NOT_PUT`` when it is older than the history retention.
        """
        self.metrics["put"] += 1
        raw = None if value is None else self.value_serde.serialize(self.topic, value)
        return self.versions.put(self._raw_key(key), raw, timestamp)

    def delete(self, key: K, timestamp: int) -> VersionedRecord[V] | None:
        """Put a tombstone at ``timestamp``; return the version valid at ``timestamp``
        before it (None when there was none, or the delete is too old)."""
        self.metrics["delete"] += 1
        return self._typed(self.versions.delete(self._raw_key(key), timestamp))

    def get(self, key: K, as_of_timestamp: int | None = None) -> VersionedRecord[V] | None:
        """The latest version of ``key``, or the one valid at ``as_of_timestamp``."""
        self.metrics["get"] += 1
        return self._typed(self.versions.get(self._raw_key(key), as_of_timestamp))

    def all_versions(self) -> Iterator[tuple[K, VersionedRecord[V]]]:
        """Every key's versions as :meth:`get_versions` answers them (tombstones left
        out), key by key in serialized key order, each key's oldest first."""
        self.metrics["range"] += 1
        deserialize = self.key_serde.deserialize
        for raw in self.versions.stored_keys():
            key = deserialize(self.topic, raw)
            for found in self.versions.versions(raw, MIN_TIME, MAX_TIME):
                record = self._typed(found)
                if record is not None:
                    yield key, record

    def get_versions(
        self,
        key: K,
        from_timestamp: int | None = None,
        to_timestamp: int | None = None,
        *,
        ascending: bool = False,
    ) -> list[VersionedRecord[V]]:
        """The versions of ``key`` valid at some time in ``[from_timestamp, to_timestamp]``
        (open bounds when None), newest first unless ``ascending`` (KIP-968's
        ``MultiVersionedKeyQuery``); tombstones are left out."""
        self.metrics["range"] += 1
        lo = MIN_TIME if from_timestamp is None else from_timestamp
        hi = MAX_TIME if to_timestamp is None else to_timestamp
        found = self.versions.versions(self._raw_key(key), lo, hi)
        records = [r for r in map(self._typed, found) if r is not None]
        return records if ascending else records[::-1]
