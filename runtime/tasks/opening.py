"""A task built and restored in the background of its host: Kafka's state updater.

Kafka's stream thread hands a newly assigned task to its state updater, which restores
the task's stores in a thread of its own; the stream thread goes on processing its running
tasks and polling the group, and takes the task back once it is restored. A rebalance
never waits for a restoration: the stream thread answers it at its next poll.

Here a task host builds a task it does not hold in a thread of its own (:class:`Opening`):
the state directory's lock (a killed executor's host may still hold it), the snapshot's
download, the changelog's replay. A visit waits for it at most ``restore.wait.ms`` (2 s:
a small store restores in milliseconds, within its first visit); a restoration that takes
longer leaves the task *restoring*: the visit processes nothing
(its records stay unconsumed, those handed on inside the batch are spilled to their
topic), commits nothing of the task, and says so (a ``restoring`` row). The stream thread
then runs its next batches for the running tasks and polls its group between them; a
later visit finds the task restored and runs it. A task that leaves the thread while it
restores (another owner, another stay, another executor) is cancelled between two
changelog reads and closed dirty, its lock released.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from runtime.state.adapters import RootSnapshotStorage, TopicChangelogReader
from runtime.tasks.collector import StagingCollector
from runtime.tasks.contract import BatchPlan
from runtime.tasks.executor import executor_state_dir
from statestores.api import StateStore
from statestores.protocols import TransactionOutcomes
from statestores.state_directory import StateDirectory
from statestores.state_manager import ProcessorStateManager
from topology.engine.task import StreamTask
from topology.engine.task_commit import TaskCommit
from topology.engine.task_creator import ActiveTaskCreator, TaskServices

log = logging.getLogger(__name__)


class Opening:
    """One task being built in the background.

    Args:
        task_id: the task.
        owner: the thread the task is built for, and ``incarnation`` its stay there.
        build: builds the task (takes a callable telling it whether to stop, which its
            restoration checks between changelog reads) and returns it.
    """

    def __init__(
        self,
        task_id: str,
        owner: str,
        incarnation: int,
        build: Callable[[Callable[[], bool]], LiveTask],
    ) -> None:
        self.task_id = task_id
        self.owner = owner
        self.incarnation = incarnation
        #: The batch (owner, batch id) whose visits were told the task restores: a later
        #: level of that batch must not find it restored (its earlier levels did not run).
        self.answered: tuple[str, int] | None = None
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._result: LiveTask | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(build,), name=f"restore-{task_id}", daemon=True
        )
        self._thread.start()

    def _run(self, build: Callable[[Callable[[], bool]], LiveTask]) -> None:
        try:
            self._result = build(self._cancel.is_set)
        except BaseException as exc:  # handed to the visit that takes the task
            self._error = exc
        finally:
            self._done.set()

    def wait(self, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` for the build; return whether it is over."""
        return self._done.wait(timeout_s)

    def result(self) -> LiveTask:
        """The built task (the build is over). Raises what the build raised."""
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def cancel(self) -> None:
        """Stop the build and wait for it to end (one changelog read at most)."""
        self._cancel.set()
        self._thread.join()


@dataclass
class LiveTask:
    """A task kept between batches, with what the next batch must settle."""

    task: StreamTask
    collector: StagingCollector
    owner: str
    #: Its stay with the owner (:attr:`BatchPlan.incarnations`).
    incarnation: int
    directory: StateDirectory | None
    #: How its stores commit (chosen once, from the guarantee).
    commit: TaskCommit
    #: The transaction whose writes the stores hold prepared, until its outcome is known.
    prepared: tuple[str, int] | None = None
    #: A batch visiting the task at several levels: (owner, batch) and the levels run so
    #: far, with what was consumed and held back (reported at its last visit).
    open_batch: tuple[str, int] | None = None
    open_levels: list[int] = field(default_factory=list)
    open_consumed: dict[tuple[str, int], int] = field(default_factory=dict)
    open_held_back: int = 0

    @property
    def manager(self) -> ProcessorStateManager | None:
        """The task's state manager (None when it has no stores)."""
        manager = self.task.state_manager
        return manager if manager is not None and manager.stores else None


def build_task(  # noqa: PLR0917 - what the background build is given
    plan: BatchPlan,
    subtopology_id: int,
    partition: int,
    global_stores: Mapping[str, StateStore],
    outcomes: TransactionOutcomes,
    cancelled: Callable[[], bool],
) -> LiveTask:
    """Build task ``<subtopology_id>_<partition>`` for ``plan``'s thread and restore its
    stores (in its :class:`Opening`'s thread); on failure close what it opened."""
    config, topology = plan.thread.config, plan.thread.topology
    task_id = f"{subtopology_id}_{partition}"
    collector = StagingCollector(plan.thread.root, plan.outputs, plan.staging_dir)
    has_stores = bool(topology.subtopology(subtopology_id).stores)
    directory = (
        StateDirectory(executor_state_dir(config.state_dir), config.application_id)
        if has_stores
        else None
    )
    state_dir = directory.lock(task_id, wait_ms=LOCK_WAIT_MS) if directory else None
    creator = ActiveTaskCreator(
        topology,
        config,
        services=TaskServices(
            changelog_reader=TopicChangelogReader(plan.thread.root),
            transaction_outcomes=outcomes,
            snapshots=RootSnapshotStorage(plan.thread.root),
            # snapshots are the driver's decision (BatchPlan.snapshot)
            snapshot_interval=0,
            # a batch's repartition records are counted in the same transaction
            combine_repartitions=True,
        ),
    )
    try:
        task = creator.create(
            subtopology_id, partition, collector, state_dir=state_dir, global_stores=global_stores
        )
    except BaseException:  # nothing opened yet but the directory's lock
        if directory is not None:
            directory.unlock(task_id)
        raise
    live = LiveTask(
        task,
        collector,
        plan.thread.owner,
        plan.incarnations.get(task_id, 0),
        directory,
        creator.task_commit,
    )
    if task.state_manager is not None:
        task.state_manager.cancelled = cancelled
    try:
        task.initialize()
    except BaseException:
        close_task(live, dirty=True)
        raise
    log.info("[task %s] created for owner %s", task_id, plan.thread.owner)
    return live


def close_task(live: LiveTask, *, dirty: bool, wipe: bool = False) -> None:
    """Close ``live`` (dirty: drop what is not committed; wipe: delete its local state
    too, before the lock is released) and release its lock."""
    task_id = live.task.task_id
    try:
        manager = live.task.state_manager
        if dirty and manager is not None:
            manager.abort()
        live.task.close()
    except Exception:  # closing dirty: the committed state is what counts
        log.warning("[task %s] error while closing", task_id, exc_info=True)
    finally:
        if live.directory is not None:
            if wipe:
                live.directory.wipe(task_id)
            live.directory.unlock(task_id)


#: How long a new host waits for the previous holder of a task directory (a host being
#: shut down, or killed with its executor) to release it.
LOCK_WAIT_MS = 30_000
