"""The serde contract and what every built-in serde shares.

:class:`Serde` is the protocol (Kafka's ``Serde<T>``); :class:`SerdeBase` gives the
built-in serdes value equality and a readable repr; :func:`preview` and :func:`byte_size`
word the :class:`~common.errors.SerializationError` of a bad value.
"""

from __future__ import annotations

import reprlib
from typing import Protocol, TypeVar, runtime_checkable

from common.errors import SerializationError

T = TypeVar("T")

_BYTES_LIKE = (bytes, bytearray, memoryview)
_PREVIEW = 60
_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = _repr.maxlong = _PREVIEW


@runtime_checkable
class Serde(Protocol[T]):
    """Turn values of type ``T`` into record bytes and back (Kafka's ``Serde<T>``)."""

    def serialize(self, topic: str, data: T | None) -> bytes | None:
        """Return the bytes for ``data`` written to ``topic``; ``None`` gives ``None``."""
        ...

    def deserialize(self, topic: str, data: bytes | None) -> T | None:
        """Return the value for ``data`` read from ``topic``; ``None`` gives ``None``."""
        ...


def preview(value: object) -> str:
    """Describe ``value`` for an error message: its type or size and a repr cut to ~60 chars."""
    if isinstance(value, _BYTES_LIKE):
        size = value.nbytes if isinstance(value, memoryview) else len(value)
        kind = "" if type(value) is bytes else f"{type(value).__name__} of "
        text = repr(bytes(value[:_PREVIEW]))
        label = f"{kind}{size} bytes"
    else:
        text = repr(value[: _PREVIEW + 1]) if isinstance(value, str) else _repr.repr(value)
        size, label = len(text), type(value).__name__
    cut = len(text) > _PREVIEW or size > _PREVIEW
    return f"{label} {text[:_PREVIEW]}{'...' if cut else ''}"


def byte_size(data: object, who: str) -> int:
    """Return the byte length of ``data``, raising if it is not bytes-like."""
    if isinstance(data, memoryview):
        return data.nbytes
    if isinstance(data, (bytes, bytearray)):
        return len(data)
    raise SerializationError(f"{who} expected bytes, got {preview(data)}")


class SerdeBase:
    """Give the serdes value equality and a readable repr."""

    __slots__ = ()

    def _args(self) -> tuple[object, ...]:
        return ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self._args()))})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._args() == other._args()

    def __hash__(self) -> int:
        return hash((type(self), self._args()))
