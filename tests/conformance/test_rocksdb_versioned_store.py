"""Kafka's ``RocksDBVersionedStoreTest`` (with ``StoresTest`` and
``RocksDbVersionedKeyValueBytesStoreSupplierTest`` facts): a versioned key-value store
(KIP-889), put to by a Processor-API processor in a topology.

History retention 300 000 ms (also the grace period of puts), segments of 100 000 ms,
string keys and values. Each put is a record ``(key, value, timestamp)`` piped into the
processor, which puts it and forwards Kafka's put result (the new version's ``validTo``,
-1 when it is the latest, ``PUT_RETURN_CODE_NOT_PUT`` when it is too old). Reads go to the
store the driver hands out (``get_versioned_key_value_store``). A restore replays, into an
empty store, the changelog another store wrote while it took the puts, as Kafka's test
calls ``restoreBatch``; the restored store must answer as one that took the puts.
"""

from __future__ import annotations

from typing import Any

import pytest

from common.errors import ConfigError
from statestores.api import PUT_RETURN_CODE_NOT_PUT as NOT_PUT
from statestores.api import VersionedRecord
from statestores.bytes_layer import bottom
from statestores.stores import Stores
from tests.conformance.conftest import I, L, S
from topology import Consumed, Materialized, Processor, Produced, Record, StreamsBuilder

HR = 300_000  # history retention
GRACE = HR
SI = HR // 3  # segment interval
BASE = 10
LATEST = -1  # PUT_RETURN_CODE_VALID_TO_UNDEFINED
NAME = "versioned-store"
CHANGELOG = f"app-{NAME}-changelog"


