"""What the versioned store scenarios share (Kafka's ``RocksDBVersionedStoreTest`` and
``VersionedKeyValueStoreIntegrationTest``): a topology whose Processor-API processor puts
into a versioned key-value store, with reads from the driver's store; the histories
several scenarios put or restore, and what a store that took them answers.

History retention 300 000 ms (also the grace period of puts), segments of 100 000 ms,
string keys and values. The scenarios stay in ``test_rocksdb_versioned_store.py`` and
``test_versioned_key_value_store_integration.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from statestores.api import VersionedRecord
from statestores.bytes_layer import bottom
from statestores.stores import Stores
from tests.conformance.conftest import L, S
from topology import Consumed, Processor, Produced, Record, StreamsBuilder

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

    def put_all(self, key: str, history: Sequence[tuple[str | None, int, int]]) -> None:
        """Put ``history``'s (value, timestamp, the put's result) under ``key``, in order."""
        for value, ts, expected in history:
            self.put(key, value, ts, expected)

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


def check_nulls_history(s: Store, values: tuple[str, str, str] = ("vp5", "vn5", "vn6")) -> None:
    """Assert what a store that took ``NULLS`` (or ``REPEATS``) answers for ``k``: nulls,
    but for ``values`` put at ``SI + 5``, ``SI - 5`` and ``SI - 6``."""
    plus5, minus5, minus6 = values
    s.latest("k", None)
    for t in (SI + 30, SI + 15, SI + 2, SI, SI - 1, SI - 8):
        s.as_of("k", t, None)
    s.as_of("k", SI + 6, plus5, SI + 5, SI + 10)
    s.as_of("k", SI - 5, minus5, SI - 5, SI - 1)
    s.as_of("k", SI - 6, minus6, SI - 6, SI - 5)


def check_moves_history(s: Store) -> None:
    """Assert what a store that took ``MOVES`` answers for ``k``."""
    s.latest("k", "vp20", SI + 20)
    s.as_of("k", SI + 30, "vp20", SI + 20)
    s.as_of("k", SI + 15, "vp10", SI + 10, SI + 20)
    s.as_of("k", SI + 5, "vp1", SI + 1, SI + 10)
    s.as_of("k", SI, "vn1", SI - 1, SI + 1)
    s.as_of("k", SI - 1, "vn1", SI - 1, SI + 1)
    s.as_of("k", SI - 2, "vn2", SI - 2, SI - 1)
    s.as_of("k", SI - 5, "vn10", SI - 10, SI - 2)


def check_multi_history(s: Store) -> None:
    """Assert what a store that took ``MULTI`` answers for ``k``."""
    s.latest("k", None)
    for t in (SI + 30, SI + 5, SI + 2, SI, SI - 1, SI - 15):
        s.as_of("k", t, None)
    s.as_of("k", SI + 15, "vp10", SI + 10, SI + 20)
    s.as_of("k", SI - 5, "vn10", SI - 10, SI - 1)
