"""Kafka's ``Stores`` factories: suppliers of bytes stores and builders of typed stores.

::

    from statestores.stores import Stores
    from common.serdes import Serdes

    builder = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), Serdes.String(), Serdes.Long()
    ).with_caching_enabled()
    store = builder.build()  # a KeyValueStore[str, int]; store.init(context) opens it

A builder composes the layers by wrapping: metered (serdes, counters) → caching (when
enabled) → change-logging (when enabled) → the transactional bytes store (RocksDB or
memory). As in Kafka, logging is enabled and caching disabled by default. Builders are
frozen: each ``with_*`` returns a new builder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Self

from common.errors import ConfigError
from common.serdes import Serde
from statestores.bytes_layer import BytesKeyValue
from statestores.caching import CachingBytesStore
from statestores.logging_layer import ChangeLoggingBytesStore
from statestores.metered import MeteredKeyValueStore, MeteredStore
from statestores.segments import (
    IN_MEMORY,
    PERSISTENT,
    TIME_ORDERED,
    Expiry,
    SegmentedBytesStore,
)
from statestores.session import MeteredSessionStore
from statestores.transactional import TransactionalBytesStore
from statestores.versioned import default_segment_interval
from statestores.versioned_store import MeteredVersionedKeyValueStore
from statestores.window import MeteredWindowStore

StoreKind = Literal["key_value", "window", "session", "versioned"]
#: Kafka's default ``windowstore.changelog.additional.retention.ms`` (one day).
ADDITIONAL_RETENTION_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True, slots=True)
class KeyValueBytesStoreSupplier:
    """Supplies the bytes store of a key-value store (Kafka's supplier of the same name)."""

    name: str
    persistent: bool

    def get(self) -> TransactionalBytesStore:
        """Return a new, unopened bytes store."""
        return TransactionalBytesStore(self.name, persistent=self.persistent)

    def metrics_scope(self) -> str:
        """Return ``rocksdb`` or ``in-memory``."""
        return "rocksdb" if self.persistent else "in-memory"


@dataclass(frozen=True, slots=True)
class WindowBytesStoreSupplier(KeyValueBytesStoreSupplier):
    """Supplies the bytes store of a window store; ``time_ordered``: Kafka's time-ordered
    RocksDB store of emit-on-close aggregations (it keeps a window one ms longer)."""

    retention_ms: int = 0
    window_size_ms: int = 0
    retain_duplicates: bool = False
    time_ordered: bool = False

    def expiry(self) -> Expiry:
        """Return how this store expires windows (see :class:`statestores.segments.Expiry`)."""
        if not self.persistent:
            return IN_MEMORY
        return TIME_ORDERED if self.time_ordered else PERSISTENT


@dataclass(frozen=True, slots=True)
class SessionBytesStoreSupplier(KeyValueBytesStoreSupplier):
    """Supplies the bytes store of a session store."""

    retention_ms: int = 0


@dataclass(frozen=True, slots=True)
class VersionedBytesStoreSupplier(KeyValueBytesStoreSupplier):
    """Supplies the bytes store of a versioned key-value store (Kafka's
    ``VersionedBytesStoreSupplier``): RocksDB, versions kept ``history_retention_ms``,
    expired by segments of ``segment_interval_ms`` (see :mod:`statestores.versioned`)."""

    history_retention_ms: int = 0
    segment_interval_ms: int = 0


@dataclass(frozen=True, slots=True)
class _Builder:
    """A frozen store builder; implements :class:`statestores.api.StoreBuilder`."""

    supplier: KeyValueBytesStoreSupplier
    key_serde: Serde[Any]
    value_serde: Serde[Any]
    kind: StoreKind
    caching_enabled: bool = False
    logging_enabled: bool = True
    logging_config: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The store name."""
        return self.supplier.name

    def with_caching_enabled(self) -> Self:
        """Return a builder whose stores cache writes between commits."""
        return dataclasses.replace(self, caching_enabled=True)

    def with_caching_disabled(self) -> Self:
        """Return a builder whose stores write through."""
        return dataclasses.replace(self, caching_enabled=False)

    def with_logging_enabled(self, config: Mapping[str, str]) -> Self:
        """Return a builder whose stores log changes; ``config`` overrides the changelog
        topic's configuration (``cleanup.policy``, ``retention.ms``, ...)."""
        return dataclasses.replace(self, logging_enabled=True, logging_config=dict(config))

    def with_logging_disabled(self) -> Self:
        """Return a builder whose stores keep no changelog (not restorable)."""
        return dataclasses.replace(self, logging_enabled=False, logging_config={})

    def changelog_config(self) -> dict[str, str]:
        """Return the changelog topic configuration: compacted (windows and sessions also
        deleted after retention + one day, as Kafka's), then the user's overrides."""
        config = {"cleanup.policy": "compact"}
        retention = getattr(self.supplier, "retention_ms", 0)
        if self.kind != "key_value":
            config["cleanup.policy"] = "compact,delete"
            config["retention.ms"] = str(retention + ADDITIONAL_RETENTION_MS)
        return {**config, **self.logging_config}

    def _stack(self) -> BytesKeyValue:
        """Return the bytes layers: change-logging and caching as configured."""
        inner: BytesKeyValue = self.supplier.get()
        if self.logging_enabled:
            inner = ChangeLoggingBytesStore(inner)
        if self.caching_enabled:
            inner = CachingBytesStore(inner)
        return inner

    def build(self) -> MeteredStore:
        """Return a new, unopened typed store (call ``init(context)`` to open it)."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class KeyValueStoreBuilder(_Builder):
    """Builds :class:`~statestores.metered.MeteredKeyValueStore` instances."""

    def build(self) -> MeteredKeyValueStore[Any, Any]:
        """Return a new, unopened key-value store."""
        return MeteredKeyValueStore(self._stack(), self.key_serde, self.value_serde)


@dataclass(frozen=True, slots=True)
class WindowStoreBuilder(_Builder):
    """Builds :class:`~statestores.window.MeteredWindowStore` instances."""

    def build(self) -> MeteredWindowStore[Any, Any]:
        """Return a new, unopened window store: metered → caching → change-logging →
        segments (expiry, below the cache as in Kafka) → the transactional bytes store."""
        supplier = self.supplier
        assert isinstance(supplier, WindowBytesStoreSupplier)
        segmented = SegmentedBytesStore(supplier.get(), supplier.retention_ms, supplier.expiry())
        inner: BytesKeyValue = segmented
        if self.logging_enabled:
            inner = ChangeLoggingBytesStore(inner)
        if self.caching_enabled:
            inner = CachingBytesStore(inner, cache_reads=False)
        return MeteredWindowStore(
            inner,
            segmented,
            self.key_serde,
            self.value_serde,
            window_size_ms=supplier.window_size_ms,
            retain_duplicates=supplier.retain_duplicates,
        )


@dataclass(frozen=True, slots=True)
class SessionStoreBuilder(_Builder):
    """Builds :class:`~statestores.session.MeteredSessionStore` instances."""

    def build(self) -> MeteredSessionStore[Any, Any]:
        """Return a new, unopened session store."""
        supplier = self.supplier
        assert isinstance(supplier, SessionBytesStoreSupplier)
        return MeteredSessionStore(
            self._stack(), self.key_serde, self.value_serde, retention_ms=supplier.retention_ms
        )


@dataclass(frozen=True, slots=True)
class VersionedKeyValueStoreBuilder(_Builder):
    """Builds :class:`~statestores.versioned_store.MeteredVersionedKeyValueStore`
    instances. Versioned stores have no cache: caching is ignored, as Kafka's DSL ignores
    it for a versioned store."""

    def with_caching_enabled(self) -> Self:
        """Return this builder: a versioned store has no cache."""
        return self

    def changelog_config(self) -> dict[str, str]:
        """Return the changelog topic configuration: compacted, no compaction within the
        history retention plus one day (Kafka's ``min.compaction.lag.ms``), then the
        user's overrides."""
        supplier = self.supplier
        assert isinstance(supplier, VersionedBytesStoreSupplier)
        lag = supplier.history_retention_ms + ADDITIONAL_RETENTION_MS
        config = {"cleanup.policy": "compact", "min.compaction.lag.ms": str(lag)}
        return {**config, **self.logging_config}

    def build(self) -> MeteredVersionedKeyValueStore[Any, Any]:
        """Return a new, unopened versioned store."""
        supplier = self.supplier
        assert isinstance(supplier, VersionedBytesStoreSupplier)
        return MeteredVersionedKeyValueStore(
            self._stack(),
            self.key_serde,
            self.value_serde,
            history_retention_ms=supplier.history_retention_ms,
            segment_interval_ms=supplier.segment_interval_ms,
        )


def _check_name(name: str) -> str:
    if not name or not all(c.isalnum() or c in "._-" for c in name):
        raise ConfigError(
            f"store name {name!r} is invalid: it names the changelog topic, so use 1 or more "
            "characters from [a-zA-Z0-9._-]"
        )
    return name


def _check_window(name: str, retention_ms: int, window_size_ms: int) -> None:
    if retention_ms < 0 or window_size_ms < 0:
        raise ConfigError(f"store {name}: retention and window size must be >= 0")
    if window_size_ms > retention_ms:
        raise ConfigError(
            f"store {name}: the retention period ({retention_ms} ms) must be at least the "
            f"window size ({window_size_ms} ms)"
        )


class Stores:
    """Factories of store suppliers and builders, named as Kafka's ``Stores``."""

    @staticmethod
    def persistent_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        """A RocksDB key-value store."""
        return KeyValueBytesStoreSupplier(_check_name(name), True)

    @staticmethod
    def in_memory_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        """An in-memory key-value store."""
        return KeyValueBytesStoreSupplier(_check_name(name), False)

    @staticmethod
    def persistent_window_store(
        name: str, retention_ms: int, window_size_ms: int, retain_duplicates: bool = False
    ) -> WindowBytesStoreSupplier:
        """A RocksDB window store.

        Raises:
            ConfigError: a negative time, or a window larger than the retention.
        """
        _check_window(name, retention_ms, window_size_ms)
        return WindowBytesStoreSupplier(
            _check_name(name), True, retention_ms, window_size_ms, retain_duplicates
        )

    @staticmethod
    def persistent_time_ordered_window_store(
        name: str, retention_ms: int, window_size_ms: int
    ) -> WindowBytesStoreSupplier:
        """The RocksDB window store Kafka's DSL gives an emit-on-close aggregation
        (``RocksDbIndexedTimeOrderedWindowBytesStoreSupplier``): a window is kept while its
        start is at least ``stream time - retention``, one ms longer than
        :meth:`persistent_window_store` keeps it.

        Raises:
            ConfigError: a negative time, or a window larger than the retention.
        """
        _check_window(name, retention_ms, window_size_ms)
        return WindowBytesStoreSupplier(
            _check_name(name), True, retention_ms, window_size_ms, time_ordered=True
        )

    @staticmethod
    def in_memory_window_store(
        name: str, retention_ms: int, window_size_ms: int, retain_duplicates: bool = False
    ) -> WindowBytesStoreSupplier:
        """An in-memory window store (see :meth:`persistent_window_store`)."""
        _check_window(name, retention_ms, window_size_ms)
        return WindowBytesStoreSupplier(
            _check_name(name), False, retention_ms, window_size_ms, retain_duplicates
        )

    @staticmethod
    def persistent_session_store(name: str, retention_ms: int) -> SessionBytesStoreSupplier:
        """A RocksDB session store."""
        _check_window(name, retention_ms, 0)
        return SessionBytesStoreSupplier(_check_name(name), True, retention_ms)

    @staticmethod
    def in_memory_session_store(name: str, retention_ms: int) -> SessionBytesStoreSupplier:
        """An in-memory session store."""
        _check_window(name, retention_ms, 0)
        return SessionBytesStoreSupplier(_check_name(name), False, retention_ms)

    @staticmethod
    def persistent_versioned_key_value_store(
        name: str, history_retention_ms: int, segment_interval_ms: int | None = None
    ) -> VersionedBytesStoreSupplier:
        """A RocksDB versioned key-value store (KIP-889): old versions stay queryable
        ``history_retention_ms`` of stream time, grouped for expiry in segments of
        ``segment_interval_ms`` (Kafka's default for the retention when None).

        Example:
            >>> Stores.persistent_versioned_key_value_store("prices", 60_000).segment_interval_ms
            20000

        Raises:
            ConfigError: a negative retention, or a segment interval below 1 ms.
        """
        if history_retention_ms < 0:
            raise ConfigError(f"store {name}: historyRetention cannot be negative")
        if segment_interval_ms is None:
            segment_interval_ms = default_segment_interval(history_retention_ms)
        if segment_interval_ms < 1:
            raise ConfigError(f"store {name}: segmentInterval cannot be zero or negative")
        return VersionedBytesStoreSupplier(
            _check_name(name), True, history_retention_ms, segment_interval_ms
        )

    @staticmethod
    def versioned_key_value_store_builder(
        supplier: VersionedBytesStoreSupplier, key_serde: Serde[Any], value_serde: Serde[Any]
    ) -> VersionedKeyValueStoreBuilder:
        """A builder of typed versioned key-value stores over ``supplier``'s bytes stores."""
        return VersionedKeyValueStoreBuilder(supplier, key_serde, value_serde, "versioned")

    @staticmethod
    def key_value_store_builder(
        supplier: KeyValueBytesStoreSupplier, key_serde: Serde[Any], value_serde: Serde[Any]
    ) -> KeyValueStoreBuilder:
        """A builder of typed key-value stores over ``supplier``'s bytes stores."""
        return KeyValueStoreBuilder(supplier, key_serde, value_serde, "key_value")

    @staticmethod
    def window_store_builder(
        supplier: WindowBytesStoreSupplier, key_serde: Serde[Any], value_serde: Serde[Any]
    ) -> WindowStoreBuilder:
        """A builder of typed window stores."""
        return WindowStoreBuilder(supplier, key_serde, value_serde, "window")

    @staticmethod
    def session_store_builder(
        supplier: SessionBytesStoreSupplier, key_serde: Serde[Any], value_serde: Serde[Any]
    ) -> SessionStoreBuilder:
        """A builder of typed session stores."""
        return SessionStoreBuilder(supplier, key_serde, value_serde, "session")
