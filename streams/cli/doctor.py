"""``streams-eos doctor``: find what is damaged under a storage root, and repair it.

Kafka's log recovery and ``kafka-dump-log`` in spirit: every topic's Delta log (and
``__consumer_offsets``) is read as a reader would read it, the offset index snapshots, the
transaction and group logs under ``_transactions/`` and ``_groups/`` and the staging
directories are checked (:mod:`runtime.storage.doctor`). Each damage is printed on one
line with its repair; the exit code is 0 only when nothing is damaged. ``--repair`` does
what loses no committed record (rebuild index snapshots, set a lowered partition count
back, quarantine stray files under ``<root>/_quarantine/``, complete a torn newest commit from
its commitInfo or move it away when its transaction is still to be rolled forward,
complete decided transactions through the coordinator's sweep) and refuses the rest,
naming why; it then checks again.
"""

from __future__ import annotations

import argparse
from typing import Any

from common.errors import StreamsError
from runtime.group.state import GROUPS_DIR, GroupMetadata
from runtime.storage.doctor import Doctor, Finding
from runtime.storage.topics import TopicAdmin
from runtime.txn.cas_log import CasLog
from runtime.txn.coordinator import DECIDED_GRACE_MS, TRANSACTIONS_DIR, TransactionCoordinator
from runtime.txn.metadata import TransactionMetadata
from runtime.txn.state import TransactionState
from streams.cli import COMMANDS


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``doctor`` subcommand."""
    p = sub.add_parser(
        "doctor",
        parents=[common],
        help=COMMANDS["doctor"][1],
        description=(
            "Check every topic, __consumer_offsets, the transaction and group logs and the "
            "staging directories (or one topic) and print what is damaged and how to repair "
            "it; exit 0 only when nothing is. --repair does what loses no committed record "
            "and refuses the rest, naming why."
        ),
    )
    p.add_argument("--topic", help="check one topic only")
    p.add_argument("--repair", action="store_true", help="repair what can be repaired without loss")
    p.set_defaults(handler=run)


class Coordinators:
    """The transaction and group logs of a root, as :class:`Doctor` checks them."""

    def __init__(self, coordinator: TransactionCoordinator) -> None:
        self.coordinator = coordinator
        self.root = coordinator.root

    def pending_commit(self, transactional_id: str, sequence: int) -> bool:
        """Return True if the transaction is in PrepareCommit (its files still to add)."""
        snap = self.coordinator.load(transactional_id)
        return (
            snap is not None
            and snap.meta.state is TransactionState.PREPARE_COMMIT
            and snap.meta.txn_sequence == sequence
        )

    def findings(self) -> list[Finding]:
        """Return the damage of the transaction and group logs."""
        found: list[Finding] = []
        now = self.coordinator.clock()
        for info in self.root.list_subdirs(self.root.path(TRANSACTIONS_DIR)):
            try:
                latest = CasLog(self.root, (TRANSACTIONS_DIR, info.base_name)).read_latest()
                meta = None if latest is None else TransactionMetadata.from_json(latest[1])
            except StreamsError as exc:
                found.append(_unreadable_log(info.path, exc))
                continue
            if meta is not None:
                found += self._transaction(info.path, meta, now)
        for info in self.root.list_subdirs(self.root.path(GROUPS_DIR)):
            try:
                latest = CasLog(self.root, (GROUPS_DIR, info.base_name)).read_latest()
                if latest is not None:
                    GroupMetadata.from_json(latest[1])
            except StreamsError as exc:
                found.append(_unreadable_log(info.path, exc))
        return found

    def _transaction(self, path: str, meta: TransactionMetadata, now: int) -> list[Finding]:
        tid = meta.transactional_id
        if meta.state.is_prepare and meta.txn_last_update_timestamp + DECIDED_GRACE_MS < now:
            damage = (
                f"transaction {tid!r} {meta.txn_sequence} is decided "
                f"({meta.state.state_name}) but not complete: its producer is gone or its "
                "commit phase failed"
            )
            return [
                Finding(path, damage, "complete it (the coordinator's sweep)", self._sweep(tid))
            ]
        if meta.state is TransactionState.ONGOING and meta.is_timed_out(now):
            damage = f"transaction {tid!r} {meta.txn_sequence} is hanging past its timeout"
            return [Finding(path, damage, "abort it (the coordinator's sweep)", self._sweep(tid))]
        return []

    def _sweep(self, tid: str) -> Any:
        def sweep() -> str:
            result = self.coordinator.sweep(orphans=False)
            if tid in result.stuck:
                raise StreamsError(result.stuck[tid])
            snap = self.coordinator.load(tid)
            state = "gone" if snap is None else snap.meta.state.state_name
            return f"swept: transaction {tid!r} is {state}"

        return sweep


def _unreadable_log(path: str, exc: BaseException) -> Finding:
    return Finding(
        path,
        f"the log's newest version cannot be read: {exc}",
        "restore the version from a backup; if it is a torn write of a version recovery "
        "re-derives (Ongoing, Complete*), move that one file away",
    )


def run(args: argparse.Namespace) -> int:
    """Check the root (or one topic); repair with ``--repair``; 0 only when undamaged."""
    admin = TopicAdmin(args.root)
    coordinators = Coordinators(TransactionCoordinator(admin))
    doctor = Doctor(admin, coordinators=coordinators)
    findings = doctor.check(args.topic)
    scope = f"topic {args.topic}" if args.topic else args.root
    if not findings:
        print(f"No damage found in {scope}.")
        return 0
    if not args.repair:
        for finding in findings:
            print(f"DAMAGED {finding.line()}")
        fixable = sum(f.repairable for f in findings)
        print(
            f"{len(findings)} damaged, {fixable} repairable without loss "
            "(streams-eos doctor --repair), the rest by hand."
        )
        return 1
    report = doctor.repair(findings)
    for line in report.repaired:
        print(f"REPAIRED {line}")
    for line in report.refused:
        print(f"NOT REPAIRED {line}")
    left = doctor.check(args.topic)
    if left:
        print(f"{len(left)} damaged after the repair: run streams-eos doctor to see them.")
        return 1
    print(f"No damage left in {scope}.")
    return 0
