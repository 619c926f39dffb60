"""Tests for common.serdes: Kafka byte compatibility, errors, name lookup, batch helpers."""

from __future__ import annotations

import importlib
import math
import struct
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pydantic
import pytest

from common.errors import ConfigError, SerializationError
from common.serdes import (
    BytesSerde,
    DoubleSerde,
    IntegerSerde,
    JsonSerde,
    LongSerde,
    PydanticSerde,
    Serde,
    Serdes,
    StringSerde,
    deserialize_many,
    deserialize_record_field,
    serde_from_name,
    serialize_many,
)


class Order(pydantic.BaseModel):
    id: int
    name: str
    tags: list[str] = []


TOPIC = "orders"

# (serde, value, the bytes Kafka's Java serializer writes for it)
KAFKA_VECTORS: list[tuple[Serde[Any], Any, bytes]] = [
    (IntegerSerde(), 0, b"\x00\x00\x00\x00"),
    (IntegerSerde(), 1, b"\x00\x00\x00\x01"),
    (IntegerSerde(), -1, b"\xff\xff\xff\xff"),
    (IntegerSerde(), 256, b"\x00\x00\x01\x00"),
    (IntegerSerde(), 2**31 - 1, b"\x7f\xff\xff\xff"),
    (IntegerSerde(), -(2**31), b"\x80\x00\x00\x00"),
    (LongSerde(), 0, b"\x00" * 8),
    (LongSerde(), 1, b"\x00\x00\x00\x00\x00\x00\x00\x01"),
    (LongSerde(), -1, b"\xff" * 8),
    (LongSerde(), 1234567890123, b"\x00\x00\x01\x1f\x71\xfb\x04\xcb"),
    (LongSerde(), 2**63 - 1, b"\x7f\xff\xff\xff\xff\xff\xff\xff"),
    (LongSerde(), -(2**63), b"\x80\x00\x00\x00\x00\x00\x00\x00"),
    (DoubleSerde(), 1.0, b"?\xf0\x00\x00\x00\x00\x00\x00"),
    (DoubleSerde(), -2.5, b"\xc0\x04\x00\x00\x00\x00\x00\x00"),
    (DoubleSerde(), 0.0, b"\x00" * 8),
    (DoubleSerde(), -0.0, b"\x80" + b"\x00" * 7),
    (DoubleSerde(), math.inf, b"\x7f\xf0" + b"\x00" * 6),
    (DoubleSerde(), math.nan, b"\x7f\xf8" + b"\x00" * 6),  # Java's canonical NaN
    (StringSerde(), "héllo", b"h\xc3\xa9llo"),
    (StringSerde(), "", b""),
    (StringSerde(), "日本", "日本".encode()),
    (StringSerde("latin-1"), "é", b"\xe9"),
    (BytesSerde(), b"\x00\xff\x10", b"\x00\xff\x10"),
    (
        JsonSerde(),
        {"b": 1, "a": [1, 2.5, None, True, "é"]},
        b'{"a":[1,2.5,null,true,"\xc3\xa9"],"b":1}',
    ),
    (JsonSerde(), "x", b'"x"'),
    (PydanticSerde(Order), Order(id=7, name="x"), b'{"id":7,"name":"x","tags":[]}'),
]


def _id(value: Any) -> str:
    """Return a short test id."""
    text = repr(value)
    return text if len(text) <= 30 else text[:27] + "..."


