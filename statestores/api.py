"""The store contract shared by the DSL, the Processor API, the test driver and the runtime.

Kafka's ``StateStore``, ``KeyValueStore``, ``WindowStore`` and ``SessionStore`` in Python:
typed stores (``K``/``V``) seen by processors, built by wrapping a *bytes* store (keys
and values serialised, ordered by unsigned byte order as RocksDB orders them) in layers:
metered (serdes, counters) → caching → change-logging → bytes store (RocksDB or memory).

Ranges are inclusive at both ends, as Kafka's; ``None`` as a bound means open. Iterators
are snapshots: writing to the store while iterating never invalidates them.

Windows: a time window is ``[start, end)``; a session window is ``[start, end]`` (both
ends inclusive, as Kafka's ``SessionWindow``). Window stores key each entry by the
window's *start*; session stores by ``(key, start, end)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

K = TypeVar("K")
V = TypeVar("V")
K_co = TypeVar("K_co", covariant=True)
K_contra = TypeVar("K_contra", contravariant=True)


@dataclass(frozen=True, order=True, slots=True)
class Window:
    """A time interval in epoch milliseconds: ``[start, end)`` for time windows,
    ``[start, end]`` for sessions."""

    start: int
    end: int

    def overlaps(self, other: Window) -> bool:
        """Return whether the two windows share a moment (half-open semantics)."""
        return self.start < other.end and other.start < self.end


@dataclass(frozen=True, order=True, slots=True)
class Windowed(Generic[K_co]):
    """A record key together with the window it was aggregated in (Kafka's ``Windowed<K>``)."""

    key: K_co
    window: Window

    def __str__(self) -> str:
        return f"[{self.key}@{self.window.start}/{self.window.end}]"


@runtime_checkable
class StateStoreContext(Protocol):
    """What a store learns from its task when it is initialised.

    ``state_dir`` is the task's directory (``state.dir/<application.id>/<task id>``) or
    ``None`` where there is none (the in-memory test driver). ``changelog`` is where a
    change-logging layer sends its records, ``None`` when logging is off.
    """

    @property
    def application_id(self) -> str: ...

    @property
    def task_id(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def state_dir(self) -> str | None: ...

    @property
    def app_config(self) -> Mapping[str, Any]: ...

    @property
    def changelog(self) -> ChangelogCollector | None: ...

    def timestamp(self) -> int:
        """Return the timestamp of the record being processed (ms)."""
        ...

    def register(self, store: StateStore) -> None:
        """Tell the task that ``store`` exists (flushed at commit, closed with the task)."""
        ...


class ChangelogCollector(Protocol):
    """Receives a change-logged store's changes; the runtime sends them in the transaction."""

    def send_change(
        self, store: str, key: bytes, value: bytes | None, timestamp: int
    ) -> None:  # pragma: no cover - protocol
        """Record that ``key`` became ``value`` (``None``: deleted) in ``store``."""
        ...


@runtime_checkable
class StateStore(Protocol):
    """The part every store has: a name, a lifecycle, persistence."""

    @property
    def name(self) -> str: ...

    def init(self, context: StateStoreContext) -> None:
        """Open the store for ``context``'s task (create or restore its data)."""
        ...

    def flush(self) -> None:
        """Push buffered writes down (caches) and make them durable where applicable."""
        ...

    def close(self) -> None:
        """Release the store; it must be ``init``-ed again before use."""
        ...

    def persistent(self) -> bool:
        """Return whether the data survives the process (RocksDB) or not (memory)."""
        ...

    def is_open(self) -> bool:
        """Return whether ``init`` ran and ``close`` did not."""
        ...


@runtime_checkable
class KeyValueStore(StateStore, Protocol[K, V]):
    """A key-value store; ``put(key, None)`` deletes (a tombstone, as Kafka's)."""

    def get(self, key: K) -> V | None: ...

    def put(self, key: K, value: V | None) -> None: ...

    def put_if_absent(self, key: K, value: V) -> V | None:
        """Put unless ``key`` has a value; return the value it had."""
        ...

    def put_all(self, entries: Iterable[tuple[K, V | None]]) -> None: ...

    def delete(self, key: K) -> V | None:
        """Delete ``key``; return the value it had."""
        ...

    def range(self, from_key: K | None, to_key: K | None) -> Iterator[tuple[K, V]]:
        """Entries with ``from_key <= key <= to_key`` in ascending (byte) key order."""
        ...

    def reverse_range(self, from_key: K | None, to_key: K | None) -> Iterator[tuple[K, V]]: ...

    def all(self) -> Iterator[tuple[K, V]]: ...

    def reverse_all(self) -> Iterator[tuple[K, V]]: ...

    def prefix_scan(self, prefix: Any, prefix_serializer: Any = None) -> Iterator[tuple[K, V]]:
        """Entries whose serialised key starts with the serialised ``prefix``."""
        ...

    def approximate_num_entries(self) -> int: ...


@runtime_checkable
class WindowStore(StateStore, Protocol[K, V]):
    """Values per key and window start, kept for ``retention_period`` ms of stream time."""

    @property
    def window_size(self) -> int: ...

    @property
    def retention_period(self) -> int: ...

    def put(self, key: K, value: V | None, window_start: int) -> None: ...

    def fetch_value(self, key: K, window_start: int) -> V | None:
        """The value of ``key`` in the window starting at ``window_start`` (Kafka's
        ``fetch(key, time)``)."""
        ...

    def fetch(self, key: K, time_from: int, time_to: int) -> Iterator[tuple[int, V]]:
        """``(window_start, value)`` of ``key`` with ``time_from <= start <= time_to``,
        ascending."""
        ...

    def backward_fetch(self, key: K, time_from: int, time_to: int) -> Iterator[tuple[int, V]]: ...

    def fetch_range(
        self, key_from: K | None, key_to: K | None, time_from: int, time_to: int
    ) -> Iterator[tuple[Windowed[K], V]]: ...

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Windowed[K], V]]: ...

    def all(self) -> Iterator[tuple[Windowed[K], V]]: ...


