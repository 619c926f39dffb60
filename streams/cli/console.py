"""``streams-eos console-produce`` and ``console-consume``, as Kafka's console tools."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from common.errors import StreamsError
from common.serdes import Serde, deserialize_record_field, serde_from_name
from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.records import ConsumerRecord
from runtime.txn.producer import TransactionalProducer
from streams.cli import COMMANDS
from streams.cli.stdin_lines import stdin_lines
from streams.cli.transactions import uncommitted_records

#: Topics named so are the runtime's own (``__consumer_offsets``), as Kafka's internal topics.
INTERNAL_PREFIX = "__"
#: Lines per transaction of ``console-produce --transactional-id`` without ``--batch``.
DEFAULT_TXN_BATCH = 1000

_PRODUCE_PROPS = {"parse.key", "key.separator", "null.marker"}
#: ``--producer-property`` keys (Kafka's producer configs) and the producer's argument each
#: sets: an int of bytes.
_PRODUCER_SETTINGS = {"max.request.size": "max_request_size", "batch.size": "batch_size"}
_CONSUME_PROPS = {
    "print.key",
    "print.partition",
    "print.offset",
    "print.timestamp",
    "print.headers",
    "key.separator",
    "line.separator",
    "null.literal",
}


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``console-produce`` and ``console-consume`` subcommands."""
    prod = sub.add_parser(
        "console-produce",
        parents=[common],
        help=COMMANDS["console-produce"][1],
        description=(
            "Read lines from stdin and produce each as one record (UTF-8). With "
            "--transactional-id, lines are produced in transactions of --batch lines, each "
            "visible all at once; a bad line aborts its transaction."
        ),
    )
    prod.add_argument("--topic", required=True, help="the topic to write the lines to")
    prod.add_argument(
        "--force",
        action="store_true",
        help="produce to an internal topic (__consumer_offsets, ...): only to repair one",
    )
    _add_property_option(prod, _PRODUCE_PROPS)
    prod.add_argument(
        "--producer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"a producer setting, as Kafka's: {', '.join(sorted(_PRODUCER_SETTINGS))}",
    )
    prod.add_argument(
        "--batch-size", type=int, default=10_000, help="lines per commit at most (default 10000)"
    )
    prod.add_argument(
        "--timeout",
        type=int,
        default=1000,
        metavar="MS",
        help="commit buffered lines after this many ms without more (linger)",
    )
    prod.add_argument(
        "--transactional-id",
        help="produce in transactions of this id: all lines of a batch or none",
    )
    prod.add_argument(
        "--batch",
        type=int,
        metavar="N",
        help=f"with --transactional-id: lines per transaction (default {DEFAULT_TXN_BATCH})",
    )
    prod.add_argument(
        "--transaction-timeout-ms",
        type=int,
        default=60_000,
        help="with --transactional-id: abort a transaction left open this long (default 60000)",
    )
    prod.set_defaults(handler=run_produce)

    cons = sub.add_parser(
        "console-consume",
        parents=[common],
        help=COMMANDS["console-consume"][1],
        description="Print records, in offset order per partition.",
    )
    cons.add_argument("--topic", required=True, help="the topic to print")
    cons.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the log-start offset (default: the log end)",
    )
    cons.add_argument("--partition", type=int, help="only this partition")
    cons.add_argument("--offset", help="with --partition: earliest, latest or an offset")
    cons.add_argument(
        "--max-messages",
        type=int,
        help="exit after this many records (unset or negative: no limit)",
    )
    cons.add_argument("--timeout-ms", type=int, help="exit after this long without a record")
    _add_property_option(cons, _CONSUME_PROPS)
    cons.add_argument(
        "--key-deserializer",
        default="string",
        help="serde of keys: bytes, string, int, long, double, json or a path",
    )
    cons.add_argument("--value-deserializer", default="string", help="serde of values")
    cons.add_argument(
        "--isolation-level",
        choices=("read_committed", "read_uncommitted"),
        default="read_committed",
        help=(
            "read_uncommitted also prints, once the committed records are caught up, the "
            "records staged by open transactions, marked [uncommitted txn=ID seq=N] and "
            "with offset - (default read_committed)"
        ),
    )
    cons.set_defaults(handler=run_consume)


def _add_property_option(parser: argparse.ArgumentParser, allowed: set[str]) -> None:
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"one of {', '.join(sorted(allowed))} (repeatable)",
    )


def _producer_settings(items: list[str]) -> dict[str, Any]:
    """Return the producer's keyword arguments from ``--producer-property`` items."""
    settings = {}
    for key, value in _properties(items, set(_PRODUCER_SETTINGS), "--producer-property").items():
        try:
            number = int(value)
        except ValueError:
            number = 0
        if number <= 0:
            raise StreamsError(
                f"--producer-property {key}={value}: give a positive number of bytes"
            )
        settings[_PRODUCER_SETTINGS[key]] = number
    return settings


def _properties(items: list[str], allowed: set[str], option: str = "--property") -> dict[str, str]:
    props = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise StreamsError(f"{option} {item!r} is not KEY=VALUE")
        if key not in allowed:
            raise StreamsError(f"unknown {option} {key!r}; allowed: {', '.join(sorted(allowed))}")
        props[key] = value.encode().decode("unicode_escape")
    return props


