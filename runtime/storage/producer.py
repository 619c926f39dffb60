"""A non-transactional producer: records buffered per topic, one Delta commit per flush.

``flush()`` writes one parquet file per partition that received records and adds them all
to the topic's Delta log in a single commit (:class:`~runtime.storage.committer.
TopicCommitter`): a compare-and-swap on the version the offsets were computed from, retried
with recomputed offsets after a lost race. So concurrent producers, in any number of
processes, never leave a gap or a duplicate offset, and the data files are never rewritten.
Acknowledged (returned) means durable.

Per-record cost is a few list appends; partitioning (murmur2), grouping and encoding run
once per flush over Arrow columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

import pyarrow as pa

from common.errors import CommitOutcomeUnknownError, StreamsError
from runtime.storage.accumulator import RecordAccumulator
from runtime.storage.committer import ROW_GROUP_SIZE, StagedFile, TopicCommitter, write_file
from runtime.storage.fs import StorageRoot
from runtime.storage.record_checks import MAX_REQUEST_SIZE, check_batch, check_record
from runtime.storage.records import AppendResult, Headers
from runtime.storage.topics import TopicAdmin

__all__ = ["ROW_GROUP_SIZE", "Producer"]


class Producer:
    """Send records to topics; ``flush()`` commits them.

    Args:
        root: the storage root (path, URI, ``StorageRoot`` or ``TopicAdmin``).
        batch_size: bytes a keyless record stream sticks to one partition (Kafka's
            ``batch.size``).
        buffer_memory: buffered bytes of a topic that trigger an automatic flush.
        delivery_timeout_ms: how long a flush keeps retrying lost compare-and-swaps.
        compression: parquet codec of data files (``snappy``, ``zstd``, ``lz4``, ``none``).
        max_request_size: the largest record ``send`` accepts, in bytes (Kafka's
            ``max.request.size``, 1 MiB by default).

    Not thread-safe: use one producer per thread.

    Example:
        >>> with Producer("/data/streams") as producer:  # doctest: +SKIP
        ...     producer.send("words", key=b"k", value=b"hello")
    """

    def __init__(
        self,
        root: str | StorageRoot | TopicAdmin,
        *,
        batch_size: int = 16_384,
        buffer_memory: int = 32 * 1024 * 1024,
        delivery_timeout_ms: int = 120_000,
        compression: str = "snappy",
        max_request_size: int = MAX_REQUEST_SIZE,
    ) -> None:
        self.admin = root if isinstance(root, TopicAdmin) else TopicAdmin(root)
        self.root: StorageRoot = self.admin.root
        self.buffer_memory = buffer_memory
        self.delivery_timeout_ms = delivery_timeout_ms
        self.compression = compression
        self.max_request_size = max_request_size
        self.accumulator = RecordAccumulator(self.admin, batch_size=batch_size)
        self._committers: dict[str, TopicCommitter] = {}
        self.metrics = {"records": 0, "commits": 0, "commit_conflicts": 0, "files": 0}

    def send(
        self,
        topic: str,
        key: bytes | None = None,
        value: bytes | None = None,
        *,
        timestamp: int | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> None:
        """Buffer one record for ``topic``; it is committed by the next ``flush()``.

        A record with a bad field is refused here, alone: the records sent before it stay
        buffered for the next ``flush()``.

        Raises:
            SerializationError: key or value is not bytes (serialize first).
            InvalidRecordError: the timestamp is not an int in 0 .. 2**63 - 1, a header is
                not a ``(str, bytes | None)`` pair, or the record exceeds ``max_request_size``.
            InvalidPartitionsError: ``partition`` is not a partition of the topic.
            UnknownTopicError: the topic does not exist.
        """
        check_record(topic, key, value, timestamp, headers, max_request_size=self.max_request_size)
        size = self.accumulator.append(
            topic, key, value, timestamp=timestamp, headers=headers, partition=partition
        )
        if size >= self.buffer_memory:
            self._flush_topic(topic)

    def send_batch(
        self,
        topic: str,
        keys: pa.Array | Sequence[bytes | None] | None,
        values: pa.Array | Sequence[bytes | None],
        *,
        timestamps: pa.Array | Sequence[int] | int | None = None,
        partitions: pa.Array | Sequence[int] | None = None,
        headers: pa.Array | None = None,
    ) -> None:
        """Buffer many records at once from Arrow arrays or sequences (the fast path).

        ``keys`` may be None (all keyless); ``timestamps`` one value or one per record
        (default: now); ``partitions`` one per record (-1 = let the partitioner choose).
        """
        check_batch(topic, timestamps, headers)
        size = self.accumulator.append_batch(
            topic, keys, values, timestamps=timestamps, partitions=partitions, headers=headers
        )
        if size >= self.buffer_memory:
            self._flush_topic(topic)

    def flush(self, *, app_txn: tuple[str, int] | None = None) -> list[AppendResult]:
        """Commit every buffered record; return where each partition's records landed.

        Args:
            app_txn: ``(app id, version)`` written as Delta's ``txn`` action with each
                topic's commit; a topic that already holds that version (or a later one)
                for the app id commits nothing (an idempotent writer's replay).

        Raises:
            CommitTimeoutError: other writers kept winning past ``delivery_timeout_ms``.
            StorageError: the storage failed; nothing of that topic's batch was committed.
        """
        results: list[AppendResult] = []
        for topic in self.accumulator.topics():
            results.extend(self._flush_topic(topic, app_txn))
        return results

    def close(self) -> None:
        """Flush and release the producer."""
        self.flush()
        self._committers.clear()

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()

    def committer(self, topic: str) -> TopicCommitter:
        """Return the (cached) committer of ``topic``."""
        found = self._committers.get(topic)
        if found is None:
            found = self._committers[topic] = TopicCommitter(self.admin, topic)
        return found

    def stage(self, topic: str) -> list[StagedFile]:
        """Write ``topic``'s buffered records as data files, not committed: one a partition
        (for :meth:`commit_staged`, here or in another process: a DataFrame source's
        executors stage, its driver commits).

        Raises:
            StorageError: a file could not be written; what this call wrote is removed.
        """
        groups = self.accumulator.drain(topic)
        table_path = self.admin.table_path(topic)
        staged: list[StagedFile] = []
        try:
            for p, chunk in groups:
                staged.append(
                    write_file(self.root, table_path, "", p, chunk, compression=self.compression)
                )
        except StreamsError:  # e.g. disk full: remove what this flush wrote, then fail
            self.discard(topic, staged)
            raise
        self.metrics["files"] += len(staged)
        return staged

    def discard(self, topic: str, staged: list[StagedFile]) -> None:
        """Delete staged files that will not be committed."""
        table_path = self.admin.table_path(topic)
        for f in staged:
            self.root.delete_file(f"{table_path}/{f.path}")

    def commit_staged(
        self, topic: str, staged: list[StagedFile], app_txn: tuple[str, int] | None = None
    ) -> list[AppendResult]:
        """Commit staged files of ``topic`` in one commit (``app_txn``: see :meth:`flush`);
        files that are not committed are deleted, unless the commit's outcome is unknown.

        Raises:
            CommitTimeoutError, CommitOutcomeUnknownError, StorageError: as :meth:`flush`.
        """
        committer = self.committer(topic)
        conflicts = committer.conflicts
        try:
            results = committer.commit(staged, timeout_ms=self.delivery_timeout_ms, app_txn=app_txn)
        except CommitOutcomeUnknownError:
            raise
        except StreamsError:
            # commit() raises these only after checking that the commit did not land, so
            # the files are orphans. On any other interruption they are left alone: the
            # commit may have landed, and an unreferenced file is harmless (VACUUM).
            self.discard(topic, staged)
            raise
        finally:
            self.metrics["commit_conflicts"] += committer.conflicts - conflicts
        if not results:  # committed meanwhile under the same app_txn (a racing replay)
            self.discard(topic, staged)
            return []
        self.metrics["commits"] += 1
        self.metrics["records"] += sum(f.count for f in staged)
        return results

    def _flush_topic(
        self, topic: str, app_txn: tuple[str, int] | None = None
    ) -> list[AppendResult]:
        if not self.accumulator.has(topic):
            return []
        done = -1 if app_txn is None else self.committer(topic).committed_txn_version(app_txn[0])
        if app_txn is not None and done >= app_txn[1]:
            self.accumulator.drain(topic)
            return []  # committed before (a replay): nothing is written again
        staged = self.stage(topic)
        return self.commit_staged(topic, staged, app_txn) if staged else []
