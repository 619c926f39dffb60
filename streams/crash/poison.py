"""Poison records for the crash harness (``streams-eos crashtest --poison RATE``).

A fraction ``RATE`` of the input records (chosen by the seed) gets a value no deserializer
accepts: :data:`POISON_PREFIX` then the record's index, bytes that are not UTF-8 (string
and JSON serdes fail), nor 4 or 8 bytes long (integer, long and double serdes fail). The
runs get ``deserialization.exception.handler=log-and-continue`` and a dead-letter topic
(:data:`DEAD_LETTER_TOPIC`), unless ``--config`` sets them, so each poison record is
skipped and written to the dead-letter topic in its batch's transaction.

The checks: the reference is computed over the input *without* the poison records, so the
outputs and stores must equal a run that never saw them; and the dead-letter topic must
hold each poison record exactly once, by its source topic, partition and offset (the
``__streams.errors.*`` headers), and nothing else.

Before the runs, the poison records are piped through the test driver alone: a topology
whose source accepts them (a bytes serde, a global table) cannot be tested so, and the
harness says which topic before anything runs.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from common.config import StreamsConfig
from common.errors import ConfigError
from runtime.app.dead_letters import read_dead_letters
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from streams.crash.inputs import CrashTestError, InputRecord
from streams.testkit.driver import TopologyTestDriver
from topology.graph.topology import Topology

POISON_PREFIX = b"\xff\xfe\x00crashtest-poison-"
DEAD_LETTER_TOPIC = "crashtest-dead-letters"
#: Settings of the runs with poison, unless the caller's config sets them.
POISON_DEFAULTS = {
    "deserialization.exception.handler": "log-and-continue",
    "errors.dead.letter.queue.topic.name": DEAD_LETTER_TOPIC,
}
Position = tuple[str, int, int]  # source topic, partition, offset


def is_poison(value: Any) -> bool:
    """Whether ``value`` is a poison record's value."""
    return isinstance(value, bytes) and value.startswith(POISON_PREFIX)


def poison_records(records: Sequence[InputRecord], rate: float, seed: int) -> list[InputRecord]:
    """Return ``records`` with ``round(rate * len)`` of them (at least one when ``rate`` is
    above 0) made poison, chosen by ``seed``; keys, timestamps and headers are kept.

    Raises:
        ConfigError: ``rate`` is not in [0, 1).
    """
    if not 0.0 <= rate < 1.0:
        raise ConfigError(f"--poison {rate}: expected a fraction of the input in [0, 1)")
    if rate == 0.0 or not records:
        return list(records)
    count = min(len(records), max(1, round(rate * len(records))))
    chosen = set(random.Random(seed + 2).sample(range(len(records)), count))
    return [
        replace(r, value=POISON_PREFIX + str(i).encode()) if i in chosen else r
        for i, r in enumerate(records)
    ]


def check_rejected(
    topology: Topology, config: StreamsConfig, records: Iterable[InputRecord]
) -> None:
    """Pipe the poison ``records`` through the test driver; every one must become a dead
    letter.

    Raises:
        CrashTestError: a topic's source accepts the poison value.
    """
    poison = [r for r in records if is_poison(r.value)]
    topic = config.errors_dead_letter_queue_topic_name
    if not poison or not topic:
        return
    with TopologyTestDriver(topology, config) as driver:
        accepted: Counter[str] = Counter()
        for r in poison:
            before = len(driver.output_queue(topic))
            key, value, headers = r.raw()
            driver.pipe_raw(r.topic, key, value, r.timestamp, headers)
            if len(driver.output_queue(topic)) != before + 1:
                accepted[r.topic] += 1
    if accepted:
        names = ", ".join(sorted(accepted))
        raise CrashTestError(
            f"--poison: the topology accepts (or drops without a dead letter) a record that "
            f"cannot be deserialized on {names}: a bytes serde, or a global table; poison "
            "needs sources that deserialize their values"
        )


def poison_positions(admin: TopicAdmin, topics: Iterable[str]) -> list[Position]:
    """Return where the poison records landed in the input topics."""
    reader = TopicReader(admin)
    found: list[Position] = []
    for topic in sorted(set(topics)):
        for p in sorted(reader.end_offsets(topic)):
            table = reader.read(topic, p, reader.beginning_offsets(topic)[p])
            offsets, values = table.column("offset").to_pylist(), table.column("value").to_pylist()
            found += [(topic, p, o) for o, v in zip(offsets, values, strict=True) if is_poison(v)]
    return found


@dataclass
class DeadLetterCheck:
    """How the dead-letter topic compares with the poison records."""

    topic: str
    expected: int = 0
    found: int = 0
    duplicates: int = 0
    losses: int = 0
    strays: int = 0
    diff: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether each poison record is a dead letter exactly once, and nothing else."""
        return not (self.duplicates or self.losses or self.strays)


def compare_dead_letters(
    admin: TopicAdmin, topic: str, expected: Sequence[Position], *, max_diff: int = 10
) -> DeadLetterCheck:
    """Compare the dead letters of ``topic`` (by their source position) with ``expected``."""
    check = DeadLetterCheck(topic, expected=len(expected))
    got: Counter[Position] = Counter()
    if admin.exists(topic):
        for letter in read_dead_letters(admin, topic):
            part, offset = letter.source_partition, letter.source_offset
            got[(letter.source_topic or "?", _or(part), _or(offset))] += 1
    want = Counter(expected)
    check.found = got.total()
    check.duplicates = sum(n - 1 for pos, n in got.items() if pos in want and n > 1)
    check.losses = sum(1 for pos in want if pos not in got)
    check.strays = sum(n for pos, n in got.items() if pos not in want)
    for pos in sorted(set(want) | set(got)):
        if got[pos] != want[pos] and len(check.diff) < max_diff:
            t, p, o = pos
            check.diff.append(f"dead letter of {t}-{p}@{o}: expected {want[pos]}, got {got[pos]}")
    return check


def _or(number: int | None) -> int:
    return -1 if number is None else number


def poison_config(config: Mapping[str, object] | None) -> dict[str, object]:
    """The runs' config with the poison defaults under the caller's."""
    return {**POISON_DEFAULTS, **dict(config or {})}