def _flag(props: dict[str, str], key: str) -> bool:
    return props.get(key, "false").strip().lower() == "true"


# -- produce -----------------------------------------------------------------------------


def run_produce(args: argparse.Namespace) -> int:
    """Produce stdin's lines to the topic.

    Without ``--transactional-id``, buffered lines are committed every ``--batch-size``
    lines or linger timeout. With it, see :func:`_produce_transactional`.
    """
    if args.topic.startswith(INTERNAL_PREFIX) and not args.force:
        raise StreamsError(
            f"{args.topic} is an internal topic, written only by the runtime: a line produced "
            "to it can break every group or transaction that reads it. To repair it on "
            "purpose, pass --force"
        )
    props = _properties(args.property, _PRODUCE_PROPS)
    parse = _LineParser(props)
    if args.transactional_id is not None:
        return _produce_transactional(args, parse)
    if args.batch is not None:
        raise StreamsError("--batch needs --transactional-id (without it, use --batch-size)")
    producer = Producer(args.root, **_producer_settings(args.producer_property))
    producer.admin.index(args.topic)  # fail before reading stdin on an unknown topic
    pending = 0
    try:
        for lineno, line in stdin_lines(sys.stdin.buffer, args.timeout / 1000):
            if line is None:  # linger expired with records waiting
                producer.flush()
                pending = 0
                continue
            try:
                key, value = parse(lineno, line)
            except StreamsError as exc:
                raise StreamsError(f"{exc}; earlier lines were produced") from None
            producer.send(args.topic, key, value)
            pending += 1
            if pending >= args.batch_size:
                producer.flush()
                pending = 0
    finally:
        producer.flush()
    return 0


def _produce_transactional(args: argparse.Namespace, parse: _LineParser) -> int:
    """Produce stdin's lines in transactions of ``--transactional-id``.

    ``init_transactions()`` runs once (fencing an older producer of the id and finishing
    what it left open); then each transaction holds ``--batch`` lines (default
    :data:`DEFAULT_TXN_BATCH`) and commits when full, when input pauses past ``--timeout``
    (so an interactive session sees its lines) and at EOF. A bad line aborts the open
    transaction, so none of its lines become visible, and fails naming the line;
    transactions committed before it stay.
    """
    batch = DEFAULT_TXN_BATCH if args.batch is None else args.batch
    if batch < 1:
        raise StreamsError(f"--batch must be at least 1, got {batch}")
    producer = TransactionalProducer(
        args.root,
        args.transactional_id,
        transaction_timeout_ms=args.transaction_timeout_ms,
        **_producer_settings(args.producer_property),
    )
    producer.admin.index(args.topic)  # fail before reading stdin on an unknown topic
    producer.init_transactions()
    pending = 0
    first = 0  # the first line of the open transaction
    try:
        for lineno, line in stdin_lines(sys.stdin.buffer, args.timeout / 1000):
            if line is None:  # linger expired: commit what is open
                if pending:
                    producer.commit_transaction()
                    pending = 0
                continue
            try:
                key, value = parse(lineno, line)
            except StreamsError as exc:
                if not pending:
                    raise StreamsError(f"{exc}; earlier transactions stay committed") from None
                producer.abort_transaction()
                lost = (
                    f"line {first} was"
                    if first == lineno - 1
                    else f"lines {first}-{lineno - 1} were"
                )
                raise StreamsError(
                    f"{exc}; aborted the open transaction of {args.transactional_id}, so {lost} "
                    "not produced; earlier transactions stay committed"
                ) from None
            if not pending:
                producer.begin_transaction()
                first = lineno
            producer.send(args.topic, key, value)
            pending += 1
            if pending >= batch:
                producer.commit_transaction()
                pending = 0
        if pending:
            producer.commit_transaction()
    finally:
        producer.close()  # aborts a transaction still open (an error, Ctrl-C)
    return 0


class _LineParser:
    """Turns an input line into ``(key, value)`` per the ``parse.key``, ``key.separator``
    and ``null.marker`` properties."""

    def __init__(self, props: dict[str, str]) -> None:
        self.parse_key = _flag(props, "parse.key")
        self.separator = props.get("key.separator", "\t").encode()
        if self.parse_key and not self.separator:
            raise StreamsError(
                "key.separator is empty: with parse.key=true, give the text that separates "
                "a line's key from its value (default a tab), e.g. --property key.separator=:"
            )
        marker = props.get("null.marker")
        self.null = marker.encode() if marker is not None else None

    def __call__(self, lineno: int, line: bytes) -> tuple[bytes | None, bytes | None]:
        """Return the line's key and value.

        Raises:
            StreamsError: ``parse.key=true`` and the line has no separator.
        """
        key: bytes | None = None
        value: bytes | None = line
        if self.parse_key:
            key, sep, value = line.partition(self.separator)
            if not sep:
                raise StreamsError(
                    f"line {lineno} has no key separator {self.separator.decode()!r} "
                    f"(parse.key=true): {line[:60].decode(errors='replace')!r}"
                )
            key = None if key == self.null else key
        return key, None if value == self.null else value


