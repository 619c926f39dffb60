"""What a task's node and store contexts, and the columnar engine's record feed, see of
their task: :class:`TaskView`, the narrow side of
:class:`~topology.engine.task.StreamTask` they depend on instead of the whole class.

The record context (``current_*``, ``stream_time``) is written by the task as records
run and read by the contexts on demand; a node fed a batch record by record
(:func:`~topology.engine.columnar.record_entry`) sets it per record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from statestores.api import ChangelogCollector, StateStore
    from topology.api.record import Headers
    from topology.engine.columnar import BatchInput
    from topology.engine.punctuation import PunctuationQueue


class TaskView(Protocol):
    """A running task as its contexts see it."""

    #: The record context: the input record being processed (None in a punctuator).
    current_topic: str | None
    current_partition: int | None
    current_offset: int | None
    current_headers: Headers | None
    #: The timestamp of the record being processed (what a store write is stamped with).
    current_timestamp: int
    #: The task's stream time (-1 before the first record).
    stream_time: int
    #: Set by a processor asking for a commit soon.
    commit_requested: bool
    #: Kafka's task-level dropped records (a processor counts the records it drops).
    dropped_records: int

    @property
    def application_id(self) -> str:
        """The application id."""

    @property
    def task_id(self) -> str:
        """The task id, ``<sub-topology>_<partition>``."""

    @property
    def partition(self) -> int:
        """The task's input partition."""

    @property
    def app_config(self) -> Mapping[str, Any]:
        """The application configuration, dotted keys."""

    @property
    def changelog(self) -> ChangelogCollector | None:
        """Where change-logged stores send their changes."""

    @property
    def stores(self) -> Mapping[str, StateStore]:
        """The task's own stores, by name."""

    @property
    def global_stores(self) -> Mapping[str, StateStore]:
        """The global stores (read-only views), by name."""

    @property
    def punctuations(self) -> PunctuationQueue:
        """Where the task's processors schedule punctuators."""

    @property
    def batch_input(self) -> BatchInput | None:
        """The input rows of the batch being processed (columnar), else None."""

    def wall_clock_ms(self) -> int:
        """The task's wall-clock time (ms; mocked in the test driver)."""