@runtime_checkable
class SessionStore(StateStore, Protocol[K, V]):
    """Session aggregates keyed by ``Windowed[K]`` with inclusive ``[start, end]``."""

    def find_sessions(
        self, key: K, earliest_session_end: int, latest_session_start: int
    ) -> Iterator[tuple[Windowed[K], V]]:
        """Sessions of ``key`` with ``end >= earliest_session_end`` and
        ``start <= latest_session_start``, ascending by end then start."""
        ...

    def backward_find_sessions(
        self, key: K, earliest_session_end: int, latest_session_start: int
    ) -> Iterator[tuple[Windowed[K], V]]: ...

    def fetch_session(self, key: K, start: int, end: int) -> V | None: ...

    def fetch(self, key: K) -> Iterator[tuple[Windowed[K], V]]:
        """Every session of ``key``."""
        ...

    def put(self, session: Windowed[K], value: V | None) -> None:
        """Store ``value`` for ``session``; ``None`` removes it."""
        ...

    def remove(self, session: Windowed[K]) -> None: ...


#: What ``VersionedKeyValueStore.put`` returns for a record that became the latest version
#: of its key (Kafka's ``PUT_RETURN_CODE_VALID_TO_UNDEFINED``).
PUT_RETURN_CODE_VALID_TO_UNDEFINED = -1
#: What ``VersionedKeyValueStore.put`` returns for a record older than the history
#: retention, which was not put (Kafka's ``PUT_RETURN_CODE_NOT_PUT``, ``Long.MIN_VALUE``).
PUT_RETURN_CODE_NOT_PUT = -(1 << 63)


class VersionedRecord(NamedTuple, Generic[V]):
    """One version of a key's value (Kafka's ``VersionedRecord``): valid from ``timestamp``
    (inclusive) to ``valid_to`` (exclusive; ``None`` while it is the current version).

    Indexing reads ``(value, timestamp)`` as a :class:`ValueAndTimestamp`'s would, so the
    DSL reads a versioned table with the code that reads a timestamped one.
    """

    value: V
    timestamp: int
    valid_to: int | None = None


@runtime_checkable
class VersionedKeyValueStore(StateStore, Protocol[K_contra, V]):
    """A key-value store keeping every version of a value for ``history_retention`` ms of
    stream time (Kafka's ``VersionedKeyValueStore``, KIP-889)."""

    @property
    def history_retention(self) -> int: ...

    def put(self, key: K_contra, value: V | None, timestamp: int) -> int:
        """Put a version valid from ``timestamp`` (``None``: a tombstone); return its
        ``valid_to``, :data:`PUT_RETURN_CODE_VALID_TO_UNDEFINED` when it is the latest, or
        :data:`PUT_RETURN_CODE_NOT_PUT` when it is older than the history retention."""
        ...

    def delete(self, key: K_contra, timestamp: int) -> VersionedRecord[V] | None:
        """Put a tombstone at ``timestamp``; return the version it replaced."""
        ...

    def get(self, key: K_contra, as_of_timestamp: int | None = None) -> VersionedRecord[V] | None:
        """The latest version of ``key`` (valid at ``as_of_timestamp`` when given)."""
        ...


@runtime_checkable
class StoreBuilder(Protocol):
    """Builds one store instance per task (Kafka's ``StoreBuilder``).

    ``kind`` is ``"key_value"``, ``"window"``, ``"session"`` or ``"versioned"``.
    """

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def logging_enabled(self) -> bool: ...

    @property
    def logging_config(self) -> Mapping[str, str]: ...

    def build(self) -> StateStore: ...
