"""The built-in serdes over Arrow columns: a batch of values to one binary column and back.

The columnar engine reads a topic-partition's keys and values as Arrow binary columns and
writes a sink's batch as one. For the built-in serdes (String in UTF-8, Long, Integer,
Double, Bytes) the conversion runs inside Arrow, with no ``bytes`` object per record:
strings are checked and encoded by Arrow's string builder, numbers go through NumPy as
big-endian words. The result is byte for byte what the scalar serdes produce, and whatever
they would reject (a ``bytes`` value for a String serde, a ``bool`` for a Long, invalid
UTF-8, a wrong size) takes the scalar path, whose error names the failing element. Any
other serde converts one value at a time.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.serdes import (
    BytesSerde,
    DoubleSerde,
    IntegerSerde,
    LongSerde,
    Serde,
    StringSerde,
    deserialize_many,
    serialize_many,
)

#: Fixed-size serdes: their big-endian NumPy type and the Arrow types a batch of their
#: values may be inferred as.
_FIXED: dict[type, tuple[str, tuple[pa.DataType, ...]]] = {
    IntegerSerde: (">i4", (pa.int64(),)),
    LongSerde: (">i8", (pa.int64(),)),
    DoubleSerde: (">f8", (pa.float64(), pa.int64())),
}
_INT32 = (-(1 << 31), (1 << 31) - 1)
_REAL_OR_NONE = frozenset({float, int, type(None)})


def _utf8(serde: object) -> bool:
    return type(serde) is StringSerde and codecs.lookup(serde.encoding).name == "utf-8"


def serialize_column(serde: Serde[Any], topic: str, values: Sequence[Any]) -> pa.Array:
    """Serialize ``values`` to one Arrow binary column (None gives null).

    Raises:
        SerializationError: a value failed; the message names the first failing element.
    """
    out = _serialize_fast(serde, values)
    if out is not None:
        return out
    return pa.array(serialize_many(serde, topic, values), pa.binary())


def _serialize_fast(serde: object, values: Sequence[Any]) -> pa.Array | None:
    kind = type(serde)
    if kind is BytesSerde:
        try:
            out = pa.array(values)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return None
        # bytes only: a str column would be encoded, which the Bytes serde refuses
        return out if out.type in (pa.binary(), pa.null()) and _all_bytes(values) else None
    if not (kind in _FIXED or _utf8(serde)):
        return None
    try:
        # Arrow infers the column's type in C: all str -> string, all int -> int64 (bools
        # and floats infer other types), so the type says whether every value is valid.
        inferred = pa.array(values)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    if inferred.type == pa.null():
        return pa.nulls(len(inferred), pa.binary())
    if kind is StringSerde:
        return inferred.cast(pa.binary()) if inferred.type == pa.string() else None
    dtype, allowed = _FIXED[kind]
    if inferred.type not in allowed:
        return None
    if kind is DoubleSerde and not set(map(type, values)) <= _REAL_OR_NONE:
        return None  # Arrow takes a bool among floats as a number; the serde refuses it
    if kind is IntegerSerde:
        low, high = pc.min_max(inferred).values()
        if low.as_py() < _INT32[0] or high.as_py() > _INT32[1]:
            return None
    numbers = inferred.cast(pa.float64(), safe=False) if kind is DoubleSerde else inferred
    return _fixed_binary(numbers, np.dtype(dtype))


def _all_bytes(values: Sequence[Any]) -> bool:
    return all(v is None or type(v) is bytes for v in values)


def _fixed_binary(numbers: pa.Array, dtype: np.dtype[Any]) -> pa.Array:
    """Each number as ``dtype.itemsize`` big-endian bytes, nulls as nulls."""
    n, size = len(numbers), dtype.itemsize
    if numbers.null_count:
        valid = np.asarray(numbers.is_valid(), dtype=bool)
        data = np.asarray(numbers.drop_null(), dtype=dtype.newbyteorder("=")).astype(dtype)
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum(np.where(valid, size, 0), out=offsets[1:])
        validity = pa.array(valid).buffers()[1]
    else:
        data = np.asarray(numbers, dtype=dtype.newbyteorder("=")).astype(dtype)
        offsets = np.arange(0, size * (n + 1), size, dtype=np.int32)
        validity = None
    return pa.Array.from_buffers(
        pa.binary(),
        n,
        [validity, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data.tobytes())],
        null_count=numbers.null_count,
    )


def deserialize_column(serde: Serde[Any], topic: str, column: Any) -> list[Any]:
    """Deserialize a binary column (or a sequence of bytes) to one value per record.

    Raises:
        SerializationError: an element failed; the message names the first failing one.
    """
    if not isinstance(column, (pa.Array, pa.ChunkedArray)):
        return deserialize_many(serde, topic, column)
    out = _deserialize_fast(serde, column)
    if out is not None:
        return out
    return deserialize_many(serde, topic, column.to_pylist())


def _deserialize_fast(serde: object, column: Any) -> list[Any] | None:
    kind = type(serde)
    if kind is BytesSerde:
        out: list[Any] = column.to_pylist()
        return out
    if _utf8(serde):
        try:
            out = column.cast(pa.string()).to_pylist()  # checks UTF-8
            return out
        except pa.ArrowInvalid:
            return None
    if kind not in _FIXED:
        return None
    dtype = np.dtype(_FIXED[kind][0])
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n = len(column)
    if n == 0:
        return []
    sizes = pc.binary_length(column)
    low, high = pc.min_max(sizes).values()
    if low.as_py() is None:  # every element null
        return [None] * n
    if low.as_py() != dtype.itemsize or high.as_py() != dtype.itemsize:
        return None  # a wrong size: the scalar path names it
    dense = column.drop_null() if column.null_count else column
    offsets = np.frombuffer(
        dense.buffers()[1], np.int32, count=len(dense) + 1, offset=4 * dense.offset
    )
    start = int(offsets[0])
    data = dense.buffers()[2]
    values: list[Any] = np.frombuffer(data, dtype, count=len(dense), offset=start).tolist()
    if not column.null_count:
        return values
    merged: list[Any] = [None] * n
    it = iter(values)
    for i, ok in enumerate(column.is_valid().to_pylist()):
        if ok:
            merged[i] = next(it)
    return merged


def column_decodes(serde: Serde[Any], column: Any) -> bool:
    """Whether every element of a binary column deserializes with ``serde``, checked
    inside Arrow for the built-in serdes (False for any other serde: decode to know)."""
    kind = type(serde)
    if kind is BytesSerde:
        return True
    if _utf8(serde):
        try:
            column.cast(pa.string())
        except pa.ArrowInvalid:
            return False
        return True
    if kind not in _FIXED or len(column) == column.null_count:
        return kind in _FIXED
    low, high = pc.min_max(pc.binary_length(column)).values()
    size = np.dtype(_FIXED[kind][0]).itemsize
    return bool(low.as_py() == size and high.as_py() == size)


def int_list(column: Any) -> list[int]:
    """An int column (Arrow, or any sequence) as a list of ints; Arrow's without nulls go
    through NumPy (faster)."""
    if isinstance(column, list):
        return column
    if isinstance(column, (pa.Array, pa.ChunkedArray)):
        ints: list[int] = column.to_pylist() if column.null_count else column.to_numpy().tolist()
        return ints
    return list(column)


def epoch_millis(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Return a timestamp column (any unit) or an integer one as epoch milliseconds
    (int64; nulls stay null)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_timestamp(array.type):
        return pc.cast(array, pa.timestamp("ms", array.type.tz), safe=False).cast(pa.int64())
    if pa.types.is_null(array.type):
        return pa.nulls(len(array), pa.int64())
    return array.cast(pa.int64())


def same_bytes(source: Serde[Any], target: Serde[Any]) -> bool:
    """Whether bytes that ``source`` deserializes serialize back to the very same bytes
    under ``target`` (both the same built-in serde that keeps every byte: bytes, UTF-8
    strings, integers and longs), so they can be used as they are."""
    if type(source) is not type(target):
        return False
    if type(source) is BytesSerde or type(source) in {IntegerSerde, LongSerde}:
        return True
    return _utf8(source) and _utf8(target)


def looks_distinct(column: Any, *, share: float = 1.0, sample: int = 1024) -> bool:
    """Whether a large column's first ``sample`` values are mostly distinct (more than
    ``share`` of them; 1.0: all), as a backlog of new keys is: grouping such a column by
    value costs more than it saves."""
    if len(column) < 4 * sample:
        return False
    distinct = pc.count_distinct(column.slice(0, sample)).as_py()
    return bool(distinct >= sample if share >= 1.0 else distinct > share * sample)
