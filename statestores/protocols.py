"""What the state stores need from the runtime, as small protocols the runtime implements.

``statestores`` imports nothing from ``runtime``; a task hands its
:class:`~statestores.state_manager.ProcessorStateManager` objects implementing these:

* :class:`ChangelogReader` — committed records of a changelog partition (restoration);
* :class:`TransactionOutcomes` — "did transaction (transactional_id, sequence) commit?",
  to resolve a prepared batch found after a crash;
* :class:`SnapshotStorage` — files under the storage root where snapshots live;
* :class:`StateRestoreListener` — restore progress (Kafka's listener of the same name).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class ChangelogReader(Protocol):
    """Reads committed (read_committed) records of changelog topics."""

    def offsets(self, topic: str, partition: int) -> tuple[int, int] | None:
        """Return ``(log-start, log-end)`` of the partition, or None if the topic is missing."""
        ...

    def read(
        self, topic: str, partition: int, offset: int, max_records: int
    ) -> Sequence[tuple[bytes, bytes | None]]:
        """Return up to ``max_records`` ``(key, value)`` records from ``offset`` on, in
        offset order (``None`` value: a tombstone); raise a ``StreamsError`` if unreadable."""
        ...


class TransactionOutcomes(Protocol):
    """Answers whether a transaction committed (from the transaction log, or the list of
    committed transactions the driver sends with each task)."""

    def committed(self, transactional_id: str, sequence: int) -> bool | None:
        """Return True (committed), False (aborted or never prepared) or None (unknown)."""
        ...


class SnapshotStorage(Protocol):
    """Files addressed by ``/``-separated keys under one root (a directory or a bucket)."""

    def put_file(self, local_path: str, key: str) -> None:
        """Copy a local file to ``key`` (a reader sees all of it or nothing)."""
        ...

    def get_file(self, key: str, local_path: str) -> None:
        """Copy ``key`` to a local file."""
        ...

    def put_bytes(self, key: str, data: bytes) -> None:
        """Write ``data`` to ``key`` atomically."""
        ...

    def get_bytes(self, key: str) -> bytes | None:
        """Return the content of ``key``, or None if it does not exist."""
        ...

    def list_keys(self, prefix: str) -> list[str]:
        """Return every key under ``prefix`` (recursively)."""
        ...

    def delete_keys(self, keys: Sequence[str]) -> None:
        """Delete ``keys`` (missing ones are ignored)."""
        ...


class StateRestoreListener(Protocol):
    """Restore progress, per store (Kafka's ``StateRestoreListener``)."""

    def on_restore_start(self, store: str, start_offset: int, end_offset: int) -> None:
        """Restoration of ``store`` replays ``[start_offset, end_offset)``."""
        ...

    def on_batch_restored(self, store: str, batch_end_offset: int, restored: int) -> None:
        """A batch of ``restored`` records up to ``batch_end_offset`` was applied."""
        ...

    def on_restore_end(self, store: str, total_restored: int, elapsed_s: float) -> None:
        """Restoration finished: ``total_restored`` records in ``elapsed_s`` seconds."""
        ...
