"""Global stores on Spark: Kafka's ``GlobalStateManager`` and ``GlobalStateUpdateTask``.

A global store holds the whole of its global topic (every partition) on every instance,
and every task reads it. Kafka keeps it up to date continuously in a ``GlobalStreamThread``;
here it is brought up to date at the start of each batch, in each executor process, to
the global topics' end offsets *as the driver planned them for the batch*, so every task of
a batch sees the same global state.

Driver side (:func:`global_topics`, :func:`plan_globals`): per batch, the file slices of
each global topic partition from its log start to its end, carried to the executors in
``BatchPlan.globals``. The stream thread plans them *after* the batch's stream reads: a
global record committed before a stream record the batch reads is then always in the plan.

Executor side (:class:`GlobalStores`, :class:`GlobalStateManager`): a process keeps one
manager per (storage root, state dir, application id, topology, configuration) in a
module-level registry, so later batches reaching the same Python worker reuse its stores
and read only the records past its positions (a global record is read once per process;
a new topology of the application replaces the old one's manager).
The global topic is the stores' changelog: no changelog topic is written, and restoring
is reading the topic. The records are run through the global sub-topology's processors
(``add_global_store`` may bring a custom one), not merely put. A record that cannot be
deserialized goes to the deserialization exception handler, as in Kafka; its dead
letters are not produced (the record is read once per process, its dead letters would be
written by every process) but logged.

State directory: each process takes its own slot ``state.dir/<application.id>/global/<n>``
(Kafka's ``global`` directory, one sub-directory per process), locked with the
:class:`~statestores.state_directory.StateDirectory` lock for as long as the process holds
its global stores, and wiped when taken: persistent (RocksDB) global stores open there
as configured, never two processes on one RocksDB, and a process that dies frees its slot
for the next (its lock dies with it). Positions are not kept across processes: a new
Python worker rebuilds its global stores from the topic at its first batch (Kafka's
bootstrap of the global stores); workers are long-lived (Spark reuses them).

An update that fails (a record the deserialization handler fails on, a processor error)
marks the manager broken: its next update rebuilds the stores from the log start, so no
record is ever applied twice. The store views a manager hands out stay valid across
rebuilds (long-lived tasks and their processors keep them). A partition whose log start
moved past a manager's position (retention) also rebuilds them. A plan whose end is below
a manager's position is taken as an older plan (another thread's batch): the stores never
go back. (So a global topic deleted and re-created under the same storage root is not
noticed by Python workers that read the old one.)
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from common.config import StreamsConfig
from common.errors import StreamsError
from runtime.storage.fs import StorageRoot
from runtime.storage.reader import FileSlice, TopicReader, read_slices
from runtime.storage.slices import TopicSlices
from runtime.tasks.contract import BatchPlan
from runtime.tasks.executor import executor_state_dir
from statestores.api import StateStore
from statestores.state_directory import StateDirectory, TaskDirectoryLockedError
from topology.engine.read_only_stores import read_only
from topology.engine.task import StreamTask
from topology.engine.task_commit import AtLeastOnceTaskCommit
from topology.graph.topology import Topology

log = logging.getLogger(__name__)

#: How many per-process global directories an application may have on one machine.
MAX_SLOTS = 256


# -- driver side ------------------------------------------------------------------------------


def global_topics(topology: Topology, application_id: str) -> tuple[str, ...]:
    """Return the runtime names of the topics the global sub-topologies read, sorted."""
    topics: set[str] = set()
    for sub in topology.subtopologies:
        if sub.is_global:
            topics.update(topology.source_topics(sub.id, application_id))
    return tuple(sorted(topics))


def plan_globals(reader: TopicReader, topics: Sequence[str]) -> tuple[TopicSlices, ...]:
    """Plan every partition of ``topics`` from its log start to its end, now (driver).

    An executor reads only what it has not read yet (:meth:`GlobalStateManager.update`).
    """
    out: list[TopicSlices] = []
    for topic in topics:
        starts = reader.beginning_offsets(topic)
        for partition, end in sorted(reader.end_offsets(topic).items()):
            start = starts[partition]
            slices = reader.plan(topic, partition, start, end - start) if end > start else []
            out.append(TopicSlices(topic, partition, start, end, tuple(slices)))
    return tuple(out)


# -- executor side ----------------------------------------------------------------------------


#: Global stores apply what they read at once: every process reads every global record,
#: none commits it in a transaction.
_COMMIT = AtLeastOnceTaskCommit()


class _NoOutputs:
    """The collector of global tasks: global processors forward nothing; dead letters of
    global records are logged, not produced (every process reads every global record)."""

    def send(  # noqa: PLR0917 - the RecordCollector protocol
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Sequence[tuple[str, bytes | None]],
        partition: int | None,
    ) -> None:
        log.warning(
            "[global] a record for topic %s from a global processor or handler is dropped: "
            "global tasks produce nothing",
            topic,
        )

    def partitions_for(self, topic: str) -> int:
        return 1


class GlobalStateManager:
    """One process's global stores of one application (Kafka's ``GlobalStateManager``
    with its ``GlobalStateUpdateTask``).

    Args:
        topology: the topology (its global sub-topologies fill the stores).
        config: the application configuration.
        root: the storage root the planned slices are under.
    """

    def __init__(self, topology: Topology, config: StreamsConfig, root: str) -> None:
        self.topology = topology
        self.config = config
        self.root = StorageRoot(root)
        self.application_id = config.application_id
        #: The next offset to read of each global topic partition.
        self.positions: dict[tuple[str, int], int] = {}
        #: Records read from the global topics since the stores were last built.
        self.records_read = 0
        #: How many times the stores were built (1 unless rebuilt).
        self.builds = 0
        self._directory: StateDirectory | None = None
        self._slot: str | None = None
        self._tasks: dict[str, StreamTask] = {}
        self._live: dict[str, StateStore] = {}
        self._broken = False
        # Views stay valid across rebuilds: tasks and processors keep them.
        live: dict[str, Any] = {n: _LiveStore(self, n) for n in topology.global_stores}
        self._views = read_only(live)
        self._build()

    @property
    def stores(self) -> Mapping[str, StateStore]:
        """Read-only views of the global stores, by name (what tasks get). They stay
        valid for the manager's life: after a rebuild they read the new stores."""
        return self._views

    def live(self, name: str) -> StateStore:
        """Return the current global store ``name`` (writable: for the views)."""
        return self._live[name]

    def _build(self) -> None:
        """Build and initialise a task per global sub-topology in this process's slot."""
        state_dir = self._take_slot()
        tasks: list[StreamTask] = []
        for sub in self.topology.subtopologies:
            if not sub.is_global:
                continue
            task = StreamTask(
                self.topology, sub.id, 0, self.config, _NoOutputs(), state_dir=state_dir
            )
            task.initialize()
            tasks.append(task)
        self._tasks = {}
        for task in tasks:
            for topic in self.topology.source_topics(task.subtopology.id, self.application_id):
                self._tasks[topic] = task
        self._live = {n: s for t in tasks for n, s in t.stores.items()}
        self.positions = {}
        self.records_read = 0
        self._broken = False
        self.builds += 1

    def _take_slot(self) -> str:
        """Lock and wipe a free ``global/<n>`` directory of the application; return it."""
        if self._slot is not None and self._directory is not None:
            self._directory.wipe(self._slot)
            return os.path.join(self._directory.app_dir, self._slot)
        directory = StateDirectory(executor_state_dir(self.config.state_dir), self.application_id)
        for n in range(MAX_SLOTS):
            slot = os.path.join("global", str(n))
            try:
                path = directory.lock(slot)
            except TaskDirectoryLockedError:
                continue
            directory.wipe(slot)
            self._directory, self._slot = directory, slot
            return path
        raise StreamsError(
            f"[global {self.application_id}] all {MAX_SLOTS} global state directories under "
            f"{directory.app_dir}/global are locked by other processes"
        )

    def update(self, globals: Sequence[TopicSlices]) -> int:
        """Bring the stores up to the planned ends: run the global processors over the
        records past this process's positions; return how many records were read.

        Raises:
            StreamsError: the deserialization handler (or a global processor) failed; the
                stores are rebuilt from the log start at the next update, so no record is
                applied twice.
        """
        if self._broken or any(self._gone(item) for item in globals):
            log.warning(
                "[global %s] rebuilding the global stores from the log start (%s)",
                self.application_id,
                "an update failed" if self._broken else "the log lost this process's position",
            )
            self.close()
            self._build()
        read = 0
        try:
            for item in sorted(globals, key=lambda i: (i.topic, i.partition)):
                at = self.positions.get((item.topic, item.partition), item.start)
                if at >= item.end:
                    continue
                read += self._apply(item, at)
                self.positions[(item.topic, item.partition)] = item.end
            for task in {id(t): t for t in self._tasks.values()}.values() if read else ():
                # caches and stores flush: what tasks read is complete
                task.prepare_commit()
                _COMMIT.end_batch(task, None, worked=True)
        except BaseException:
            self._broken = True
            raise
        self.records_read += read
        if read:
            log.debug("[global %s] read %d records", self.application_id, read)
        return read

    def _gone(self, item: TopicSlices) -> bool:
        at = self.positions.get((item.topic, item.partition))
        return at is not None and at < item.start

    def _apply(self, item: TopicSlices, at: int) -> int:
        """Read the records of ``item`` from offset ``at`` and process them, one file
        slice at a time (a bootstrap never holds a whole topic in memory)."""
        task, read = self._tasks[item.topic], 0
        for piece in _slices_from(item.slices, at):
            table = read_slices(self.root, item.topic, item.partition, [piece])
            offsets = table.column("offset")
            table = table.filter(pc.and_(pc.greater_equal(offsets, at), pc.less(offsets, item.end)))
            if table.num_rows == 0:
                continue
            task.process_columns(
                item.topic,
                item.partition,
                table.column("key").to_pylist(),
                table.column("value").to_pylist(),
                table.column("timestamp").to_pylist(),
                table.column("offset").to_pylist(),
                _headers(table.column("headers")),
            )
            read += int(table.num_rows)
        return read

    def close(self) -> None:
        """Close the global tasks (their stores); the slot stays locked."""
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in {id(t): t for t in tasks}.values():
            try:
                task.close()
            except Exception:  # closing others matters more; the stores are rebuilt anyway
                log.warning("[global %s] closing a global task", self.application_id, exc_info=True)

    def release(self) -> None:
        """Close, then unlock the slot (the manager is not used again)."""
        self.close()
        if self._directory is not None and self._slot is not None:
            self._directory.unlock(self._slot)
        self._directory = self._slot = None


