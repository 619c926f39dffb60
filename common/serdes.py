"""Serialize and deserialize record keys and values, byte-compatible with Kafka's serdes.

A :class:`Serde` turns Python objects into record bytes and back. The built-in serdes write
exactly the bytes Kafka's Java serializers write (``IntegerSerializer``, ``LongSerializer``,
``DoubleSerializer``, ``StringSerializer``, ...), so topics can be shared with Java clients.
``None`` always maps to ``None`` in both directions, so tombstones pass through.

Failures raise :class:`~common.errors.SerializationError`; readers call
:func:`deserialize_record_field` so the error names the topic, partition and offset of the
bad record. :func:`serialize_many` and :func:`deserialize_many` are the batch forms used on
the hot path.
"""

from __future__ import annotations

import codecs
import importlib
import json
import numbers
import operator
import reprlib
import struct
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError

from common.errors import ConfigError, SerializationError

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
N = TypeVar("N", int, float)

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_DOUBLE = struct.Struct(">d")
_BYTES_LIKE = (bytes, bytearray, memoryview)
_NONE = type(None)
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


def _preview(value: object) -> str:
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


def _size(data: object, who: str) -> int:
    """Return the byte length of ``data``, raising if it is not bytes-like."""
    if isinstance(data, memoryview):
        return data.nbytes
    if isinstance(data, (bytes, bytearray)):
        return len(data)
    raise SerializationError(f"{who} expected bytes, got {_preview(data)}")


class _Base:
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


class BytesSerde(_Base):
    """Pass bytes through unchanged (Kafka's ``BytesSerde`` / ``ByteArraySerde``)."""

    __slots__ = ()

    def serialize(self, topic: str, data: bytes | bytearray | memoryview | None) -> bytes | None:
        """Return ``data`` as ``bytes``; raise SerializationError if it is not bytes-like."""
        if data is None or type(data) is bytes:
            return data
        _size(data, "BytesSerializer")
        return bytes(data)

    def deserialize(self, topic: str, data: bytes | None) -> bytes | None:
        """Return ``data`` as ``bytes``; raise SerializationError if it is not bytes-like."""
        if data is None or type(data) is bytes:
            return data
        _size(data, "BytesDeserializer")
        return bytes(data)


class StringSerde(_Base):
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
            raise SerializationError(f"StringSerializer expected str, got {_preview(data)}")
        try:
            return data.encode(self._encoding)
        except UnicodeEncodeError as exc:
            raise SerializationError(
                f"StringSerializer could not encode to {self._encoding}: {exc.reason} at "
                f"position {exc.start}, got {_preview(data)}"
            ) from exc

    def deserialize(self, topic: str, data: bytes | None) -> str | None:
        """Return the decoded text; raise SerializationError on undecodable bytes."""
        if data is None:
            return None
        _size(data, "StringDeserializer")
        try:
            return str(data, self._encoding)
        except UnicodeDecodeError as exc:
            raise SerializationError(
                f"StringDeserializer expected valid {self._encoding}, got invalid byte at "
                f"position {exc.start} ({exc.reason}) in {_preview(data)}"
            ) from exc


def _as_int(data: object, who: str, bits: int) -> int:
    """Return ``data`` as an int in the signed ``bits`` range, or raise SerializationError."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if isinstance(data, bool) or not hasattr(type(data), "__index__"):
        raise SerializationError(f"{who} expected int, got {_preview(data)}")
    value = operator.index(data)  # type: ignore[arg-type]
    if not lo <= value <= hi:
        raise SerializationError(
            f"{who} expected int in range [{lo}, {hi}] ({bits}-bit signed), got {_preview(value)}"
        )
    return value


class _FixedSerde(_Base, Generic[N]):
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
        if _size(data, who) != size:
            raise SerializationError(
                f"Size of data received by {who} is not {size}: got {_preview(data)}"
            )
        return self._packer.unpack(data)[0]  # type: ignore[no-any-return]


class IntegerSerde(_FixedSerde[int]):
    """Encode ``int`` as 4 bytes, big-endian two's complement (Kafka's ``IntegerSerde``)."""

    __slots__ = ()
    _packer, _kind = _INT, "Integer"

    def _coerce(self, data: object) -> int:
        return _as_int(data, "IntegerSerializer", 32)


class LongSerde(_FixedSerde[int]):
    """Encode ``int`` as 8 bytes, big-endian two's complement (Kafka's ``LongSerde``)."""

    __slots__ = ()
    _packer, _kind = _LONG, "Long"

    def _coerce(self, data: object) -> int:
        return _as_int(data, "LongSerializer", 64)


class DoubleSerde(_FixedSerde[float]):
    """Encode ``float`` as 8 bytes of big-endian IEEE-754 (Kafka's ``DoubleSerde``)."""

    __slots__ = ()
    _packer, _kind = _DOUBLE, "Double"

    def _coerce(self, data: object) -> float:
        if isinstance(data, bool) or not isinstance(data, numbers.Real):
            raise SerializationError(f"DoubleSerializer expected float, got {_preview(data)}")
        try:
            return float(data)
        except OverflowError as exc:
            raise SerializationError(
                f"DoubleSerializer expected float, got {_preview(data)} (too large for a double)"
            ) from exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_JSON_ENCODE = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
).encode
_JSON_DECODE = json.JSONDecoder(parse_constant=_reject_constant).decode


