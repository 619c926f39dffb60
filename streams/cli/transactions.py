"""``streams-eos transactions``: list, describe, find hanging, abort and sweep transactions.

Modelled on Kafka's ``kafka-transactions`` tool. The state comes from each transactional
id's log under ``<root>/_transactions`` (see :mod:`runtime.txn.coordinator`); there is no
broker, so ``--abort`` and ``--sweep`` run the coordinator's steps in this process, and are
safe against a producer or another sweep running at the same time (every step is one
compare-and-swap on the id's log).

Tables (``--list``, ``--find-hanging``) are printed as Kafka prints them: a header line,
then one row per transactional id; every cell but the last is padded to its column's width
and cells are separated by a tab, so ``line.split("\\t")`` gives the cells even when an id
contains spaces.

:func:`uncommitted_records` reads the records staged by open transactions, for
``console-consume --isolation-level read_uncommitted``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from common.errors import StreamsError, TransactionError
from runtime.storage.records import FILE_SCHEMA, ConsumerRecord
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.metadata import TransactionMetadata
from runtime.txn.state import TransactionState
from streams.cli import COMMANDS

LIST_HEADERS = ("TransactionalId", "ProducerId", "ProducerEpoch", "State", "Participants", "Age")
HANGING_HEADERS = (*LIST_HEADERS, "TimeoutMs")
NONE = "-"
#: Transaction states whose staged records ``console-consume read_uncommitted`` prints.
DIRTY_STATES = (TransactionState.ONGOING, TransactionState.PREPARE_COMMIT)
#: A staged file's partition: ``.../partition=N/<file>`` (older: ``.../partition=N-<file>``).
_PARTITION_DIR = re.compile(r"/partition=(\d+)[/-][^/]*$")


class UnknownTransactionalIdError(TransactionError):
    """The transactional id has no log under the storage root (it never ran, or it expired).
    Check the spelling against ``streams-eos transactions --list``."""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``transactions`` subcommand."""
    p = sub.add_parser(
        "transactions",
        parents=[common],
        help=COMMANDS["transactions"][1],
        description=(
            "Inspect and repair transactions, as kafka-transactions does. Age is the time "
            "since an open transaction began (ms); a hanging transaction is one still "
            "Ongoing past its timeout."
        ),
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list every transactional id")
    action.add_argument(
        "--describe", action="store_true", help="describe one transactional id (all fields)"
    )
    action.add_argument(
        "--find-hanging", action="store_true", help="list Ongoing transactions past their timeout"
    )
    action.add_argument(
        "--abort",
        action="store_true",
        help="fence the producer of an open transaction and abort it (not once Prepare*)",
    )
    action.add_argument(
        "--sweep",
        action="store_true",
        help="abort timed-out transactions, expire idle ids, delete orphaned staged files",
    )
    p.add_argument("--transactional-id", help="the transactional id (--describe, --abort)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Carry out one ``transactions`` action."""
    coordinator = TransactionCoordinator(TopicAdmin(args.root))
    if args.list:
        now = coordinator.clock()
        rows = [_row(meta, now) for meta in coordinator.list()]
        print(format_table(LIST_HEADERS, rows))
        return 0
    if args.find_hanging:
        now = coordinator.clock()
        hanging = coordinator.hanging()
        if not hanging:
            print("No hanging transactions.")
            return 0
        rows = [(*_row(meta, now), str(meta.txn_timeout_ms)) for meta in hanging]
        print(format_table(HANGING_HEADERS, rows))
        return 0
    if args.sweep:
        result = coordinator.sweep()
        print(f"Aborted {len(result.aborted)} timed-out transaction(s): {_names(result.aborted)}")
        print(
            f"Completed {len(result.completed)} decided transaction(s): {_names(result.completed)}"
        )
        for tid, why in sorted(result.stuck.items()):
            print(
                f"Could not complete the decided transaction of {tid} (retried next sweep): {why}"
            )
        print(f"Expired {len(result.expired)} transactional id(s): {_names(result.expired)}")
        print(f"Deleted {result.orphan_files_deleted} orphaned staged file(s).")
        return 0
    tid = args.transactional_id
    if tid is None:
        action = "--describe" if args.describe else "--abort"
        raise StreamsError(f"{action} needs --transactional-id ID (see --list)")
    snap = coordinator.load(tid)
    if snap is None:
        raise UnknownTransactionalIdError(
            f"transactional id {tid!r} does not exist under {args.root} (see --list)"
        )
    if args.describe:
        print(describe(coordinator, snap.meta))
        return 0
    owner = snap.meta
    coordinator.abort(tid)
    # The abort fences first (epoch + 1); report the producer whose transaction it was.
    fenced = owner.state is TransactionState.PREPARE_EPOCH_FENCE
    epoch = owner.producer_epoch - 1 if fenced else owner.producer_epoch
    print(f"Aborted transaction of {tid} (producer id {owner.producer_id}, epoch {epoch}).")
    return 0


def is_open(meta: TransactionMetadata) -> bool:
    """Return whether ``meta`` has a transaction begun and not completed."""
    return not meta.state.is_complete_or_empty and meta.state is not TransactionState.DEAD


def _row(meta: TransactionMetadata, now_ms: int) -> tuple[str, ...]:
    """Return the ``--list`` cells of one transactional id."""
    age = str(now_ms - meta.txn_start_timestamp) if is_open(meta) else NONE
    return (
        meta.transactional_id,
        str(meta.producer_id),
        str(meta.producer_epoch),
        meta.state.state_name,
        _names(meta.participants),
        age,
    )


def describe(coordinator: TransactionCoordinator, meta: TransactionMetadata) -> str:
    """Return ``Key: value`` lines with every field of ``meta``.

    ``StagedFiles`` counts, per participant, the data files on disk in the staging
    directory of the current transaction (committed files stay there, aborted ones are
    deleted).
    """
    offsets = [f"{e.group}/{e.topic}/{e.partition}={e.offset}" for e in meta.pending_offsets]
    staged = [f"{t}={len(coordinator.staged_paths(t, meta))}" for t in meta.participants]
    fields = [
        ("TransactionalId", meta.transactional_id),
        ("ProducerId", meta.producer_id),
        ("ProducerEpoch", meta.producer_epoch),
        ("LastProducerId", meta.last_producer_id),
        ("LastProducerEpoch", meta.last_producer_epoch),
        ("State", meta.state.state_name),
        ("TransactionTimeoutMs", meta.txn_timeout_ms),
        ("TransactionSequence", meta.txn_sequence),
        ("TransactionStartTimeMs", _time(meta.txn_start_timestamp)),
        ("LastUpdateTimeMs", _time(meta.txn_last_update_timestamp)),
        ("Participants", _names(meta.participants)),
        ("ConsumerGroups", _names(meta.group_ids)),
        ("PendingOffsets", _names(offsets)),
        ("StagedFiles", _names(staged)),
    ]
    return "\n".join(f"{key}: {value}" for key, value in fields)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Return ``headers`` and ``rows`` as Kafka's tools print tables (see the module doc)."""
    widths = [max(len(row[i]) for row in (headers, *rows)) for i in range(len(headers))]
    lines = []
    for row in (headers, *rows):
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=False)]
        lines.append("\t".join([*cells, row[-1]]))
    return "\n".join(lines)


