"""Store factories: how a topology names a store and builds it for each task, plus the
internal serdes of the DSL's stores and repartition topics.

A :class:`StoreFactory` is resolved against the configuration when a task starts (Kafka's
``StoreFactory``): a DSL store without a supplier becomes RocksDB or in-memory according to
``default.dsl.store``; a user :class:`~statestores.api.StoreBuilder` is used as given. A
cache size of 0 (``statestore.cache.max.bytes``) strips the caching layer from every store,
the user's too, as Kafka's ``InternalTopologyBuilder.rewriteTopology``: records go straight
through the store and its forwarder.
The windows phase adds window and session factories beside :class:`KeyValueStoreFactory`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from common.config import StreamsConfig
from common.errors import SerializationError
from common.serdes import LongSerde, Serde, deserialize_many, serde_from_name, serialize_many
from statestores.api import StoreBuilder
from statestores.stores import Stores, VersionedBytesStoreSupplier
from topology.api.record import Change, ValueAndTimestamp

_TS = struct.Struct(">q")
_new = tuple.__new__
_TS_LONG = struct.Struct(">qq")  # a timestamp, then a long value
_LEN = struct.Struct(">i")


@runtime_checkable
class StoreFactory(Protocol):
    """Names a store and builds a :class:`~statestores.api.StoreBuilder` for it."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def logging_enabled(self) -> bool: ...

    def builder(self, config: StreamsConfig) -> StoreBuilder:
        """Return the builder of this store under ``config``."""
        ...


@dataclass(frozen=True, slots=True)
class BuilderStoreFactory:
    """A user-supplied :class:`~statestores.api.StoreBuilder` (``add_state_store``)."""

    store_builder: StoreBuilder

    @property
    def name(self) -> str:
        """The store name."""
        return self.store_builder.name

    @property
    def kind(self) -> str:
        """``key_value``, ``window`` or ``session``."""
        return self.store_builder.kind

    @property
    def logging_enabled(self) -> bool:
        """Whether the store has a changelog topic."""
        return self.store_builder.logging_enabled

    def builder(self, config: StreamsConfig) -> StoreBuilder:
        """Return the user's builder, without its caching layer when the cache size is 0."""
        uncached = getattr(self.store_builder, "with_caching_disabled", None)
        if uncached is not None and not _caching(config, enabled=True):
            return uncached()  # type: ignore[no-any-return]
        return self.store_builder


def resolve_serde(serde: Serde[Any] | None, default: str) -> Serde[Any]:
    """Return ``serde``, or the one the configuration's default names (also inside a
    :class:`ChangeSerde` without an inner serde)."""
    if serde is None:
        return serde_from_name(default)
    if isinstance(serde, ChangeSerde) and serde.inner is None:
        return ChangeSerde(serde_from_name(default))
    with_inner = getattr(serde, "with_inner", None)
    if with_inner is not None and getattr(serde, "inner", 0) is None:
        return with_inner(serde_from_name(default))  # type: ignore[no-any-return]
    return serde


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyValueStoreFactory:
    """A DSL key-value store (tables, aggregates); values are kept as
    :class:`~topology.api.record.ValueAndTimestamp` when ``timestamped``."""

    name: str
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    supplier: Any = None
    caching_enabled: bool = True
    logging_enabled: bool = True
    logging_config: Mapping[str, str] = field(default_factory=dict)
    timestamped: bool = True

    @property
    def kind(self) -> str:
        """``key_value``, or ``versioned`` for a versioned supplier (KIP-889)."""
        return (
            "versioned" if isinstance(self.supplier, VersionedBytesStoreSupplier) else "key_value"
        )

    def builder(self, config: StreamsConfig) -> StoreBuilder:
        """Build through :class:`statestores.stores.Stores`, honouring ``default.dsl.store``
        (a versioned supplier's store keeps plain values: each version has its time)."""
        key_serde = resolve_serde(self.key_serde, config.default_key_serde)
        value_serde = resolve_serde(self.value_serde, config.default_value_serde)
        if isinstance(self.supplier, VersionedBytesStoreSupplier):
            versioned: Any = Stores.versioned_key_value_store_builder(
                self.supplier, key_serde, value_serde
            )
            return _configure(versioned, config, self)
        if self.timestamped:
            value_serde = ValueAndTimestampSerde(value_serde)
        supplier = self.supplier
        if supplier is None:
            if config.default_dsl_store == "in_memory":
                supplier = Stores.in_memory_key_value_store(self.name)
            else:
                supplier = Stores.persistent_key_value_store(self.name)
        builder: Any = Stores.key_value_store_builder(supplier, key_serde, value_serde)
        return _configure(builder, config, self)


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowStoreFactory:
    """A DSL window store (windowed aggregations); values are kept as
    :class:`~topology.api.record.ValueAndTimestamp`. ``retention_ms`` and ``window_size_ms``
    are settled by the window specification (see :mod:`topology.dsl.windowed`).
    ``time_ordered``: the store of an emit-on-close aggregation, which Kafka's DSL makes
    its time-ordered RocksDB store (an in-memory one stays as it is, as Kafka's)."""

    name: str
    retention_ms: int
    window_size_ms: int
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    supplier: Any = None
    caching_enabled: bool = True
    logging_enabled: bool = True
    logging_config: Mapping[str, str] = field(default_factory=dict)
    retain_duplicates: bool = False
    time_ordered: bool = False

    @property
    def kind(self) -> str:
        """Always ``window``."""
        return "window"

    def builder(self, config: StreamsConfig) -> StoreBuilder:
        """Build through :class:`statestores.stores.Stores`, honouring ``default.dsl.store``."""
        supplier = self.supplier
        if supplier is None:
            make: Callable[[str, int, int, bool], Any]
            if config.default_dsl_store == "in_memory":
                make = Stores.in_memory_window_store
            elif self.time_ordered and not self.retain_duplicates:
                make = _time_ordered
            else:
                make = Stores.persistent_window_store
            supplier = make(
                self.name, self.retention_ms, self.window_size_ms, self.retain_duplicates
            )
        value_serde = resolve_serde(self.value_serde, config.default_value_serde)
        builder: Any = Stores.window_store_builder(
            supplier,
            resolve_serde(self.key_serde, config.default_key_serde),
            ValueAndTimestampSerde(value_serde),
        )
        return _configure(builder, config, self)


