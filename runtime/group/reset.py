"""Plan and apply a reset of a consumer group's committed offsets (Kafka's
``kafka-consumer-groups --reset-offsets``), and delete a group's offsets.

A reset has three dimensions, as in Kafka: the *scope* (which partitions), the *strategy*
(where to) and the *execution* (print the plan, apply it, or export it as CSV).
:func:`plan_reset` only reads; :func:`apply_reset` writes the whole plan as the group's
offset records in one producer flush. Every record of a group goes to the same partition
of ``__consumer_offsets`` and a flush is one Delta commit, so a reset becomes visible all
at once or not at all.

Targets outside ``[log-start, log-end]`` are clamped, as Kafka's ``checkOffsetsRange``
does; the entry keeps the requested offset in ``clamped_from`` so a tool can warn.

Example:
    >>> plan = plan_reset(admin, "wordcount", scope=[TopicScope("words")],
    ...                   strategy=ToEarliest())  # doctest: +SKIP
    >>> apply_reset(admin, "wordcount", plan)  # doctest: +SKIP
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Literal

from common.errors import InvalidPartitionsError, StreamsError, UnknownTopicError
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.metadata import OffsetEntry
from runtime.txn.offsets import OFFSETS_TOPIC, OffsetsStore, committed_records


class InvalidResetError(StreamsError, ValueError):
    """A reset cannot be planned as asked: a bad option value, a malformed CSV line, or a
    partition whose current offset is needed but missing. Fix the input and run again."""


@dataclass(frozen=True, slots=True)
class TopicScope:
    """A topic of the reset scope: every partition (``partitions`` None) or some."""

    topic: str
    partitions: tuple[int, ...] | None = None

    @classmethod
    def parse(cls, spec: str) -> TopicScope:
        """Parse Kafka's ``--topic`` value: ``topic`` or ``topic:0,1,2``.

        Raises:
            InvalidResetError: the partition list is not comma-separated numbers.
        """
        topic, sep, parts = spec.partition(":")
        if not topic:
            raise InvalidResetError(f"--topic {spec!r} has no topic name")
        if not sep:
            return cls(topic)
        try:
            numbers = tuple(sorted({int(p) for p in parts.split(",") if p.strip()}))
        except ValueError as exc:
            raise InvalidResetError(
                f"--topic {spec!r}: partitions must be comma-separated numbers, e.g. {topic}:0,1"
            ) from exc
        if not numbers:
            raise InvalidResetError(f"--topic {spec!r} names no partition after ':'")
        return cls(topic, numbers)


@dataclass(frozen=True, slots=True)
class ToEarliest:
    """Reset to the log-start offset."""


@dataclass(frozen=True, slots=True)
class ToLatest:
    """Reset to the log-end offset."""


@dataclass(frozen=True, slots=True)
class ToCurrent:
    """Re-commit the committed offset (a partition without one: see ``default_position``)."""


@dataclass(frozen=True, slots=True)
class ToOffset:
    """Reset to one absolute offset (clamped per partition)."""

    offset: int


@dataclass(frozen=True, slots=True)
class ShiftBy:
    """Move the committed offset by ``shift`` records (negative: back), clamped."""

    shift: int


@dataclass(frozen=True, slots=True)
class ToDatetime:
    """Reset to the first offset whose timestamp is at or after ``timestamp_ms``."""

    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class ByDuration:
    """Reset to the first offset at or after ``now - duration_ms``."""

    duration_ms: int


@dataclass(frozen=True, slots=True)
class FromFile:
    """Reset to per-partition offsets read from a plan (see :func:`parse_csv`)."""

    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)


ResetStrategy = (
    ToEarliest | ToLatest | ToCurrent | ToOffset | ShiftBy | ToDatetime | ByDuration | FromFile
)


@dataclass(frozen=True, slots=True)
class ResetPlanEntry:
    """One partition of a reset plan.

    ``current`` is the committed offset before the reset (None: none committed);
    ``target`` the new offset; ``clamped_from`` the requested offset when it was outside
    ``[log-start, log-end]`` and ``target`` is the bound it was clamped to.
    """

    topic: str
    partition: int
    current: int | None
    target: int
    clamped_from: int | None = None


def committed_offsets(admin: TopicAdmin, group: str) -> dict[tuple[str, int], int]:
    """Return the committed offsets of ``group`` (empty when nothing was ever committed)."""
    if not admin.exists(OFFSETS_TOPIC):
        return {}
    return OffsetsStore(admin).fetch(group)


def groups_with_offsets(admin: TopicAdmin) -> list[str]:
    """Return every group that has at least one committed offset, sorted."""
    if not admin.exists(OFFSETS_TOPIC):
        return []
    reader = TopicReader(admin)
    groups: set[str] = set()
    for partition in range(admin.num_partitions(OFFSETS_TOPIC)):
        for (group, _, _), (_, offset) in _scan(reader, partition).items():
            if offset is not None:
                groups.add(group)
    return sorted(groups)


def plan_reset(
    admin: TopicAdmin,
    group: str,
    *,
    scope: Sequence[TopicScope] | None,
    strategy: ResetStrategy,
    default_position: Literal["earliest", "latest"] | None = None,
    now_ms: int | None = None,
) -> list[ResetPlanEntry]:
    """Return the reset plan of ``group``, sorted by topic and partition; write nothing.

    Args:
        admin: the topic admin of the storage root.
        group: the consumer group (a Streams application's ``application.id``).
        scope: the topics and partitions to reset; None means Kafka's ``--all-topics``
            (the partitions the group has committed offsets for), or the plan's own
            partitions with :class:`FromFile` (a scope then filters the plan).
        strategy: where to reset to.
        default_position: the position of a partition without a committed offset for
            :class:`ShiftBy` and :class:`ToCurrent` (a consumer's ``auto.offset.reset``).
            None is Kafka's consumer-groups tool: shifting such a partition is an error and
            ``--to-current`` uses the log-end offset.
        now_ms: the clock for :class:`ByDuration` (default: now).

    Raises:
        UnknownTopicError: a topic of the scope or plan does not exist.
        InvalidPartitionsError: a partition of the scope or plan is not in its topic.
        InvalidResetError: a shift of a partition without a committed offset (and no
            ``default_position``), or a negative offset.
    """
    committed = committed_offsets(admin, group)
    partitions = _partitions(admin, committed, scope, strategy)
    resolver = _Resolver(TopicReader(admin), committed, default_position)
    if isinstance(strategy, ByDuration):
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        strategy = ToDatetime(max(0, now - strategy.duration_ms))
    return [resolver.entry(topic, p, strategy) for topic, p in partitions]


def apply_reset(
    admin: TopicAdmin,
    group: str,
    plan: Iterable[ResetPlanEntry],
    *,
    delete: Sequence[TopicScope] = (),
) -> list[tuple[str, int]]:
    """Commit ``plan`` as ``group``'s offsets, and delete its offsets inside ``delete``
    (tombstones), all in one atomic commit; return the deleted ``(topic, partition)`` pairs.

    The caller checks first that the group has no active members (a member would commit
    its own positions over the reset).
    """
    entries = [OffsetEntry(group, e.topic, e.partition, e.target) for e in plan]
    if not entries and not delete:
        return []
    store = OffsetsStore(admin)
    offsets_partition = store.partition_for(group)
    producer = Producer(admin)
    deleted = []
    if delete:
        latest = _scan(TopicReader(admin), offsets_partition)
        for (g, topic, partition), (key, offset) in sorted(latest.items()):
            if (
                g == group
                and offset is not None
                and any(_covers(s, topic, partition) for s in delete)
            ):
                producer.send(OFFSETS_TOPIC, key, None, partition=offsets_partition)
                deleted.append((topic, partition))
    for key, value in store.records(group, entries):
        producer.send(OFFSETS_TOPIC, key, value, partition=offsets_partition)
    producer.flush()
    return deleted


def delete_offsets(
    admin: TopicAdmin, group: str, scope: Sequence[TopicScope] | None = None
) -> list[tuple[str, int]]:
    """Delete the committed offsets of ``group`` (only those inside ``scope`` when given)
    with tombstones, in one atomic commit; return the deleted ``(topic, partition)`` pairs
    in order."""
    if not admin.exists(OFFSETS_TOPIC):
        return []
    if scope is None:
        scope = [TopicScope(t) for t in sorted({t for t, _ in committed_offsets(admin, group)})]
    return apply_reset(admin, group, [], delete=scope) if scope else []


def export_csv(plan: Iterable[ResetPlanEntry]) -> str:
    """Return ``plan`` as Kafka's export CSV: one ``topic,partition,offset`` line each."""
    return "".join(f"{e.topic},{e.partition},{e.target}\n" for e in plan)


def parse_csv(text: str, group: str | None = None) -> dict[tuple[str, int], int]:
    """Parse a reset plan: lines ``topic,partition,offset`` (Kafka's single-group export)
    or ``group,topic,partition,offset`` (multi-group; only ``group``'s lines are kept).

    Raises:
        InvalidResetError: a malformed or duplicate line (naming its number), or a
            four-column plan without lines for ``group``.
    """
    out: dict[tuple[str, int], int] = {}
    grouped = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 4:
            grouped = True
            if group is not None and cells[0] != group:
                continue
            cells = cells[1:]
        if len(cells) != 3 or not cells[0]:
            raise InvalidResetError(
                f"reset plan line {number} ({line!r}) is not 'topic,partition,offset'"
            )
        try:
            partition, offset = int(cells[1]), int(cells[2])
        except ValueError as exc:
            raise InvalidResetError(
                f"reset plan line {number} ({line!r}): partition and offset must be numbers"
            ) from exc
        if partition < 0 or offset < 0:
            raise InvalidResetError(f"reset plan line {number} ({line!r}): negative number")
        if (cells[0], partition) in out:
            raise InvalidResetError(
                f"reset plan line {number}: {cells[0]}-{partition} is already in the plan"
            )
        out[(cells[0], partition)] = offset
    if grouped and not out:
        raise InvalidResetError(f"the reset plan has no lines for group {group!r}")
    return out


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DATETIME = re.compile(
    r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3})(Z|[+-]\d{2}(?::?\d{2})?)?", re.IGNORECASE
)
_DURATION = re.compile(
    r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:[.,](\d{1,9}))?S)?)?", re.IGNORECASE
)


