"""Replay dead letters, each once however often it runs (``streams-eos dlq replay``).

A replay sends the selected dead letters of a dead-letter topic back as the records they
were (key, value, timestamp, their own headers; the ``__streams.errors.*`` headers are
dropped): to the topic each came from (its ``__streams.errors.topic`` header, to the same
partition when that topic still has it), or to the one ``to`` names.

Each letter is replayed once: the replay keeps a position per partition of the
dead-letter topic in the consumer group ``streams-eos-dlq-replay-<topic>``
(``__consumer_offsets``), committed **in the same transaction** as the replayed records
(``send_offsets_to_transaction`` of a :class:`TransactionalProducer` whose transactional id
is the group's name): a crash mid-replay leaves both or neither, and the next replay goes
on from there. The position is the first offset not yet decided; the letters above it
already replayed (selected by an earlier, narrower filter) are listed, as ranges, in the
committed offset's metadata, so they are not sent again either.

A letter the filter does not select stays waiting, to be replayed by a later run (after
another fix); with ``skip_unselected`` the position moves past it for good (it will never
be replayed; use it once the letters left are known to be garbage).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from common.errors import ConfigError, StreamsError
from runtime.app.dead_letters import DeadLetter, LetterFilter, read_dead_letters
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.offsets import OFFSETS_TOPIC, OffsetsStore, committed_records
from runtime.txn.producer import TransactionalProducer

log = logging.getLogger(__name__)


def replay_group(topic: str) -> str:
    """The consumer group (and transactional id) of the replays of ``topic``."""
    return f"streams-eos-dlq-replay-{topic}"


@dataclass(frozen=True, slots=True)
class ReplayPosition:
    """Where the replay of one partition stands: every offset below ``offset`` is
    decided (replayed or skipped for good), and so are the offsets in ``replayed``."""

    offset: int = 0
    replayed: frozenset[int] = frozenset()

    def done(self, offset: int) -> bool:
        """Whether the letter at ``offset`` was replayed or skipped already."""
        return offset < self.offset or offset in self.replayed

    def metadata(self) -> str:
        """The committed offset's metadata: the replayed offsets above it, as ranges."""
        return json.dumps({"replayed": _ranges(self.replayed)}, separators=(",", ":"))


