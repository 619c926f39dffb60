"""Adapters from the runtime to the protocols of :mod:`statestores.protocols`.

``statestores`` imports nothing from ``runtime``; a task wires its
:class:`~statestores.state_manager.ProcessorStateManager` with these:

* :class:`TopicChangelogReader` — changelog restoration through :class:`TopicReader`
  (read_committed: only committed Delta data is ever listed);
* :class:`ProducerChangelogCollector` — changelog records sent with the task's producer
  (the transactional one under exactly-once), partition = the task's partition;
* :class:`CoordinatorTransactionOutcomes` — "did ``(transactional_id, sequence)`` commit?"
  from the transaction log;
* :class:`RootSnapshotStorage` — snapshot files under the storage root (``topics.root``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import Protocol

import pyarrow as pa
import pyarrow.fs as pafs

from runtime.storage.fs import StorageRoot
from runtime.storage.reader import TopicReader
from runtime.storage.topics import TopicAdmin
from runtime.txn.coordinator import TransactionCoordinator
from runtime.txn.state import TransactionState
from statestores.metered import changelog_topic


class _Sender(Protocol):
    def send(
        self,
        topic: str,
        key: bytes | None = None,
        value: bytes | None = None,
        *,
        timestamp: int | None = None,
        partition: int | None = None,
    ) -> None: ...


class TopicChangelogReader:
    """Reads changelog partitions for restoration.

    Args:
        root: the storage root, an admin or a reader.
    """

    def __init__(self, root: str | StorageRoot | TopicAdmin | TopicReader) -> None:
        self.reader = root if isinstance(root, TopicReader) else TopicReader(root)
        self.records_read = 0

    def offsets(self, topic: str, partition: int) -> tuple[int, int] | None:
        """Return ``(log-start, log-end)``, or None if the topic does not exist."""
        if not self.reader.admin.exists(topic):
            return None
        plog = self.reader.index(topic).log(partition)
        return plog.start, plog.end

    def read(
        self, topic: str, partition: int, offset: int, max_records: int
    ) -> Sequence[tuple[bytes, bytes | None]]:
        """Return ``(key, value)`` pairs from ``offset`` on: one per offset of
        ``[offset, offset + max_records)`` (up to the log end).

        The restorer advances by the number of pairs returned. A compacted changelog has
        gaps, so there the batch is padded with repeats of its last record (applying a
        record again right after itself changes nothing); a window wholly inside a gap
        carries the next record, which nothing precedes back to ``offset``.
        """
        table = self.reader.read(topic, partition, offset, max_records)
        if table.num_rows != max_records:  # the log end, or a compacted range's gaps
            table, covered = self._across_gaps(topic, partition, offset, max_records, table)
        else:
            covered = max_records
        keys = table.column("key").to_pylist()
        values = table.column("value").to_pylist()
        self.records_read += len(keys)
        pairs = list(zip(keys, values, strict=True))
        return pairs + pairs[-1:] * (covered - len(pairs)) if pairs else pairs

    def _across_gaps(
        self, topic: str, partition: int, offset: int, max_records: int, table: pa.Table
    ) -> tuple[pa.Table, int]:
        """Return the records to apply and how many offsets they stand for."""
        end = self.reader.admin.topic_log(topic).index.log(partition).end
        covered = max(0, min(max_records, end - offset))
        if table.num_rows == 0 and covered:
            found = self.reader.next_record_offset(topic, partition, offset)
            if found is not None:
                table = self.reader.read(topic, partition, found, 1)
        return table, covered


class ProducerChangelogCollector:
    """Sends store changes to ``<application.id>-<store>-changelog``.

    Args:
        producer: the task's producer (``TransactionalProducer`` or ``Producer``).
        application_id: the application id.
        partition: the task's partition.
    """

    def __init__(self, producer: _Sender, application_id: str, partition: int) -> None:
        self.producer = producer
        self.application_id = application_id
        self.partition = partition
        self._topics: dict[str, str] = {}

    def send_change(self, store: str, key: bytes, value: bytes | None, timestamp: int) -> None:
        """Send the change in the producer's open transaction."""
        topic = self._topics.get(store)
        if topic is None:
            topic = self._topics[store] = changelog_topic(self.application_id, store)
        self.producer.send(topic, key, value, timestamp=timestamp, partition=self.partition)


