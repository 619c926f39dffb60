"""The contexts a task hands out: one :class:`NodeContext` per processor node (what a
processor sees) and one :class:`TaskStoreContext` per task (what a store sees).

A node context holds its children's ``process`` callables pre-bound, so ``forward`` is a
loop of direct calls; record metadata lives on the task and is read on demand.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from common.errors import StreamsError, TopologyError
from statestores.api import ChangelogCollector, StateStore
from topology.api.processor import PunctuationType, Punctuator
from topology.api.record import Headers, Record
from topology.engine.columnar import record_entry
from topology.engine.task_api import TaskView

if TYPE_CHECKING:
    from topology.engine.columnar import Batch, BatchForward

Forward = Callable[[Record[Any, Any]], None]


class PunctuationSchedule:
    """A scheduled punctuator; ``cancel()`` stops it (Kafka's ``Cancellable``)."""

    __slots__ = ("cancelled", "interval", "next_time", "node", "punctuator", "type")

    def __init__(
        self,
        node: str,
        interval: int,
        punctuation_type: PunctuationType,
        punctuator: Punctuator,
        next_time: int,
    ) -> None:
        self.node = node
        self.interval = interval
        self.type = punctuation_type
        self.punctuator = punctuator
        self.next_time = next_time
        self.cancelled = False

    def cancel(self) -> None:
        """Stop this punctuation."""
        self.cancelled = True

    def advance(self, now: int) -> None:
        """Move ``next_time`` past ``now`` on the interval grid, skipping missed ones."""
        nxt = self.next_time + self.interval
        if now >= nxt:
            nxt = self.next_time + ((now - self.next_time) // self.interval + 1) * self.interval
        self.next_time = nxt


class NodeContext:
    """The :class:`~topology.api.processor.ProcessorContext` of one processor node."""

    __slots__ = ("_batch_children", "_child_map", "_children", "_stores", "_task", "name")

    def __init__(self, task: TaskView, name: str, stores: frozenset[str]) -> None:
        self._task = task
        self.name = name
        self._stores = stores
        self._children: tuple[Forward, ...] = ()
        self._child_map: dict[str, Forward] = {}
        self._batch_children: tuple[BatchForward, ...] = ()

    def bind_children(self, children: list[tuple[str, Forward]]) -> None:
        """Pre-bind the children's process callables (called once by the task)."""
        self._children = tuple(fn for _, fn in children)
        self._child_map = dict(children)

    def bind_batch_children(self, children: tuple[BatchForward, ...]) -> None:
        """Pre-bind the children's batch entries (columnar processing)."""
        self._batch_children = children

    def forwards_batches(self) -> bool:
        """Whether this node's children take batches (columnar processing; a node without
        children forwards nothing either way)."""
        return bool(self._batch_children)

    def forward_batch(self, batch: Batch) -> None:
        """Send ``batch`` to every child (columnar processing)."""
        if len(batch):
            for fn in self._batch_children:
                fn(batch)

    def record_by_record(self, forward: Forward) -> BatchForward:
        """Return an entry feeding a batch to ``forward`` record by record, each with the
        record context the record engine gives it
        (:func:`~topology.engine.columnar.record_entry`): how a batch node runs what reads
        its record's context (a user's transformer)."""
        return record_entry(self._task, forward)

    def set_timestamp(self, timestamp: int) -> None:
        """Make ``timestamp`` the current record's (what a store write is stamped with)
        while a batch node writes a store on behalf of one of its records."""
        self._task.current_timestamp = timestamp

    @property
    def application_id(self) -> str:
        """The application id."""
        return self._task.application_id

    @property
    def task_id(self) -> str:
        """The task id, ``<sub-topology>_<partition>``."""
        return self._task.task_id

    @property
    def app_config(self) -> Mapping[str, Any]:
        """The application configuration, dotted keys."""
        return self._task.app_config

    @property
    def processor_name(self) -> str:
        """This node's name."""
        return self.name

    @property
    def topic(self) -> str | None:
        """The topic of the input record (None in a punctuator)."""
        return self._task.current_topic

    @property
    def partition(self) -> int | None:
        """The partition of the input record (None in a punctuator)."""
        return self._task.current_partition

    @property
    def offset(self) -> int | None:
        """The offset of the input record (None in a punctuator)."""
        return self._task.current_offset

    @property
    def headers(self) -> Headers | None:
        """The headers of the input record (None in a punctuator)."""
        return self._task.current_headers

    def timestamp(self) -> int:
        """The timestamp of the record being processed."""
        return self._task.current_timestamp

    def current_stream_time_ms(self) -> int:
        """The task's stream time (-1 before the first record)."""
        return self._task.stream_time

    def current_system_time_ms(self) -> int:
        """The wall-clock time of the task (mocked in the test driver)."""
        return self._task.wall_clock_ms()

    def forward(self, record: Record[Any, Any], child: str | None = None) -> None:
        """Send ``record`` to every child, or to the child named ``child``."""
        self._task.current_timestamp = record[2]
        if child is None:
            for fn in self._children:
                fn(record)
            return
        target = self._child_map.get(child)
        if target is None:
            raise StreamsError(
                f"Processor {self.name}: unknown child {child!r}; children are "
                f"{sorted(self._child_map)}"
            )
        target(record)

    def schedule(
        self, interval_ms: int, punctuation_type: PunctuationType, punctuator: Punctuator
    ) -> PunctuationSchedule:
        """Run ``punctuator`` every ``interval_ms`` of stream time or wall-clock time."""
        return self._task.punctuations.schedule(
            self.name, interval_ms, punctuation_type, punctuator
        )

    def get_state_store(self, name: str) -> Any:
        """Return the store ``name``; raise TopologyError if it is not connected here."""
        if name in self._stores:
            return self._task.stores[name]
        store = self._task.global_stores.get(name)
        if store is not None:
            return store
        raise TopologyError(
            f"Processor {self.name} has no access to state store {name!r}: connect it "
            "(process(..., stores=[...]) or add_state_store) first"
        )

    def commit(self) -> None:
        """Ask the task to commit soon."""
        self._task.commit_requested = True

    def input_offset(self, row: int) -> int | None:
        """The offset of input row ``row`` of the batch being processed (a batch's
        ``rows``), or of the record being processed outside a batch."""
        given = self._task.batch_input
        return self._task.current_offset if given is None else given.offsets[row]

    def record_dropped(self) -> None:
        """Count a record this node dropped (a null key, a late record for a closed
        window) in the task's ``dropped_records`` (Kafka's ``dropped-records`` sensor)."""
        self._task.dropped_records += 1


class FixedKeyNodeContext(NodeContext):
    """A node context that keeps the input key on every forwarded record."""

    __slots__ = ("key",)

    def __init__(self, task: TaskView, name: str, stores: frozenset[str]) -> None:
        super().__init__(task, name, stores)
        self.key: Any = None

    def forward(self, record: Record[Any, Any], child: str | None = None) -> None:
        """Forward ``record`` with the input record's key."""
        if record[0] is not self.key:
            record = record.with_key(self.key)
        super().forward(record, child)


class TaskStoreContext:
    """The :class:`~statestores.api.StateStoreContext` of one task."""

    def __init__(self, task: TaskView, state_dir: str | None) -> None:
        self._task = task
        self._state_dir = state_dir
        self.registered: list[StateStore] = []

    @property
    def application_id(self) -> str:
        """The application id."""
        return self._task.application_id

    @property
    def task_id(self) -> str:
        """The task id."""
        return self._task.task_id

    @property
    def partition(self) -> int:
        """The task's partition."""
        return self._task.partition

    @property
    def state_dir(self) -> str | None:
        """``state.dir/<application.id>/<task id>``, or None without a state directory."""
        return self._state_dir

    @property
    def app_config(self) -> Mapping[str, Any]:
        """The application configuration, dotted keys."""
        return self._task.app_config

    @property
    def changelog(self) -> ChangelogCollector | None:
        """Where change-logged stores send their changes."""
        return self._task.changelog

    def timestamp(self) -> int:
        """The timestamp of the record being processed."""
        return self._task.current_timestamp

    def register(self, store: StateStore) -> None:
        """Remember ``store`` (flushed at commit, closed with the task)."""
        if store not in self.registered:
            self.registered.append(store)


class ManagedTaskStoreContext(TaskStoreContext):
    """A store context whose task drives the store transactions (prepare/commit/abort);
    the Spark runtime uses it under exactly-once."""

    def manages_transactions(self) -> bool:
        """Return True: ``flush()`` does not commit; the task does."""
        return True