class JsonSerde(_Base):
    """Encode JSON-able objects as compact UTF-8 JSON with sorted keys (stable output)."""

    __slots__ = ()

    def serialize(self, topic: str, data: Any) -> bytes | None:
        """Return the JSON bytes; raise SerializationError if ``data`` is not JSON-able."""
        if data is None:
            return None
        try:
            return _JSON_ENCODE(data).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:
            raise SerializationError(
                f"JsonSerializer expected a JSON-able value, got {_preview(data)}: {exc}"
            ) from exc

    def deserialize(self, topic: str, data: bytes | None) -> Any:
        """Return the parsed object; raise SerializationError on bad UTF-8 or bad JSON."""
        if data is None:
            return None
        _size(data, "JsonDeserializer")
        try:
            return _JSON_DECODE(str(data, "utf-8"))
        except UnicodeDecodeError as exc:
            raise SerializationError(
                f"JsonDeserializer expected UTF-8 JSON, got invalid UTF-8 at position "
                f"{exc.start} in {_preview(data)}"
            ) from exc
        except (ValueError, RecursionError) as exc:
            raise SerializationError(
                f"JsonDeserializer expected valid JSON, got {_preview(data)}: {exc}"
            ) from exc


class PydanticSerde(_Base, Generic[M]):
    """Encode pydantic v2 models as JSON (``model_dump_json`` / ``model_validate_json``)."""

    __slots__ = ("_model",)

    def __init__(self, model_cls: type[M]) -> None:
        """Serve ``model_cls``; raise ConfigError if it is not a pydantic BaseModel."""
        if not (isinstance(model_cls, type) and issubclass(model_cls, BaseModel)):
            raise ConfigError(f"PydanticSerde needs a pydantic BaseModel class, got {model_cls!r}")
        self._model: type[M] = model_cls

    @property
    def model_cls(self) -> type[M]:
        """The pydantic model class."""
        return self._model

    def _args(self) -> tuple[object, ...]:
        return (self._model,)

    def __repr__(self) -> str:
        return f"PydanticSerde({self._model.__qualname__})"

    def serialize(self, topic: str, data: M | None) -> bytes | None:
        """Return the model's JSON bytes; raise SerializationError on other types."""
        if data is None:
            return None
        name = self._model.__qualname__
        if not isinstance(data, self._model):
            raise SerializationError(f"PydanticSerializer expected {name}, got {_preview(data)}")
        try:
            return data.model_dump_json().encode("utf-8")
        except Exception as exc:
            raise SerializationError(f"PydanticSerializer could not dump {name}: {exc}") from exc

    def deserialize(self, topic: str, data: bytes | None) -> M | None:
        """Return the validated model; raise SerializationError when validation fails."""
        if data is None:
            return None
        _size(data, "PydanticDeserializer")
        raw = bytes(data) if isinstance(data, memoryview) else data
        try:
            return self._model.model_validate_json(raw)
        except ValidationError as exc:
            errs = exc.errors(include_url=False, include_input=False)
            where = ".".join(map(str, errs[0]["loc"])) or "<root>"
            raise SerializationError(
                f"PydanticDeserializer expected JSON for {self._model.__qualname__}, got "
                f"{_preview(data)}: {len(errs)} validation error(s), first at {where}: "
                f"{errs[0]['msg']}"
            ) from exc


class Serdes:
    """Build serdes as Kafka does: ``Serdes.String()``, ``Serdes.Long()``, ...

    ``Serdes.String(encoding="latin-1")`` and ``Serdes.Pydantic(Model)`` take arguments.
    """

    Bytes = BytesSerde
    String = StringSerde
    Integer = IntegerSerde
    Long = LongSerde
    Double = DoubleSerde
    Json = JsonSerde
    Pydantic = PydanticSerde


_NAMED: dict[str, Callable[[], Serde[Any]]] = {
    "bytes": BytesSerde,
    "string": StringSerde,
    "int": IntegerSerde,
    "long": LongSerde,
    "double": DoubleSerde,
    "json": JsonSerde,
}
_ALLOWED = (
    f"one of {', '.join(_NAMED)}, or an import path 'pkg.module.Name' or 'pkg.module:Name' "
    "naming a Serde class, a zero-argument factory or a Serde instance"
)


def serde_from_name(name: str) -> Serde[Any]:
    """Return the serde a configuration string names.

    Args:
        name: ``"bytes"``, ``"string"``, ``"int"``, ``"long"``, ``"double"``, ``"json"``, or
            ``"pkg.module.Name"`` / ``"pkg.module:Name"`` naming a Serde class (called with
            no arguments), a zero-argument factory, or a Serde instance.

    Returns:
        The serde.

    Raises:
        ConfigError: The name is unknown, cannot be imported, or does not give a serde.
    """
    key = name.strip()
    if key.lower() in _NAMED:
        return _NAMED[key.lower()]()
    if ":" in key:
        module_name, _, attr_path = key.partition(":")
    else:
        module_name, _, attr_path = key.rpartition(".")
    if not module_name or not attr_path:
        raise ConfigError(f"unknown serde {name!r}: expected {_ALLOWED}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise ConfigError(f"serde {name!r}: module {module_name!r} not found") from exc
        raise ConfigError(f"serde {name!r}: importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:
        raise ConfigError(
            f"serde {name!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    owner = module_name
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"serde {name!r}: {owner!r} has no attribute {part!r}")
        obj, owner = getattr(obj, part), f"{owner}.{part}"
    if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Serde)):
        try:
            obj = obj()
        except Exception as exc:
            raise ConfigError(
                f"serde {name!r}: calling {owner!r} with no arguments failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    missing = [m for m in ("serialize", "deserialize") if not callable(getattr(obj, m, None))]
    if missing:
        raise ConfigError(
            f"serde {name!r}: {type(obj).__name__} object lacks {' and '.join(missing)}; "
            f"expected {_ALLOWED}"
        )
    return obj  # type: ignore[no-any-return]


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
    IntegerSerde: (_INT, frozenset({int, _NONE})),
    LongSerde: (_LONG, frozenset({int, _NONE})),
    DoubleSerde: (_DOUBLE, frozenset({float, int, _NONE})),
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