def _same(a: Any, b: Any) -> bool:
    """Compare values, treating NaN as equal to NaN and -0.0 as distinct from 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack(">d", a) == struct.pack(">d", b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize(("serde", "value", "expected"), KAFKA_VECTORS, ids=_id)
def test_serialize_matches_kafka_bytes(serde: Serde[Any], value: Any, expected: bytes) -> None:
    assert serde.serialize(TOPIC, value) == expected


@pytest.mark.parametrize(("serde", "value", "data"), KAFKA_VECTORS, ids=_id)
def test_deserialize_kafka_bytes(serde: Serde[Any], value: Any, data: bytes) -> None:
    assert _same(serde.deserialize(TOPIC, data), value)


ROUND_TRIPS: list[tuple[Serde[Any], list[Any]]] = [
    (BytesSerde(), [b"", b"\x00", bytes(range(256)), b"x" * 10_000]),
    (StringSerde(), ["", "a", "héllo wörld", "😀 emoji", "\x00nul", "x" * 10_000]),
    (StringSerde("utf-16"), ["", "abc", "😀"]),
    (IntegerSerde(), [0, 1, -1, 2**31 - 1, -(2**31), 12345, -98765]),
    (LongSerde(), [0, 1, -1, 2**63 - 1, -(2**63), 2**40 + 3, -(2**50)]),
    (DoubleSerde(), [0.0, -0.0, 1.5, -1e308, 5e-324, math.inf, -math.inf, math.nan, 0.1]),
    (JsonSerde(), [0, -3, 1.25, "s", True, False, [], {}, {"k": [1, {"z": None}]}, "é"]),
    (PydanticSerde(Order), [Order(id=1, name=""), Order(id=-5, name="ü", tags=["a", "b"])]),
]


@pytest.mark.parametrize(("serde", "values"), ROUND_TRIPS, ids=_id)
def test_round_trip(serde: Serde[Any], values: list[Any]) -> None:
    for value in values:
        data = serde.serialize(TOPIC, value)
        assert isinstance(data, bytes)
        assert _same(serde.deserialize(TOPIC, data), value), value


ALL_SERDES: list[Serde[Any]] = [
    BytesSerde(),
    StringSerde(),
    IntegerSerde(),
    LongSerde(),
    DoubleSerde(),
    JsonSerde(),
    PydanticSerde(Order),
]


@pytest.mark.parametrize("serde", ALL_SERDES, ids=_id)
def test_none_passes_through(serde: Serde[Any]) -> None:
    assert serde.serialize(TOPIC, None) is None
    assert serde.deserialize(TOPIC, None) is None
    assert isinstance(serde, Serde)


def test_bytes_like_inputs_are_accepted() -> None:
    for data in (bytearray(b"\x00\x00\x00\x05"), memoryview(b"\x00\x00\x00\x05")):
        assert IntegerSerde().deserialize(TOPIC, data) == 5  # type: ignore[arg-type]
        assert BytesSerde().serialize(TOPIC, data) == b"\x00\x00\x00\x05"
        assert type(BytesSerde().deserialize(TOPIC, data)) is bytes  # type: ignore[arg-type]
        assert StringSerde().deserialize(TOPIC, data) == "\x00\x00\x00\x05"  # type: ignore[arg-type]


def test_numpy_numbers_serialize_like_python_numbers() -> None:
    assert LongSerde().serialize(TOPIC, np.int64(-2)) == LongSerde().serialize(TOPIC, -2)  # type: ignore[arg-type]
    assert IntegerSerde().serialize(TOPIC, np.int32(7)) == b"\x00\x00\x00\x07"  # type: ignore[arg-type]
    assert DoubleSerde().serialize(TOPIC, np.float32(0.5)) == struct.pack(">d", 0.5)  # type: ignore[arg-type]
    assert DoubleSerde().serialize(TOPIC, 3) == struct.pack(">d", 3.0)


def test_json_output_is_stable_and_compact() -> None:
    a = JsonSerde().serialize(TOPIC, {"z": 1, "a": {"y": 2, "b": 3}})
    b = JsonSerde().serialize(TOPIC, {"a": {"b": 3, "y": 2}, "z": 1})
    assert a == b == b'{"a":{"b":3,"y":2},"z":1}'


def test_repr_and_equality() -> None:
    assert repr(LongSerde()) == "LongSerde()"
    assert repr(StringSerde("latin-1")) == "StringSerde(encoding='latin-1')"
    assert repr(PydanticSerde(Order)) == "PydanticSerde(Order)"
    assert LongSerde() == LongSerde()
    assert LongSerde() != IntegerSerde()
    assert StringSerde("utf-8") != StringSerde("latin-1")
    assert hash(StringSerde()) == hash(StringSerde())


def test_serdes_factories() -> None:
    assert isinstance(Serdes.Bytes(), BytesSerde)
    assert isinstance(Serdes.String(), StringSerde)
    assert Serdes.String("latin-1").encoding == "latin-1"
    assert isinstance(Serdes.Integer(), IntegerSerde)
    assert isinstance(Serdes.Long(), LongSerde)
    assert isinstance(Serdes.Double(), DoubleSerde)
    assert isinstance(Serdes.Json(), JsonSerde)
    serde = Serdes.Pydantic(Order)
    assert isinstance(serde, PydanticSerde)
    assert serde.model_cls is Order


# --- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("serde", "value", "message"),
    [
        (LongSerde(), "12", r"^LongSerializer expected int, got str '12'$"),
        (LongSerde(), 1.5, r"^LongSerializer expected int, got float 1\.5$"),
        (LongSerde(), True, r"^LongSerializer expected int, got bool True$"),
        (IntegerSerde(), b"\x01", r"^IntegerSerializer expected int, got 1 bytes b'\\x01'$"),
        (DoubleSerde(), "1.0", r"^DoubleSerializer expected float, got str '1\.0'$"),
        (DoubleSerde(), False, r"^DoubleSerializer expected float, got bool False$"),
        (
            DoubleSerde(),
            10**400,
            r"^DoubleSerializer expected float, got int 1000.*\(too large for a double\)$",
        ),
        (StringSerde(), 5, r"^StringSerializer expected str, got int 5$"),
        (StringSerde(), b"ab", r"^StringSerializer expected str, got 2 bytes b'ab'$"),
        (StringSerde(), "\ud800", r"^StringSerializer could not encode to utf-8: surrogates"),
        (StringSerde("ascii"), "é", r"^StringSerializer could not encode to ascii: .*position 0"),
        (BytesSerde(), "text", r"^BytesSerializer expected bytes, got str 'text'$"),
        (JsonSerde(), {"s": {1}}, r"^JsonSerializer expected a JSON-able value, got dict .*set"),
        (JsonSerde(), math.nan, r"^JsonSerializer expected a JSON-able value, got float nan"),
        (PydanticSerde(Order), {"id": 1}, r"^PydanticSerializer expected Order, got dict"),
    ],
    ids=_id,
)
def test_serialize_wrong_type(serde: Serde[Any], value: Any, message: str) -> None:
    with pytest.raises(SerializationError, match=message):
        serde.serialize(TOPIC, value)


@pytest.mark.parametrize(
    ("serde", "ok", "bad"),
    [
        (IntegerSerde(), [2**31 - 1, -(2**31)], [2**31, -(2**31) - 1, 10**30]),
        (LongSerde(), [2**63 - 1, -(2**63)], [2**63, -(2**63) - 1, 10**30]),
    ],
    ids=_id,
)
def test_range_checks(serde: Serde[int], ok: list[int], bad: list[int]) -> None:
    for value in ok:
        assert serde.serialize(TOPIC, value) is not None
    bits = 32 if isinstance(serde, IntegerSerde) else 64
    for value in bad:
        with pytest.raises(SerializationError) as info:
            serde.serialize(TOPIC, value)
        assert f"expected int in range [{-(2 ** (bits - 1))}, {2 ** (bits - 1) - 1}]" in str(
            info.value
        )
        assert f"got int {value}" in str(info.value)


@pytest.mark.parametrize(
    ("serde", "data", "message"),
    [
        (IntegerSerde(), b"\x00" * 3, "Size of data received by IntegerDeserializer is not 4"),
        (IntegerSerde(), b"\x00" * 8, "Size of data received by IntegerDeserializer is not 4"),
        (LongSerde(), b"\x00" * 4, "Size of data received by LongDeserializer is not 8"),
        (LongSerde(), b"", "Size of data received by LongDeserializer is not 8"),
        (DoubleSerde(), b"\x00" * 9, "Size of data received by DoubleDeserializer is not 8"),
    ],
    ids=_id,
)
def test_deserialize_wrong_size(serde: Serde[Any], data: bytes, message: str) -> None:
    with pytest.raises(SerializationError) as info:
        serde.deserialize(TOPIC, data)
    assert str(info.value).startswith(message)
    assert f"got {len(data)} bytes" in str(info.value)


@pytest.mark.parametrize("serde", ALL_SERDES, ids=_id)
def test_deserialize_non_bytes(serde: Serde[Any]) -> None:
    with pytest.raises(SerializationError, match=r"Deserializer expected bytes, got str 'abc'$"):
        serde.deserialize(TOPIC, "abc")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("serde", "data", "message"),
    [
        (
            StringSerde(),
            b"ab\xff",
            r"^StringDeserializer expected valid utf-8, got invalid byte at position 2 "
            r"\(invalid start byte\) in 3 bytes b'ab\\xff'$",
        ),
        (JsonSerde(), b'"\xc3"', r"^JsonDeserializer expected UTF-8 JSON, got invalid UTF-8"),
        (JsonSerde(), b"{bad", r"^JsonDeserializer expected valid JSON, got 4 bytes b'\{bad': "),
        (JsonSerde(), b"NaN", r"^JsonDeserializer expected valid JSON, .*NaN is not valid JSON"),
        (JsonSerde(), b"", r"^JsonDeserializer expected valid JSON, got 0 bytes b''"),
        (
            PydanticSerde(Order),
            b'{"id":"x","name":"n"}',
            r"^PydanticDeserializer expected JSON for Order, got .*1 validation error\(s\), "
            r"first at id: Input should be a valid integer",
        ),
        (
            PydanticSerde(Order),
            b"not json",
            r"^PydanticDeserializer expected JSON for Order, .*Invalid JSON",
        ),
    ],
    ids=_id,
)
def test_deserialize_bad_content(serde: Serde[Any], data: bytes, message: str) -> None:
    with pytest.raises(SerializationError, match=message) as info:
        serde.deserialize(TOPIC, data)
    assert info.value.__cause__ is not None


@pytest.mark.parametrize(
    ("serde", "payload"),
    [
        (LongSerde(), b"\x07" * 1000),
        (StringSerde(), b"\x07" * 999 + b"\xff"),
        (JsonSerde(), b"[" * 1000),
        (PydanticSerde(Order), b"[" * 1000),
    ],
    ids=_id,
)
def test_long_payloads_are_truncated_in_messages(serde: Serde[Any], payload: bytes) -> None:
    with pytest.raises(SerializationError) as info:
        serde.deserialize(TOPIC, payload)
    message = str(info.value)
    assert "1000 bytes" in message
    assert "..." in message
    assert len(message) < 400
    assert repr(payload[:100])[2:-1] not in message


def test_long_values_are_truncated_in_messages() -> None:
    with pytest.raises(SerializationError) as info:
        LongSerde().serialize(TOPIC, "z" * 5000)  # type: ignore[arg-type]
    assert len(str(info.value)) < 120
    assert str(info.value).endswith("...")


def test_bad_construction_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown encoding 'no-such-codec'"):
        StringSerde("no-such-codec")
    with pytest.raises(ConfigError, match="needs a pydantic BaseModel class, got <class 'dict'>"):
        PydanticSerde(dict)  # type: ignore[type-var]


# --- deserialize_record_field -------------------------------------------------------------


class ExplodingSerde:
    """A user serde whose deserialize fails with a plain exception."""

    def serialize(self, topic: str, data: Any) -> bytes | None:
        return None if data is None else b"x"

    def deserialize(self, topic: str, data: bytes | None) -> Any:
        if data == b"boom":
            raise ValueError("boom happened")
        return data


def test_record_field_success() -> None:
    assert (
        deserialize_record_field(LongSerde(), TOPIC, 0, 5, b"\x00" * 7 + b"\x09", field="key") == 9
    )
    assert deserialize_record_field(LongSerde(), TOPIC, 0, 5, None, field="value") is None


@pytest.mark.parametrize("field", ["key", "value"])
def test_record_field_names_the_record(field: Any) -> None:
    with pytest.raises(SerializationError) as info:
        deserialize_record_field(LongSerde(), "payments", 3, 41, b"abc", field=field)
    err = info.value
    assert (err.topic, err.partition, err.offset) == ("payments", 3, 41)
    assert str(err) == (
        f"Error deserializing {field} with LongSerde(): Size of data received by "
        "LongDeserializer is not 8: got 3 bytes b'abc' (topic=payments partition=3 offset=41)"
    )
    assert isinstance(err.__cause__, SerializationError)


def test_record_field_wraps_user_serde_exceptions() -> None:
    serde = ExplodingSerde()
    assert deserialize_record_field(serde, "t", 0, 0, b"fine", field="value") == b"fine"
    with pytest.raises(SerializationError) as info:
        deserialize_record_field(serde, "t", 7, 1234, b"boom", field="key")
    assert isinstance(info.value.__cause__, ValueError)
    message = str(info.value)
    assert message.startswith("Error deserializing key with ")
    assert "ValueError: boom happened" in message
    assert message.endswith("(topic=t partition=7 offset=1234)")


# --- serde_from_name ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("bytes", BytesSerde),
        ("string", StringSerde),
        ("int", IntegerSerde),
        ("long", LongSerde),
        ("double", DoubleSerde),
        ("json", JsonSerde),
        (" Long ", LongSerde),
        ("common.serdes.LongSerde", LongSerde),
        ("common.serdes:DoubleSerde", DoubleSerde),
        ("common.serdes:Serdes.Integer", IntegerSerde),
    ],
)
def test_serde_from_name(name: str, cls: type) -> None:
    serde = serde_from_name(name)
    assert type(serde) is cls
    assert serde == cls()


USER_MODULE = """
from typing import Any