def create_changelog_topics(
    admin: TopicAdmin,
    application_id: str,
    stores: dict[str, dict[str, str]],
    partitions: int,
) -> list[str]:
    """Create the changelog topic of each store (``{store: topic config}``) if missing."""
    topics = []
    for store, config in stores.items():
        topic = changelog_topic(application_id, store)
        admin.create(topic, partitions, configs=config, if_not_exists=True)
        topics.append(topic)
    return topics


class CoordinatorTransactionOutcomes:
    """Answers from the transaction log (and the changelog tables) whether a transaction
    committed.

    The id's current transaction is answered from its state. An older one is answered
    from the Delta ``txn`` version the commit phase writes into each changelog table:
    equal to the sequence → committed there; below it → it never committed there (and no
    commit is pending, the current state being past it); above → unknown (None), and the
    store then drops its prepared batch and replays the changelog tail, which is always
    correct.

    Args:
        coordinator: the transaction coordinator.
        changelog_topics: the changelog topics of the task's stores.
    """

    def __init__(
        self, coordinator: TransactionCoordinator, changelog_topics: Sequence[str] = ()
    ) -> None:
        self.coordinator = coordinator
        self.changelog_topics = tuple(changelog_topics)

    def committed(self, transactional_id: str, sequence: int) -> bool | None:
        """Return True, False or None (unknown)."""
        snap = self.coordinator.load(transactional_id)
        if snap is None:
            return None
        state = snap.meta.state
        if snap.meta.txn_sequence == sequence:
            if state in (TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT):
                return True
            if state in (
                TransactionState.ONGOING,
                TransactionState.PREPARE_ABORT,
                TransactionState.COMPLETE_ABORT,
            ):
                return False
        if state is TransactionState.PREPARE_COMMIT or snap.meta.txn_sequence < sequence:
            return None
        versions = [
            self.coordinator.committer(topic).committed_txn_version(transactional_id)
            for topic in self.changelog_topics
        ]
        if sequence in versions:
            return True
        if versions and all(v < sequence for v in versions):
            return False
        return None


class RootSnapshotStorage:
    """Snapshot files under a storage root (local directory or object store).

    Args:
        root: the storage root (``topics.root``).
    """

    def __init__(self, root: str | StorageRoot) -> None:
        self.root = root if isinstance(root, StorageRoot) else StorageRoot(root)

    def put_file(self, local_path: str, key: str) -> None:
        """Copy a local file to ``key``: a copy of its own, never a link to the live store's
        file (a store's corrupted file must not corrupt its snapshots). On a local root the
        copy is written under a temporary name and renamed."""
        target = self.root.path(key)
        self.root.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        if self.root.is_local:
            tmp = f"{target}.tmp-{os.getpid()}"
            shutil.copyfile(local_path, tmp)
            os.replace(tmp, target)
        else:  # an object store's PUT is atomic
            pafs.copy_files(local_path, target, destination_filesystem=self.root.fs)

    def get_file(self, key: str, local_path: str) -> None:
        """Copy ``key`` to a local file (a copy of its own)."""
        os.makedirs(os.path.dirname(local_path) or ".", exist_ok=True)
        source = self.root.path(key)
        if self.root.is_local:
            shutil.copyfile(source, local_path)
        else:
            pafs.copy_files(source, local_path, source_filesystem=self.root.fs)

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write ``data`` to ``key`` atomically."""
        self.root.write_bytes(self.root.path(key), data)

    def get_bytes(self, key: str) -> bytes | None:
        """Return the content of ``key`` or None."""
        return self.root.read_bytes(self.root.path(key))

    def list_keys(self, prefix: str) -> list[str]:
        """Return every key under ``prefix``."""
        start = self.root.path(prefix.rstrip("/"))
        selector = pafs.FileSelector(start, allow_not_found=True, recursive=True)
        base = len(self.root.base) + 1
        return sorted(
            info.path[base:]
            for info in self.root.fs.get_file_info(selector)
            if info.type == pafs.FileType.File and ".tmp" not in info.base_name
        )

    def delete_keys(self, keys: Sequence[str]) -> None:
        """Delete ``keys``."""
        for key in keys:
            self.root.delete_file(self.root.path(key))
