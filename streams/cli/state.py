"""``streams-eos state --application-id X --store S [--key K]``: a store's committed state.

The same query as ``app.store(S)`` (:mod:`runtime.app.store_queries`), from another
process: a standby replica restored from the store's snapshots and changelog, answering
from the last committed transaction, while the application runs or after it stopped. The
store's kind and serdes come from the catalog the application kept when it started.

``--export PATH`` writes every entry as a new Delta table instead (columns as
``streams.read_store`` gives them; see :mod:`runtime.app.store_frames`).

``--key K`` prints that key's value (window and session stores: its windows); without it,
every entry (``--from``/``--to`` bound a key-value store's keys, ``--limit`` the lines).
A key is given as text and passed to the key serde as a string, else as an integer, a
float, or JSON, whichever it takes first.
"""

from __future__ import annotations

import argparse
import itertools
import json
from typing import Any

from common.errors import StreamsError
from runtime.app.store_frames import export_store, plan_read
from runtime.app.store_queries import QueryableStore, StoreCatalog
from runtime.storage.topics import TopicAdmin
from streams.cli import COMMANDS


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``state`` subcommand."""
    parser = sub.add_parser(
        "state",
        parents=[common],
        help=COMMANDS["state"][1],
        description=(
            "Print the committed state of an application's store: one key, or every entry; "
            "while the application runs or after it stopped."
        ),
    )
    parser.add_argument(
        "--application-id", required=True, metavar="ID", help="the application of the store"
    )
    parser.add_argument("--store", required=True, metavar="NAME", help="the store to read")
    parser.add_argument("--key", metavar="K", help="the key to look up")
    parser.add_argument("--from", dest="from_key", metavar="K", help="first key (range)")
    parser.add_argument("--to", dest="to_key", metavar="K", help="last key (range)")
    parser.add_argument("--limit", type=int, default=0, metavar="N", help="at most N entries")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument(
        "--export",
        metavar="PATH",
        help="write the store's committed state as a new Delta table at PATH (columns key, "
        "value, timestamp, and window_start/window_end or valid_to), instead of printing it",
    )
    parser.add_argument(
        "--as-of",
        metavar="SAVEPOINT",
        help="with --export: the store as savepoint SAVEPOINT holds it",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the state ``args`` ask for."""
    if args.limit < 0:
        raise StreamsError(f"--limit must be >= 0 (got {args.limit})")
    admin = TopicAdmin(args.root)
    if args.as_of is not None and args.export is None:
        raise StreamsError("--as-of reads a savepoint's state for --export PATH: add --export")
    if args.export is not None:
        read = plan_read(admin, args.application_id, args.store, as_of=args.as_of)
        rows = export_store(read, args.export)
        print(
            f"exported {rows} entries of store {args.store!r} ({len(read.ends)} partitions) "
            f"to {args.export}"
        )
        return 0
    with StoreCatalog.read(admin, args.application_id).query(admin, args.store) as store:
        if args.key is not None:
            key = _key(store, args.key)
            if store.kind == "key_value":
                value = store.get(key)
                if value is None:
                    raise StreamsError(
                        f"store {args.store!r} holds no committed value for key {args.key!r}"
                    )
                _print(args, key, value)
                return 0
            entries: Any = store.fetch(key)
        elif args.from_key is not None or args.to_key is not None:
            lo = None if args.from_key is None else _key(store, args.from_key)
            hi = None if args.to_key is None else _key(store, args.to_key)
            entries = store.range(lo, hi)
        else:
            entries = store.all()
        shown = 0
        for key, value in itertools.islice(entries, args.limit or None):
            _print(args, key, value)
            shown += 1
        if not shown:
            which = " for that key" if args.key is not None else ""
            print(f"(store {args.store!r} holds no committed entries{which})")
    return 0


def _key(store: QueryableStore, text: str) -> Any:
    """``text`` as the key serde takes it: a string, else an int, a float, or JSON."""
    serde = store.key_serde
    candidates: list[Any] = [text]
    for parse in (int, float, json.loads):
        try:
            candidates.append(parse(text))
        except ValueError:
            continue
    for candidate in candidates:
        try:
            serde.serialize(store.changelog, candidate)
        except Exception:  # the serde refuses this type: try the next
            continue
        return candidate
    raise StreamsError(
        f"store {store.name!r}: its key serde takes none of {text!r} as a string, number or "
        "JSON; give the key as the serde expects it"
    )


def _print(args: argparse.Namespace, key: Any, value: Any) -> None:
    if args.json:
        print(json.dumps({"key": _plain(key), "value": _plain(value)}, default=str))
    else:
        print(f"{_plain(key)}\t{_plain(value)}")


def _plain(item: Any) -> Any:
    """Windowed keys and value-and-timestamp pairs as plain data."""
    window = getattr(item, "window", None)
    if window is not None and hasattr(item, "key"):
        return {"key": _plain(item.key), "start": window.start, "end": window.end}
    if isinstance(item, bytes):
        return item.decode("utf-8", "backslashreplace")
    return item
