"""A plain store context for tests and tools (Kafka's ``MockProcessorContext`` for stores).

A store opened with a :class:`StandaloneContext` is not managed by a task: its ``flush()``
commits its writes, and its changes go to ``changelog`` when one is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from statestores.api import ChangelogCollector, StateStore


@dataclass
class RecordingCollector:
    """A changelog collector that keeps every change: ``(store, key, value, timestamp)``."""

    records: list[tuple[str, bytes, bytes | None, int]] = field(default_factory=list)

    def send_change(self, store: str, key: bytes, value: bytes | None, timestamp: int) -> None:
        """Keep the change."""
        self.records.append((store, key, value, timestamp))


@dataclass
class StandaloneContext:
    """A :class:`~statestores.api.StateStoreContext` with fixed values.

    Attributes:
        application_id: the application id (changelog topic prefix).
        task_id: the task id, ``<sub-topology>_<partition>``.
        partition: the task's partition.
        state_dir: the task directory, or None (persistent stores then use a temporary one).
        app_config: configuration keys (``statestore.cache.max.bytes``, ...).
        changelog: where changes go, or None.
        record_timestamp: what :meth:`timestamp` returns.
    """

    application_id: str = "app"
    task_id: str = "0_0"
    partition: int = 0
    state_dir: str | None = None
    app_config: Mapping[str, Any] = field(default_factory=dict)
    changelog: ChangelogCollector | None = None
    record_timestamp: int = 0
    stores: list[StateStore] = field(default_factory=list)

    def timestamp(self) -> int:
        """Return :attr:`record_timestamp`."""
        return self.record_timestamp

    def register(self, store: StateStore) -> None:
        """Remember ``store``."""
        self.stores.append(store)