class UpperSerde:
    def serialize(self, topic: str, data: Any) -> bytes | None:
        return None if data is None else data.upper().encode()

    def deserialize(self, topic: str, data: bytes | None) -> Any:
        return None if data is None else data.decode().lower()

def make_upper() -> UpperSerde:
    return UpperSerde()

INSTANCE = UpperSerde()

class NeedsArgs(UpperSerde):
    def __init__(self, x: int) -> None:
        self.x = x

class NotASerde:
    def serialize(self, topic: str, data: Any) -> bytes | None:
        return b""

NUMBER = 42
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    pkg = tmp_path / "serdes_test_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "custom.py").write_text(textwrap.dedent(USER_MODULE))
    (pkg / "broken.py").write_text("import no_such_dependency_xyz\n")
    (pkg / "raises.py").write_text("raise RuntimeError('bad module')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod in ("serdes_test_pkg", "serdes_test_pkg.custom"):
        monkeypatch.delitem(sys.modules, mod, raising=False)
    return "serdes_test_pkg.custom"


@pytest.mark.parametrize(
    "path", ["{m}.UpperSerde", "{m}:UpperSerde", "{m}.make_upper", "{m}:make_upper", "{m}.INSTANCE"]
)
def test_serde_from_name_user_paths(user_module: str, path: str) -> None:
    serde = serde_from_name(path.format(m=user_module))
    assert type(serde).__name__ == "UpperSerde"
    assert serde.serialize(TOPIC, "abc") == b"ABC"
    assert serde.deserialize(TOPIC, b"ABC") == "abc"


def test_serde_from_name_instance_is_returned_as_is(user_module: str) -> None:
    module = importlib.import_module(user_module)
    assert serde_from_name(f"{user_module}:INSTANCE") is module.INSTANCE


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("yaml", r"^unknown serde 'yaml': expected one of bytes, string, int, long, double, json,"),
        ("", r"^unknown serde '': expected one of"),
        ("{m}:", r"^unknown serde '.*': expected one of"),
        ("no_such_pkg_xyz.mod.Serde", r"module 'no_such_pkg_xyz.mod' not found$"),
        ("serdes_test_pkg.nope:Serde", r"module 'serdes_test_pkg.nope' not found$"),
        ("serdes_test_pkg.broken.X", r"importing 'serdes_test_pkg.broken' failed: .*no_such_dep"),
        ("serdes_test_pkg.raises.X", r"importing 'serdes_test_pkg.raises' failed: RuntimeError"),
        ("{m}.Missing", r"^serde '{m}.Missing': '{m}' has no attribute 'Missing'$"),
        ("{m}:UpperSerde.nope", r"'{m}.UpperSerde' has no attribute 'nope'$"),
        ("{m}.NotASerde", r"^serde '{m}.NotASerde': NotASerde object lacks deserialize; expected"),
        ("{m}.NUMBER", r"^serde '{m}.NUMBER': int object lacks serialize and deserialize"),
        ("{m}.NeedsArgs", r"calling '{m}.NeedsArgs' with no arguments failed: TypeError"),
    ],
)
def test_serde_from_name_errors(user_module: str, name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("{m}", user_module)):
        serde_from_name(name.replace("{m}", user_module))


