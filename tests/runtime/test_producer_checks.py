"""A producer refuses a bad record on ``send``, alone: the records buffered before it are
committed by the next flush, and a flush never fails on a field ``send`` accepted."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from common.errors import InvalidRecordError, SerializationError
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.records import HEADER_TYPE
from runtime.storage.topics import TopicAdmin
from runtime.txn.producer import TransactionalProducer

BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"timestamp": 2**63}, InvalidRecordError, r"timestamp 9223372036854775808 is out of range"),
    ({"timestamp": -1}, InvalidRecordError, r"timestamp -1 is out of range"),
    ({"timestamp": "now"}, InvalidRecordError, r"must be an int.*str 'now'.*field=timestamp"),
    ({"timestamp": 1.5}, InvalidRecordError, r"must be an int.*float 1.5"),
    ({"timestamp": True}, InvalidRecordError, r"must be an int.*bool"),
    ({"headers": [("h", "text")]}, InvalidRecordError, r"header 0 must be a \(str, bytes"),
    ({"headers": [(b"h", b"v")]}, InvalidRecordError, r"header 0 .*field=headers"),
    ({"headers": [("h",)]}, InvalidRecordError, r"header 0 must be"),
    ({"headers": "h=v"}, InvalidRecordError, r"headers must be a list of \(name, value\)"),
    ({"value": "text"}, SerializationError, r"value must be bytes or None, got str"),
    ({"key": 7}, SerializationError, r"key must be bytes or None, got int"),
    ({"value": b"x" * 2_000_000}, InvalidRecordError, r"2000\d+ bytes, larger than max_request"),
]


def _send(producer: Any, fields: dict[str, Any]) -> None:
    record = {"key": b"k", "value": b"v", "timestamp": 5, "headers": None, **fields}
    producer.send(
        "t",
        record["key"],
        record["value"],
        timestamp=record["timestamp"],
        headers=record["headers"],
    )


@pytest.mark.parametrize("case", BAD, ids=[str(c[0])[:40] for c in BAD])
def test_a_bad_field_is_refused_alone_and_the_buffer_is_kept(
    admin: TopicAdmin,
    producer: Producer,
    reader: TopicReader,
    case: tuple[dict[str, Any], type[Exception], str],
) -> None:
    fields, error, message = case
    admin.create("t", 1)
    producer.send("t", b"a", b"1", timestamp=1, headers=[("h", b"x"), ("n", None)])
    with pytest.raises(error, match=message):
        _send(producer, fields)
    producer.send("t", b"b", b"2", timestamp=2)
    producer.flush()
    got = reader.read("t", 0, 0).to_pylist()
    assert [(r["offset"], r["key"], r["value"], r["timestamp"]) for r in got] == [
        (0, b"a", b"1", 1),
        (1, b"b", b"2", 2),
    ]
    assert got[0]["headers"] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]


def test_the_largest_timestamp_and_a_raised_request_size_are_accepted(
    admin: TopicAdmin, reader: TopicReader
) -> None:
    admin.create("t", 1)
    producer = Producer(admin, max_request_size=3_000_000)
    producer.send("t", None, b"x" * 2_000_000, timestamp=2**63 - 1)
    producer.flush()
    (row,) = reader.read("t", 0, 0).select(["timestamp"]).to_pylist()
    assert row == {"timestamp": 2**63 - 1}


def test_a_transactional_send_refuses_a_bad_field_and_keeps_its_transaction(
    admin: TopicAdmin, reader: TopicReader
) -> None:
    admin.create("t", 1)
    txn = TransactionalProducer(admin, "checks-1")
    txn.init_transactions()
    txn.begin_transaction()
    txn.send("t", b"a", b"1", timestamp=1)
    with pytest.raises(InvalidRecordError, match="field=timestamp"):
        txn.send("t", b"b", b"2", timestamp=-5)
    txn.commit_transaction()
    assert reader.read("t", 0, 0).column("key").to_pylist() == [b"a"]


@pytest.mark.parametrize(
    "case",
    [
        ([1, -2], None, r"record 1: the timestamp -2 is out of range"),
        ([1, 2.5], None, r"record 1: the timestamp must be an int"),
        (pa.array([1, -2], pa.int64()), None, r"non-negative; the smallest is -2"),
        (pa.array([1.0, 2.0]), None, r"timestamps must be integers, got double"),
        (-3, None, r"timestamp -3 is out of range"),
        (None, pa.array([[("h", "v")], []]), r"headers must be an Arrow array of"),
    ],
)
def test_send_batch_refuses_bad_timestamps_and_headers(
    admin: TopicAdmin, producer: Producer, reader: TopicReader, case: tuple[Any, Any, str]
) -> None:
    timestamps, headers, message = case
    admin.create("t", 1)
    producer.send_batch("t", None, [b"ok"], timestamps=9)
    with pytest.raises(InvalidRecordError, match=message):
        producer.send_batch("t", None, [b"1", b"2"], timestamps=timestamps, headers=headers)
    good = pa.array([[{"key": "h", "value": b"v"}], []], pa.list_(HEADER_TYPE))
    producer.send_batch("t", None, [b"3", b"4"], timestamps=[3, 4], headers=good)
    producer.flush()
    got = reader.read("t", 0, 0).select(["value", "timestamp"]).to_pylist()
    assert got == [
        {"value": b"ok", "timestamp": 9},
        {"value": b"3", "timestamp": 3},
        {"value": b"4", "timestamp": 4},
    ]
