"""The built-in serdes over Arrow columns agree byte for byte with the scalar serdes, and
whatever the scalar path rejects fails with its message."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from common.columns import deserialize_column, serialize_column
from common.errors import SerializationError
from common.serdes import IntegerSerde, LongSerde, Serde, StringSerde, deserialize_many

from .test_serdes import (
    BATCHES,
    TOPIC,
    _first_error,
    _id,
    _same,
    test_deserialize_many_reports_first_failing_index,
    test_serialize_many_reports_first_failing_index,
)


@pytest.mark.parametrize(("serde", "values"), BATCHES, ids=_id)
def test_column_agrees_with_scalar(serde: Serde[Any], values: list[Any]) -> None:
    column = serialize_column(serde, TOPIC, values)
    assert column.type == pa.binary()
    assert column.to_pylist() == [serde.serialize(TOPIC, v) for v in values]
    expected = [serde.deserialize(TOPIC, serde.serialize(TOPIC, v)) for v in values]
    for given in (column, pa.chunked_array([column], pa.binary()), column.slice(1)):
        decoded = deserialize_column(serde, TOPIC, given)
        want = expected[len(expected) - len(given) :]
        assert len(decoded) == len(want)
        assert all(_same(a, b) for a, b in zip(decoded, want, strict=True))
        assert [type(x) for x in decoded] == [type(x) for x in want]


@pytest.mark.parametrize(
    "serde", [StringSerde(), LongSerde(), IntegerSerde()], ids=lambda s: type(s).__name__
)
def test_all_null_and_empty(serde: Serde[Any]) -> None:
    assert serialize_column(serde, TOPIC, [None, None]).to_pylist() == [None, None]
    assert deserialize_column(serde, TOPIC, pa.nulls(2, pa.binary())) == [None, None]
    assert deserialize_column(serde, TOPIC, pa.array([], pa.binary())) == []


_BAD_VALUES = test_serialize_many_reports_first_failing_index.pytestmark[0].args[1]
_BAD_DATAS = [
    (serde, datas)
    for serde, datas in test_deserialize_many_reports_first_failing_index.pytestmark[0].args[1]
    if all(d is None or isinstance(d, (bytes, bytearray)) for d in datas)
]


@pytest.mark.parametrize(("serde", "values"), _BAD_VALUES, ids=_id)
def test_serialize_column_reports_first_failing_index(serde: Serde[Any], values: list[Any]) -> None:
    with pytest.raises(SerializationError) as info:
        serialize_column(serde, TOPIC, values)
    assert str(info.value) == _first_error(serde.serialize, values)


@pytest.mark.parametrize(("serde", "datas"), _BAD_DATAS, ids=_id)
def test_deserialize_column_reports_first_failing_index(
    serde: Serde[Any], datas: list[Any]
) -> None:
    plain = [None if d is None else bytes(d) for d in datas]
    with pytest.raises(SerializationError) as info:
        deserialize_column(serde, TOPIC, pa.array(plain, pa.binary()))
    assert str(info.value) == _first_error(serde.deserialize, plain)


def test_a_sequence_takes_the_many_path() -> None:
    assert deserialize_column(LongSerde(), TOPIC, [b"\0" * 8, None]) == deserialize_many(
        LongSerde(), TOPIC, [b"\0" * 8, None]
    )