# --- serialize_many / deserialize_many ----------------------------------------------------

BATCHES: list[tuple[Serde[Any], list[Any]]] = [
    (BytesSerde(), [b"a", None, b"", bytearray(b"xy"), memoryview(b"z")]),
    (BytesSerde(), [b"a", b"b"]),
    (StringSerde(), ["a", None, "héllo", ""]),
    (StringSerde(), ["only", "strings"]),
    (StringSerde("utf-16"), ["a", None, "😀"]),
    (IntegerSerde(), [0, None, -1, 2**31 - 1, -(2**31)]),
    (IntegerSerde(), [1, np.int32(2), 3]),
    (LongSerde(), [0, -1, 2**63 - 1, -(2**63)]),
    (LongSerde(), [None, 5, None]),
    (LongSerde(), [np.int64(9), 10]),
    (DoubleSerde(), [0.5, None, 3, -0.0, math.inf, np.float32(1.5)]),
    (DoubleSerde(), [1.0, 2.0]),
    (JsonSerde(), [{"a": 1}, None, [1, 2], "s"]),
    (PydanticSerde(Order), [Order(id=1, name="a"), None]),
    (LongSerde(), []),
]


@pytest.mark.parametrize(("serde", "values"), BATCHES, ids=_id)
def test_many_agrees_with_scalar(serde: Serde[Any], values: list[Any]) -> None:
    datas = serialize_many(serde, TOPIC, values)
    assert datas == [serde.serialize(TOPIC, v) for v in values]
    assert all(d is None or type(d) is bytes for d in datas)
    decoded = deserialize_many(serde, TOPIC, datas)
    expected = [serde.deserialize(TOPIC, d) for d in datas]
    assert len(decoded) == len(expected)
    assert all(_same(a, b) for a, b in zip(decoded, expected, strict=True))
    assert [type(x) for x in decoded] == [type(x) for x in expected]