def parse_datetime(text: str) -> int:
    """Parse Kafka's ``--to-datetime`` value (``yyyy-MM-ddTHH:mm:ss.SSS`` with an optional
    zone ``Z``, ``+hh``, ``+hhmm`` or ``+hh:mm``) into epoch milliseconds. Without a zone the
    time is UTC, as Kafka's ``Utils.getDateTime`` reads it.

    Raises:
        InvalidResetError: the value does not follow the format.
    """
    match = _DATETIME.fullmatch(text.strip())
    try:
        if match is None:
            raise ValueError(text)
        moment = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S.%f")
        zone = (match.group(2) or "Z").upper()
        if zone == "Z":
            tz = UTC
        else:
            digits = zone[1:].replace(":", "")
            minutes = int(digits[:2]) * 60 + int(digits[2:] or 0)
            tz = timezone(timedelta(minutes=minutes if zone[0] == "+" else -minutes))
    except ValueError as exc:
        raise InvalidResetError(
            f"--to-datetime {text!r} is not yyyy-MM-ddTHH:mm:ss.SSS with an optional zone "
            "(Z, +01:00), e.g. 2024-08-04T14:30:00.000"
        ) from exc
    return (moment.replace(tzinfo=tz) - _EPOCH) // timedelta(milliseconds=1)


