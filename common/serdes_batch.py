"""Serializing on the hot path: a record's field naming the record when it fails, and
whole batches at once.

:func:`deserialize_record_field` wraps any failure in a
:class:`~common.errors.SerializationError` naming the topic, partition and offset of the
bad record. :func:`serialize_many` and :func:`deserialize_many` convert a batch in bulk for
the built-in serdes (or a serde's own ``serialize_batch``/``deserialize_batch``), else one
value at a time, naming the first that fails.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, Literal

from common.errors import SerializationError
from common.serdes_base import Serde, T
from common.serdes_primitive import (
    FLOAT64,
    INT32,
    INT64,
    BytesSerde,
    DoubleSerde,
    IntegerSerde,
    LongSerde,
    StringSerde,
)

_NONE = type(None)


def _describe_failure(exc: Exception) -> str:
    if isinstance(exc, SerializationError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def deserialize_record_field(
    serde: Serde[T],
    topic: str,
    partition: int,
    offset: int,
    data: bytes | None,
    *,
    field: Literal["key", "value"],
) -> T | None:
    """Deserialize a record's key or value, naming the record if it fails.

    Args:
        serde: The serde for the field.
        topic: The record's topic.
        partition: The record's partition.
        offset: The record's offset.
        data: The field's bytes, or ``None``.
        field: ``"key"`` or ``"value"``, for the error message.

    Returns:
        The deserialized field.

    Raises:
        SerializationError: The serde failed (with any exception); the error names the
            topic, partition, offset and field, and chains the cause.
    """
    try:
        return serde.deserialize(topic, data)
    except Exception as exc:
        raise SerializationError(
            f"Error deserializing {field} with {serde!r}: {_describe_failure(exc)}",
            topic=topic,
            partition=partition,
            offset=offset,
        ) from exc


_PACKED: dict[type, tuple[struct.Struct, frozenset[type]]] = {
    IntegerSerde: (INT32, frozenset({int, _NONE})),
    LongSerde: (INT64, frozenset({int, _NONE})),
    DoubleSerde: (FLOAT64, frozenset({float, int, _NONE})),
}
_STR_OR_NONE, _BYTES_OR_NONE = frozenset({str, _NONE}), frozenset({bytes, _NONE})


def _fast(serde: object, items: Sequence[Any], encode: bool) -> list[Any] | None:
    """Convert a batch with a built-in serde in bulk; None means "use the scalar path"."""
    kind = type(serde)
    if kind in _PACKED and not encode:
        unpack = _PACKED[kind][0].unpack  # raises on a wrong size or a non-bytes value
        return [None if d is None else unpack(d)[0] for d in items]
    types = set(map(type, items))  # exact types: bool and other subclasses take the slow path
    if kind in _PACKED:
        packer, allowed = _PACKED[kind]
        if not types <= allowed:
            return None
        if _NONE not in types:
            return list(map(packer.pack, items))
        pack = packer.pack
        return [None if v is None else pack(v) for v in items]
    if kind is StringSerde:
        enc = serde.encoding  # type: ignore[attr-defined]
        if encode and types <= _STR_OR_NONE:
            return [None if v is None else v.encode(enc) for v in items]
        if not encode and types <= _BYTES_OR_NONE:
            return [None if d is None else d.decode(enc) for d in items]
    if kind is BytesSerde and types <= _BYTES_OR_NONE:
        return list(items)
    return None


def _batch(serde: Serde[Any], topic: str, items: Sequence[Any], encode: bool) -> list[Any]:
    """Convert ``items`` in bulk if possible (a built-in serde, or a serde with its own
    ``serialize_batch``/``deserialize_batch`` returning None when it cannot), else one by
    one naming the first failure."""
    own = getattr(serde, "serialize_batch" if encode else "deserialize_batch", None)
    try:
        out = _fast(serde, items, encode) if own is None else own(topic, items)
    except Exception:
        out = None  # the loop below finds and reports the first failing element
    if out is not None:
        return out
    fn = serde.serialize if encode else serde.deserialize
    out = []
    append = out.append
    for i, item in enumerate(items):
        if item is None:  # None gives None, as documented (a serde never sees it)
            append(None)
            continue
        try:
            append(fn(topic, item))
        except Exception as exc:
            raise SerializationError(f"element {i}: {_describe_failure(exc)}") from exc
    return out


def serialize_many(serde: Serde[T], topic: str, values: Sequence[T | None]) -> list[bytes | None]:
    """Serialize a batch of values, faster than one call per value for built-in serdes.

    Args:
        serde: The serde.
        topic: The topic the values are written to.
        values: The values; ``None`` gives ``None``.

    Returns:
        One ``bytes`` (or ``None``) per value, in order.

    Raises:
        SerializationError: A value failed; the message is ``"element <i>: "`` followed by
            the scalar path's message for the first failing value.
    """
    return _batch(serde, topic, values, encode=True)


def deserialize_many(serde: Serde[T], topic: str, datas: Sequence[bytes | None]) -> list[T | None]:
    """Deserialize a batch of record fields, faster than one call each for built-in serdes.

    Args:
        serde: The serde.
        topic: The topic the data was read from.
        datas: The bytes; ``None`` gives ``None``.

    Returns:
        One value (or ``None``) per input, in order.

    Raises:
        SerializationError: An input failed; the message is ``"element <i>: "`` followed by
            the scalar path's message for the first failing input.
    """
    return _batch(serde, topic, datas, encode=False)