def _slices_from(slices: Sequence[FileSlice], at: int) -> list[FileSlice]:
    """The parts of ``slices`` that may hold offsets ``>= at`` (dense slices are trimmed,
    so records before ``at`` are not read again; a compacted slice is filtered after)."""
    out: list[FileSlice] = []
    for piece in slices:
        if piece.first is not None:  # a compacted file: offsets are in its records
            if piece.segment.end > at:
                out.append(piece)
            continue
        first = piece.first_offset
        if first + piece.length <= at:
            continue
        skip = max(0, at - first)
        out.append(dataclasses.replace(piece, start=piece.start + skip, length=piece.length - skip))
    return out


def _headers(column: pa.ChunkedArray) -> list[tuple[tuple[str, bytes | None], ...]] | None:
    if len(pc.list_flatten(column)) == 0:
        return None
    return [tuple((h["key"], h["value"]) for h in hs) if hs else () for hs in column.to_pylist()]


class _LiveStore:
    """The global store ``name`` of a manager, whichever instance is current."""

    __slots__ = ("_manager", "_name")

    def __init__(self, manager: GlobalStateManager, name: str) -> None:
        self._manager = manager
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._manager.live(self._name), attr)


class GlobalStores:
    """The process's registry of :class:`GlobalStateManager` (executor side)."""

    _managers: dict[tuple[str, ...], GlobalStateManager] = {}
    _shapes: weakref.WeakKeyDictionary[Topology, str] = weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    @classmethod
    def for_plan(cls, plan: BatchPlan) -> Mapping[str, StateStore]:
        """Return the global stores for a batch's tasks, brought up to ``plan.globals``
        (read-only views; empty when the topology has no global store).

        Built once per process and application, reused by later batches.
        """
        if not plan.globals:
            return {}
        with cls._lock:
            key = cls._key(plan)
            manager = cls._managers.get(key)
            if manager is None:
                # a new topology of the application replaces the old one's stores
                for stale in [k for k in cls._managers if k[:3] == key[:3] and k[3] != key[3]]:
                    cls._managers.pop(stale).release()
                thread = plan.thread
                manager = GlobalStateManager(thread.topology, thread.config, thread.root)
                cls._managers[key] = manager
            manager.update(plan.globals)
            return manager.stores

    @classmethod
    def manager(cls, plan: BatchPlan) -> GlobalStateManager | None:
        """Return the process's manager for ``plan``'s application, if built."""
        with cls._lock:
            return cls._managers.get(cls._key(plan))

    @classmethod
    def close_all(cls) -> None:
        """Release every manager of the process (their stores and slots)."""
        with cls._lock:
            managers, cls._managers = list(cls._managers.values()), {}
        for manager in managers:
            manager.release()

    @classmethod
    def _key(cls, plan: BatchPlan) -> tuple[str, ...]:
        """(root, state dir, application id, topology description, configuration): one
        manager each."""
        thread = plan.thread
        config = thread.config
        shape = cls._shapes.get(thread.topology)
        if shape is None:  # once per unpickled topology, not once per task
            shape = cls._shapes[thread.topology] = str(thread.topology.describe())
        state_dir = executor_state_dir(config.state_dir)
        return (thread.root, state_dir, config.application_id, shape, config.model_dump_json())
