"""Records as processors see them: :class:`Record`, :class:`Change` and input records.

A :class:`Record` is Kafka's ``api.Record``: key, value, timestamp and headers, immutable;
``with_*`` returns a copy. It is a ``NamedTuple`` so that creating and reading one is as
cheap as Python allows (this is the per-record hot path).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, NamedTuple, TypeVar

from common.errors import StreamsError

K = TypeVar("K")
V = TypeVar("V")
K2 = TypeVar("K2")
V2 = TypeVar("V2")

#: Record headers: ordered ``(key, value)`` pairs, duplicates allowed (Kafka's ``Headers``).
Headers = tuple[tuple[str, bytes | None], ...]

_new = tuple.__new__


class Record(NamedTuple, Generic[K, V]):
    """An immutable record: ``key``, ``value``, ``timestamp`` (epoch ms) and ``headers``.

    Example:
        >>> r = Record("k", 1, 1000)
        >>> r.with_value(2)
        Record(key='k', value=2, timestamp=1000, headers=())
    """

    key: K
    value: V
    timestamp: int
    headers: Headers = ()

    def with_key(self, key: K2) -> Record[K2, V]:
        """Return a copy with ``key``."""
        return _new(Record, (key, self[1], self[2], self[3]))

    def with_value(self, value: V2) -> Record[K, V2]:
        """Return a copy with ``value``."""
        return _new(Record, (self[0], value, self[2], self[3]))

    def with_timestamp(self, timestamp: int) -> Record[K, V]:
        """Return a copy with ``timestamp``; raise StreamsError if it is negative."""
        if timestamp < 0:
            raise StreamsError(f"Timestamp cannot be negative, got {timestamp}")
        return _new(Record, (self[0], self[1], timestamp, self[3]))

    def with_headers(self, headers: Sequence[tuple[str, bytes | None]]) -> Record[K, V]:
        """Return a copy with ``headers``."""
        return _new(Record, (self[0], self[1], self[2], tuple(headers)))


def make_record(key: K, value: V, timestamp: int, headers: Headers) -> Record[K, V]:
    """Build a record without argument processing (the hot-path constructor)."""
    return _new(Record, (key, value, timestamp, headers))


class Change(NamedTuple, Generic[V]):
    """A table update: the ``new_value`` and, when old values are sent, the ``old_value``
    (Kafka's ``Change``). ``None`` as ``new_value`` is a deletion.

    ``is_latest`` (KIP-914) says whether the update is the latest version of its key: a
    ``Change`` always is; an out-of-order update a versioned table took is a
    :class:`NonLatestChange` (build either with :func:`make_change`). The flag lives in the
    type so that the hot path keeps making two-field tuples.
    """

    new_value: V | None
    old_value: V | None

    @property
    def is_latest(self) -> bool:
        """Whether this update is the latest version of its key (always, for a ``Change``)."""
        return True


class NonLatestChange(Change[V]):
    """A table update older than its key's latest version: a versioned table took it into
    its history (Kafka's ``Change`` with ``isLatest`` false). Operators that keep only the
    latest value (joins, ``group_by``) drop it; those that pass it on keep the flag.

    Example:
        >>> make_change(1, None, is_latest=False) == Change(1, None)
        False
    """

    __slots__ = ()
    is_latest = False

    def __eq__(self, other: object) -> bool:
        return type(other) is NonLatestChange and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((tuple(self), False))

    def __repr__(self) -> str:
        return f"Change(new_value={self[0]!r}, old_value={self[1]!r}, is_latest=False)"


def make_change(new_value: V | None, old_value: V | None, is_latest: bool) -> Change[V]:
    """Return the change ``(new_value, old_value)``: a :class:`Change` when it is the
    latest version of its key, else a :class:`NonLatestChange`."""
    return _new(Change if is_latest else NonLatestChange, (new_value, old_value))


class ValueAndTimestamp(NamedTuple, Generic[V]):
    """A table or aggregate value together with the timestamp of its last update, as stored
    in the DSL's key-value stores (Kafka's ``ValueAndTimestamp``)."""

    value: V
    timestamp: int


class InputRecord(NamedTuple):
    """One raw record read from a topic partition: bytes key and value, as the runtime
    hands it to a task (the input of :meth:`topology.engine.task.StreamTask.process`)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


class ConsumedRecord(NamedTuple):
    """A deserialized input record as a :class:`~topology.api.timestamps.TimestampExtractor`
    sees it (Kafka's ``ConsumerRecord<Object, Object>``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: object
    value: object
    headers: Headers = ()
