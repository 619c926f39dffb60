"""The test topics of a :class:`~streams.testkit.driver.TopologyTestDriver`: records piped
in through a :class:`TestInputTopic` and read back from a :class:`TestOutputTopic`, as
:class:`TestRecord` objects (Kafka's ``TestInputTopic``, ``TestOutputTopic``,
``TestRecord``)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from common.errors import StreamsError
from common.serdes import Serde

if TYPE_CHECKING:
    from streams.testkit.driver import TopologyTestDriver

K = TypeVar("K")
V = TypeVar("V")
HeaderList = Sequence[tuple[str, bytes | None]]


class EmptyTopicError(StreamsError, LookupError):
    """A test output topic was read while empty. Check ``is_empty()`` first, or pipe the
    input that should produce the record."""


@dataclass(frozen=True, slots=True)
class TestRecord(Generic[K, V]):
    """A record piped into or read from a test topic (``partition``: where a sink put it,
    ``None`` for the default partitioner)."""

    __test__ = False  # not a pytest test class

    key: K | None
    value: V | None
    timestamp: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class CapturedRecord:
    """A record a task produced, serialized, as the driver keeps it for its output topic."""

    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]
    partition: int | None


class TestInputTopic(Generic[K, V]):
    """Pipes records into one topic of a :class:`TopologyTestDriver`."""

    __test__ = False

    def __init__(
        self,
        driver: TopologyTestDriver,
        topic: str,
        key_serde: Serde[K],
        value_serde: Serde[V],
        *,
        start_timestamp: int,
        auto_advance_ms: int,
    ) -> None:
        self.driver = driver
        self.topic = topic
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.current_time = start_timestamp
        self.auto_advance_ms = auto_advance_ms

    def advance_time(self, advance_ms: int) -> None:
        """Move this topic's time forward (for records piped without a timestamp)."""
        self.current_time += advance_ms

    def _timestamp(self, timestamp: int | None) -> int:
        if timestamp is not None:
            return timestamp
        ts = self.current_time
        self.current_time += self.auto_advance_ms
        return ts

    def pipe_input(
        self,
        key: K | None = None,
        value: V | None = None,
        timestamp: int | None = None,
        headers: HeaderList = (),
    ) -> None:
        """Pipe one record and process it to completion."""
        self.driver.pipe_raw(
            self.topic,
            self.key_serde.serialize(self.topic, key),
            self.value_serde.serialize(self.topic, value),
            self._timestamp(timestamp),
            headers,
        )

    def pipe_record_list(self, records: Iterable[TestRecord[K, V]]) -> None:
        """Pipe each record in order."""
        for r in records:
            self.pipe_input(r.key, r.value, r.timestamp, r.headers)

    def pipe_key_value_list(self, pairs: Iterable[tuple[K | None, V | None]]) -> None:
        """Pipe each ``(key, value)`` in order, at this topic's time."""
        for key, value in pairs:
            self.pipe_input(key, value)

    def pipe_value_list(self, values: Iterable[V | None]) -> None:
        """Pipe each value with a ``None`` key, in order."""
        for value in values:
            self.pipe_input(None, value)


class TestOutputTopic(Generic[K, V]):
    """Reads the records produced to one topic of a :class:`TopologyTestDriver`; reading
    consumes them (every output topic object of a topic shares one queue)."""

    __test__ = False

    def __init__(
        self, driver: TopologyTestDriver, topic: str, key_serde: Serde[K], value_serde: Serde[V]
    ) -> None:
        self.driver = driver
        self.topic = topic
        self.key_serde = key_serde
        self.value_serde = value_serde

    def read_record(self) -> TestRecord[K, V]:
        """Read the next record; raise EmptyTopicError if there is none."""
        queue = self.driver.output_queue(self.topic)
        if not queue:
            raise EmptyTopicError(f"Empty topic: {self.topic}")
        raw = queue.popleft()
        return TestRecord(
            self.key_serde.deserialize(self.topic, raw.key),
            self.value_serde.deserialize(self.topic, raw.value),
            raw.timestamp,
            raw.headers,
            raw.partition,
        )

    def read_value(self) -> V | None:
        """Read the next record's value."""
        return self.read_record().value

    def read_key_value(self) -> tuple[K | None, V | None]:
        """Read the next record as ``(key, value)``."""
        record = self.read_record()
        return record.key, record.value

    def read_records_to_list(self) -> list[TestRecord[K, V]]:
        """Read every remaining record."""
        return [self.read_record() for _ in range(self.get_queue_size())]

    def read_values_to_list(self) -> list[V | None]:
        """Read every remaining value."""
        return [r.value for r in self.read_records_to_list()]

    def read_key_values_to_list(self) -> list[tuple[K | None, V | None]]:
        """Read every remaining record as ``(key, value)``."""
        return [(r.key, r.value) for r in self.read_records_to_list()]

    def read_key_values_to_map(self) -> dict[K, V | None]:
        """Read every remaining record into a dict (the last value per key wins)."""
        out: dict[K, V | None] = {}
        for record in self.read_records_to_list():
            if record.key is None:
                raise StreamsError("Null keys not allowed with read_key_values_to_map")
            out[record.key] = record.value
        return out

    def is_empty(self) -> bool:
        """Return whether nothing is left to read."""
        return not self.driver.output_queue(self.topic)

    def get_queue_size(self) -> int:
        """Return how many records are left to read."""
        return len(self.driver.output_queue(self.topic))


