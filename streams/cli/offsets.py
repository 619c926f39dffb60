"""``streams-eos get-offsets``: per-partition offsets by time, as Kafka's GetOffsetShell."""

from __future__ import annotations

import argparse
from typing import Any

from common.errors import StreamsError
from runtime.storage.reader import TopicReader
from streams.cli import COMMANDS


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``get-offsets`` subcommand."""
    p = sub.add_parser(
        "get-offsets",
        parents=[common],
        help=COMMANDS["get-offsets"][1],
        description=(
            "Print TOPIC:PARTITION:OFFSET per partition. --time -1 gives the log-end offset, "
            "-2 the log-start offset, and an epoch-ms timestamp the first offset whose "
            "timestamp is at or after it (the log-end offset when no record is that late)."
        ),
    )
    p.add_argument("--topic", required=True, help="the topic name")
    p.add_argument("--time", type=_time, default=-1, help="-1 (latest), -2 (earliest) or epoch ms")
    p.add_argument("--partitions", help="comma-separated partitions (default: all)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the offsets."""
    reader = TopicReader(args.root)
    found = reader.offsets_for_times(args.topic, args.time)
    ends = reader.end_offsets(args.topic) if None in found.values() else {}
    wanted = _partitions(args.partitions, len(found))
    for partition in sorted(found):
        if wanted is None or partition in wanted:
            offset = found[partition]
            print(f"{args.topic}:{partition}:{ends[partition] if offset is None else offset}")
    return 0


def _time(text: str) -> int:
    """``--time``: -1, -2 or a timestamp >= 0 (argparse reports the error in one line)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not -1 (latest), -2 (earliest) or an epoch-ms timestamp"
        ) from None
    if value < -2:
        raise argparse.ArgumentTypeError(
            f"{value} is not supported: give -1 (latest), -2 (earliest) or an epoch-ms "
            "timestamp (Kafka's -3, the offset of the largest timestamp, is not available)"
        )
    return value


def _partitions(spec: str | None, count: int) -> set[int] | None:
    if not spec:
        return None
    try:
        chosen = {int(x) for x in spec.split(",") if x.strip()}
    except ValueError as exc:
        raise StreamsError(
            f"--partitions {spec!r} is not a comma-separated list of numbers"
        ) from exc
    unknown = sorted(p for p in chosen if not 0 <= p < count)
    if unknown:
        raise StreamsError(f"--partitions: {unknown} not in the topic (it has {count})")
    return chosen