# -- consume -----------------------------------------------------------------------------


class _Printer:
    """Formats records as Kafka's DefaultMessageFormatter does (tab-separated fields)."""

    def __init__(
        self, props: dict[str, str], key_serde: Serde[Any], value_serde: Serde[Any]
    ) -> None:
        self.print_key = _flag(props, "print.key")
        self.print_partition = _flag(props, "print.partition")
        self.print_offset = _flag(props, "print.offset")
        self.print_timestamp = _flag(props, "print.timestamp")
        self.print_headers = _flag(props, "print.headers")
        self.sep = props.get("key.separator", "\t").encode()
        self.eol = props.get("line.separator", "\n").encode()
        self.null = props.get("null.literal", "null").encode()
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.out = sys.stdout.buffer

    def write(self, rec: ConsumerRecord, uncommitted: str | None = None) -> None:
        """Print one record; an ``uncommitted`` one gets that label, a tab, and offset ``-``."""
        fields: list[bytes] = []
        if self.print_timestamp:
            fields.append(b"CreateTime:%d" % rec.timestamp)
        if self.print_partition:
            fields.append(b"%d" % rec.partition)
        if self.print_offset:
            fields.append(b"-" if uncommitted is not None else b"%d" % rec.offset)
        if self.print_headers:
            fields.append(
                b",".join(
                    k.encode() + b":" + (v if v is not None else self.null) for k, v in rec.headers
                )
                or b"NO_HEADERS"
            )
        if self.print_key:
            fields.append(self._text(rec, rec.key, self.key_serde, "key"))
        fields.append(self._text(rec, rec.value, self.value_serde, "value"))
        label = b"" if uncommitted is None else uncommitted.encode() + b"\t"
        self.out.write(label + self.sep.join(fields) + self.eol)

    def _text(
        self, rec: ConsumerRecord, data: bytes | None, serde: Serde[Any], field: Any
    ) -> bytes:
        obj = deserialize_record_field(
            serde, rec.topic, rec.partition, rec.offset, data, field=field
        )
        if obj is None:
            return self.null
        if isinstance(obj, bytes):
            return obj
        return str(obj).encode()


def run_consume(args: argparse.Namespace) -> int:
    """Print records until ``--max-messages`` or ``--timeout-ms`` of idleness.

    With ``--isolation-level read_uncommitted``, the first time the committed records are
    caught up the records of open transactions are printed too (once per run), see
    :func:`streams.cli.transactions.uncommitted_records`.
    """
    props = _properties(args.property, _CONSUME_PROPS)
    printer = _Printer(
        props, serde_from_name(args.key_deserializer), serde_from_name(args.value_deserializer)
    )
    reader = TopicReader(args.root)
    positions = _start_positions(reader, args)
    limit = None if args.max_messages is None or args.max_messages < 0 else args.max_messages
    printed = 0
    dirty = args.isolation_level == "read_uncommitted"  # uncommitted records still to print
    last_record = time.monotonic()
    try:
        while limit is None or printed < limit:
            got = 0
            for partition in sorted(positions):
                want = 500 if limit is None else min(500, limit - printed - got)
                if want <= 0:
                    break
                records = reader.records(args.topic, partition, positions[partition], want)
                for rec in records:
                    printer.write(rec)
                got += len(records)
                if records:
                    positions[partition] = records[-1].offset + 1
            printed += got
            if not got and dirty:
                dirty = False
                for label, rec in uncommitted_records(reader.admin, args.topic, args.partition):
                    if limit is not None and printed >= limit:
                        break
                    printer.write(rec, label)
                    printed += 1
                    got += 1
            sys.stdout.buffer.flush()
            if got:
                last_record = time.monotonic()
                continue
            if (
                args.timeout_ms is not None
                and (time.monotonic() - last_record) * 1000 >= args.timeout_ms
            ):
                break
            time.sleep(0.1)
    finally:
        print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0


def _start_positions(reader: TopicReader, args: argparse.Namespace) -> dict[int, int]:
    starts = reader.beginning_offsets(args.topic)
    ends = reader.end_offsets(args.topic)
    if args.partition is None:
        if args.offset is not None:
            raise StreamsError("--offset needs --partition")
        return dict(starts if args.from_beginning else ends)
    if args.partition not in ends:
        raise StreamsError(
            f"--partition {args.partition} is not in topic {args.topic} (it has {len(ends)})"
        )
    p = args.partition
    spec = args.offset or ("earliest" if args.from_beginning else "latest")
    if spec == "earliest":
        return {p: starts[p]}
    if spec == "latest":
        return {p: ends[p]}
    try:
        offset = int(spec)
    except ValueError as exc:
        raise StreamsError(f"--offset {spec!r}: use earliest, latest or a number") from exc
    if not starts[p] <= offset <= ends[p]:
        raise StreamsError(
            f"--offset {offset} is out of range for {args.topic}-{p} "
            f"(log-start {starts[p]}, log-end {ends[p]})"
        )
    return {p: offset}