class RecordQueues:
    """The records waiting to be processed, as Kafka's ``PartitionGroup`` holds them: one
    FIFO queue per input (a topic, or a pattern for every topic it matches), the next
    record taken from the queue whose head record has the smallest timestamp (the queues
    kept in a binary heap ordered as Java's ``PriorityQueue``, so equal timestamps are
    taken in Kafka's order).

    Args:
        idle_ms: ``max.task.idle.ms``: how long a drained input holds processing back
            (``-1``: never; ``0``, the default: not at all, its records are all known).
    """

    __slots__ = ("_deadlines", "_heap", "_idle_ms", "_queues")

    def __init__(self, idle_ms: int = 0) -> None:
        self._idle_ms = idle_ms
        self._queues: dict[str, deque[tuple[str, CapturedRecord]]] = {}
        self._heap: list[tuple[int, str]] = []  # (head timestamp, input) of non-empty queues
        self._deadlines: dict[str, int] = {}  # when a drained input stops holding back

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def add(self, queue_key: str, topic: str, record: CapturedRecord) -> None:
        """Append ``record`` of ``topic`` to the queue of input ``queue_key``."""
        queue = self._queues.setdefault(queue_key, deque())
        queue.append((topic, record))
        if len(queue) == 1:
            self._offer((record.timestamp, queue_key))

    def ready(self, now_ms: int, inputs: Iterable[str]) -> bool:
        """Whether the next record may be processed at wall-clock ``now_ms`` (Kafka's
        ``PartitionGroup.readyToProcess``, every input's lag known to be 0): each drained
        one of ``inputs`` holds processing back until ``max.task.idle.ms`` after it was
        first seen drained."""
        if not self._heap:
            return False
        if self._idle_ms <= 0:  # never held back, or a drained input's deadline is now
            return True
        for key in inputs:
            if self._queues.get(key):
                self._deadlines.pop(key, None)
            elif now_ms < self._deadlines.setdefault(key, now_ms + self._idle_ms):
                return False
        return True

    def poll(self) -> tuple[str, CapturedRecord] | None:
        """Take the head of the queue with the smallest head timestamp (None: all empty);
        return its topic and the record."""
        heap = self._heap
        if not heap:
            return None
        _, key = heap[0]
        last = heap.pop()
        if heap:
            self._sift_down(0, last)
        queue = self._queues[key]
        taken = queue.popleft()
        if queue:
            self._offer((queue[0][1].timestamp, key))
        return taken

    def _offer(self, item: tuple[int, str]) -> None:
        # Java's PriorityQueue.siftUp: move up while strictly smaller than the parent
        heap = self._heap
        heap.append(item)
        k = len(heap) - 1
        while k > 0:
            parent = (k - 1) >> 1
            if item[0] >= heap[parent][0]:
                break
            heap[k] = heap[parent]
            k = parent
        heap[k] = item

    def _sift_down(self, k: int, item: tuple[int, str]) -> None:
        # Java's PriorityQueue.siftDown: the smaller child (the left one on a tie) moves up
        # while strictly smaller than ``item``
        heap = self._heap
        n = len(heap)
        half = n >> 1
        while k < half:
            child = 2 * k + 1
            right = child + 1
            if right < n and heap[child][0] > heap[right][0]:
                child = right
            if item[0] <= heap[child][0]:
                break
            heap[k] = heap[child]
            k = child
        heap[k] = item
