"""Kafka's ``ActiveTaskCreator``: the one place that builds a task.

A task is a :class:`~topology.engine.task.StreamTask` wired to a
:class:`~statestores.state_manager.ProcessorStateManager`, which opens, restores, commits
and snapshots its stores. The ``TopologyTestDriver`` and the Spark runtime's task hosts
both build their tasks here, so the engine a test runs is the engine production runs; what
differs is only the services the runtime hands in (:class:`TaskServices`): where
changelogs are read from, how a prepared batch left by a crash learns its transaction's
outcome, where snapshots go. The test driver has none of them (its stores start empty and
never restore). The creator also chooses, once, how its tasks' stores commit
(:attr:`ActiveTaskCreator.task_commit`, see :mod:`topology.engine.task_commit`).

Example:
    >>> creator = ActiveTaskCreator(topology, config)            # doctest: +SKIP
    >>> task = creator.create(0, 3, collector, state_dir="/state/app/0_3")  # doctest: +SKIP
    >>> task.initialize()                                         # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from common.config import StreamsConfig
from statestores.api import ChangelogCollector, StateStore
from statestores.protocols import (
    ChangelogReader,
    SnapshotStorage,
    StateRestoreListener,
    TransactionOutcomes,
)
from statestores.state_manager import SNAPSHOT_INTERVAL_KEY, ProcessorStateManager
from topology.engine.collector import CollectorChangelog, RecordCollector
from topology.engine.task import StreamTask, config_dict
from topology.engine.task_commit import TaskCommit, task_commit
from topology.engine.task_metrics import RestoreStats
from topology.graph.topology import Topology


@dataclass(frozen=True)
class TaskServices:
    """What the runtime provides to a task's state manager (all optional).

    Attributes:
        changelog_reader: reads changelog partitions for restoration.
        transaction_outcomes: resolves a prepared batch found when a store opens.
        snapshots: where store snapshots are uploaded and found.
        restore_listener: told about restore progress.
        snapshot_interval: ``statestore.snapshot.interval`` for the state manager (None:
            the configuration's; 0 when the runtime decides when to snapshot).
        combine_repartitions: the runtime processes the records a batch writes to a
            repartition topic before its next commit, so a cached count's may go
            combined per key (:mod:`topology.engine.combine`); not so in a driver that
            commits after every record.
    """

    changelog_reader: ChangelogReader | None = None
    transaction_outcomes: TransactionOutcomes | None = None
    snapshots: SnapshotStorage | None = None
    restore_listener: StateRestoreListener | None = None
    snapshot_interval: int | None = None
    combine_repartitions: bool = False


class ActiveTaskCreator:
    """Builds the tasks of one topology.

    Args:
        topology: the built topology.
        config: the application configuration.
        services: what the runtime provides to state managers.
        wall_clock: the time source of wall-clock punctuation (ms; default: the clock).
    """

    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig,
        *,
        services: TaskServices | None = None,
        wall_clock: Callable[[], int] | None = None,
    ) -> None:
        self.topology = topology
        self.config = config
        self.services = services or TaskServices()
        self.wall_clock = wall_clock
        app_config: dict[str, Any] = config_dict(config)
        if self.services.snapshot_interval is not None:
            app_config[SNAPSHOT_INTERVAL_KEY] = self.services.snapshot_interval
        self._app_config: Mapping[str, Any] = app_config
        #: How the tasks' stores commit: chosen once, from the guarantee.
        self.task_commit: TaskCommit = task_commit(config.eos_enabled)

    def create(
        self,
        subtopology_id: int,
        partition: int,
        collector: RecordCollector,
        *,
        state_dir: str | None,
        global_stores: Mapping[str, StateStore] | None = None,
        changelog: ChangelogCollector | None = None,
    ) -> StreamTask:
        """Return the task ``<subtopology_id>_<partition>``, not yet initialised.

        Args:
            subtopology_id: the sub-topology.
            partition: the input partition (also the changelog partition).
            collector: receives the sinks' records (and the changelog records, unless
                ``changelog`` is given).
            state_dir: the task's (locked) state directory; None: temporary directories.
            global_stores: the global stores the task's processors may read.
            changelog: where the stores log their changes (default: the changelog
                topics through ``collector``).
        """
        topology = self.topology
        changelog = changelog or CollectorChangelog(
            collector, topology.changelog_topics(self.config.application_id), partition
        )
        holder: list[StreamTask] = []
        services = self.services
        manager = ProcessorStateManager(
            application_id=self.config.application_id,
            task_id=f"{subtopology_id}_{partition}",
            partition=partition,
            state_dir=state_dir,
            app_config=self._app_config,
            changelog=changelog,
            changelog_reader=services.changelog_reader,
            transaction_outcomes=services.transaction_outcomes,
            snapshots=services.snapshots,
            timestamp=lambda: holder[0].current_timestamp if holder else 0,
            restore_listener=RestoreStats(
                lambda: holder[0].stats if holder else None,
                services.restore_listener,
                lambda: state_dir,
            ),
            transactional=self.task_commit.transactional,
        )
        task = StreamTask(
            topology,
            subtopology_id,
            partition,
            self.config,
            collector,
            state_dir=state_dir,
            changelog=changelog,
            global_stores=global_stores,
            wall_clock=self.wall_clock,
            store_context=manager,
            combine_repartitions=services.combine_repartitions,
        )
        task.state_manager = manager
        holder.append(task)
        return task