def _first_error(fn: Any, items: list[Any]) -> str:
    for i, item in enumerate(items):
        try:
            fn(TOPIC, item)
        except SerializationError as exc:
            return f"element {i}: {exc}"
    raise AssertionError("no element failed")


@pytest.mark.parametrize(
    ("serde", "values"),
    [
        (LongSerde(), [1, 2, True, "x"]),  # bool must fail like the scalar path does
        (LongSerde(), [1, None, 2**63, 3]),
        (IntegerSerde(), [1, 2**31]),
        (IntegerSerde(), [1, False]),
        (DoubleSerde(), [1.0, True]),
        (IntegerSerde(), [1, 2.0]),
        (DoubleSerde(), [1.0, 10**400]),
        (DoubleSerde(), [1.0, None, "2"]),
        (StringSerde(), ["a", "b", 3]),
        (StringSerde("ascii"), ["a", "é"]),
        (BytesSerde(), [b"a", "b"]),
        (JsonSerde(), [1, {2}]),
        (PydanticSerde(Order), [Order(id=1, name="a"), {"id": 2}]),
    ],
    ids=_id,
)
def test_serialize_many_reports_first_failing_index(serde: Serde[Any], values: list[Any]) -> None:
    with pytest.raises(SerializationError) as info:
        serialize_many(serde, TOPIC, values)
    assert str(info.value) == _first_error(serde.serialize, values)
    assert isinstance(info.value.__cause__, SerializationError)