def parse_duration(text: str) -> int:
    """Parse an ISO-8601 duration ``PnDTnHnMn.nS`` (e.g. ``PT0H5M0S``) into milliseconds.

    Raises:
        InvalidResetError: the value is not such a duration.
    """
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.groups()) or text.strip().upper().endswith("T"):
        raise InvalidResetError(
            f"--by-duration {text!r} is not an ISO-8601 duration PnDTnHnMnS, e.g. PT0H5M0S "
            "(5 minutes) or P1DT2H (a day and two hours)"
        )
    days, hours, minutes, seconds, fraction = (g or "0" for g in match.groups())
    total = ((int(days) * 24 + int(hours)) * 60 + int(minutes)) * 60 + int(seconds)
    return total * 1000 + int(fraction.ljust(3, "0")[:3])


# -- internals ------------------------------------------------------------------------------


def _scan(
    reader: TopicReader, partition: int
) -> dict[tuple[str, str, int], tuple[bytes, int | None]]:
    """Return, per ``(group, topic, partition)`` key of one ``__consumer_offsets``
    partition, the key's bytes and its latest offset (None: deleted)."""
    start = reader.beginning_offsets(OFFSETS_TOPIC)[partition]
    table = reader.read(OFFSETS_TOPIC, partition, start)
    return {
        coordinates: (key, position)
        for key, _value, coordinates, position in committed_records(table, partition)
    }


