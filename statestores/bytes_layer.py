"""The bytes-level contract between store layers, and the base class of wrapping layers.

Every layer below the metered (typed) one speaks :class:`BytesKeyValue`: sorted ``bytes``
keys, ``bytes`` values, ``None`` = deleted. Window and session stores encode their keys
(segment, key, time) into this space, so caching, change-logging and the transactional
bottom serve all three store kinds. :func:`bottom` walks down to the
:class:`~statestores.transactional.TransactionalBytesStore` of a stack.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from statestores.api import StateStoreContext
from statestores.transactional import TransactionalBytesStore


class BytesKeyValue(Protocol):
    """A key-value store of bytes with lifecycle, used between layers."""

    @property
    def name(self) -> str: ...

    def init(self, context: StateStoreContext) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def persistent(self) -> bool: ...

    def is_open(self) -> bool: ...

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes | None) -> None: ...

    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...

    def put_many(
        self, keys: list[bytes], values: list[bytes | None], timestamps: list[int]
    ) -> None: ...

    def delete_range(self, lo: bytes, hi: bytes) -> None: ...

    def items(
        self, lo: bytes | None, hi: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]: ...

    def approximate_num_entries(self) -> int: ...

    def abort(self) -> None: ...


#: ``(key, new value, old value, timestamp)`` of an entry a cache flushes or evicts.
BytesFlushListener = Callable[[bytes, bytes | None, bytes | None, int], None]
#: A flush's entries at once: keys, new values, old values, timestamps.
BytesBatchListener = Callable[
    [list[bytes], list[bytes | None], list[bytes | None], list[int]], None
]


class WrappingBytesStore:
    """A layer that delegates everything it does not change to ``wrapped``."""

    def __init__(self, wrapped: BytesKeyValue) -> None:
        self.wrapped = wrapped

    @property
    def name(self) -> str:
        """The store name."""
        return self.wrapped.name

    def init(self, context: StateStoreContext) -> None:
        """Open the inner store."""
        self.wrapped.init(context)

    def flush(self) -> None:
        """Flush the inner store."""
        self.wrapped.flush()

    def close(self) -> None:
        """Close the inner store."""
        self.wrapped.close()

    def persistent(self) -> bool:
        """Return whether the inner store persists."""
        return self.wrapped.persistent()

    def is_open(self) -> bool:
        """Return whether the inner store is open."""
        return self.wrapped.is_open()

    def get(self, key: bytes) -> bytes | None:
        """Read from the inner store."""
        return self.wrapped.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        """Write to the inner store."""
        self.wrapped.put(key, value)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Each key's value, read below at once (a layer that overrides :meth:`get`
        overrides this too)."""
        return self.wrapped.get_many(keys)

    def put_many(
        self, keys: list[bytes], values: list[bytes | None], timestamps: list[int]
    ) -> None:
        """Write each key in order, as :meth:`put` with the record timestamp
        ``timestamps[i]`` (a layer that stamps what it writes, by caching or logging it,
        overrides this)."""
        put = self.put
        for key, value in zip(keys, values, strict=True):
            put(key, value)

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        """Delete ``lo <= key < hi`` in the inner store (unlogged)."""
        self.wrapped.delete_range(lo, hi)

    def approximate_num_entries(self) -> int:
        """Return the inner store's estimate."""
        return self.wrapped.approximate_num_entries()

    def abort(self) -> None:
        """Discard uncommitted state below."""
        self.wrapped.abort()


def bottom(store: object) -> TransactionalBytesStore:
    """Return the transactional bytes store at the bottom of a stack of layers.

    Raises:
        TypeError: ``store`` is no stack built by :mod:`statestores.stores`.
    """
    current = store
    for _ in range(16):
        if isinstance(current, TransactionalBytesStore):
            return current
        current = getattr(current, "wrapped", None)
    raise TypeError(f"{store!r} is not a store built by statestores.Stores")
