"""``streams-eos savepoint`` and ``streams-eos rewind``: consistent cuts of an
exactly-once application, and putting it back to one (:mod:`runtime.app.savepoints`,
:mod:`runtime.app.rewind`).

::

    streams-eos savepoint create --application-id A --name N   # while A runs
    streams-eos savepoint list --application-id A
    streams-eos savepoint describe --application-id A --name N
    streams-eos savepoint delete --application-id A --name N
    streams-eos rewind --application-id A --to-savepoint N [--dry-run] [--force]
                       [--reset-groups]                         # A stopped
    streams-eos rewind --application-id A --to-time 2026-11-28T13:00:00   # the newest
                                                 # savepoint taken by then (UTC)
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from typing import Any

from common.errors import StreamsError
from runtime.app.rewind import apply_rewind, plan_rewind
from runtime.app.savepoints import (
    Savepoint,
    create_savepoint,
    delete_savepoint,
    list_savepoints,
    load_savepoint,
)
from runtime.storage.topics import TopicAdmin
from streams.cli import COMMANDS


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``savepoint`` and ``rewind`` subcommands."""
    p = sub.add_parser(
        "savepoint",
        parents=[common],
        help=COMMANDS["savepoint"][1],
        description=(
            "Take, list, describe or delete savepoints: consistent cuts of an exactly-once "
            "application's positions, stores and outputs, taken while it runs and kept "
            "apart from retention until deleted."
        ),
    )
    p.add_argument(
        "action",
        choices=["create", "list", "describe", "delete"],
        help="take a savepoint, list them, describe one, or delete one",
    )
    p.add_argument(
        "--application-id", required=True, metavar="ID", help="the application of the savepoints"
    )
    p.add_argument("--name", metavar="N", help="the savepoint (create, describe, delete)")
    p.add_argument("--json", action="store_true", help="print JSON (list, describe)")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="configuration for the store snapshots (e.g. state.dir=...); repeatable",
    )
    p.set_defaults(handler=run_savepoint)
    r = sub.add_parser(
        "rewind",
        parents=[common],
        help=COMMANDS["rewind"][1],
        description=(
            "Put a stopped application back to a savepoint: its positions, its stores, and "
            "its output topics, internal topics and Delta sinks (what it wrote after the "
            "cut is taken back by new Delta versions). Consumer groups that read its "
            "outputs past the cut are named, and the rewind refuses unless --force."
        ),
    )
    r.add_argument(
        "--application-id", required=True, metavar="ID", help="the stopped application to rewind"
    )
    to = r.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-savepoint", metavar="N", help="the savepoint")
    to.add_argument(
        "--to-time",
        metavar="yyyy-MM-ddTHH:mm:ss",
        help="the newest savepoint taken at or before this UTC time",
    )
    r.add_argument("--dry-run", action="store_true", help="print the plan only")
    r.add_argument("--force", action="store_true", help="rewind although groups read past")
    r.add_argument(
        "--reset-groups",
        action="store_true",
        help="also move the groups that read past the cut back to its end offsets",
    )
    r.set_defaults(handler=run_rewind)


def run_savepoint(args: argparse.Namespace) -> int:
    """Carry out ``savepoint ACTION``."""
    admin = TopicAdmin(args.root)
    app = args.application_id
    if args.action != "list" and not args.name:
        raise SystemExit(f"streams-eos savepoint {args.action}: error: --name is required")
    if args.action == "create":
        config = dict(item.split("=", 1) for item in args.config if "=" in item)
        started = time.monotonic()
        sp = create_savepoint(admin, app, args.name, config=config)
        print(
            f"savepoint {sp.name} of {app} taken in {time.monotonic() - started:.1f} s: "
            f"{len(sp.topics)} topics, {len(sp.sinks)} Delta sinks, {len(sp.stores)} stores"
        )
    elif args.action == "list":
        found = list_savepoints(admin, app)
        if args.json:
            for sp in found:
                print(json.dumps(_summary(sp)))
        for sp in [] if args.json else found:
            print(f"{sp.name}\t{_when(sp.created_ms)}\t{len(sp.topics)} topics")
    elif args.action == "describe":
        sp = load_savepoint(admin, app, args.name)
        if args.json:
            print(sp.model_dump_json(indent=1))
        else:
            print("\n".join(describe(sp)))
    else:
        delete_savepoint(admin, app, args.name)
        print(f"deleted savepoint {args.name} of {app}")
    return 0


def run_rewind(args: argparse.Namespace) -> int:
    """Rewind the application (or print the plan)."""
    admin = TopicAdmin(args.root)
    target: str | datetime.datetime = args.to_savepoint
    if args.to_time is not None:
        try:
            target = datetime.datetime.fromisoformat(args.to_time)
        except ValueError as exc:
            raise StreamsError(
                f"--to-time {args.to_time!r}: {exc}; e.g. 2026-11-28T13:00:00"
            ) from exc
    plan = plan_rewind(admin, args.application_id, target)
    print("\n".join(plan.describe()))
    if args.dry_run:
        return 0
    rewind_id = apply_rewind(admin, plan, force=args.force, reset_groups=args.reset_groups)
    moved = f"; groups moved back: {', '.join(sorted(plan.past_cut))}" if args.reset_groups else ""
    name = plan.savepoint.name
    print(f"rewound {args.application_id} to savepoint {name} ({rewind_id}){moved}")
    return 0


def describe(sp: Savepoint) -> list[str]:
    """A savepoint as lines a person reads."""
    lines = [f"savepoint {sp.name} of {sp.application_id}, taken {_when(sp.created_ms)}"]
    for topic, parts in sorted(sp.positions.items()):
        lines.append(f"  input {topic}: " + ", ".join(f"{p}@{o}" for p, o in sorted(parts.items())))
    for topic, cut in sorted(sp.topics.items()):
        kind = sp.record.outputs[topic].kind if topic in sp.record.outputs else "topic"
        ends = ", ".join(f"{p}:{e}" for p, e in sorted(cut.ends.items()))
        lines.append(f"  {kind} {topic}: version {cut.version}, ends {ends}")
    for name, sink in sorted(sp.sinks.items()):
        lines.append(f"  delta-sink {name}: version {sink.version}")
    for store, kept in sorted(sp.stores.items()):
        lines.append(
            f"  store {store} ({kept.kind}): {len(kept.snapshots)} of {len(kept.ends)} "
            "partitions snapshotted"
        )
    lines.append("topology:")
    lines += [f"  {line}" for line in sp.record.description.splitlines()]
    return lines


def _summary(sp: Savepoint) -> dict[str, Any]:
    return {
        "name": sp.name,
        "application_id": sp.application_id,
        "created_ms": sp.created_ms,
        "topics": sorted(sp.topics),
        "stores": sorted(sp.stores),
    }


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))
