"""The Processor API: :class:`Processor`, :class:`FixedKeyProcessor`, the context they get,
punctuation.

A processor is a small class with lifecycle hooks, as Kafka's ``api.Processor``::

    class Dedup(Processor[str, str, str, str]):
        def init(self, context):
            super().init(context)
            self.seen = context.get_state_store("seen")

        def process(self, record):
            if self.seen.get(record.key) is None:
                self.seen.put(record.key, record.value)
                self.context.forward(record)

The same processor objects run in the :class:`~streams.testkit.driver.TopologyTestDriver` and in
the Spark runtime's tasks (both drive :class:`topology.engine.task.StreamTask`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from topology.api.record import Headers, Record

KIn = TypeVar("KIn")
VIn = TypeVar("VIn")
KOut = TypeVar("KOut")
VOut = TypeVar("VOut")


class PunctuationType(enum.Enum):
    """What time drives a punctuator: the task's stream time, or the wall clock."""

    STREAM_TIME = "stream_time"
    WALL_CLOCK_TIME = "wall_clock_time"


#: Called with the current stream time (or wall-clock time) in ms.
Punctuator = Callable[[int], None]


@runtime_checkable
class Cancellable(Protocol):
    """A handle to a scheduled punctuation."""

    def cancel(self) -> None:
        """Stop the punctuation; it will not run again."""
        ...


class ProcessorContext(Protocol[KOut, VOut]):
    """What a processor sees of its task (Kafka's ``api.ProcessorContext``).

    ``topic``, ``partition``, ``offset`` and ``headers`` describe the input record being
    processed; they are ``None`` inside a punctuator.
    """

    @property
    def application_id(self) -> str: ...

    @property
    def task_id(self) -> str: ...

    @property
    def app_config(self) -> Mapping[str, Any]: ...

    @property
    def processor_name(self) -> str: ...

    @property
    def topic(self) -> str | None: ...

    @property
    def partition(self) -> int | None: ...

    @property
    def offset(self) -> int | None: ...

    @property
    def headers(self) -> Headers | None: ...

    def current_stream_time_ms(self) -> int:
        """The task's stream time: the largest timestamp seen (-1 before any record)."""
        ...

    def current_system_time_ms(self) -> int:
        """The wall-clock time (mocked in the test driver)."""
        ...

    def forward(self, record: Record[KOut, VOut], child: str | None = None) -> None:
        """Send ``record`` to every child node, or only to the child named ``child``."""
        ...

    def schedule(
        self, interval_ms: int, punctuation_type: PunctuationType, punctuator: Punctuator
    ) -> Cancellable:
        """Call ``punctuator`` every ``interval_ms`` of stream or wall-clock time."""
        ...

    def get_state_store(self, name: str) -> Any:
        """Return the store ``name`` connected to this processor (or a global store)."""
        ...

    def commit(self) -> None:
        """Ask the task to commit soon (a request; the runtime decides when)."""
        ...


class Processor(Generic[KIn, VIn, KOut, VOut]):
    """Base class of record processors: override :meth:`process`, optionally :meth:`init`
    and :meth:`close` (Kafka's ``ContextualProcessor``)."""

    context: ProcessorContext[KOut, VOut]

    def init(self, context: ProcessorContext[KOut, VOut]) -> None:
        """Keep ``context``; look up stores and schedule punctuators here."""
        self.context = context

    def process(self, record: Record[KIn, VIn]) -> None:
        """Handle one record; forward results with ``self.context.forward``."""
        raise NotImplementedError

    def close(self) -> None:
        """Release resources (stores are closed by the task)."""


class FixedKeyProcessor(Processor[KIn, VIn, KIn, VOut]):
    """A processor that may change values but never keys (``process_values``); a record it
    forwards always keeps the input record's key, so no repartition follows."""


#: Builds a fresh processor for each task (Kafka's ``ProcessorSupplier``).
ProcessorSupplier = Callable[[], Processor[Any, Any, Any, Any]]
