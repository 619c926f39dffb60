"""Check a storage root's logs and repair what can be repaired without losing a record.

Kafka checks its log on start (index and offset sanity, a torn segment tail) and
``kafka-dump-log`` shows what is there; :class:`Doctor` does both for a storage root: it
reads every topic's Delta log as a reader would (a missing, torn or unparsable commit,
offsets that do not follow, a lowered partition count, a log that cannot be read), checks
the offset index snapshots, and looks for stray files where only directories belong
(``_transactions/``, ``_groups/``, a topic's ``txn-staging/``). The transaction and group
logs are checked by a :class:`CoordinatorView` the caller passes in (they live in a layer
above this package).

Each damage is a :class:`Finding`: where, what, and the repair. A finding whose repair
loses no committed record carries it (``fix``): rebuilding index snapshots (derived
data), setting a lowered partition count back, moving stray files to
``<root>/_quarantine/``, completing a torn newest commit from its commitInfo when every
file it lists is there (what every reader of the table does when it opens it; the check
here only reports it), else moving it away when a transaction still in PrepareCommit wrote
it (its commit phase adds the files again, with its ``txn`` guard), and completing
decided transactions (the view's). Every other finding is refused with the reason: a
missing middle commit, a commit that does not parse, offsets that do not follow must be
restored from a backup.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow.fs as pafs

from common.errors import StorageError, StreamsError
from runtime.storage import quarantine
from runtime.storage.delta_log import LogDamageError, PartitionCountError, log_path
from runtime.storage.offset_index import INDEX_DIR, OffsetIndex
from runtime.storage.topic_log import TopicLog
from runtime.storage.topics import TopicAdmin
from runtime.storage.torn_commit import (
    NotCompletableError,
    complete_newest,
    completed_commit,
    newest_version,
)

log = logging.getLogger(__name__)

#: Directories of the root where only directories (one log each) belong.
COORDINATOR_DIRS = ("_transactions", "_groups")
STAGING_DIR = "txn-staging"
_RESTORE = "restore it from a backup or a copy of the table (no repair can recreate it)"


@dataclass(frozen=True, slots=True)
class Finding:
    """One damage: where (a table or file), what, and how to repair it.

    ``fix`` carries out a repair that loses no committed record and returns what it did;
    None when the damage cannot be repaired here (``repair`` then says what to do).
    """

    where: str
    damage: str
    repair: str
    fix: Callable[[], str] | None = field(default=None, compare=False, repr=False)

    @property
    def repairable(self) -> bool:
        """Return True when ``--repair`` can fix it without losing a record."""
        return self.fix is not None

    def line(self) -> str:
        """Return the finding as one line."""
        how = "--repair" if self.repairable else "by hand"
        return f"{self.where}: {self.damage}; repair ({how}): {self.repair}"


@dataclass(slots=True)
class Report:
    """What a repair did: the findings, the repairs made and those refused."""

    findings: list[Finding]
    repaired: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


class CoordinatorView(Protocol):
    """The transaction and group logs, as the doctor needs them."""

    def pending_commit(self, transactional_id: str, sequence: int) -> bool:
        """Return True if transaction ``sequence`` of ``transactional_id`` is decided as
        committed (PrepareCommit) and not complete: its commit phase will add its files."""
        ...

    def findings(self) -> list[Finding]:
        """Return the damage of the transaction and group logs."""
        ...


class Doctor:
    """Checks the logs of one storage root and repairs what can be repaired without loss.

    Args:
        admin: the topic admin of the root.
        coordinators: the transaction and group logs' view (None: not checked, and a torn
            commit is never moved away, since nothing proves it uncommitted).
    """

    def __init__(self, admin: TopicAdmin, *, coordinators: CoordinatorView | None = None) -> None:
        self.admin = admin
        self.root = admin.root
        self.coordinators = coordinators

    def check(self, topic: str | None = None) -> list[Finding]:
        """Return the damage of one topic, or of the whole root (``topic`` None).

        Raises:
            UnknownTopicError: ``topic`` does not exist.
        """
        if topic is not None:
            self.admin.topic_log(topic)  # validates the name
            if not self.admin.exists(topic):
                self.admin.index(topic)  # raises UnknownTopicError naming what to do
            return self.check_topic(topic)
        found = [f for name in self.admin.list() for f in self.check_topic(name)]
        for directory in COORDINATOR_DIRS:
            found += self._stray(self.root.path(directory), "only transaction or group logs")
        if self.coordinators is not None:
            found += self.coordinators.findings()
        return found

    def repair(self, findings: Sequence[Finding]) -> Report:
        """Carry out every repair that loses no record; refuse the others, naming why."""
        report = Report(list(findings))
        for finding in findings:
            if finding.fix is None:
                report.refused.append(finding.line())
                continue
            try:
                report.repaired.append(f"{finding.where}: {finding.fix()}")
            except StreamsError as exc:
                report.refused.append(f"{finding.where}: repair failed: {exc}")
        return report

    # -- one topic -------------------------------------------------------------------------

    def check_topic(self, topic: str) -> list[Finding]:
        """Return the damage of one topic's log, index snapshots and staging area."""
        table = self.admin.table_path(topic)
        found = self._snapshots(topic, table)
        try:
            TopicLog(self.root, topic, table, recover=False).refresh()  # checks the log end
        except LogDamageError as exc:
            found.insert(0, self._log_finding(topic, table, exc))
        except StorageError as exc:
            found.insert(0, Finding(table, str(exc), _RESTORE))
        found += self._stray(f"{table}/{STAGING_DIR}", "only transactions' staging directories")
        return found

    def _log_finding(self, topic: str, table: str, exc: LogDamageError) -> Finding:
        if isinstance(exc, PartitionCountError):
            old = exc.old

            def restore_count() -> str:
                self.admin.alter_partitions(topic, old)
                return f"set {topic}'s partition count back to {old}"

            return Finding(
                exc.path, str(exc), f"set streams.partitions back to {old}", restore_count
            )
        if exc.kind in ("torn", "unparsable"):
            return self._torn_finding(topic, table, exc)
        if exc.kind == "unreadable":
            return Finding(exc.path, str(exc), "make the directory readable and writable")
        return Finding(exc.path, str(exc), _RESTORE)

    def _torn_finding(self, topic: str, table: str, exc: LogDamageError) -> Finding:
        """A torn (or cut) newest commit is completed from its commitInfo when every file
        it lists is there (:mod:`runtime.storage.torn_commit`, what every reader does on
        opening the table); else it may be moved away only when a transaction still in
        PrepareCommit wrote it: its commit phase adds the files again (the table holds no
        ``txn`` of it, so the roll-forward is not skipped), and no reader served it."""
        try:
            completed_commit(self.root, table, exc.version)
            newest = newest_version(self.root, table)
            if exc.version != newest:
                raise NotCompletableError(f"commits up to {newest} follow it")
        except NotCompletableError as why:
            return self._move_away(table, exc, str(why))

        def complete() -> str:
            self._drop_snapshots(table, exc.version)
            kept = complete_newest(self.root, table, exc.version)
            return (
                f"completed the torn commit {exc.version} from its commitInfo (every file "
                f"it lists was there); the torn file is kept as {kept}"
            )

        return Finding(
            exc.path,
            str(exc),
            "complete it from its commitInfo: every file it lists is there",
            complete,
        )

    def _move_away(self, table: str, exc: LogDamageError, why: str) -> Finding:
        owner = self._torn_owner(table, exc.version)
        if isinstance(owner, str):
            return Finding(exc.path, str(exc), f"{why}; {owner}; {_RESTORE}")
        tid, sequence = owner

        def move_away() -> str:
            self._drop_snapshots(table, exc.version)
            moved = quarantine.move(self.root, exc.path)
            return (
                f"moved the torn commit {exc.version} to {moved}; transaction {tid!r} "
                f"{sequence} (PrepareCommit) adds its files again at the next sweep "
                "('streams-eos transactions --sweep') or its producer's restart"
            )

        return Finding(
            exc.path,
            str(exc),
            f"{why}; move it away: transaction {tid!r} {sequence} is in PrepareCommit and "
            "its commit phase adds the files again",
            move_away,
        )

    def _torn_owner(self, table: str, version: int) -> tuple[str, int] | str:
        """Return the transaction still to roll forward that wrote the torn ``version``,
        or why none can be proved."""
        newest = newest_version(self.root, table)
        if version != newest:
            return f"commits up to {newest} follow it"
        try:
            raw = self.root.read_bytes(log_path(self.root, table, version)) or b""
            first = json.loads(raw.splitlines()[0]) if raw.strip() else {}
            meta = json.loads(first.get("commitInfo", {}).get("streams.offsets") or "{}")
        except (ValueError, AttributeError, TypeError):
            return "its commitInfo, naming the transaction that wrote it, is lost"
        txn = meta.get("txn") if isinstance(meta, dict) else None
        if not txn:
            return "no transaction wrote it (a plain producer's commit may have been read)"
        tid, sequence = str(txn[0]), int(txn[1])
        if self.coordinators is None or not self.coordinators.pending_commit(tid, sequence):
            return f"transaction {tid!r} {sequence} is not in PrepareCommit (it may be complete)"
        return tid, sequence

    # -- offset index snapshots ------------------------------------------------------------

    def _snapshots(self, topic: str, table: str) -> list[Finding]:
        try:
            newest = newest_version(self.root, table)
        except StorageError:  # an unreadable log: reported by check_topic
            newest = -1
        found = []
        for info in self.root.list_dir(f"{table}/{INDEX_DIR}"):
            if not info.base_name.endswith(".json.gz"):
                continue
            raw = self.root.read_bytes(info.path) or b""
            try:
                index = OffsetIndex.from_json(json.loads(gzip.decompress(raw)))
            except (OSError, ValueError, KeyError, TypeError, StorageError) as exc:
                damage = f"offset index snapshot does not parse ({exc})"
            else:
                if index.version <= newest:
                    continue
                damage = (
                    f"offset index snapshot of version {index.version} is ahead of the "
                    f"Delta log (newest commit {newest}): readers would skip commits"
                )
            found.append(
                Finding(
                    info.path,
                    damage,
                    "move it away and rebuild the snapshot from the log (derived data)",
                    self._rebuild(topic, table, info.path),
                )
            )
        return found

    def _rebuild(self, topic: str, table: str, path: str) -> Callable[[], str]:
        def rebuild() -> str:
            moved = quarantine.move(self.root, path)
            index = TopicLog(self.root, topic, table, recover=False).write_snapshot()
            return f"moved {path} to {moved}; rebuilt the index at version {index.version}"

        return rebuild

    def _drop_snapshots(self, table: str, version: int) -> None:
        """Move away the index snapshots of ``version`` and later (they hold it)."""
        for info in self.root.list_dir(f"{table}/{INDEX_DIR}"):
            head = info.base_name[:20]
            if info.base_name.endswith(".json.gz") and head.isdigit() and int(head) >= version:
                quarantine.move(self.root, info.path)

    # -- stray files -----------------------------------------------------------------------

    def _stray(self, directory: str, belongs: str) -> list[Finding]:
        found = []
        for info in self.root.list_dir(directory):
            if info.type == pafs.FileType.Directory:
                continue
            path = info.path
            found.append(
                Finding(
                    path,
                    f"a stray file where {belongs} belong (readers skip it)",
                    f"move it to {self.root.path(quarantine.QUARANTINE_DIR)}",
                    self._mover(path),
                )
            )
        return found

    def _mover(self, path: str) -> Callable[[], str]:
        return lambda: f"moved to {quarantine.move(self.root, path)}"