@pytest.mark.parametrize(
    ("serde", "datas"),
    [
        (LongSerde(), [b"\x00" * 8, None, b"\x00" * 7, b"\x00"]),
        (IntegerSerde(), [b"\x00" * 4, b"\x00" * 8]),
        (DoubleSerde(), [None, "not bytes"]),
        (StringSerde(), [b"ok", None, b"\xff", b"\xfe"]),
        (StringSerde(), [b"ok", bytearray(b"\xff")]),
        (BytesSerde(), [b"ok", 5]),
        (JsonSerde(), [b"1", b"{"]),
        (PydanticSerde(Order), [b'{"id":1,"name":"a"}', b"{}"]),
    ],
    ids=_id,
)
def test_deserialize_many_reports_first_failing_index(serde: Serde[Any], datas: list[Any]) -> None:
    with pytest.raises(SerializationError) as info:
        deserialize_many(serde, TOPIC, datas)
    assert str(info.value) == _first_error(serde.deserialize, datas)


def test_many_with_user_serde_wraps_plain_exceptions() -> None:
    serde = ExplodingSerde()
    assert deserialize_many(serde, TOPIC, [b"a", None]) == [b"a", None]
    assert serialize_many(serde, TOPIC, ["q", None]) == [b"x", None]
    with pytest.raises(SerializationError, match=r"^element 1: ValueError: boom happened$"):
        deserialize_many(serde, TOPIC, [b"a", b"boom", b"boom"])


def test_many_subclass_uses_its_own_methods() -> None:
    class PlusOne(LongSerde):
        __slots__ = ()

        def deserialize(self, topic: str, data: bytes | None) -> int | None:
            value = super().deserialize(topic, data)
            return None if value is None else value + 1

    data = LongSerde().serialize(TOPIC, 41)
    assert deserialize_many(PlusOne(), TOPIC, [data]) == [42]


def test_json_too_deep_is_a_serialization_error() -> None:
    nested: list[Any] = []
    for _ in range(100_000):
        nested = [nested]
    with pytest.raises(SerializationError, match=r"^JsonSerializer expected a JSON-able value"):
        JsonSerde().serialize(TOPIC, nested)
