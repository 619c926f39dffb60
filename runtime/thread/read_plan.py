"""A stream thread's reads: where each of its partitions stands, and what a batch reads.

The thread keeps the committed position of every partition its tasks consume; a batch
reads from there, at most ``max.poll.records`` per partition, up to the log end seen when
the batch is planned (Spark's source only triggers batches). A partition with no valid
committed position starts where the reset policy says: an internal (repartition) topic at
its beginning, any other as its source's own policy says
(``Consumed.with_offset_reset_policy``), else as ``auto.offset.reset`` says (``none``: an
error that names the partition and how to commit a position).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from common.config import StreamsConfig
from common.errors import OffsetOutOfRangeError
from runtime.storage.reader import TopicReader
from runtime.storage.slices import TopicSlices

Positions = dict[tuple[str, int], int]
#: Whether the thread runs a task: (task id, partition number) -> bool.
Owns = Callable[[str, int], bool]


@dataclass(frozen=True, slots=True)
class BatchReads:
    """What one batch reads.

    Attributes:
        inputs: per partition number, the slices of each topic the batch reads there.
        truncated: the partitions whose read ``max.poll.records`` capped.
        ends: the log end of each partition read, as seen when the batch was planned.
        log_ends: the log end of every partition the thread owns, read or not (its lag
            after the batch is this less its position).
    """

    inputs: dict[int, tuple[TopicSlices, ...]] = field(default_factory=dict)
    truncated: frozenset[tuple[str, int]] = frozenset()
    ends: dict[tuple[str, int], int] = field(default_factory=dict)
    log_ends: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def records(self) -> int:
        """How many records the batch reads."""
        return sum(i.end - i.start for items in self.inputs.values() for i in items)

    @property
    def fullest(self) -> int:
        """How many records the batch reads of its fullest partition number (every topic
        of it: one task's share of the batch)."""
        return max(
            (sum(i.end - i.start for i in items) for items in self.inputs.values()), default=0
        )

    @property
    def topics(self) -> frozenset[str]:
        """The topics the batch reads."""
        return frozenset(i.topic for items in self.inputs.values() for i in items)

    def ranges(self) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, partition) -> the offsets the batch reads there, from and to."""
        return {(i.topic, i.partition): (i.start, i.end) for r in self.inputs.values() for i in r}

    def files(self, also: Iterable[TopicSlices] = ()) -> set[str]:
        """The files the batch reads (and those of ``also``: the global topics')."""
        items = [*(i for r in self.inputs.values() for i in r), *also]
        return {piece.file for item in items for piece in item.slices}

    def behind(self, positions: Mapping[tuple[str, int], int]) -> bool:
        """Whether a partition read still has records past ``positions`` (capped by
        ``max.poll.records``, or held back waiting for another input)."""
        return any(positions.get(tp, 0) < end for tp, end in self.ends.items())


class ReadPlanner:
    """Plans a stream thread's reads from its positions.

    Args:
        reader: the storage root's topic reader.
        config: the application configuration (``max.poll.records``, the reset policy).
        sources: source topic -> the sub-topology reading it.
        internal_sources: the topics this application writes itself (repartition topics).
        name: how log and error messages name the thread.
        offset_resets: source topic -> its source's own reset policy, which wins over
            ``auto.offset.reset`` (``Consumed.with_offset_reset_policy``).
    """

    def __init__(
        self,
        reader: TopicReader,
        config: StreamsConfig,
        sources: Mapping[str, int],
        internal_sources: frozenset[str],
        name: str,
        *,
        offset_resets: Mapping[str, str] | None = None,
    ) -> None:
        self.reader = reader
        self.config = config
        self.sources = dict(sources)
        self.internal_sources = internal_sources
        self.name = name
        self.offset_resets = dict(offset_resets or {})

    def add_sources(self, sources: Mapping[str, int], offset_resets: Mapping[str, str]) -> None:
        """Read ``sources`` too (topics a pattern source matched while running)."""
        self.sources.update(sources)
        self.offset_resets.update(offset_resets)

    def plan(
        self, topics: list[str], owns: Owns, positions: Positions, *, cap: int | None = None
    ) -> BatchReads:
        """Return the batch's reads of ``topics`` for the partitions the thread owns, at
        most ``cap`` records of each (default ``max.poll.records``).

        A partition without a valid position gets its reset position, kept in
        ``positions`` until one is committed.

        Raises:
            OffsetOutOfRangeError: no valid position and ``auto.offset.reset=none``.
        """
        cap = (
            self.config.max_poll_records if cap is None else min(cap, self.config.max_poll_records)
        )
        inputs: dict[int, list[TopicSlices]] = {}
        truncated: set[tuple[str, int]] = set()
        ends: dict[tuple[str, int], int] = {}
        log_ends: dict[tuple[str, int], int] = {}
        for topic in topics:
            starts = self.reader.beginning_offsets(topic)
            sub = self.sources[topic]
            for partition, end in sorted(self.reader.end_offsets(topic).items()):
                if not owns(f"{sub}_{partition}", partition):
                    continue
                at = positions.get((topic, partition))
                if at is None or at < starts[partition]:  # none yet, or removed (retention)
                    at = self.reset_position(topic, partition, end, positions)
                log_ends[(topic, partition)] = end
                if at >= end:
                    continue
                stop = min(end, at + cap)
                slices = self.reader.plan(topic, partition, at, stop - at)
                inputs.setdefault(partition, []).append(
                    TopicSlices(topic, partition, at, stop, tuple(slices))
                )
                ends[(topic, partition)] = end
                if stop < end:
                    truncated.add((topic, partition))
        return BatchReads(
            {p: tuple(items) for p, items in inputs.items()}, frozenset(truncated), ends, log_ends
        )

    def unread(self, topics: list[str], positions: Positions) -> list[str]:
        """Return those of ``topics`` (internal ones) that hold records past ``positions``
        (a partition without a position counts from its beginning)."""
        found = []
        for topic in sorted(topics):
            starts = self.reader.beginning_offsets(topic)
            ends = self.reader.end_offsets(topic)
            if any(positions.get((topic, p), starts[p]) < end for p, end in ends.items()):
                found.append(topic)
        return found

    def caught_up(self, topics: list[str], owns: Owns, positions: Positions) -> bool:
        """Whether every record of the owned partitions of ``topics`` that exists now was
        read (a partition never read counts from where its first batch would start)."""
        for topic in topics:
            sub = self.sources[topic]
            for partition, end in self.reader.end_offsets(topic).items():
                if not owns(f"{sub}_{partition}", partition):
                    continue
                at = positions.get((topic, partition))
                if at is None:
                    latest = self.reset_policy(topic) == "latest"
                    at = end if latest else self.reader.beginning_offsets(topic)[partition]
                if at < end:
                    return False
        return True

    def lag(self, ends: Mapping[str, Mapping[int, int]], owns: Owns, positions: Positions) -> int:
        """How many records of ``ends`` (topic -> partition -> log end, as last seen)
        the owned partitions have past ``positions`` (partitions not read yet, whose start
        is a reset policy's, do not count)."""
        total = 0
        for topic, partitions in ends.items():
            sub = self.sources.get(topic)
            if sub is None:
                continue
            for partition, end in partitions.items():
                at = positions.get((topic, partition))
                if at is not None and at < end and owns(f"{sub}_{partition}", partition):
                    total += end - at
        return total

    def reset_policy(self, topic: str) -> str:
        """Where a partition with no committed position starts: an internal topic at its
        beginning, any other as its source's own policy says, else as
        ``auto.offset.reset`` says."""
        if topic in self.internal_sources:
            return "earliest"
        return self.offset_resets.get(topic, self.config.auto_offset_reset)

    def reset_position(self, topic: str, partition: int, end: int, positions: Positions) -> int:
        """Return (and keep in ``positions``) the reset position of a partition with no
        valid committed one.

        Raises:
            OffsetOutOfRangeError: ``auto.offset.reset=none``.
        """
        reset = self.reset_policy(topic)
        if reset == "none":
            raise OffsetOutOfRangeError(
                f"[thread {self.name}] no valid committed offset for {topic}-{partition} and "
                "auto.offset.reset=none; commit a position first (streams-eos groups "
                "--reset-offsets), set auto.offset.reset to earliest or latest, or give "
                "the source its own policy (Consumed.with_offset_reset_policy)"
            )
        at = end if reset == "latest" else self.reader.beginning_offsets(topic)[partition]
        positions[(topic, partition)] = at
        return at
