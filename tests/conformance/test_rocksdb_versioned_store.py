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

from collections.abc import Callable
from typing import Any

import pytest

from common.errors import ConfigError
from statestores.api import PUT_RETURN_CODE_NOT_PUT as NOT_PUT
from statestores.stores import Stores
from tests.conformance.versioned_store_kit import (
    BASE,
    GRACE,
    HR,
    LATEST,
    MOVES,
    MULTI,
    NAME,
    NULLS,
    REPEATS,
    SI,
    Store,
    check_moves_history,
    check_multi_history,
    check_nulls_history,
)


@pytest.mark.parametrize(
    ("kafka_method", "first", "second"),
    [("shouldPutLatest", "v", "v2"), ("shouldPutNullAsLatest", None, None)],
)
def test_should_put_latest(
    drive: Any, kafka_method: str, first: str | None, second: str | None
) -> None:
    """RocksDBVersionedStoreTest.shouldPutLatest and shouldPutNullAsLatest"""
    s = Store(drive)
    s.put("k", first, BASE, LATEST)
    s.put("k", second, BASE + 1, LATEST)
    s.latest("k", second, BASE + 1)
    s.as_of("k", BASE, first, BASE, BASE + 1)
    s.as_of("k", BASE + 1, second, BASE + 1)
    s.as_of("k", BASE + 2, second, BASE + 1)


@pytest.mark.parametrize(
    ("kafka_method", "latest"),
    [("shouldPutOlderWithNonNullLatest", "v"), ("shouldPutOlderWithNullLatest", None)],
)
def test_should_put_older(drive: Any, kafka_method: str, latest: str | None) -> None:
    """RocksDBVersionedStoreTest.shouldPutOlderWithNonNullLatest and
    shouldPutOlderWithNullLatest"""
    s = Store(drive)
    s.put("k", latest, BASE, LATEST)
    s.put("k", "v2", BASE - 2, BASE)
    s.put("k", "v1", BASE - 1, BASE)
    s.put("k", "v4", BASE - 4, BASE - 2)
    s.latest("k", latest, BASE)
    s.as_of("k", BASE, latest, BASE)
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


@pytest.mark.parametrize(
    ("kafka_method", "history", "check"),
    [
        ("shouldPutRepeatTimestamps", REPEATS, check_nulls_history),
        ("shouldPutIntoMultipleSegments", MULTI, check_multi_history),
        ("shouldMoveRecordToOlderSegmentDuringPut", MOVES, check_moves_history),
        ("shouldMoveRecordToOlderSegmentWithNullsDuringPut", NULLS, check_nulls_history),
    ],
)
def test_should_put_history(
    drive: Any, kafka_method: str, history: list[Any], check: Callable[[Store], None]
) -> None:
    """RocksDBVersionedStoreTest.shouldPutRepeatTimestamps, shouldPutIntoMultipleSegments,
    shouldMoveRecordToOlderSegmentDuringPut and
    shouldMoveRecordToOlderSegmentWithNullsDuringPut: each put's result, then the store's
    answers."""
    s = Store(drive)
    s.put_all("k", history)
    check(s)


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
    check_nulls_history(s, ("", "", ""))  # the empty strings answered as values


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


@pytest.mark.parametrize(
    ("kafka_method", "history", "check"),
    [
        ("shouldRestore", MOVES, check_moves_history),
        ("shouldRestoreWithNulls", NULLS, check_nulls_history),
        ("shouldRestoreWithNullsAndRepeatTimestamps", REPEATS, check_nulls_history),
    ],
)
def test_should_restore(
    drive: Any, kafka_method: str, history: list[Any], check: Callable[[Store], None]
) -> None:
    """RocksDBVersionedStoreTest.shouldRestore, shouldRestoreWithNulls and
    shouldRestoreWithNullsAndRepeatTimestamps: the history restored in one batch."""
    s = Store(drive)
    s.restore(drive, [("k", v, ts) for v, ts, _ in history])
    check(s)


def test_should_restore_multiple_batches(drive: Any) -> None:
    """RocksDBVersionedStoreTest.shouldRestoreMultipleBatches"""
    s = Store(drive)
    records = [("k", v, ts) for v, ts, _ in MULTI]
    s.restore(drive, records[:3], records[3:])
    check_multi_history(s)


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
