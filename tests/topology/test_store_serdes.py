"""The DSL stores' value serde read in bulk: the same values, and the same error, as one
value at a time."""

from __future__ import annotations

import pytest

from common.errors import SerializationError
from common.serdes import Serdes, deserialize_many
from topology.api.record import ValueAndTimestamp
from topology.graph.stores import ValueAndTimestampSerde


@pytest.mark.parametrize(
    ("inner", "values"),
    [
        (Serdes.Long(), [0, -5, 2**62, None, 7]),
        (Serdes.String(), ["a", "", "héllo", None]),
        (Serdes.Double(), [1.5, None]),
    ],
)
def test_many_values_and_timestamps_read_as_one_at_a_time(inner: object, values: list) -> None:
    serde = ValueAndTimestampSerde(inner)  # type: ignore[arg-type]
    data = [
        serde.serialize("t", None if v is None else ValueAndTimestamp(v, 1_234_567 + i))
        for i, v in enumerate(values)
    ]
    assert deserialize_many(serde, "t", data) == [serde.deserialize("t", d) for d in data]


def test_a_short_value_names_its_element() -> None:
    serde = ValueAndTimestampSerde(Serdes.Long())
    good = serde.serialize("t", ValueAndTimestamp(1, 2))
    with pytest.raises(SerializationError, match="element 1: .*at least 8 bytes, got 3"):
        deserialize_many(serde, "t", [good, b"abc"])