class PutProcessor(Processor[str, str, str, int]):
    """Put each record into the versioned store; forward the put's result."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(NAME)

    def process(self, record: Record[str, str]) -> None:
        code = self.store.put(record.key, record.value, record.timestamp)
        self.context.forward(record.with_value(code))


class Store:
    """A topology whose processor puts into a versioned store; reads from the driver."""

    def __init__(self, drive: Any, retention: int = HR, interval: int = SI) -> None:
        builder = StreamsBuilder()
        supplier = Stores.persistent_versioned_key_value_store(NAME, retention, interval)
        builder.add_state_store(Stores.versioned_key_value_store_builder(supplier, S, S))
        stream = builder.stream("in", Consumed.with_(S, S))
        stream.process(PutProcessor, NAME).to("out", Produced.with_(S, L))
        self.driver = drive(builder.build())
        self.input = self.driver.create_input_topic("in", S, S)
        self.out = self.driver.create_output_topic("out", S, L)
        self.store = self.driver.get_versioned_key_value_store(NAME)

    def put(self, key: str, value: str | None, ts: int, expected: int) -> None:
        self.input.pipe_input(key, value, ts)
        assert self.out.read_value() == expected, (key, value, ts)

    def delete(self, key: str, ts: int) -> VersionedRecord[str] | None:
        found: VersionedRecord[str] | None = self.store.delete(key, ts)
        return found

    def latest(self, key: str, value: str | None, ts: int = 0) -> None:
        found = self.store.get(key)
        assert found == (None if value is None else VersionedRecord(value, ts, None))

    def as_of(self, key: str, as_of: int, value: str | None, ts: int = 0, to: int = -1) -> None:
        found = self.store.get(key, as_of)
        expected = None if value is None else VersionedRecord(value, ts, None if to < 0 else to)
        assert found == expected, (key, as_of)

    def versions(
        self, key: str, lo: int | None, hi: int | None, expected: list[Any], *, asc: bool = False
    ) -> None:
        found = self.store.get_versions(key, lo, hi, ascending=asc)
        assert found == [VersionedRecord(v, ts, None if to < 0 else to) for v, ts, to in expected]

    def changelog(self) -> list[tuple[bytes, bytes | None]]:
        """The changelog records the store wrote so far (and takes them)."""
        queue = self.driver.output_queue(CHANGELOG)
        records = [(r.key, r.value) for r in queue]
        queue.clear()
        return records

    def restore(self, drive: Any, *batches: list[tuple[str, str | None, int]]) -> None:
        """Restore this (empty) store from the changelog of another that took the puts
        (Kafka's ``restoreBatch``), one restore batch per ``batches``."""
        source = Store(drive)
        b = bottom(self.store)
        for batch in batches:
            for key, value, ts in batch:
                source.input.pipe_input(key, value, ts)
            records = source.changelog()
            b.restore_batch(records, (b.committed_offset() or 0) + len(records))
        self.store.on_restored()


def test_should_put_latest(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldPutLatest"""
    s = Store(drive)
    s.put("k", "v", BASE, LATEST)
    s.put("k", "v2", BASE + 1, LATEST)
    s.latest("k", "v2", BASE + 1)
    s.as_of("k", BASE, "v", BASE, BASE + 1)
    s.as_of("k", BASE + 1, "v2", BASE + 1)
    s.as_of("k", BASE + 2, "v2", BASE + 1)


def test_should_put_null_as_latest(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldPutNullAsLatest"""
    s = Store(drive)
    s.put("k", None, BASE, LATEST)
    s.put("k", None, BASE + 1, LATEST)
    s.latest("k", None)
    for t in (BASE, BASE + 1, BASE + 2):
        s.as_of("k", t, None)


def test_should_put_older_with_non_null_latest(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldPutOlderWithNonNullLatest"""
    s = Store(drive)
    s.put("k", "v", BASE, LATEST)
    s.put("k", "v2", BASE - 2, BASE)
    s.put("k", "v1", BASE - 1, BASE)
    s.put("k", "v4", BASE - 4, BASE - 2)
    s.latest("k", "v", BASE)
    s.as_of("k", BASE, "v", BASE)
    s.as_of("k", BASE - 1, "v1", BASE - 1, BASE)
    s.as_of("k", BASE - 2, "v2", BASE - 2, BASE - 1)
    s.as_of("k", BASE - 3, "v4", BASE - 4, BASE - 2)


def test_should_put_older_with_null_latest(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldPutOlderWithNullLatest"""
    s = Store(drive)
    s.put("k", None, BASE, LATEST)
    s.put("k", "v2", BASE - 2, BASE)
    s.put("k", "v1", BASE - 1, BASE)
    s.put("k", "v4", BASE - 4, BASE - 2)
    s.latest("k", None)
    s.as_of("k", BASE, None)
    s.as_of("k", BASE - 1, "v1", BASE - 1, BASE)
    s.as_of("k", BASE - 2, "v2", BASE - 2, BASE - 1)
    s.as_of("k", BASE - 3, "v4", BASE - 4, BASE - 2)


def test_should_put_older_null_with_non_null_latest(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldPutOlderNullWithNonNullLatest"""
    s = Store(drive)
    s.put("k", "v", BASE, LATEST)
    s.put("k", None, BASE - 2, BASE)
    s.put("k", None, BASE - 1, BASE)
    s.put("k", None, BASE - 4, BASE - 2)
    s.put("k", "v5", BASE - 5, BASE - 4)
    s.put("k", "v3", BASE - 3, BASE - 2)
    s.put("k", None, BASE - 6, BASE - 5)
    s.latest("k", "v", BASE)
    s.as_of("k", BASE, "v", BASE)
    s.as_of("k", BASE - 1, None)
    s.as_of("k", BASE - 2, None)
    s.as_of("k", BASE - 3, "v3", BASE - 3, BASE - 2)
    s.as_of("k", BASE - 4, None)
    s.as_of("k", BASE - 5, "v5", BASE - 5, BASE - 4)
    s.as_of("k", BASE - 6, None)


def test_should_put_older_null_with_null_latest(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldPutOlderNullWithNullLatest"""
    s = Store(drive)
    s.put("k", None, BASE, LATEST)
    s.put("k", None, BASE - 2, BASE)
    s.put("k", None, BASE - 1, BASE)
    s.put("k", None, BASE - 4, BASE - 2)
    s.put("k", "v3", BASE - 3, BASE - 2)
    s.put("k", "v5", BASE - 5, BASE - 4)
    s.put("k", None, BASE - 6, BASE - 5)
    s.latest("k", None)
    for t in (BASE, BASE - 1, BASE - 2, BASE - 4, BASE - 6):
        s.as_of("k", t, None)
    s.as_of("k", BASE - 3, "v3", BASE - 3, BASE - 2)
    s.as_of("k", BASE - 5, "v5", BASE - 5, BASE - 4)


def test_should_put_repeat_timestamp_as_latest(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldPutRepeatTimestampAsLatest"""
    s = Store(drive)
    s.put("k", "to_be_replaced", BASE, LATEST)
    s.put("k", "b", BASE, LATEST)
    s.latest("k", "b", BASE)
    s.as_of("k", BASE, "b", BASE)
    s.as_of("k", BASE - 1, None)
    for _ in range(2):
        s.put("k", None, BASE, LATEST)
        s.latest("k", None)
        s.as_of("k", BASE, None)
        s.as_of("k", BASE - 1, None)
    s.put("k", "b", BASE, LATEST)
    s.latest("k", "b", BASE)
    s.as_of("k", BASE, "b", BASE)
    s.as_of("k", BASE - 1, None)


#: the history ``shouldPutRepeatTimestamps`` and ``shouldRestoreWithNullsAndRepeatTimestamps``
#: write (key ``k``): value, timestamp, and the put's result
REPEATS = [
    ("to_be_replaced", SI + 20, LATEST),
    (None, SI - 10, SI + 20),
    ("to_be_replaced", SI - 10, SI + 20),  # replaces a null, timestamps spanning segments
    (None, SI - 10, SI + 20),  # replaces a non-null with null
    ("to_be_replaced", SI - 1, SI + 20),
    ("to_be_replaced", SI + 1, SI + 20),
    (None, SI - 1, SI + 1),
    (None, SI + 1, SI + 20),
    (None, SI + 10, SI + 20),
    (None, SI + 5, SI + 10),
    ("vp5", SI + 5, SI + 10),  # replaces a null with non-null
    ("to_be_replaced", SI - 5, SI - 1),
    ("vn5", SI - 5, SI - 1),  # replaces a non-null with non-null
    (None, SI + 20, LATEST),  # replaces the latest value with null
    (None, SI + 20, LATEST),  # replaces null with null
    ("vn6", SI - 6, SI - 5),
]

#: the history ``shouldMoveRecordToOlderSegmentWithNullsDuringPut`` and
#: ``shouldRestoreWithNulls`` write
NULLS = [
    (None, SI + 20, LATEST),
    (None, SI - 1, SI + 20),
    (None, SI + 1, SI + 20),
    (None, SI - 10, SI - 1),
    (None, SI + 10, SI + 20),
    ("vp5", SI + 5, SI + 10),
    ("vn5", SI - 5, SI - 1),
    ("vn6", SI - 6, SI - 5),
]

#: the history ``shouldMoveRecordToOlderSegmentDuringPut`` and ``shouldRestore`` write
MOVES = [
    ("vp20", SI + 20, LATEST),
    ("vp10", SI + 10, SI + 20),
    ("vn10", SI - 10, SI + 10),
    ("vn2", SI - 2, SI + 10),
    ("vn1", SI - 1, SI + 10),
    ("vp1", SI + 1, SI + 10),
]

#: the history ``shouldPutIntoMultipleSegments`` and ``shouldRestoreMultipleBatches`` write
MULTI = [
    (None, SI - 20, LATEST),
    ("vn10", SI - 10, LATEST),
    (None, SI - 1, LATEST),
    (None, SI + 1, LATEST),
    ("vp10", SI + 10, LATEST),
    (None, SI + 20, LATEST),
]


def _check_nulls_history(s: Store) -> None:
    s.latest("k", None)
    for t in (SI + 30, SI + 15, SI + 2, SI, SI - 1, SI - 8):
        s.as_of("k", t, None)
    s.as_of("k", SI + 6, "vp5", SI + 5, SI + 10)
    s.as_of("k", SI - 5, "vn5", SI - 5, SI - 1)
    s.as_of("k", SI - 6, "vn6", SI - 6, SI - 5)


def _check_moves_history(s: Store) -> None:
    s.latest("k", "vp20", SI + 20)
    s.as_of("k", SI + 30, "vp20", SI + 20)
    s.as_of("k", SI + 15, "vp10", SI + 10, SI + 20)
    s.as_of("k", SI + 5, "vp1", SI + 1, SI + 10)
    s.as_of("k", SI, "vn1", SI - 1, SI + 1)
    s.as_of("k", SI - 1, "vn1", SI - 1, SI + 1)
    s.as_of("k", SI - 2, "vn2", SI - 2, SI - 1)
    s.as_of("k", SI - 5, "vn10", SI - 10, SI - 2)


def _check_multi_history(s: Store) -> None:
    s.latest("k", None)
    for t in (SI + 30, SI + 5, SI + 2, SI, SI - 1, SI - 15):
        s.as_of("k", t, None)
    s.as_of("k", SI + 15, "vp10", SI + 10, SI + 20)
    s.as_of("k", SI - 5, "vn10", SI - 10, SI - 1)


def test_should_put_repeat_timestamps(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldPutRepeatTimestamps"""
    s = Store(drive)
    for value, ts, expected in REPEATS:
        s.put("k", value, ts, expected)
    _check_nulls_history(s)


def test_should_put_into_multiple_segments(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldPutIntoMultipleSegments"""
    s = Store(drive)
    for value, ts, expected in MULTI:
        s.put("k", value, ts, expected)
    _check_multi_history(s)


def test_should_move_record_to_older_segment_during_put(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldMoveRecordToOlderSegmentDuringPut"""
    s = Store(drive)
    for value, ts, expected in MOVES:
        s.put("k", value, ts, expected)
    _check_moves_history(s)


def test_should_move_record_to_older_segment_with_nulls_during_put(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldMoveRecordToOlderSegmentWithNullsDuringPut"""
    s = Store(drive)
    for value, ts, expected in NULLS:
        s.put("k", value, ts, expected)
    _check_nulls_history(s)


def test_should_fall_through_to_existing_older_segment_as_latest_during_put(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldFallThroughToExistingOlderSegmentAsLatestDuringPut"""
    s = Store(drive)
    s.put("k", None, SI - 5, LATEST)
    s.put("k", "vn6", SI - 6, SI - 5)
    s.put("k", "vp20", SI + 20, LATEST)
    s.put("k", None, SI + 10, SI + 20)
    s.put("k", None, SI - 1, SI + 10)
    s.put("k", "vn2", SI - 2, SI - 1)
    s.latest("k", "vp20", SI + 20)
    s.as_of("k", SI + 30, "vp20", SI + 20)
    for t in (SI + 12, SI, SI - 1, SI - 5):
        s.as_of("k", t, None)
    s.as_of("k", SI - 2, "vn2", SI - 2, SI - 1)
    s.as_of("k", SI - 6, "vn6", SI - 6, SI - 5)


def test_should_put_non_latest_tombstone_into_new_segment_with_valid_to(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldPutNonLatestTombstoneIntoNewSegmentWithValidTo"""
    s = Store(drive)
    s.put("k", "vp30", SI + 30, LATEST)
    s.put("k", None, SI - 10, SI + 30)  # a tombstone valid to SI + 30
    s.put("k", "vn5", SI - 5, SI + 30)
    s.put("k", "vn1", SI - 1, SI + 30)
    s.put("k", None, SI - 2, SI - 1)
    s.latest("k", "vp30", SI + 30)
    s.as_of("k", SI + 10, "vn1", SI - 1, SI + 30)
    s.as_of("k", SI - 1, "vn1", SI - 1, SI + 30)
    s.as_of("k", SI - 2, None)
    s.as_of("k", SI - 5, "vn5", SI - 5, SI - 2)
    s.as_of("k", SI - 10, None)


def test_should_delete(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldDelete"""
    s = Store(drive)
    s.put("k", "vp20", SI + 20, LATEST)
    s.put("k", "vp10", SI + 10, SI + 20)
    s.put("k", "vn10", SI - 10, SI + 10)
    s.put("k", "vn2", SI - 2, SI + 10)
    deleted = s.delete("k", SI - 5)  # from a segment
    assert deleted is not None
    assert (deleted.value, deleted.timestamp) == ("vn10", SI - 10)
    deleted = s.delete("k", SI + 10)  # an existing timestamp
    assert deleted is not None
    assert (deleted.value, deleted.timestamp) == ("vp10", SI + 10)
    assert s.delete("k", SI + 10) is None  # the same timestamp again
    deleted = s.delete("k", SI + 25)  # the latest value
    assert deleted is not None
    assert (deleted.value, deleted.timestamp) == ("vp20", SI + 20)


def test_should_not_put_expired(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldNotPutExpired"""
    s = Store(drive)
    s.put("k", "v", HR + 10, LATEST)
    s.put("k1", "v1", HR + 10 - GRACE, LATEST)  # the grace period has not elapsed
    s.latest("k1", "v1", HR + 10 - GRACE)
    s.put("k2", "v2", HR + 9 - GRACE, NOT_PUT)  # it has: not put
    s.latest("k2", None)


def test_should_not_delete_expired(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldNotDeleteExpired"""
    s = Store(drive)
    s.put("k1", "v1", 1, LATEST)
    s.put("k2", "v2", 1, LATEST)
    s.put("kother", "vother", HR + 10, LATEST)  # advances stream time
    deleted = s.delete("k1", HR + 10 - GRACE)
    assert deleted is not None
    assert (deleted.value, deleted.timestamp) == ("v1", 1)
    s.latest("k1", None)
    assert s.delete("k2", HR + 9 - GRACE) is None  # too old: not deleted
    s.latest("k2", "v2", 1)


def test_should_get_from_older_segments(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldGetFromOlderSegments"""
    s = Store(drive)
    for n in (1, 2, 3):  # another key makes three segments
        s.put("ko", None, n * SI - 10, LATEST)
    s.as_of("k", SI - 20, None)
    s.put("k", "v", SI - 20, LATEST)
    s.put("k", None, SI - 10, LATEST)

    def check() -> None:
        s.as_of("k", SI - 30, None)
        s.as_of("k", SI - 15, "v", SI - 20, SI - 10)
        s.as_of("k", SI - 5, None)

    check()
    s.put("k", "v2", 3 * SI - 20, LATEST)
    s.put("k", None, 3 * SI - 10, LATEST)
    check()  # a later non-empty segment changes nothing


def test_should_not_get_expired(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldNotGetExpired"""
    s = Store(drive)
    s.put("k", "v_old", 0, LATEST)
    s.put("k", "v", SI - 10, LATEST)
    s.as_of("k", SI - 11, "v_old", 0, SI - 10)
    s.put("ko", "vo", HR + SI - 11, LATEST)
    s.as_of("k", SI - 11, "v_old", 0, SI - 10)  # not yet expired
    s.put("ko", "vo2", HR + SI - 10, LATEST)
    s.as_of("k", SI - 11, None)  # expired now


def test_should_get_expired_if_latest_value(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldGetExpiredIfLatestValue"""
    s = Store(drive)
    s.put("k", "v", 1, LATEST)
    s.put("ko", "vo_old", 1, LATEST)
    s.put("ko", "vo_new", HR + 12, LATEST)
    s.as_of("k", 10, "v", 1)  # the latest satisfies the bound: still answered
    s.as_of("ko", 10, None)  # the latest does not: nothing


def test_should_distinguish_empty_and_null(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldDistinguishEmptyAndNull"""
    s = Store(drive)
    s.put("k", None, SI + 20, LATEST)
    s.put("k", None, SI - 10, SI + 20)
    s.put("k", None, SI - 1, SI + 20)
    s.put("k", None, SI + 1, SI + 20)
    s.put("k", None, SI + 10, SI + 20)
    s.put("k", "", SI + 5, SI + 10)  # an empty string is a value, not a tombstone
    s.put("k", "", SI - 5, SI - 1)
    s.put("k", "", SI - 6, SI - 5)
    s.latest("k", None)
    for t in (SI + 30, SI + 15, SI + 2, SI, SI - 1, SI - 8):
        s.as_of("k", t, None)
    s.as_of("k", SI + 6, "", SI + 5, SI + 10)
    s.as_of("k", SI - 5, "", SI - 5, SI - 1)
    s.as_of("k", SI - 6, "", SI - 6, SI - 5)


ALL4 = [("v4", SI - 5, LATEST), ("v3", SI - 10, SI - 5), ("v2", SI - 25, SI - 20)]
ALL4 = [*ALL4, ("v1", SI - 30, SI - 25)]


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (SI - 40, SI - 35, []),  # a range before its first version
        (SI - 30, SI - 5, ALL4),  # tombstones in between
        (None, None, ALL4),  # (MIN, MAX)
        (SI - 4, SI, [ALL4[0]]),  # the latest only
        (SI - 5, SI - 5, [ALL4[0]]),
        (SI - 4, SI - 4, [ALL4[0]]),
        (SI - 31, SI - 21, ALL4[2:]),  # before any tombstone
        (SI - 24, SI - 11, [ALL4[2]]),  # covering both tombstones
        (SI - 11, SI - 4, ALL4[:2]),  # after the tombstones
        (SI - 26, SI - 5, ALL4),  # valid in the range, put before it
        (SI - 15, SI - 10, [ALL4[1]]),  # valid from the range's upper bound
        (SI - 19, SI - 16, []),  # no value valid
    ],
)
def test_should_get_record_versions_from_older_segments(
    drive: Any, lo: int | None, hi: int | None, expected: list[Any]
) -> None:
    """RocksDBVersionedStoreTest.shouldGetRecordVersionsFromOlderSegments"""
    s = Store(drive)
    for n in (1, 2, 3):
        s.put("ko", None, n * SI - 10, LATEST)
    s.versions("k", SI - 20, SI, [])  # the key does not exist yet
    # the key's history, then the query (ResultOrder.ANY: newest first)
    for value, ts in (("v1", -30), ("v2", -25), (None, -20), (None, -15), ("v3", -10)):
        s.put("k", value, SI + ts, LATEST)
    s.put("k", "v4", SI - 5, LATEST)
    s.versions("k", lo, hi, expected)
    s.put("k", "v5", 3 * SI - 30, LATEST)
    s.put("k", None, 3 * SI - 20, LATEST)
    if ALL4[0] not in expected:  # a later segment does not change earlier answers
        s.versions("k", lo, hi, expected)


def test_should_get_record_versions_in_ascending_order(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldGetRecordVersionsInAscendingOrder"""
    s = Store(drive)
    for value, ts in (("v1", SI - 30), ("v2", SI - 25), ("v3", SI - 10), ("v4", SI - 5)):
        s.put("k", value, ts, LATEST)
    expected = [
        ("v1", SI - 30, SI - 25),
        ("v2", SI - 25, SI - 10),
        ("v3", SI - 10, SI - 5),
        ("v4", SI - 5, LATEST),
    ]
    s.versions("k", SI - 30, SI - 5, expected, asc=True)


def test_should_get_record_versions_from_multiple_old_segments_in_ascending_order(
    drive: Any,
) -> None:
    """RocksDBVersionedStoreTest.shouldGetRecordVersionsFromMultipleOldSegmentsInAscendingOrder"""
    s = Store(drive)
    stamps = (SI - 10, SI - 5, 2 * SI - 10, 2 * SI - 5)
    for i, ts in enumerate(stamps):
        s.put("k", f"v{i + 1}", ts, LATEST)
    expected = [
        (f"v{i + 1}", ts, stamps[i + 1] if i < 3 else LATEST) for i, ts in enumerate(stamps)
    ]
    s.versions("k", None, None, expected, asc=True)


def test_should_not_get_expired_record_versions(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldNotGetExpiredRecordVersions"""
    s = Store(drive)
    s.put("k", "v_old", 0, LATEST)
    s.put("k", "v", SI - 10, LATEST)
    s.versions("k", 0, SI - 11, [("v_old", 0, SI - 10)])
    s.put("ko", "vo", HR + SI - 11, LATEST)
    s.versions("k", 0, SI - 11, [("v_old", 0, SI - 10)])
    s.put("ko", "vo2", HR + SI - 10, LATEST)
    s.versions("k", 0, SI - 11, [])


def test_should_get_expired_if_latest_version_value(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldGetExpiredIfLatestVersionValue"""
    s = Store(drive)
    s.put("k", "v", 1, LATEST)
    s.put("ko", "vo_old", 1, LATEST)
    s.put("ko", "vo_new", HR + 12, LATEST)
    s.versions("k", 0, 10, [("v", 1, LATEST)])
    s.versions("ko", 0, 10, [])


def test_should_restore(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldRestore"""
    s = Store(drive)
    s.restore(drive, [("k", v, ts) for v, ts, _ in MOVES])
    _check_moves_history(s)


def test_should_restore_with_nulls(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldRestoreWithNulls"""
    s = Store(drive)
    s.restore(drive, [("k", v, ts) for v, ts, _ in NULLS])
    _check_nulls_history(s)


def test_should_restore_with_nulls_and_repeat_timestamps(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldRestoreWithNullsAndRepeatTimestamps"""
    s = Store(drive)
    s.restore(drive, [("k", v, ts) for v, ts, _ in REPEATS])
    _check_nulls_history(s)


def test_should_restore_multiple_batches(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldRestoreMultipleBatches"""
    s = Store(drive)
    records = [("k", v, ts) for v, ts, _ in MULTI]
    s.restore(drive, records[:3], records[3:])
    _check_multi_history(s)


def test_should_not_restore_expired(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldNotRestoreExpired"""
    s = Store(drive)
    s.restore(
        drive, [("k", "v", HR + 10), ("k1", "v1", HR + 10 - GRACE), ("k2", "v2", HR + 9 - GRACE)]
    )
    s.latest("k", "v", HR + 10)
    s.latest("k1", "v1", HR + 10 - GRACE)
    s.latest("k2", None)


def test_should_restore_even_if_record_would_be_expired_by_end_of_batch(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldRestoreEvenIfRecordWouldBeExpiredByEndOfBatch"""
    s = Store(drive)
    s.restore(drive, [("k2", "v2", HR - GRACE), ("k", "v", HR + 10)])
    s.latest("k2", "v2", HR - GRACE)
    s.latest("k", "v", HR + 10)


def test_should_allow_zero_history_retention(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldAllowZeroHistoryRetention"""
    s = Store(drive, retention=0)
    s.put("k", "v", BASE, LATEST)
    s.latest("k", "v", BASE)
    s.as_of("k", BASE, "v", BASE)
    s.as_of("k", BASE + 1, "v", BASE)  # a query in the "future" is allowed
    s.put("k", "updated", BASE, LATEST)
    s.latest("k", "updated", BASE)
    s.as_of("k", BASE, "updated", BASE)
    s.put("k", "v2", BASE + 2, LATEST)
    s.latest("k", "v2", BASE + 2)
    s.as_of("k", BASE + 2, "v2", BASE + 2)
    s.as_of("k", BASE + 1, None)  # the past is out of retention
    s.delete("k", BASE + 3)
    s.latest("k", None)
    s.put("k2", "v", BASE + 2, NOT_PUT)  # older than the grace period
    s.latest("k2", None)


def test_should_survive_a_commit_and_see_the_same_history(drive: Any) -> None:
    """VersionedKeyValueStoreIntegrationTest.shouldPutGetAndDelete (the store read after
    every record's commit keeps its whole history)"""
    s = Store(drive)
    for value, ts, expected in MOVES:
        s.put("k", value, ts, expected)
    s.driver.advance_wall_clock_time(1)
    _check_moves_history(s)


@pytest.mark.parametrize(
    ("retention", "interval"),
    [
        (0, 2_000),
        (60_000, 20_000),
        (6_000, 2_000),
        (300_000, 60_000),
        (120_000, 24_000),
        (3_600_000, 300_000),
        (1_200_000, 100_000),
        (86_400_000, 3_600_000),
        (7_200_000, 300_000),
    ],
)
def test_should_use_default_segment_interval(retention: int, interval: int) -> None:
    """RocksDbVersionedKeyValueBytesStoreSupplierTest.shouldUseDefaultSegmentInterval"""
    supplier = Stores.persistent_versioned_key_value_store("s", retention)
    assert supplier.segment_interval_ms == interval


def test_should_throw_if_history_retention_is_negative() -> None:
    """StoresTest.shouldThrowIfPersistentVersionedKeyValueStoreHistoryRetentionIsNegative"""
    with pytest.raises(ConfigError, match="historyRetention cannot be negative"):
        Stores.persistent_versioned_key_value_store("anyName", -1)


def test_should_throw_if_segment_interval_is_zero_or_negative() -> None:
    """StoresTest.shouldThrowIfPersistentVersionedKeyValueStoreSegmentIntervalIsZeroOrNegative"""
    for interval in (0, -1):
        with pytest.raises(ConfigError, match="segmentInterval cannot be zero or negative"):
            Stores.persistent_versioned_key_value_store("anyName", 1, interval)


def test_should_create_versioned_store(drive: Any) -> None:
    """StoresTest.shouldCreateVersionedKeyValueStore (persistent, with its retention)"""
    s = Store(drive, retention=12)
    assert s.store.persistent()
    assert s.store.history_retention == 12
    assert s.driver.get_key_value_store(NAME) is None  # not a plain key-value store


class ContentChecker(Processor[int, str, int, int]):
    """Kafka's ``VersionedStoreContentCheckerProcessor``: put (or, for ``"delete"``,
    delete) each record, then check the store's latest and as-of answers against what was
    written so far; forward the number of failed checks."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(NAME)
        self.written: dict[int, dict[int, str | None]] = {}

    def process(self, record: Record[int, str]) -> None:
        key, value, ts = record.key, record.value, record.timestamp
        if value == "delete":
            self.store.delete(key, ts)
            value = None
        else:
            self.store.put(key, value, ts)
        versions = self.written.setdefault(key, {})
        versions[ts] = value
        failed = 0
        latest = versions[max(versions)]
        found = self.store.get(key)
        failed += (None if found is None else found.value) != latest
        for at in sorted(versions):
            expected = versions[at]
            found = self.store.get(key, at)
            failed += (None if found is None else found.value) != expected
            failed += found is not None and found.timestamp != at
        self.context.forward(record.with_value(failed))


def test_should_put_get_and_delete(drive: Any) -> None:
    """VersionedKeyValueStoreIntegrationTest.shouldPutGetAndDelete"""
    builder = StreamsBuilder()
    supplier = Stores.persistent_versioned_key_value_store(NAME, 60_000)
    builder.add_state_store(Stores.versioned_key_value_store_builder(supplier, I, S))
    stream = builder.stream("in", Consumed.with_(I, S))
    stream.process(ContentChecker, NAME).to("out", Produced.with_(I, I))
    driver = drive(builder.build())
    source = driver.create_input_topic("in", I, S)
    out = driver.create_output_topic("out", I, I)
    base = 1_000
    rounds = [
        (0, {1: "a0", 2: "b0", 3: None}),
        (5, {1: "a5", 2: None, 3: "c5"}),
        (2, {1: "a2", 2: "b2", 3: None}),  # out of order
        (5, {1: "a5_new", 2: "b5", 3: None}),  # replaces existing versions
        (7, {1: "delete", 2: "delete", 3: "delete"}),
    ]
    for offset, values in rounds:
        for key, value in values.items():
            source.pipe_input(key, value, base + offset)
    assert out.read_values_to_list() == [0] * 15


def test_should_set_changelog_topic_properties() -> None:
    """VersionedKeyValueStoreIntegrationTest.shouldSetChangelogTopicProperties"""
    supplier = Stores.persistent_versioned_key_value_store(NAME, 60_000)
    builder = Stores.versioned_key_value_store_builder(supplier, I, S)
    assert builder.changelog_config() == {
        "cleanup.policy": "compact",
        "min.compaction.lag.ms": str(60_000 + 24 * 60 * 60 * 1000),
    }


def test_should_answer_versioned_key_queries(drive: Any) -> None:
    """IQv2VersionedStoreIntegrationTest.verifyStore (VersionedKeyQuery and
    MultiVersionedKeyQuery, KIP-960 and KIP-968, on the test driver's store)"""
    builder = StreamsBuilder()
    supplier = Stores.persistent_versioned_key_value_store(NAME, 86_400_000, 3_600_000)
    builder.table("input-topic", Consumed.with_(I, I), Materialized.as_(supplier))
    driver = drive(builder.build())
    source = driver.create_input_topic("input-topic", I, I)
    base = 1_672_567_200
    values, stamps = [2, 20, 200, 2000], [base, base + 10, base + 20, base + 30]
    for value, ts in zip(values, stamps, strict=True):
        source.pipe_input(2, value, ts)
    store = driver.get_versioned_key_value_store(NAME)
    now = 1_900_000_000_000
    for at in (None, now, stamps[3]):  # the latest value
        assert store.get(2, at) == VersionedRecord(2000, stamps[3], None)
    assert store.get(2, stamps[0]) == VersionedRecord(2, stamps[0], stamps[1])  # an old one
    assert store.get(2, stamps[0] - 50) is None  # none at that time
    assert store.get(3, now) is None  # no such key
    every = [
        VersionedRecord(v, t, stamps[i + 1] if i < 3 else None)
        for i, (v, t) in enumerate(zip(values, stamps, strict=True))
    ]
    assert store.get_versions(2) == every[::-1]  # ResultOrder.ANY: newest first
    assert store.get_versions(2, ascending=True) == every
    assert store.get_versions(2, stamps[1] + 5, now) == every[1:][::-1]
    for ascending in (False, True):
        assert store.get_versions(2, stamps[0] - 100, stamps[0] - 50, ascending=ascending) == []
        assert store.get_versions(3, ascending=ascending) == []
