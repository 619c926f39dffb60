"""Dead letters as a user reads them: a dead-letter topic's records with their error
headers parsed (KIP-1034's ``__streams.errors.*``), a summary (counts by error and by
source, time range, samples) and the selection ``streams-eos dlq replay --filter`` makes.

A dead letter is the failed input record (key, value, timestamp, its own headers) plus the
error headers the exception handlers add (:func:`common.handlers.build_dead_letter_queue_record`);
:class:`DeadLetter` keeps the two apart, so a replay can send the record as it was read.

Selection (:class:`LetterFilter`), from ``--filter KEY=VALUE`` (repeatable):

* ``exception=NAME``: the exception class, qualified (``builtins.ValueError``) or not
  (``ValueError``);
* ``message=TEXT``: the error message contains TEXT;
* ``source=TOPIC`` or ``source=TOPIC-P``: the record came from that topic (partition);

filters of one key are alternatives (any may match), filters of different keys must all
match. ``--partition P``, ``--from-offset N`` and ``--to-offset N`` (both inclusive) bound
the dead-letter topic's own partition and offsets, as ``streams-eos dlq`` shows them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.errors import ConfigError, StreamsError
from common.handlers_api import (
    HEADER_EXCEPTION,
    HEADER_MESSAGE,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_STACKTRACE,
    HEADER_TOPIC,
)
from runtime.storage.reader import TopicReader
from runtime.storage.records import ConsumerRecord, Headers
from runtime.storage.topics import TopicAdmin

#: Every header a handler adds starts so; a replay drops them.
ERROR_HEADER_PREFIX = "__streams.errors."
FILTER_KEYS = ("exception", "message", "source")


class UnknownDeadLetterTopicError(StreamsError):
    """The dead-letter topic does not exist: no record failed yet, or the name is wrong.
    Check ``errors.dead.letter.queue.topic.name`` and ``streams-eos topics --list``."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One record of a dead-letter topic: where it is, the failed record, and its error."""

    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers  # the failed record's own headers, without the error headers
    exception: str
    message: str
    stacktrace: str
    source_topic: str | None
    source_partition: int | None
    source_offset: int | None

    @property
    def source(self) -> str:
        """``topic-partition`` of the failed record (``?`` where a header is missing)."""
        part = "?" if self.source_partition is None else str(self.source_partition)
        return f"{self.source_topic or '?'}-{part}"

    @property
    def short_exception(self) -> str:
        """The exception's class name without its module."""
        return self.exception.rsplit(".", 1)[-1]

    def to_dict(self, *, preview: int | None = None) -> dict[str, Any]:
        """Return the letter as JSON-able data (key and value previewed as text)."""
        return {
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": self.timestamp,
            "key": preview_bytes(self.key, preview),
            "value": preview_bytes(self.value, preview),
            "headers": {k: preview_bytes(v, preview) for k, v in self.headers},
            "exception": self.exception,
            "message": self.message,
            "stacktrace": self.stacktrace,
            "source_topic": self.source_topic,
            "source_partition": self.source_partition,
            "source_offset": self.source_offset,
        }


def preview_bytes(data: bytes | None, limit: int | None = None) -> str | None:
    """Return bytes as text (UTF-8, else Python's bytes notation), cut to ``limit`` chars."""
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = repr(data)
    if limit is not None and len(text) > limit:
        return text[: max(0, limit - 3)] + "..."
    return text


def letter_from(record: ConsumerRecord) -> DeadLetter:
    """Parse a dead-letter record: split its error headers from its own headers."""
    own: Headers = []
    errors: dict[str, str] = {}
    for name, data in record.headers:
        if name.startswith(ERROR_HEADER_PREFIX):
            errors[name] = (data or b"").decode("utf-8", errors="replace")
        else:
            own.append((name, data))
    return DeadLetter(
        record.partition,
        record.offset,
        record.timestamp,
        record.key,
        record.value,
        own,
        errors.get(HEADER_EXCEPTION, "?"),
        errors.get(HEADER_MESSAGE, ""),
        errors.get(HEADER_STACKTRACE, ""),
        errors.get(HEADER_TOPIC) or None,
        _int(errors.get(HEADER_PARTITION)),
        _int(errors.get(HEADER_OFFSET)),
    )


