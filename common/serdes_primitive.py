"""The serdes of Kafka's primitive types, byte-compatible with its Java serdes.

``BytesSerde``, ``StringSerde``, ``IntegerSerde``, ``LongSerde`` and ``DoubleSerde`` write
exactly the bytes Kafka's ``ByteArraySerializer``, ``StringSerializer``,
``IntegerSerializer``, ``LongSerializer`` and ``DoubleSerializer`` write (numbers as
big-endian fixed-size bytes), so topics can be shared with Java clients.
"""

from __future__ import annotations

import codecs
import numbers
import operator
import struct
from typing import ClassVar, Generic, TypeVar

from common.errors import ConfigError, SerializationError
from common.serdes_base import SerdeBase, byte_size, preview

N = TypeVar("N", int, float)

#: The big-endian layouts of Kafka's Integer, Long and Double serdes.
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
FLOAT64 = struct.Struct(">d")


class BytesSerde(SerdeBase):
    """Pass bytes through unchanged (Kafka's ``BytesSerde`` / ``ByteArraySerde``)."""

    __slots__ = ()

    def serialize(self, topic: str, data: bytes | bytearray | memoryview | None) -> bytes | None:
        """Return ``data`` as ``bytes``; raise SerializationError if it is not bytes-like."""
        if data is None or type(data) is bytes:
            return data
        byte_size(data, "BytesSerializer")
        return bytes(data)

    def deserialize(self, topic: str, data: bytes | None) -> bytes | None:
        """Return ``data`` as ``bytes``; raise SerializationError if it is not bytes-like."""
        if data is None or type(data) is bytes:
            return data
        byte_size(data, "BytesDeserializer")
        return bytes(data)


class StringSerde(SerdeBase):
    """Encode ``str`` as text bytes, UTF-8 unless told otherwise (Kafka's ``StringSerde``)."""

    __slots__ = ("_encoding",)

    def __init__(self, encoding: str = "utf-8") -> None:
        """Use ``encoding``; raise ConfigError if Python does not know it."""
        try:
            codecs.lookup(encoding)
        except LookupError as exc:
            raise ConfigError(f"StringSerde: unknown encoding {encoding!r}") from exc
        self._encoding = encoding

    @property
    def encoding(self) -> str:
        """The text encoding, e.g. ``"utf-8"``."""
        return self._encoding

    def _args(self) -> tuple[object, ...]:
        return (self._encoding,)

    def __repr__(self) -> str:
        return f"StringSerde(encoding={self._encoding!r})"

    def serialize(self, topic: str, data: str | None) -> bytes | None:
        """Return the encoded bytes of ``data``; raise SerializationError on non-str."""
        if data is None:
            return None
        if not isinstance(data, str):
            raise SerializationError(f"StringSerializer expected str, got {preview(data)}")
        try:
            return data.encode(self._encoding)
        except UnicodeEncodeError as exc:
            raise SerializationError(
                f"StringSerializer could not encode to {self._encoding}: {exc.reason} at "
                f"position {exc.start}, got {preview(data)}"
            ) from exc

    def deserialize(self, topic: str, data: bytes | None) -> str | None:
        """Return the decoded text; raise SerializationError on undecodable bytes."""
        if data is None:
            return None
        byte_size(data, "StringDeserializer")
        try:
            return str(data, self._encoding)
        except UnicodeDecodeError as exc:
            raise SerializationError(
                f"StringDeserializer expected valid {self._encoding}, got invalid byte at "
                f"position {exc.start} ({exc.reason}) in {preview(data)}"
            ) from exc


def _as_int(data: object, who: str, bits: int) -> int:
    """Return ``data`` as an int in the signed ``bits`` range, or raise SerializationError."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if isinstance(data, bool) or not hasattr(type(data), "__index__"):
        raise SerializationError(f"{who} expected int, got {preview(data)}")
    value = operator.index(data)  # type: ignore[arg-type]
    if not lo <= value <= hi:
        raise SerializationError(
            f"{who} expected int in range [{lo}, {hi}] ({bits}-bit signed), got {preview(value)}"
        )
    return value


class _FixedSerde(SerdeBase, Generic[N]):
    """Encode a number as a fixed number of big-endian bytes, as Kafka's Java serdes do."""

    __slots__ = ()
    _packer: ClassVar[struct.Struct]
    _kind: ClassVar[str]

    def _coerce(self, data: object) -> N:
        raise NotImplementedError

    def serialize(self, topic: str, data: N | None) -> bytes | None:
        """Return the bytes; raise SerializationError on a wrong type or out of range."""
        return None if data is None else self._packer.pack(self._coerce(data))

    def deserialize(self, topic: str, data: bytes | None) -> N | None:
        """Return the number; raise SerializationError if the size is wrong."""
        if data is None:
            return None
        who, size = f"{self._kind}Deserializer", self._packer.size
        if byte_size(data, who) != size:
            raise SerializationError(
                f"Size of data received by {who} is not {size}: got {preview(data)}"
            )
        return self._packer.unpack(data)[0]  # type: ignore[no-any-return]


class IntegerSerde(_FixedSerde[int]):
    """Encode ``int`` as 4 bytes, big-endian two's complement (Kafka's ``IntegerSerde``)."""

    __slots__ = ()
    _packer, _kind = INT32, "Integer"

    def _coerce(self, data: object) -> int:
        return _as_int(data, "IntegerSerializer", 32)


class LongSerde(_FixedSerde[int]):
    """Encode ``int`` as 8 bytes, big-endian two's complement (Kafka's ``LongSerde``)."""

    __slots__ = ()
    _packer, _kind = INT64, "Long"

    def _coerce(self, data: object) -> int:
        return _as_int(data, "LongSerializer", 64)


class DoubleSerde(_FixedSerde[float]):
    """Encode ``float`` as 8 bytes of big-endian IEEE-754 (Kafka's ``DoubleSerde``)."""

    __slots__ = ()
    _packer, _kind = FLOAT64, "Double"

    def _coerce(self, data: object) -> float:
        if isinstance(data, bool) or not isinstance(data, numbers.Real):
            raise SerializationError(f"DoubleSerializer expected float, got {preview(data)}")
        try:
            return float(data)
        except OverflowError as exc:
            raise SerializationError(
                f"DoubleSerializer expected float, got {preview(data)} (too large for a double)"
            ) from exc