def uncommitted_records(
    admin: TopicAdmin, topic: str, partition: int | None = None
) -> Iterator[tuple[str, ConsumerRecord]]:
    """Yield ``(label, record)`` for the records staged in ``topic`` by open transactions.

    Open means Ongoing or PrepareCommit (whose files are all staged). Transactions come in
    transactional-id order; a transaction's files in partition order, then in the order
    they were written (modification time). The records have offset -1: they get theirs
    only when committed. A file gone meanwhile (its transaction completed) is skipped.
    """
    coordinator = TransactionCoordinator(admin)
    fs = admin.root.fs
    for meta in coordinator.list():
        if meta.state not in DIRTY_STATES or topic not in meta.participants:
            continue
        label = f"[uncommitted txn={meta.transactional_id} seq={meta.txn_sequence}]"
        files = []
        for info in fs.get_file_info(coordinator.staged_paths(topic, meta)):
            found = _PARTITION_DIR.search(info.path)
            p = int(found.group(1)) if found else -1
            if partition is None or p == partition:
                files.append((p, info.mtime_ns or 0, info.path))
        for p, _, path in sorted(files):
            try:
                data = pq.ParquetFile(fs.open_input_file(path)).read(columns=FILE_SCHEMA.names)
            except (OSError, pa.ArrowException):
                continue
            cols = data.to_pydict()
            for key, value, timestamp, headers in zip(
                cols["key"], cols["value"], cols["timestamp"], cols["headers"], strict=True
            ):
                pairs = [(h["key"], h["value"]) for h in headers or ()]
                yield label, ConsumerRecord(topic, p, -1, timestamp, key, value, pairs)


def _names(items: Sequence[str]) -> str:
    return ",".join(items) if items else NONE


def _time(ms: int) -> str:
    return str(ms) if ms >= 0 else NONE