def _int(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def read_dead_letters(
    admin: TopicAdmin, topic: str, *, start: Mapping[int, int] | None = None
) -> Iterator[DeadLetter]:
    """Yield the committed dead letters of ``topic``, partition by partition, in offset
    order, from ``start[p]`` (default: the log start) to the log end.

    Raises:
        UnknownDeadLetterTopicError: ``topic`` does not exist.
    """
    if not admin.exists(topic):
        raise UnknownDeadLetterTopicError(
            f"dead-letter topic {topic!r} does not exist; check "
            "errors.dead.letter.queue.topic.name (streams-eos topics --list)"
        )
    reader = TopicReader(admin)
    begin = reader.beginning_offsets(topic)
    for p, end in sorted(reader.end_offsets(topic).items()):
        first = max(begin.get(p, 0), (start or {}).get(p, 0))
        if first >= end:
            continue
        for r in reader.records(topic, p, first, end - first):
            yield letter_from(r)


@dataclass(frozen=True, slots=True)
class LetterFilter:
    """Which dead letters to select (see the module docstring); empty: every letter."""

    exceptions: tuple[str, ...] = ()
    messages: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    partition: int | None = None
    from_offset: int | None = None
    to_offset: int | None = None

    @classmethod
    def parse(
        cls,
        specs: Sequence[str] = (),
        *,
        partition: int | None = None,
        from_offset: int | None = None,
        to_offset: int | None = None,
    ) -> LetterFilter:
        """Build a filter from ``KEY=VALUE`` specs.

        Raises:
            ConfigError: a spec is not ``KEY=VALUE`` with a known key, or the offsets are
                negative or in the wrong order.
        """
        found: dict[str, list[str]] = {key: [] for key in FILTER_KEYS}
        for spec in specs:
            key, sep, value = spec.partition("=")
            key = key.strip()
            if not sep or key not in found or not value:
                raise ConfigError(
                    f"--filter {spec!r}: expected KEY=VALUE with KEY one of "
                    f"{', '.join(FILTER_KEYS)} (e.g. exception=ValueError, source=orders-0)"
                )
            found[key].append(value)
        for name, number in (("--from-offset", from_offset), ("--to-offset", to_offset)):
            if number is not None and number < 0:
                raise ConfigError(f"{name} {number}: an offset is 0 or more")
        if from_offset is not None and to_offset is not None and to_offset < from_offset:
            raise ConfigError(f"--to-offset {to_offset} is below --from-offset {from_offset}")
        return cls(
            tuple(found["exception"]),
            tuple(found["message"]),
            tuple(found["source"]),
            partition,
            from_offset,
            to_offset,
        )

    def selects(self, letter: DeadLetter) -> bool:
        """Whether ``letter`` is selected."""
        if self.partition is not None and letter.partition != self.partition:
            return False
        if self.from_offset is not None and letter.offset < self.from_offset:
            return False
        if self.to_offset is not None and letter.offset > self.to_offset:
            return False
        if self.exceptions and not any(
            name in (letter.exception, letter.short_exception) for name in self.exceptions
        ):
            return False
        if self.messages and not any(text in letter.message for text in self.messages):
            return False
        return not self.sources or any(
            spec in (letter.source_topic, letter.source) for spec in self.sources
        )


@dataclass
class DeadLetterSummary:
    """What ``streams-eos dlq`` prints: counts by error and by source, the time range,
    the offsets of each partition, and the first ``samples`` letters."""

    topic: str
    total: int = 0
    first_timestamp: int | None = None
    last_timestamp: int | None = None
    by_error: Counter[tuple[str, str]] = field(default_factory=Counter)
    by_source: Counter[str] = field(default_factory=Counter)
    partitions: dict[int, tuple[int, int]] = field(default_factory=dict)
    samples: list[DeadLetter] = field(default_factory=list)

    def add(self, letter: DeadLetter, *, samples: int) -> None:
        """Count ``letter`` in."""
        self.total += 1
        ts = letter.timestamp
        self.first_timestamp = ts if self.first_timestamp is None else min(ts, self.first_timestamp)
        self.last_timestamp = ts if self.last_timestamp is None else max(ts, self.last_timestamp)
        self.by_error[(letter.exception, letter.message)] += 1
        self.by_source[letter.source] += 1
        low, high = self.partitions.get(letter.partition, (letter.offset, letter.offset))
        self.partitions[letter.partition] = (min(low, letter.offset), max(high, letter.offset))
        if len(self.samples) < samples:
            self.samples.append(letter)

    def to_dict(self, *, preview: int | None = None) -> dict[str, Any]:
        """Return the summary as JSON-able data (``streams-eos dlq --json``)."""
        return {
            "topic": self.topic,
            "total": self.total,
            "first_timestamp": self.first_timestamp,
            "last_timestamp": self.last_timestamp,
            "by_error": [
                {"exception": exc, "message": msg, "count": n}
                for (exc, msg), n in self.by_error.most_common()
            ],
            "by_source": [{"source": s, "count": n} for s, n in self.by_source.most_common()],
            "partitions": {
                str(p): {"first_offset": lo, "last_offset": hi}
                for p, (lo, hi) in sorted(self.partitions.items())
            },
            "samples": [s.to_dict(preview=preview) for s in self.samples],
        }


def summarize(
    admin: TopicAdmin,
    topic: str,
    *,
    selection: LetterFilter | None = None,
    samples: int = 5,
) -> DeadLetterSummary:
    """Read ``topic`` and summarize its dead letters (those ``selection`` selects).

    Raises:
        UnknownDeadLetterTopicError: ``topic`` does not exist.
    """
    summary = DeadLetterSummary(topic)
    for letter in read_dead_letters(admin, topic):
        if selection is None or selection.selects(letter):
            summary.add(letter, samples=samples)
    return summary
