"""The metered key-value store: the typed face of a store stack (serdes and counters).

Kafka's ``MeteredKeyValueStore``: keys and values are (de)serialised here and only here,
with the changelog topic ``<application.id>-<store>-changelog`` as the serde topic; every
layer below sees bytes. Operation counts are kept in :attr:`MeteredKeyValueStore.metrics`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from common.serdes import Serde, deserialize_many, serialize_many
from statestores.api import StateStoreContext
from statestores.bytes_layer import BytesKeyValue
from statestores.sorted_keys import prefix_end

K = TypeVar("K")
V = TypeVar("V")

#: ``(key, new value, old value, timestamp)`` forwarded when a cache flushes an entry.
FlushListener = Callable[[Any, Any, Any, int], None]
#: A flush's entries at once: keys, new values, old values, timestamps (typed).
BatchListener = Callable[[list[Any], list[Any], list[Any], list[int]], None]


def changelog_topic(application_id: str, store: str) -> str:
    """Return the changelog topic of ``store``: ``<application.id>-<store>-changelog``."""
    return f"{application_id}-{store}-changelog"


class MeteredStore:
    """What the typed stores share: the inner stack, lifecycle, metrics, flush listener."""

    def __init__(self, wrapped: BytesKeyValue, key_serde: Serde[Any], value_serde: Serde[Any]):
        self.wrapped = wrapped
        # typed as Any: the typed stores' K and V are the serdes' types, unknown to mypy
        self.key_serde: Any = key_serde
        self.value_serde: Any = value_serde
        self.topic = ""
        self.metrics: dict[str, int] = {"put": 0, "get": 0, "delete": 0, "range": 0, "flush": 0}
        self._open = False
        #: metadata entry -> [its source, the value last written or read]
        self._kept: dict[str, list[Any]] = {}

    @property
    def name(self) -> str:
        """The store name."""
        return self.wrapped.name

    def init(self, context: StateStoreContext) -> None:
        """Open the stack below and register this store with the task."""
        self.topic = changelog_topic(context.application_id, self.name)
        self.wrapped.init(context)
        self._bind()
        self._open = True
        context.register(self)

    def _bind(self) -> None:
        """Cache bound methods of the stack (called after ``init``)."""

    def flush(self) -> None:
        """Write the kept metadata entries that changed, flush caches and (outside a task's
        transactions) commit."""
        self.metrics["flush"] += 1
        for name, kept in self._kept.items():
            value = kept[0]()
            if value != kept[1] and value is not None:
                self.write_meta(name, value)
                kept[1] = value
        self.wrapped.flush()

    def keep_meta(self, name: str, source: Callable[[], int | None]) -> int | None:
        """Keep the int metadata entry ``name`` equal to ``source()`` as of every flush, so
        it commits with the data (a processor's bookkeeping: a rebuilt task starts from the
        committed value, as the run that was not interrupted went on); return its committed
        value (None: never written)."""
        found = self.read_meta(name)
        self._kept[name] = [source, found]
        return found

    def read_meta(self, name: str) -> int | None:
        """Return the int metadata entry ``name`` (stores that keep such entries)."""
        raise TypeError(f"store {self.name} keeps no metadata entries ({name})")

    def write_meta(self, name: str, value: int) -> None:
        """Write the int metadata entry ``name`` (stores that keep such entries)."""
        raise TypeError(f"store {self.name} keeps no metadata entries ({name})")

    def close(self) -> None:
        """Close the stack."""
        self.wrapped.close()
        self._open = False

    def persistent(self) -> bool:
        """Return whether the data survives the process."""
        return self.wrapped.persistent()

    def is_open(self) -> bool:
        """Return whether ``init`` ran and ``close`` did not."""
        return self._open and self.wrapped.is_open()

    def approximate_num_entries(self) -> int:
        """Return about how many entries the store holds."""
        return self.wrapped.approximate_num_entries()

    def on_restored(self) -> None:
        """Re-read what the store derives from its data (called after a restore)."""

    def abort(self) -> None:
        """Discard the uncommitted writes of every layer (caches, overlay, prepared batch)."""
        self.wrapped.abort()

    def set_flush_listener(
        self,
        listener: FlushListener | None,
        batch_listener: BatchListener | None = None,
        *,
        old_values: bool = True,
    ) -> bool:
        """Forward ``(key, new, old, timestamp)`` of each entry the cache flushes
        (``old_values`` False: old is None unless the entry is a tombstone).

        Returns:
            Whether the store has a cache (without one, nothing is ever forwarded).
        """
        layer: Any = self.wrapped
        while layer is not None and not hasattr(layer, "set_flush_listener"):
            layer = getattr(layer, "wrapped", None)
        if layer is None:
            return False
        typed = None if listener is None else self._typed_listener(listener)
        batch = None if batch_listener is None else self._typed_batch_listener(batch_listener)
        layer.set_flush_listener(typed, batch, old_values=old_values)
        return True

    def _typed_batch_listener(self, listener: BatchListener) -> Any:
        """The bytes form of a batch flush listener (None: this store hands on entries one
        at a time)."""
        return None

    def _typed_listener(self, listener: FlushListener) -> Any:
        topic, key_de, value_de = self.topic, self.key_serde, self.value_serde

        def forward(key: bytes, new: bytes | None, old: bytes | None, timestamp: int) -> None:
            listener(
                key_de.deserialize(topic, key),
                value_de.deserialize(topic, new),
                value_de.deserialize(topic, old),
                timestamp,
            )

        return forward


class MeteredKeyValueStore(MeteredStore, Generic[K, V]):
    """A typed :class:`~statestores.api.KeyValueStore` over a bytes stack."""

    def _typed_batch_listener(self, listener: BatchListener) -> Any:
        topic, key_serde, value_serde = self.topic, self.key_serde, self.value_serde

        def forward(
            keys: list[bytes], news: list[Any], olds: list[Any], timestamps: list[int]
        ) -> None:
            listener(
                deserialize_many(key_serde, topic, keys),
                deserialize_many(value_serde, topic, news),
                deserialize_many(value_serde, topic, olds),
                timestamps,
            )

        return forward

    def _bind(self) -> None:
        self._kser = self.key_serde.serialize
        self._vser = self.value_serde.serialize
        self._vde = self.value_serde.deserialize
        self._inner_get = self.wrapped.get
        self._inner_put = self.wrapped.put

    def get(self, key: K) -> V | None:
        """Return the value of ``key`` or None."""
        self.metrics["get"] += 1
        raw = self._inner_get(self._kser(self.topic, key))
        return None if raw is None else self._vde(self.topic, raw)

    def put(self, key: K, value: V | None) -> None:
        """Write ``key``; ``None`` deletes."""
        self.metrics["put"] += 1
        topic = self.topic
        self._inner_put(self._kser(topic, key), None if value is None else self._vser(topic, value))

    def get_many(self, keys: list[K]) -> list[V | None]:
        """The value of each key (None: none), read below at once."""
        self.metrics["get"] += len(keys)
        topic, vde = self.topic, self._vde
        raws = self.wrapped.get_many(self.raw_keys(keys))
        return [None if raw is None else vde(topic, raw) for raw in raws]

    def put_many(self, keys: list[K], values: list[V | None], timestamps: list[int]) -> None:
        """Write each key in order (``None`` deletes), as :meth:`put` would with the
        record timestamp ``timestamps[i]``."""
        self.metrics["put"] += len(keys)
        raw_values = serialize_many(self.value_serde, self.topic, values)
        self.wrapped.put_many(self.raw_keys(keys), raw_values, timestamps)

    def get_raw_many(self, raw_keys: list[bytes]) -> list[bytes | None]:
        """The stored bytes of keys given as the store holds them (a batch kernel that
        works on bytes), counted and timed as :meth:`get_many`."""
        self.metrics["get"] += len(raw_keys)
        return self.wrapped.get_many(raw_keys)

    def put_raw_many(
        self, raw_keys: list[bytes], raw_values: list[bytes | None], timestamps: list[int]
    ) -> None:
        """:meth:`put_many` of keys and values already serialized."""
        self.metrics["put"] += len(raw_keys)
        self.wrapped.put_many(raw_keys, raw_values, timestamps)

    def raw_keys(self, keys: list[K]) -> list[bytes]:
        """The keys as the store holds them (serialized)."""
        raw = serialize_many(self.key_serde, self.topic, keys)
        if None in raw:
            raise TypeError(f"store {self.name}: a key serialized to null")
        return raw  # type: ignore[return-value]

    def put_if_absent(self, key: K, value: V) -> V | None:
        """Put unless ``key`` has a value; return the value it had."""
        old = self.get(key)
        if old is None:
            self.put(key, value)
        return old

    def put_all(self, entries: Iterable[tuple[K, V | None]]) -> None:
        """Put each entry in order."""
        for key, value in entries:
            self.put(key, value)

    def delete(self, key: K) -> V | None:
        """Delete ``key``; return the value it had."""
        self.metrics["delete"] += 1
        old = self.get(key)
        self.put(key, None)
        return old

    def _range(self, lo: bytes | None, hi: bytes | None, reverse: bool) -> Iterator[tuple[K, V]]:
        self.metrics["range"] += 1
        topic, kde, vde = self.topic, self.key_serde.deserialize, self._vde
        for key, value in self.wrapped.items(lo, hi, reverse=reverse):
            yield kde(topic, key), vde(topic, value)

    def _bound(self, key: K | None) -> bytes | None:
        return None if key is None else self._kser(self.topic, key)

    def range(self, from_key: K | None, to_key: K | None) -> Iterator[tuple[K, V]]:
        """Entries with ``from_key <= key <= to_key`` ascending (serialised byte order)."""
        return self._range(self._bound(from_key), self._bound(to_key), False)

    def reverse_range(self, from_key: K | None, to_key: K | None) -> Iterator[tuple[K, V]]:
        """Entries with ``from_key <= key <= to_key`` descending."""
        return self._range(self._bound(from_key), self._bound(to_key), True)

    def all(self) -> Iterator[tuple[K, V]]:
        """Every entry ascending."""
        return self._range(None, None, False)

    def reverse_all(self) -> Iterator[tuple[K, V]]:
        """Every entry descending."""
        return self._range(None, None, True)

    def prefix_scan(self, prefix: Any, prefix_serializer: Any = None) -> Iterator[tuple[K, V]]:
        """Entries whose serialised key starts with the serialised ``prefix``.

        Args:
            prefix: the prefix value.
            prefix_serializer: a serde (or anything with ``serialize(topic, data)``) for the
                prefix; the key serde when None.
        """
        serializer = self.key_serde if prefix_serializer is None else prefix_serializer
        raw: bytes = serializer.serialize(self.topic, prefix)
        end = prefix_end(raw)
        self.metrics["range"] += 1
        topic, kde, vde = self.topic, self.key_serde.deserialize, self._vde
        for key, value in self.wrapped.items(raw, end):
            if key == end:  # the exclusive bound itself
                break
            yield kde(topic, key), vde(topic, value)
