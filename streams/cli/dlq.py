"""``streams-eos dlq``: what is in a dead-letter topic, and replaying it after a fix.

::

    streams-eos dlq --topic orders-dlq                      # counts by error and source, samples
    streams-eos dlq --topic orders-dlq --json
    streams-eos dlq replay --topic orders-dlq --filter exception=ValueError --dry-run
    streams-eos dlq replay --topic orders-dlq --filter source=orders-0 --to orders-fixed

A replay sends each selected letter once however often it runs; letters not selected wait
for a later replay unless ``--skip-unselected``. See :mod:`runtime.app.dead_letters` (the
filter syntax) and :mod:`runtime.app.dead_letter_replay` (positions and transactions).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from runtime.app.dead_letter_replay import ReplayResult, read_positions, replay_dead_letters
from runtime.app.dead_letters import (
    FILTER_KEYS,
    DeadLetter,
    DeadLetterSummary,
    LetterFilter,
    preview_bytes,
    summarize,
)
from runtime.storage.topics import TopicAdmin
from streams.cli import COMMANDS

PREVIEW = 40
MESSAGE_WIDTH = 60


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``dlq`` subcommand."""
    p = sub.add_parser(
        "dlq",
        parents=[common],
        help=COMMANDS["dlq"][1],
        description=(
            "Without an action: count a dead-letter topic's records by error (exception "
            "class and message) and by source (topic-partition), give their time range and "
            "show samples. 'replay': send the selected letters back to their source topic "
            "(or --to), each once however often it runs (a position per partition of the "
            "dead-letter topic, committed in the same transaction as the replayed records, "
            "in the group streams-eos-dlq-replay-<topic>). Letters not selected wait for a "
            "later replay unless --skip-unselected moves past them for good."
        ),
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=("show", "replay"),
        default="show",
        help="show: summarize the dead letters (the default); replay: send them back",
    )
    p.add_argument("--topic", required=True, help="the dead-letter topic")
    p.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"select letters by {', '.join(FILTER_KEYS)} (repeatable; the same key: any "
        "value matches; different keys: all must match), e.g. exception=ValueError "
        "source=orders-0 message=timeout",
    )
    p.add_argument("--partition", type=int, help="only this partition of the dead-letter topic")
    p.add_argument("--from-offset", type=int, metavar="N", help="dead-letter offsets >= N")
    p.add_argument("--to-offset", type=int, metavar="N", help="dead-letter offsets <= N")
    p.add_argument("--samples", type=int, default=5, metavar="N", help="samples shown (5)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--to", metavar="TOPIC", help="replay: send here instead of each source topic")
    p.add_argument(
        "--skip-unselected",
        action="store_true",
        help="replay: move the position past letters the filter leaves (never replayed then)",
    )
    p.add_argument("--dry-run", action="store_true", help="replay: print what would be sent")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Summarize or replay the dead-letter topic; return the exit code."""
    admin = TopicAdmin(args.root)
    selection = LetterFilter.parse(
        args.filter,
        partition=args.partition,
        from_offset=args.from_offset,
        to_offset=args.to_offset,
    )
    if args.action == "replay":
        result = replay_dead_letters(
            admin,
            args.topic,
            to=args.to,
            selection=selection,
            skip_unselected=args.skip_unselected,
            dry_run=args.dry_run,
        )
        print(json.dumps(replay_dict(result), indent=2) if args.json else replay_text(result))
        return 0
    summary = summarize(admin, args.topic, selection=selection, samples=max(0, args.samples))
    positions = read_positions(admin, args.topic)
    if args.json:
        data = summary.to_dict(preview=PREVIEW)
        data["replay_positions"] = {str(p): q.offset for p, q in sorted(positions.items())}
        print(json.dumps(data, indent=2))
    else:
        waiting = {p: q.offset for p, q in positions.items()}
        print(summary_text(summary, waiting))
    return 0


def summary_text(summary: DeadLetterSummary, positions: dict[int, int]) -> str:
    """The readable form of a summary."""
    parts = ", ".join(f"{p}: {lo}..{hi}" for p, (lo, hi) in sorted(summary.partitions.items()))
    lines = [f"dead-letter topic {summary.topic}: {summary.total} records ({parts or 'none'})"]
    if summary.total:
        lines.append(
            f"time range: {_time(summary.first_timestamp)} .. {_time(summary.last_timestamp)}"
        )
    if positions:
        lines.append(
            "replay positions: " + ", ".join(f"{p}: {o}" for p, o in sorted(positions.items()))
        )
    if not summary.total:
        return "\n".join(lines)
    errors = [
        [str(n), exc, _cut(msg, MESSAGE_WIDTH)] for (exc, msg), n in summary.by_error.most_common()
    ]
    lines += ["", "BY ERROR", *_table(["COUNT", "EXCEPTION", "MESSAGE"], errors)]
    sources = [[str(n), s] for s, n in summary.by_source.most_common()]
    lines += ["", "BY SOURCE", *_table(["COUNT", "SOURCE"], sources)]
    lines += ["", f"SAMPLES ({len(summary.samples)} of {summary.total})"]
    lines += _table(
        ["DLQ", "SOURCE", "TIMESTAMP", "EXCEPTION", "KEY", "VALUE", "HEADERS"],
        [_sample(s) for s in summary.samples],
    )
    return "\n".join(lines)


def _sample(letter: DeadLetter) -> list[str]:
    offset = "?" if letter.source_offset is None else str(letter.source_offset)
    headers = ",".join(f"{k}={preview_bytes(v, 16)}" for k, v in letter.headers) or "-"
    return [
        f"{letter.partition}@{letter.offset}",
        f"{letter.source}@{offset}",
        _time(letter.timestamp),
        letter.short_exception,
        str(preview_bytes(letter.key, PREVIEW)),
        str(preview_bytes(letter.value, PREVIEW)),
        headers,
    ]


def replay_text(result: ReplayResult) -> str:
    """The readable form of a replay's outcome."""
    verb = "would send" if result.dry_run else "sent"
    lines = [
        f"{verb} {len(result.sent)} dead letters of {result.topic}; "
        f"{result.already_replayed} replayed before, {result.waiting} not selected (waiting), "
        f"{result.skipped} not selected (skipped for good)"
    ]
    lines += _table(
        ["DLQ", "TO", "EXCEPTION", "KEY", "VALUE"],
        [
            [
                f"{letter.partition}@{letter.offset}",
                dest,
                letter.short_exception,
                str(preview_bytes(letter.key, PREVIEW)),
                str(preview_bytes(letter.value, PREVIEW)),
            ]
            for letter, dest in result.sent
        ],
    )
    for p, (old, new) in sorted(result.positions.items()):
        moved = "would move" if result.dry_run else "moved"
        lines.append(f"position of partition {p} {moved} {old.offset} -> {new.offset}")
    return "\n".join(lines)


def replay_dict(result: ReplayResult) -> dict[str, Any]:
    """The JSON form of a replay's outcome."""
    return {
        "topic": result.topic,
        "dry_run": result.dry_run,
        "sent": [{**letter.to_dict(preview=PREVIEW), "to": dest} for letter, dest in result.sent],
        "already_replayed": result.already_replayed,
        "waiting": result.waiting,
        "skipped": result.skipped,
        "positions": {
            str(p): {"from": old.offset, "to": new.offset}
            for p, (old, new) in sorted(result.positions.items())
        },
    }


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    if not rows:
        return []
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [headers, *rows]
    ]


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
