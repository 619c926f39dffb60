"""``streams-eos topics``: create, list, describe, alter and delete topics."""

from __future__ import annotations

import argparse
from typing import Any

from common.errors import StreamsError
from runtime.storage.topics import TopicAdmin, TopicDescription
from streams.cli import COMMANDS


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``topics`` subcommand."""
    p = sub.add_parser(
        "topics",
        parents=[common],
        help=COMMANDS["topics"][1],
        description="Manage topics (Delta tables under <root>/topics), as kafka-topics does.",
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true", help="create a topic")
    action.add_argument("--list", action="store_true", help="list topic names")
    action.add_argument("--describe", action="store_true", help="describe one or all topics")
    action.add_argument("--alter", action="store_true", help="add partitions or set configs")
    action.add_argument("--delete", action="store_true", help="delete a topic and its data")
    p.add_argument("--topic", help="the topic name")
    p.add_argument("--partitions", type=int, help="partition count (create, alter)")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="topic config override, e.g. cleanup.policy=compact (repeatable)",
    )
    p.add_argument("--if-not-exists", action="store_true", help="create: no error if it exists")
    p.add_argument("--if-exists", action="store_true", help="alter/delete: no error if missing")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Carry out one ``topics`` action."""
    admin = TopicAdmin(args.root)
    if args.list:
        for name in admin.list():
            print(name)
        return 0
    if args.describe:
        names = [args.topic] if args.topic else admin.list()
        for name in names:
            print(format_description(admin.describe(name)))
        return 0
    topic = _require(args.topic, "--topic")
    if args.create:
        partitions = args.partitions if args.partitions is not None else 1
        admin.create(
            topic, partitions, configs=_configs(args.config), if_not_exists=args.if_not_exists
        )
        print(f"Created topic {topic}.")
        return 0
    if (args.alter or args.delete) and args.if_exists and not admin.exists(topic):
        return 0
    if args.delete:
        admin.delete(topic)
        print(f"Deleted topic {topic}.")
        return 0
    if args.partitions is None and not args.config:
        raise StreamsError("--alter needs --partitions N and/or --config KEY=VALUE")
    if args.partitions is not None:
        admin.alter_partitions(topic, args.partitions)
    if args.config:
        admin.alter_configs(topic, _configs(args.config))
    print(f"Altered topic {topic}.")
    return 0


def format_description(desc: TopicDescription) -> str:
    """Return kafka-topics style lines for one topic."""
    configs = ",".join(f"{k}={v}" for k, v in desc.configs.items())
    files = sum(p.files for p in desc.partitions)
    size = sum(p.bytes for p in desc.partitions)
    lines = [
        f"Topic: {desc.name}\tPartitionCount: {desc.num_partitions}\tFiles: {files}\t"
        f"Bytes: {size}\tAwaitingVacuum: {desc.removed_files}\tConfigs: {configs}"
    ]
    lines.extend(
        f"\tTopic: {desc.name}\tPartition: {p.partition}\tLogStartOffset: "
        f"{p.log_start_offset}\tLogEndOffset: {p.log_end_offset}\tRecords: {p.records}\t"
        f"Files: {p.files}\tBytes: {p.bytes}"
        for p in desc.partitions
    )
    return "\n".join(lines)


def _require(value: str | None, flag: str) -> str:
    if not value:
        raise StreamsError(f"this action needs {flag}")
    return value


def _configs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise StreamsError(f"--config {item!r} is not KEY=VALUE")
        out[key.strip()] = value
    return out