def _partitions(
    admin: TopicAdmin,
    committed: Mapping[tuple[str, int], int],
    scope: Sequence[TopicScope] | None,
    strategy: ResetStrategy,
) -> list[tuple[str, int]]:
    """Return the sorted partitions to reset, each checked to exist."""
    if isinstance(strategy, FromFile):
        chosen = set(strategy.offsets)
        if scope is not None:
            chosen = {tp for tp in chosen if any(_covers(s, *tp) for s in scope)}
    elif scope is None:
        chosen = set(committed)
    else:
        chosen = set()
        for item in scope:
            count = _partition_count(admin, item.topic)
            chosen.update((item.topic, p) for p in item.partitions or range(count))
    counts: dict[str, int] = {}
    for topic, partition in chosen:
        if topic not in counts:
            counts[topic] = _partition_count(admin, topic)
        if not 0 <= partition < counts[topic]:
            raise InvalidPartitionsError(
                f"partition {partition} is not a partition of topic {topic!r} "
                f"(it has {counts[topic]}: 0..{counts[topic] - 1})"
            )
    return sorted(chosen)


def _covers(scope: TopicScope, topic: str, partition: int) -> bool:
    return scope.topic == topic and (scope.partitions is None or partition in scope.partitions)


def _partition_count(admin: TopicAdmin, topic: str) -> int:
    if not admin.exists(topic):
        raise UnknownTopicError(
            f"topic {topic!r} does not exist under {admin.root.uri}; check the name with "
            "'streams-eos topics --list'"
        )
    return admin.num_partitions(topic)


class _Resolver:
    """Turns a strategy into one partition's target, reading each topic's bounds once."""

    def __init__(
        self,
        reader: TopicReader,
        committed: Mapping[tuple[str, int], int],
        default_position: Literal["earliest", "latest"] | None,
    ) -> None:
        self.reader = reader
        self.committed = committed
        self.default_position = default_position
        self._starts: dict[str, dict[int, int]] = {}
        self._ends: dict[str, dict[int, int]] = {}
        self._by_time: dict[tuple[str, int], dict[int, int | None]] = {}

    def entry(self, topic: str, partition: int, strategy: ResetStrategy) -> ResetPlanEntry:
        """Return the plan entry of ``topic-partition`` under ``strategy``."""
        start, end = self._bounds(topic, partition)
        current = self.committed.get((topic, partition))
        match strategy:
            case ToEarliest():
                return ResetPlanEntry(topic, partition, current, start)
            case ToLatest():
                return ResetPlanEntry(topic, partition, current, end)
            case ToCurrent():
                base = current if current is not None else self._default(topic, partition)
                return ResetPlanEntry(topic, partition, current, end if base is None else base)
            case ToDatetime(timestamp_ms=ts):
                found = self._offset_for_time(topic, ts).get(partition)
                return ResetPlanEntry(topic, partition, current, end if found is None else found)
            case ToOffset(offset=offset):
                requested = offset
            case ShiftBy(shift=shift):
                base = current if current is not None else self._default(topic, partition)
                if base is None:
                    raise InvalidResetError(
                        f"cannot shift offset for partition {topic}-{partition} since there is "
                        "no current committed offset; reset it with --to-earliest, "
                        "--to-latest or --to-offset first"
                    )
                requested = base + shift
            case FromFile(offsets=offsets):
                requested = offsets[(topic, partition)]
            case _:  # ByDuration is resolved to ToDatetime by plan_reset
                raise InvalidResetError(f"unsupported reset strategy {strategy!r}")
        target = min(max(requested, start), end)
        clamped = requested if target != requested else None
        return ResetPlanEntry(topic, partition, current, target, clamped)

    def _default(self, topic: str, partition: int) -> int | None:
        if self.default_position is None:
            return None
        start, end = self._bounds(topic, partition)
        return start if self.default_position == "earliest" else end

    def _bounds(self, topic: str, partition: int) -> tuple[int, int]:
        if topic not in self._starts:
            self._starts[topic] = self.reader.beginning_offsets(topic)
            self._ends[topic] = self.reader.end_offsets(topic)
        return self._starts[topic][partition], self._ends[topic][partition]

    def _offset_for_time(self, topic: str, timestamp: int) -> dict[int, int | None]:
        found = self._by_time.get((topic, timestamp))
        if found is None:
            found = self._by_time[(topic, timestamp)] = self.reader.offsets_for_times(
                topic, timestamp
            )
        return found