def _time_ordered(name: str, retention_ms: int, size_ms: int, _dups: bool) -> Any:
    """Kafka's DSL store of an emit-on-close aggregation (never with duplicates)."""
    return Stores.persistent_time_ordered_window_store(name, retention_ms, size_ms)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionStoreFactory:
    """A DSL session store (session aggregations); values are the plain aggregates."""

    name: str
    retention_ms: int
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    supplier: Any = None
    caching_enabled: bool = True
    logging_enabled: bool = True
    logging_config: Mapping[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """Always ``session``."""
        return "session"

    def builder(self, config: StreamsConfig) -> StoreBuilder:
        """Build through :class:`statestores.stores.Stores`, honouring ``default.dsl.store``."""
        supplier = self.supplier
        if supplier is None:
            make = (
                Stores.in_memory_session_store
                if config.default_dsl_store == "in_memory"
                else Stores.persistent_session_store
            )
            supplier = make(self.name, self.retention_ms)
        builder: Any = Stores.session_store_builder(
            supplier,
            resolve_serde(self.key_serde, config.default_key_serde),
            resolve_serde(self.value_serde, config.default_value_serde),
        )
        return _configure(builder, config, self)


def _caching(config: StreamsConfig, *, enabled: bool) -> bool:
    """Whether a store caches: asked for, and a cache size above 0 (Kafka: 0 is no cache)."""
    return enabled and config.statestore_cache_max_bytes > 0


def _configure(builder: Any, config: StreamsConfig, factory: Any) -> StoreBuilder:
    """Give ``builder`` the DSL ``factory``'s caching (under ``config``) and logging."""
    caching = _caching(config, enabled=factory.caching_enabled)
    builder = builder.with_caching_enabled() if caching else builder.with_caching_disabled()
    if factory.logging_enabled:
        return builder.with_logging_enabled(dict(factory.logging_config))  # type: ignore[no-any-return]
    return builder.with_logging_disabled()  # type: ignore[no-any-return]


class ValueAndTimestampSerde:
    """Serialise :class:`~topology.api.record.ValueAndTimestamp` as Kafka does: 8 bytes of
    big-endian timestamp, then the value's bytes."""

    __slots__ = ("inner",)

    def __init__(self, inner: Serde[Any]) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"ValueAndTimestampSerde({self.inner!r})"

    def deserialize_batch(
        self, topic: str, items: Sequence[bytes | None]
    ) -> list[ValueAndTimestamp[Any] | None] | None:
        """Many at once (``deserialize_many``); None when one is too short (the scalar
        path reports it)."""
        long = type(self.inner) is LongSerde
        if long and items and None not in items:  # counts, say: every one 16 bytes?
            joined = b"".join(items)  # type: ignore[arg-type]
            if len(joined) == len(items) * _TS_LONG.size:
                pairs = np.frombuffer(joined, ">i8")
                return [
                    _new(ValueAndTimestamp, pair)
                    for pair in zip(pairs[1::2].tolist(), pairs[0::2].tolist(), strict=True)
                ]
        if any(len(d) < _TS.size for d in items if d is not None):
            return None
        if long:  # an aggregate's count: both at once
            unpack = _TS_LONG.unpack
            out: list[ValueAndTimestamp[Any] | None] = []
            for d in items:
                if d is None or len(d) != _TS_LONG.size:
                    out.append(None if d is None else self.deserialize(topic, d))
                else:
                    ts, value = unpack(d)
                    out.append(ValueAndTimestamp(value, ts))
            return out
        values = deserialize_many(self.inner, topic, [None if d is None else d[8:] for d in items])
        return [
            None if d is None else ValueAndTimestamp(v, _TS.unpack_from(d)[0])
            for d, v in zip(items, values, strict=True)
        ]

    def serialize_batch(
        self, topic: str, items: Sequence[ValueAndTimestamp[Any] | None]
    ) -> list[bytes | None] | None:
        """Many at once (``serialize_many``); None when the scalar path must decide (a
        value that is not a plain int under a long serde, out of range, ...)."""
        if type(self.inner) is LongSerde:  # an aggregate's count: both in one pack
            pack = _TS_LONG.pack
            out: list[bytes | None] = []
            for item in items:
                if item is None:
                    out.append(None)
                elif type(item[0]) is int and type(item[1]) is int:
                    out.append(pack(item[1], item[0]))  # struct.error past 64 bits
                else:
                    return None
            return out
        values = serialize_many(self.inner, topic, [None if v is None else v[0] for v in items])
        pack = _TS.pack
        return [
            None if item is None or raw is None else pack(item[1]) + raw
            for item, raw in zip(items, values, strict=True)
        ]

    def serialize(self, topic: str, data: ValueAndTimestamp[Any] | None) -> bytes | None:
        """Return ``timestamp + value`` bytes; ``None`` gives ``None``."""
        if data is None:
            return None
        raw = self.inner.serialize(topic, data[0])
        if raw is None:
            return None
        return _TS.pack(data[1]) + raw

    def deserialize(self, topic: str, data: bytes | None) -> ValueAndTimestamp[Any] | None:
        """Return the value and its timestamp; ``None`` gives ``None``."""
        if data is None:
            return None
        if len(data) < 8:
            raise SerializationError(f"ValueAndTimestamp needs at least 8 bytes, got {len(data)}")
        return ValueAndTimestamp(self.inner.deserialize(topic, data[8:]), _TS.unpack_from(data)[0])


class ChangeSerde:
    """Serialise a :class:`~topology.api.record.Change` (new and old value) for a table's
    repartition topic: a flag byte (1: new present, 2: old present), the 4-byte length of
    the new value, the new value's bytes, then the old value's bytes."""

    __slots__ = ("inner",)

    def __init__(self, inner: Serde[Any] | None) -> None:
        self.inner = inner  # None: the default value serde, set when the task starts

    def __repr__(self) -> str:
        return f"ChangeSerde({self.inner!r})"

    def serialize(self, topic: str, data: Change[Any] | None) -> bytes | None:
        """Return the bytes of both values."""
        if data is None:
            return None
        assert self.inner is not None
        new = self.inner.serialize(topic, data[0]) if data[0] is not None else None
        old = self.inner.serialize(topic, data[1]) if data[1] is not None else None
        flags = (1 if new is not None else 0) | (2 if old is not None else 0)
        new_b, old_b = new or b"", old or b""
        return bytes((flags,)) + _LEN.pack(len(new_b)) + new_b + old_b

    def deserialize(self, topic: str, data: bytes | None) -> Change[Any] | None:
        """Return the change."""
        if data is None:
            return None
        if len(data) < 5:
            raise SerializationError(f"Change needs at least 5 bytes, got {len(data)}")
        assert self.inner is not None
        flags, size = data[0], _LEN.unpack_from(data, 1)[0]
        new = self.inner.deserialize(topic, data[5 : 5 + size]) if flags & 1 else None
        old = self.inner.deserialize(topic, data[5 + size :]) if flags & 2 else None
        return Change(new, old)
