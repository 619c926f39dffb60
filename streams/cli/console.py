"""``streams-eos console-produce`` and ``console-consume``, as Kafka's console tools."""

from __future__ import annotations

import argparse
import os
import select
import sys
import time
from collections.abc import Iterator
from typing import Any, BinaryIO

from runtime.storage.producer import Producer
from runtime.storage.reader import TopicReader
from runtime.storage.records import ConsumerRecord
from streams.errors import StreamsError
from streams.serdes import Serde, deserialize_record_field, serde_from_name

_PRODUCE_PROPS = {"parse.key", "key.separator", "null.marker"}
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
        help="produce lines from stdin to a topic",
        description="Read lines from stdin and produce each as one record (UTF-8).",
    )
    prod.add_argument("--topic", required=True)
    _add_property_option(prod, _PRODUCE_PROPS)
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
    prod.set_defaults(handler=run_produce)

    cons = sub.add_parser(
        "console-consume",
        parents=[common],
        help="print a topic's records",
        description="Print records, in offset order per partition.",
    )
    cons.add_argument("--topic", required=True)
    cons.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the log-start offset (default: the log end)",
    )
    cons.add_argument("--partition", type=int, help="only this partition")
    cons.add_argument("--offset", help="with --partition: earliest, latest or an offset")
    cons.add_argument("--max-messages", type=int, help="exit after this many records")
    cons.add_argument("--timeout-ms", type=int, help="exit after this long without a record")
    _add_property_option(cons, _CONSUME_PROPS)
    cons.add_argument(
        "--key-deserializer",
        default="string",
        help="serde of keys: bytes, string, int, long, double, json or a path",
    )
    cons.add_argument("--value-deserializer", default="string", help="serde of values")
    cons.set_defaults(handler=run_consume)


def _add_property_option(parser: argparse.ArgumentParser, allowed: set[str]) -> None:
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"one of {', '.join(sorted(allowed))} (repeatable)",
    )


def _properties(items: list[str], allowed: set[str]) -> dict[str, str]:
    props = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise StreamsError(f"--property {item!r} is not KEY=VALUE")
        if key not in allowed:
            raise StreamsError(f"unknown --property {key!r}; allowed: {', '.join(sorted(allowed))}")
        props[key] = value.encode().decode("unicode_escape")
    return props


def _flag(props: dict[str, str], key: str) -> bool:
    return props.get(key, "false").strip().lower() == "true"


# -- produce -----------------------------------------------------------------------------


def run_produce(args: argparse.Namespace) -> int:
    """Produce stdin's lines to the topic, committing every batch or linger timeout."""
    props = _properties(args.property, _PRODUCE_PROPS)
    parse_key = _flag(props, "parse.key")
    separator = props.get("key.separator", "\t").encode()
    null_marker = props.get("null.marker")
    null_bytes = null_marker.encode() if null_marker is not None else None
    producer = Producer(args.root)
    producer.admin.index(args.topic)  # fail before reading stdin on an unknown topic
    pending = 0
    try:
        for lineno, line in _lines(sys.stdin.buffer, args.timeout / 1000):
            if line is None:  # linger expired with records waiting
                producer.flush()
                pending = 0
                continue
            key: bytes | None = None
            value: bytes | None = line
            if parse_key:
                key, sep, value = line.partition(separator)
                if not sep:
                    raise StreamsError(
                        f"line {lineno} has no key separator {separator.decode()!r} "
                        f"(parse.key=true): {line[:60].decode(errors='replace')!r}; earlier "
                        "lines were produced"
                    )
                key = None if key == null_bytes else key
            value = None if value == null_bytes else value
            producer.send(args.topic, key, value)
            pending += 1
            if pending >= args.batch_size:
                producer.flush()
                pending = 0
    finally:
        producer.flush()
    return 0


def _lines(stream: BinaryIO, linger: float) -> Iterator[tuple[int, bytes | None]]:
    """Yield ``(line number, line)``; ``(n, None)`` when input paused past ``linger``."""
    fd = stream.fileno()
    partial = b""
    lineno = 0
    waiting = False
    while True:
        if waiting and not select.select([fd], [], [], linger)[0]:
            yield lineno, None
            waiting = False
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        parts = (partial + chunk).split(b"\n")
        partial = parts.pop()
        for raw in parts:
            lineno += 1
            yield lineno, raw.removesuffix(b"\r")
        waiting = bool(parts) or waiting
    if partial:
        yield lineno + 1, partial.removesuffix(b"\r")


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

    def write(self, rec: ConsumerRecord) -> None:
        fields: list[bytes] = []
        if self.print_timestamp:
            fields.append(b"CreateTime:%d" % rec.timestamp)
        if self.print_partition:
            fields.append(b"%d" % rec.partition)
        if self.print_offset:
            fields.append(b"%d" % rec.offset)
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
        self.out.write(self.sep.join(fields) + self.eol)

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
    """Print records until ``--max-messages`` or ``--timeout-ms`` of idleness."""
    props = _properties(args.property, _CONSUME_PROPS)
    printer = _Printer(
        props, serde_from_name(args.key_deserializer), serde_from_name(args.value_deserializer)
    )
    reader = TopicReader(args.root)
    positions = _start_positions(reader, args)
    limit = args.max_messages
    printed = 0
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