def _ranges(offsets: Iterable[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for o in sorted(offsets):
        if out and out[-1][1] == o - 1:
            out[-1][1] = o
        else:
            out.append([o, o])
    return out


def read_positions(admin: TopicAdmin, topic: str) -> dict[int, ReplayPosition]:
    """Return the committed replay position of each partition of dead-letter ``topic``."""
    store = OffsetsStore(admin)
    group = replay_group(topic)
    partition = store.partition_for(group)
    table = TopicReader(admin).read(OFFSETS_TOPIC, partition, _log_start(admin, partition))
    out: dict[int, ReplayPosition] = {}
    for _key, value, (found_group, found_topic, p), position in committed_records(table, partition):
        if (found_group, found_topic) != (group, topic):
            continue
        if position is None:
            out.pop(p, None)
            continue
        out[p] = ReplayPosition(position, _replayed(json.loads(value or b"{}")))
    return out


def _log_start(admin: TopicAdmin, partition: int) -> int:
    return TopicReader(admin).beginning_offsets(OFFSETS_TOPIC)[partition]


def _replayed(value: Mapping[str, object]) -> frozenset[int]:
    try:
        ranges = json.loads(str(value.get("metadata") or "{}")).get("replayed", [])
        return frozenset(o for lo, hi in ranges for o in range(int(lo), int(hi) + 1))
    except (ValueError, TypeError, AttributeError):
        return frozenset()


@dataclass
class ReplayResult:
    """What a replay sent (or, dry, would send) and where it left each position."""

    topic: str
    dry_run: bool
    sent: list[tuple[DeadLetter, str]] = field(default_factory=list)
    already_replayed: int = 0
    skipped: int = 0  # not selected; moved past for good (skip_unselected)
    waiting: int = 0  # not selected; left for a later replay
    positions: dict[int, tuple[ReplayPosition, ReplayPosition]] = field(default_factory=dict)


def plan_replay(
    letters: Iterable[DeadLetter],
    positions: Mapping[int, ReplayPosition],
    *,
    topic: str,
    selection: LetterFilter,
    skip_unselected: bool,
    to: str | None,
    dry_run: bool,
) -> ReplayResult:
    """Decide, letter by letter, what a replay sends and where positions move."""
    result = ReplayResult(topic, dry_run)
    done: dict[int, set[int]] = {p: set(pos.replayed) for p, pos in positions.items()}
    waiting: dict[int, int] = {}  # partition -> first waiting offset
    ends: dict[int, int] = {}
    for letter in letters:
        p, pos = letter.partition, positions.get(letter.partition, ReplayPosition())
        ends[p] = letter.offset + 1
        if pos.done(letter.offset):
            result.already_replayed += 1
        elif selection.selects(letter):
            result.sent.append((letter, _destination(letter, to)))
            done.setdefault(p, set()).add(letter.offset)
        elif skip_unselected:
            result.skipped += 1
            done.setdefault(p, set()).add(letter.offset)
        else:
            result.waiting += 1
            waiting.setdefault(p, letter.offset)
    for p, end in ends.items():
        old = positions.get(p, ReplayPosition())
        offset = waiting.get(p, end)
        new = ReplayPosition(offset, frozenset(o for o in done.get(p, ()) if o > offset))
        if new != old:
            result.positions[p] = (old, new)
    return result


def _destination(letter: DeadLetter, to: str | None) -> str:
    if to:
        return to
    if not letter.source_topic:
        raise StreamsError(
            f"dead letter {letter.partition}-{letter.offset} has no __streams.errors.topic "
            "header: its source topic is unknown; give --to TOPIC"
        )
    return letter.source_topic


def replay_dead_letters(
    admin: TopicAdmin,
    topic: str,
    *,
    to: str | None = None,
    selection: LetterFilter | None = None,
    skip_unselected: bool = False,
    dry_run: bool = False,
) -> ReplayResult:
    """Send the selected dead letters of ``topic`` back, once (see the module docstring).

    Raises:
        UnknownDeadLetterTopicError: ``topic`` does not exist.
        ConfigError: ``to`` is the dead-letter topic itself, or a destination is missing.
        ProducerFencedError: another replay of ``topic`` started meanwhile (nothing of this
            one is committed; run it again).
    """
    if to == topic:
        raise ConfigError(f"--to {to}: that is the dead-letter topic itself")
    group = replay_group(topic)
    producer = None if dry_run else TransactionalProducer(admin, group)
    try:
        if producer is not None:
            producer.init_transactions()  # fences an older replay, finishes what it left
        positions = read_positions(admin, topic)
        letters = read_dead_letters(admin, topic, start={p: q.offset for p, q in positions.items()})
        result = plan_replay(
            letters,
            positions,
            topic=topic,
            selection=selection or LetterFilter(),
            skip_unselected=skip_unselected,
            to=to,
            dry_run=dry_run,
        )
        begin = TopicReader(admin).beginning_offsets(topic)
        result.already_replayed += sum(
            max(0, q.offset - begin.get(p, 0)) for p, q in positions.items()
        )  # below the positions (read no more)
        _check_destinations(admin, result)
        if producer is not None and (result.sent or result.positions):
            _commit(producer, result, group)
        return result
    finally:
        if producer is not None:
            producer.close()


def _check_destinations(admin: TopicAdmin, result: ReplayResult) -> None:
    for name in sorted({dest for _, dest in result.sent}):
        if not admin.exists(name):
            raise ConfigError(
                f"cannot replay to topic {name!r}: it does not exist; create it, or give --to TOPIC"
            )


def _commit(producer: TransactionalProducer, result: ReplayResult, group: str) -> None:
    """Send the letters and move the positions, in one transaction."""
    admin = producer.admin
    counts: dict[str, int] = {}
    producer.begin_transaction()
    for letter, dest in result.sent:
        if dest not in counts:
            counts[dest] = admin.num_partitions(dest)
        same = dest == letter.source_topic and letter.source_partition is not None
        partition = letter.source_partition if same else None
        if partition is not None and partition >= counts[dest]:
            partition = None
        producer.send(
            dest,
            letter.key,
            letter.value,
            timestamp=letter.timestamp,
            headers=list(letter.headers) or None,
            partition=partition,
        )
    for p, (_old, new) in sorted(result.positions.items()):
        offsets = {(result.topic, p): new.offset}
        producer.send_offsets_to_transaction(offsets, group, metadata=new.metadata())
    producer.commit_transaction()
    log.info(
        "[dlq %s] replayed=%d positions=%s",
        result.topic,
        len(result.sent),
        {p: new.offset for p, (_, new) in result.positions.items()},
    )
